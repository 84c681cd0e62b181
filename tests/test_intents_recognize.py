"""English recognition with the built-in skill pack: every intent, slot value and span; and what must not match."""

from __future__ import annotations

import importlib

import pytest

from voxline.intents import (Grammar, Match, builtin_grammar, compile_documents, could_change, is_prefix, normalize,
                             recognize)
from voxline.intents.expression import SlotRef


@pytest.fixture(scope="module")
def grammar() -> Grammar:
    return builtin_grammar()


# (utterance, intent, slots, the text each slot's span covers in the normalised utterance)
POSITIVES = [
    ("play", "media.play", {}, {}),
    ("play some music", "media.play", {}, {}),
    ("play music", "media.play", {}, {}),
    ("start the music", "media.play", {}, {}),
    ("play some jazz", "media.play", {"query": "jazz"}, {"query": "jazz"}),
    ("play jazz music", "media.play", {"query": "jazz"}, {"query": "jazz"}),
    ("Play the Beatles", "media.play", {"query": "the beatles"}, {"query": "the beatles"}),
    ("play the song yesterday", "media.play", {"query": "yesterday"}, {"query": "yesterday"}),
    ("play music by Queen", "media.play", {"query": "queen"}, {"query": "queen"}),
    ("play a song by Queen", "media.play", {"query": "queen"}, {"query": "queen"}),
    ("put on some Miles Davis", "media.play", {"query": "miles davis"}, {"query": "miles davis"}),
    ("I want to listen to Bach", "media.play", {"query": "bach"}, {"query": "bach"}),
    ("play jazz please", "media.play", {"query": "jazz"}, {"query": "jazz"}),
    ("pause", "media.pause", {}, {}),
    ("pause the music", "media.pause", {}, {}),
    ("Pause it.", "media.pause", {}, {}),
    ("pause the song", "media.pause", {}, {}),
    ("resume", "media.resume", {}, {}),
    ("resume the music", "media.resume", {}, {}),
    ("continue playing", "media.resume", {}, {}),
    ("unpause", "media.resume", {}, {}),
    ("keep playing", "media.resume", {}, {}),
    ("stop the music", "media.stop", {}, {}),
    ("stop playing", "media.stop", {}, {}),
    ("turn off the music", "media.stop", {}, {}),
    ("next", "media.next", {}, {}),
    ("next track", "media.next", {}, {}),
    ("next song", "media.next", {}, {}),
    ("skip this song", "media.next", {}, {}),
    ("skip", "media.next", {}, {}),
    ("play the next song", "media.next", {}, {}),
    ("go back", "media.previous", {}, {}),
    ("previous track", "media.previous", {}, {}),
    ("previous", "media.previous", {}, {}),
    ("last song", "media.previous", {}, {}),
    ("play the previous song again", "media.previous", {}, {}),
    ("louder", "media.volume_up", {}, {}),
    ("turn it up", "media.volume_up", {}, {}),
    ("turn the volume up a bit", "media.volume_up", {}, {}),
    ("turn up the music", "media.volume_up", {}, {}),
    ("volume up", "media.volume_up", {}, {}),
    ("increase the volume", "media.volume_up", {}, {}),
    ("a little louder", "media.volume_up", {}, {}),
    ("turn it down a bit", "media.volume_down", {}, {}),
    ("turn it down", "media.volume_down", {}, {}),
    ("turn the volume down", "media.volume_down", {}, {}),
    ("turn down the volume", "media.volume_down", {}, {}),
    ("lower the volume slightly", "media.volume_down", {}, {}),
    ("quieter", "media.volume_down", {}, {}),
    ("volume down", "media.volume_down", {}, {}),
    ("it's too loud", "media.volume_down", {}, {}),
    ("volume to 30 percent", "media.volume_set", {"level": 30}, {"level": "30"}),
    ("Volume to 30%", "media.volume_set", {"level": 30}, {"level": "30"}),
    ("set the volume to thirty percent", "media.volume_set", {"level": 30}, {"level": "thirty"}),
    ("set volume to twenty five", "media.volume_set", {"level": 25}, {"level": "twenty five"}),
    ("turn the volume down to 30", "media.volume_set", {"level": 30}, {"level": "30"}),
    ("turn it up to eighty", "media.volume_set", {"level": 80}, {"level": "eighty"}),
    ("volume 0", "media.volume_set", {"level": 0}, {"level": "0"}),
    ("volume at one hundred percent", "media.volume_set", {"level": 100}, {"level": "one hundred"}),
    ("mute", "media.mute", {}, {}),
    ("mute the music", "media.mute", {}, {}),
    ("turn off the sound", "media.mute", {}, {}),
    ("unmute", "media.unmute", {}, {}),
    ("turn the sound back on", "media.unmute", {}, {}),
    ("set a timer for 10 minutes", "timer.set", {"seconds": 600}, {"seconds": "10 minutes"}),
    ("set a timer for ten minutes", "timer.set", {"seconds": 600}, {"seconds": "ten minutes"}),
    ("Set a timer for an hour and a half.", "timer.set", {"seconds": 5400}, {"seconds": "an hour and a half"}),
    ("timer for 90 seconds", "timer.set", {"seconds": 90}, {"seconds": "90 seconds"}),
    ("start a timer for twenty five minutes", "timer.set", {"seconds": 1500}, {"seconds": "twenty five minutes"}),
    ("set a 5 minute timer", "timer.set", {"seconds": 300}, {"seconds": "5 minute"}),
    ("ten minute timer", "timer.set", {"seconds": 600}, {"seconds": "ten minute"}),
    ("set a timer for half an hour", "timer.set", {"seconds": 1800}, {"seconds": "half an hour"}),
    ("set a timer for 1 hour 30 minutes", "timer.set", {"seconds": 5400}, {"seconds": "1 hour 30 minutes"}),
    ("cancel the timer", "timer.cancel", {}, {}),
    ("stop the timer", "timer.cancel", {}, {}),
    ("turn off the timer", "timer.cancel", {}, {}),
    ("what's the time", "clock.time", {}, {}),
    ("What time is it?", "clock.time", {}, {}),
    ("what time is it now", "clock.time", {}, {}),
    ("tell me the time", "clock.time", {}, {}),
    ("do you know what time it is", "clock.time", {}, {}),
    ("turn on the lights", "lights.on", {}, {}),
    ("lights on", "lights.on", {}, {}),
    ("turn on the kitchen lights", "lights.on", {"area": "kitchen"}, {"area": "kitchen"}),
    ("switch the living room lights on", "lights.on", {"area": "living_room"}, {"area": "living room"}),
    ("turn the lights on in the bedroom", "lights.on", {"area": "bedroom"}, {"area": "bedroom"}),
    ("lights on in the lounge", "lights.on", {"area": "living_room"}, {"area": "lounge"}),
    ("switch off the kitchen lights", "lights.off", {"area": "kitchen"}, {"area": "kitchen"}),
    ("turn off the lights", "lights.off", {}, {}),
    ("lights off", "lights.off", {}, {}),
    ("turn the lights off in the dining room", "lights.off", {"area": "dining_room"}, {"area": "dining room"}),
    ("kill the hall lights", "lights.off", {"area": "hallway"}, {"area": "hall"}),
    ("stop", "assistant.stop", {}, {}),
    ("Stop!", "assistant.stop", {}, {}),
    ("stop talking", "assistant.stop", {}, {}),
    ("never mind", "assistant.stop", {}, {}),
    ("be quiet", "assistant.stop", {}, {}),
    ("cancel", "assistant.stop", {}, {}),
    ("can you please turn it down a bit thanks", "media.volume_down", {}, {}),
    ("hey voxline, what's the time?", "clock.time", {}, {}),
    ("stop please", "assistant.stop", {}, {}),
]

NEGATIVES = [
    "what's the tallest mountain",
    "tell me a story about a volume knob",
    "who paused the war",
    "turn the volume",
    "set a timer",
    "set a timer for",
    "set a timer for ten",
    "set a timer for ten apples",
    "set a timer for 0 seconds",
    "set a timer for thirty hours",
    "volume to 150 percent",
    "volume to thirty apples",
    "set the volume to 2.5",
    "what time is it in tokyo",
    "what's the time zone of paris",
    "the lights are on",
    "are the lights on",
    "turn on",
    "turn off",
    "turn the kitchen lights purple",
    "turn on the moon lights",
    "lights",
    "kitchen",
    "stop the war",
    "can you stop being rude",
    "pause for a moment and think",
    "skip breakfast",
    "next time i see you",
    "go back to sleep",
    "why did the music stop",
    "how loud is a jet engine",
    "cancel my subscription",
    "play with the dog",
    "play some",
    "play it cool",
    "play a game",
    "put on your shoes",
    "i want to hear a joke",
    "turn on the tv",
    "mute the tv",
    "turn the lights down",
    "skip the intro",
    "set a reminder for ten minutes",
    "remind me in ten minutes",
    "what is the time in london",
    "what is a timer",
    "how many minutes are in an hour",
    "the music is too quiet to hear the kitchen",
    "please",
    "thank you",
    "",
    "   ",
    "🎵",
    "turn down turn it",
    "mute unmute",
]


@pytest.mark.parametrize(("text", "intent", "slots", "span_text"), POSITIVES, ids=[p[0] for p in POSITIVES])
def test_positive(grammar, text, intent, slots, span_text):
    match = recognize(text, grammar)
    assert match is not None, f"{text!r} did not match"
    assert match.intent == intent
    assert match.slots == slots
    assert {name: match.text[start:end] for name, (start, end) in match.spans.items()} == span_text


def test_every_design_intent_has_a_positive_case(grammar):
    assert {intent for _, intent, _, _ in POSITIVES} == set(grammar.language("en").intents)


@pytest.mark.parametrize("text, intent", [
    ("turn it down turn it down", "media.volume_down"), ("mute mute", "media.mute"), ("stop stop stop", "assistant.stop"),
    ("please skip it skip it", "media.next"),
])
def test_a_command_said_over_and_over_is_the_command_once(grammar, text, intent):
    assert recognize(text, grammar).intent == intent


@pytest.mark.parametrize("text", NEGATIVES)
def test_negative(grammar, text):
    assert recognize(text, grammar) is None


def test_enough_negatives():
    assert len(NEGATIVES) >= 25


def test_match_fields(grammar):
    match = recognize("Set a timer for 10 minutes!", grammar)
    assert match == Match(
        intent="timer.set",
        slots={"seconds": 600},
        text="set a timer for 10 minutes",
        spans={"seconds": (16, 26)},
        template="timer.set#0",
        confirmation="Timer set for 10 minutes.",
    )
    assert match.to_dict() == {
        "intent": "timer.set",
        "slots": {"seconds": 600},
        "text": "set a timer for 10 minutes",
        "spans": {"seconds": [16, 26]},
        "template": "timer.set#0",
        "confirmation": "Timer set for 10 minutes.",
    }


def test_slot_values_have_their_types(grammar):
    assert isinstance(recognize("volume to thirty", grammar).slots["level"], int)
    assert isinstance(recognize("set a timer for 1.5 minutes", grammar).slots["seconds"], int)
    assert recognize("set a timer for 1.5 minutes", grammar).slots == {"seconds": 90}


@pytest.mark.parametrize(
    ("text", "confirmation"),
    [
        ("turn the volume down", "Volume down."),
        ("volume to 30%", "Volume 30."),
        ("set a timer for an hour and a half", "Timer set for 1 hour and 30 minutes."),
        ("turn on the living room lights", "Lights on in the living room."),
        ("turn on the lights", "Lights on."),
        ("play some jazz", "Playing jazz."),
        ("play", "Playing."),
        ("what time is it", None),
    ],
)
def test_confirmation(grammar, text, confirmation):
    assert recognize(text, grammar).confirmation == confirmation


def test_same_result_twice(grammar):
    for text, *_ in POSITIVES:
        assert recognize(text, grammar) == recognize(text, grammar)


def test_same_result_from_a_fresh_load():
    fresh = Grammar.from_dict(builtin_grammar().to_dict())
    for text, *_ in POSITIVES:
        assert recognize(text, fresh) == recognize(text, builtin_grammar())


def test_every_builtin_wording_recognises_as_its_own_intent(grammar):
    """Each expansion of each template, with sample slot values, must come back as its intent: no ambiguity."""
    samples = {"number": "thirty", "duration": "ten minutes", "wildcard": "jazz"}
    language = grammar.language("en")
    for template in language.templates:
        for elements in template.expansions:
            words = []
            for element in elements:
                if isinstance(element, SlotRef):
                    slot_list = language.lists[element.list_name]
                    kind = slot_list.kind
                    words.append(slot_list.values[0].synonyms[0] if kind == "values" else samples[kind])
                else:
                    words.append(element)
            text = " ".join(words)
            match = recognize(text, grammar)
            assert match is not None and match.intent == template.intent, (template.id, text)


# --- ranking and precision ----------------------------------------------------------------------------------------


def tiny(intents: dict, lists: dict | None = None, skip_words: list | None = None) -> Grammar:
    document = {"language": "en", "intents": {name: {"sentences": s} for name, s in intents.items()}}
    document["lists"] = lists or {}
    document["skip_words"] = skip_words or []
    return Grammar.from_dict(compile_documents([document]))


def test_two_intents_for_one_sentence_is_no_match():
    grammar = tiny({"a.one": ["do it"], "a.two": ["do (it|that)"]})
    assert recognize("do it", grammar) is None
    assert recognize("do that", grammar).intent == "a.two"


def test_one_synonym_of_two_values_is_no_match():
    lists = {"room": {"values": [{"value": "hall", "synonyms": ["hall"]}, {"value": "hallway", "synonyms": ["hall"]}]}}
    grammar = tiny({"x.go": ["go to the {room}"]}, lists)
    assert recognize("go to the hall", grammar) is None


def test_same_intent_twice_is_still_a_match():
    grammar = tiny({"a.one": ["do it", "do (it|that)"]})
    match = recognize("do it", grammar)
    assert match.intent == "a.one" and match.template == "a.one#0"


def test_literal_words_beat_free_text():
    lists = {"q": {"wildcard": {"max_tokens": 5}}}
    grammar = tiny({"x.generic": ["play music"], "x.search": ["play {q}"]}, lists)
    assert recognize("play music", grammar).intent == "x.generic"
    assert recognize("play techno", grammar).slots == {"q": "techno"}


def test_free_text_is_bounded():
    lists = {"q": {"wildcard": {"max_tokens": 3}}}
    grammar = tiny({"x.search": ["find {q}"]}, lists)
    assert recognize("find a b c", grammar).slots == {"q": "a b c"}
    assert recognize("find a b c d", grammar) is None


def test_whole_utterance_must_be_consumed():
    grammar = tiny({"x.y": ["pause"]})
    assert recognize("pause", grammar) is not None
    assert recognize("pause now", grammar) is None
    assert recognize("please pause", grammar) is None


def test_step_guard_gives_up_as_no_match(monkeypatch):
    # The package re-exports the function under the module's name, so fetch the module itself.
    recognize_module = importlib.import_module("voxline.intents.recognize")
    lists = {"q": {"wildcard": {"max_tokens": 8}}}
    grammar = tiny({"x.y": ["say {q}"]}, lists)
    assert recognize("say a b c", grammar) is not None
    monkeypatch.setattr(recognize_module, "MAX_MATCH_STEPS", 3)
    assert recognize("say a b c", grammar) is None
    assert recognize("say a b c", grammar, index=False) is None


def test_skip_words_only_at_the_edges():
    grammar = tiny({"x.y": ["turn it down"]}, skip_words=["please"])
    assert recognize("please turn it down please", grammar).intent == "x.y"
    assert recognize("turn please it down", grammar) is None


def test_skip_words_can_be_a_command_of_their_own():
    grammar = tiny({"x.thanks": ["thank you"], "x.y": ["go"]}, skip_words=["thank you"])
    assert recognize("go thank you", grammar).intent == "x.y"
    assert recognize("thank you", grammar).intent == "x.thanks"


# --- semantic endpointing -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "turn the volume",
        "turn the volume down",  # "... down to 30" may follow
        "set a timer",
        "set a timer for",
        "set a timer for ten",
        "set a timer for an hour and",
        "set a timer for ten minutes",  # "... and thirty seconds" may follow
        "volume to thirty",  # "thirty five", "thirty percent"
        "turn on the",
        "turn on the living",
        "play",
        "play some jazz",  # free text may go on
        "what time",
        "can you",
        "",
    ],
)
def test_is_prefix(grammar, text):
    assert is_prefix(text, grammar)


@pytest.mark.parametrize(
    "text",
    [
        "pause the music",
        "what time is it now",
        "cancel the timer",
        "turn off the kitchen lights",
        "next track",
        "skip this song",
        "what's the tallest mountain",
        "turn the volume sideways",
        "pause the music please",
    ],
)
def test_is_not_prefix(grammar, text):
    assert not is_prefix(text, grammar)


@pytest.mark.parametrize(
    "text",
    [
        "pause",  # "pause the music" pauses all the same
        "mute",
        "next",
        "louder",
        "unmute",
        "resume the music",
        "go back",
        "volume down",
        "stop the music",
        "pause the music",  # nothing longer starts with it at all
        "pause the music for a second",  # skip words are not the grammar's sentences
        "stop talking",  # ... "i've heard enough" says why, and stops all the same
    ],
)
def test_more_words_could_not_change_it(grammar, text):
    assert recognize(text, grammar) is not None
    assert not could_change(text, grammar)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("stop", "stop the timer: another intent"),
        ("turn on the lights", "... in the kitchen: a slot value added"),
        ("turn the lights off", "... in the kitchen"),
        ("turn the volume down", "... to 30: another intent"),
        ("set the volume to fifty", "... five: the slot's own words go on"),
        ("set a timer for ten minutes", "... and thirty seconds"),
        ("play some jazz", "free text may go on"),
        ("play", "... {query}"),
        ("turn the volume", "no command yet: as is_prefix"),
    ],
)
def test_more_words_could_change_it(grammar, text, why):
    assert could_change(text, grammar), why


def test_could_change_is_never_false_where_is_prefix_finds_a_longer_command_of_another_meaning():
    """Built from a grammar where the longer sentences differ in intent, in slots, or not at all."""
    grammar = Grammar.from_dict(compile_documents([{
        "language": "en",
        "lists": {"room": {"values": ["kitchen", "hall"]}},
        "intents": {
            "demo.on": {"sentences": ["lamp on", "lamp on now then", "lamp on in the {room}"]},
            "demo.dim": {"sentences": ["lamp", "lamp dim", "lamp dim [a bit]"]},
            "demo.other": {"sentences": ["lamp dim for good"]},
        },
    }]))
    assert is_prefix("lamp on", grammar) and could_change("lamp on", grammar)  # ... in the {room}
    assert is_prefix("lamp dim", grammar) and could_change("lamp dim", grammar)  # ... for good: demo.other
    assert is_prefix("lamp", grammar) and could_change("lamp", grammar)  # lamp on: demo.on
    assert is_prefix("lamp dim a", grammar) and could_change("lamp dim a", grammar)  # not a command yet
    assert not is_prefix("lamp on now then", grammar) and not could_change("lamp on now then", grammar)


def test_a_longer_sentence_of_the_same_meaning_does_not_change_it():
    grammar = Grammar.from_dict(compile_documents([{
        "language": "en",
        "intents": {"demo.pause": {"sentences": ["pause", "pause [the] (music|song)", "pause it now"]}},
    }]))
    assert is_prefix("pause", grammar) and not could_change("pause", grammar)
    assert recognize("pause it now", grammar).intent == "demo.pause"


def test_prefix_and_match_together_decide_early_dispatch(grammar):
    """The page dispatches on a partial transcript only when it matches and nothing longer may follow."""
    assert recognize("pause the music", grammar) and not is_prefix("pause the music", grammar)
    assert recognize("turn the volume down", grammar) and is_prefix("turn the volume down", grammar)
    assert recognize("turn the volume", grammar) is None and is_prefix("turn the volume", grammar)


@pytest.mark.parametrize("text, intent", [
    ("and pause", None), ("and mute the sound", None), ("okay and pause", None),  # Whisper's "unpause", "unmute"
    ("unpause", "media.resume"), ("un mute", "media.unmute"),
    ("and set a timer for ten minutes", "timer.set"), ("and skip this song", "media.next"),
])
def test_a_skip_word_that_may_be_a_misheard_word_start_is_kept(grammar, text, intent):
    match = recognize(text, grammar)
    assert (match.intent if match else None) == intent


def test_sound_alike_comes_from_the_skill_file(tmp_path):
    from voxline.intents import load_grammar

    path = tmp_path / "mini.yaml"
    path.write_text("language: en\nskip_words: [and]\nsound_alike: {and: un}\n"
                    "intents:\n  a.lock: {sentences: [lock]}\n  a.unlock: {sentences: [unlock]}\n")
    grammar = load_grammar([path])
    assert recognize("and lock", grammar) is None and recognize("and unlock", grammar).intent == "a.unlock"
    path.write_text("language: en\nskip_words: [and]\nintents:\n  a.lock: {sentences: [lock]}\n")
    assert recognize("and lock", load_grammar([path])).intent == "a.lock"


@pytest.mark.parametrize("text, intent, slots", [
    ("switch off my kitchen lights", "lights.off", {"area": "kitchen"}),
    ("turn the lights off in our bedroom", "lights.off", {"area": "bedroom"}),
    ("turn on your lights", "lights.on", {}),
    ("pause my music", "media.pause", {}),
    ("turn that song down", "media.volume_down", {}),
    ("mute my music", "media.mute", {}),
    ("turn off those lights", "lights.off", {}),
    ("skip this song", "media.next", {}),  # a template's own "this" is still read as itself
    ("my mistake", "assistant.stop", {}),
    ("play my jazz playlist", "media.play", {"query": "my jazz playlist"}),  # a slot keeps the words as said
    ("turn off my oven", None, {}),
    ("turn that off", None, {}),  # a pronoun: no noun after it, no command
])
def test_possessives_and_demonstratives_are_read_as_the(grammar, text, intent, slots):
    for index in (True, False):  # the trie and the linear scan agree
        match = recognize(text, grammar, index=index)
        assert (match.intent, match.slots) == (intent, slots) if intent else match is None


def test_a_word_read_as_another_changes_no_endpointing(grammar):
    """"turn my volume down" may go on ("to 30") as "turn the volume down" may; "pause my music" may not."""
    assert is_prefix("turn my volume down", grammar) and is_prefix("turn my", grammar)
    assert could_change("turn my volume down", grammar) == could_change("turn the volume down", grammar)
    assert could_change("pause my music", grammar) == could_change("pause the music", grammar)


def test_read_as_comes_from_the_skill_file(tmp_path):
    from voxline.intents import GrammarError, load_grammar

    path = tmp_path / "mini.yaml"
    path.write_text("language: en\nread_as: {my: the}\nintents:\n  a.lock: {sentences: [lock the door]}\n")
    grammar = load_grammar([path])
    assert recognize("lock my door", grammar).intent == "a.lock" and recognize("lock our door", grammar) is None
    path.write_text("language: en\nread_as: {my: a}\nintents:\n  a.lock: {sentences: [lock the door]}\n")
    with pytest.raises(GrammarError, match="no template has"):
        load_grammar([path])
    path.write_text("language: en\nread_as: {my: my}\nintents:\n  a.lock: {sentences: [lock my door]}\n")
    with pytest.raises(GrammarError, match="two different phrases"):
        load_grammar([path])


def test_a_phrase_may_be_read_as_other_words(tmp_path):
    """`read_as` takes phrases: the words said stand for the template's words where a template has them, in the trie
    and the linear scan alike, and the endpointing searches see a phrase not yet finished as one that may go on."""
    from voxline.intents import load_grammar

    path = tmp_path / "mini.yaml"
    path.write_text("language: en\nread_as: {can i have: i want, gimme: give me}\n"
                    "lists:\n  what: {wildcard: {max_tokens: 3}}\n"
                    "intents:\n  a.lock: {sentences: [i want the door locked]}\n"
                    "  a.give: {sentences: ['give me {what}']}\n")
    grammar = load_grammar([path])
    for index in (True, False):
        assert recognize("can i have the door locked", grammar, index=index).intent == "a.lock"
        assert recognize("i want the door locked", grammar, index=index).intent == "a.lock"
        match = recognize("gimme the key", grammar, index=index)
        assert (match.intent, match.slots, match.spans) == ("a.give", {"what": "the key"}, {"what": (6, 13)})
        # only where a template has the words it is read as, and only whole
        assert recognize("can i have the door", grammar, index=index) is None
        assert recognize("can have the door locked", grammar, index=index) is None
        assert recognize("i have the door locked", grammar, index=index) is None
    assert is_prefix("can i", grammar) and is_prefix("can i have the door", grammar)
    assert not is_prefix("can you", grammar)


@pytest.mark.parametrize(("text", "intent", "slots"), [
    ("can i have it a little louder", "media.volume_up", {}),
    ("could we get a timer for twenty minutes", "timer.set", {"seconds": 1200}),
    ("can i get the volume at thirty", "media.volume_set", {"level": 30}),
    ("may i have the sound back please", "media.unmute", {}),
    ("can i hear some bob marley", "media.play", {"query": "bob marley"}),
    ("can we listen to the radio", "media.play", {"query": "the radio"}),
    ("could i get the time", "clock.time", {}),
    ("can we have another track", "media.next", {}),
])
def test_asking_to_have_something_is_wanting_it(grammar, text, intent, slots):
    match = recognize(text, grammar)
    assert match is not None and (match.intent, match.slots) == (intent, slots)


@pytest.mark.parametrize("text", ["can i have a word", "can i get a glass of water", "can we have a chat about the music",
                                  "can i have the lights"])
def test_asking_to_have_what_no_command_wants_is_no_command(grammar, text):
    assert recognize(text, grammar) is None


def test_no_command_openings_may_be_written_with_alternatives(tmp_path):
    """"(he|she) (paused|muted)" is four openings, compiled to the same grammar as the four written out."""
    from voxline.intents import GrammarError, load_grammar

    path = tmp_path / "mini.yaml"
    written = tmp_path / "written.yaml"
    intents = "intents:\n  m.pause: {sentences: [pause the music]}\n"
    path.write_text('language: en\nno_command_openings:\n  statement: ["(he|she) (paused|muted)", why]\n' + intents)
    written.write_text("language: en\nno_command_openings:\n  statement: [he paused, he muted, she paused, she muted, "
                       "why]\n" + intents)
    grammar = load_grammar([path])
    assert grammar.version == load_grammar([written]).version
    assert grammar.language("en").no_command_kind(["she", "muted", "the", "music"]) == "statement"
    path.write_text('language: en\nno_command_openings:\n  statement: ["(he|she) {what}"]\n' + intents)
    with pytest.raises(GrammarError, match="words only"):
        load_grammar([path])


def test_no_command_openings_come_from_the_skill_file_and_open_no_template(tmp_path):
    from voxline.intents import GrammarError, load_grammar
    from voxline.intents.lexicon import decoding_lexicon

    path = tmp_path / "mini.yaml"
    path.write_text("language: en\nno_command_openings: [\"don't\", how do]\n"
                    "intents:\n  a.lock: {sentences: [lock, how to lock]}\n")
    grammar = load_grammar([path])
    assert grammar.language("en").no_command_openings == (("dont",), ("how", "do"))
    assert decoding_lexicon(grammar)["no_command_openings"] == [["dont"], ["how", "do"]]
    more = tmp_path / "more.yaml"
    more.write_text("language: en\nno_command_openings: [who]\n")
    assert load_grammar([path, more]).language("en").no_command_openings == (("dont",), ("how", "do"), ("who",))
    path.write_text("language: en\nno_command_openings: [how to]\nintents:\n  a.lock: {sentences: [how to lock]}\n")
    with pytest.raises(GrammarError, match="'how to' opens a template"):
        load_grammar([path])


def test_no_command_openings_have_kinds_that_merge_and_never_clash(tmp_path):
    from voxline.intents import GrammarError, load_grammar
    from voxline.intents.grammar import compile_yaml

    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("language: en\nno_command_openings: {question: [why], negated: [\"don't\"]}\n"
                     "intents:\n  a.lock: {sentences: [lock]}\n")
    second.write_text("language: en\nno_command_openings: {question: [who]}\n")
    english = load_grammar([first, second]).language("en")
    assert english.no_command_kinds == {("why",): "question", ("who",): "question", ("dont",): "negated"}
    assert english.no_command_kind(["who", "locked", "it"]) == "question" and english.no_command_kind(["lock"]) is None
    assert english.no_command_kind([]) is None
    third = tmp_path / "c.yaml"
    third.write_text("language: en\nno_command_openings: {someone_else: [who else]}\n")
    assert load_grammar([first, second, third]).language("en").no_command_kind(["who", "else", "is", "here"]) \
        == "someone_else"  # the longest opening decides
    assert compile_yaml([second, first]) == compile_yaml([first, second])  # canonical: kinds and phrases sorted
    second.write_text("language: en\nno_command_openings: {negated: [why]}\n")
    with pytest.raises(GrammarError, match="'why' is of two kinds"):
        load_grammar([first, second])
    second.write_text("language: en\nno_command_openings: {Not A Kind: [why]}\n")
    with pytest.raises(GrammarError, match="is no kind"):
        load_grammar([first, second])


def test_the_chinese_question_openings_are_no_commands(grammar):
    chinese = grammar.language("zh")
    for text in ["为什么灯关了", "谁把音乐关了", "什么时候开灯"]:
        assert chinese.no_command_kind(normalize(text).split()) == "question", text
    assert chinese.no_command_kind(normalize("别放了").split()) is None  # a request to stop, not a negated one


def test_the_english_no_command_openings_are_no_commands(grammar):
    """Utterances that open with en.yaml's openings are refused by the engine as they are (the browser no longer
    looks for a command reading of them, which would have left the opening out)."""
    openings = grammar.language("en").no_command_openings
    assert ("dont",) in openings and ("who",) in openings
    for text in ["don't stop the music", "who turned the lights off", "why is the volume so low",
                 "ask mum to pause the music", "please don't mute"]:
        assert recognize(text, grammar) is None, text
