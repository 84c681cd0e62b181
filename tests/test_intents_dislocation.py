"""Left dislocation (issue 13): a speaker who names the object first and then refers to it by a pronoun ("the
bedroom lamp, switch it off") is heard as the command with the object in the pronoun's place
(`voxline.intents.recognize._with_dislocation`); and the politeness frames that ask whether the listener is able
to. The sentences here are my own, written for these tests; none is a line of an evaluation set."""

from __future__ import annotations

import pytest

from voxline.intents import Grammar, GrammarError, builtin_grammar, compile_documents, recognize

DISLOCATION = {"topics": ["the", "my"], "pronouns": ["it", "them"]}


@pytest.fixture(scope="module")
def grammar() -> Grammar:
    return builtin_grammar()


def tiny(*, dislocation: dict | None = None) -> Grammar:
    document = {
        "language": "en",
        "intents": {"m.stop": {"sentences": ["stop the music"]},
                    "a.stop": {"sentences": ["stop it"]},
                    "l.off": {"sentences": ["turn [the] {area} lights off"]},
                    "m.play": {"sentences": ["play {query}"]}},
        "lists": {"area": {"values": ["kitchen", "garage"]}, "query": {"wildcard": {"max_tokens": 6}}},
        "skip_words": ["please", "can you"],
        "asides": {"clause_verbs": ["is", "are"], "not_with": ["tv"]},
        **({"dislocation": dislocation} if dislocation is not None else {}),
    }
    return Grammar.from_dict(compile_documents([document]))


def test_the_topic_stands_for_the_pronoun():
    grammar = tiny(dislocation=DISLOCATION)
    assert recognize("the music stop it", grammar).intent == "m.stop"  # not "stop it", the assistant
    match = recognize("the garage lights can you turn them off please", grammar)
    assert (match.intent, match.slots) == ("l.off", {"area": "garage"})


def test_without_dislocation_in_the_skill_file_the_topic_is_not_read():
    assert recognize("the garage lights turn them off", tiny()) is None


def test_a_clause_is_no_topic_but_its_noun_phrase_may_be_the_pronouns_antecedent():
    # "the garage lights are on" is a clause, not a topic; the pronoun names its noun phrase (`_with_antecedent`)
    grammar = tiny(dislocation=DISLOCATION)
    match = recognize("the garage lights are on turn them off", grammar)
    assert (match.intent, match.slots) == ("l.off", {"area": "garage"})
    assert recognize("the garage lights are on turn off", grammar) is None  # no pronoun: an area in an aside


@pytest.mark.parametrize("text", [
    "the tv stop it",  # another device
    "music stop it",  # no determiner: no topic
    "the music it",  # nothing but the pronoun
])
def test_what_is_no_topic_is_not_read_as_one(text):
    match = recognize(text, tiny(dislocation=DISLOCATION))
    assert match is None or match.intent != "m.stop" and match.intent != "l.off", text


def test_a_topic_is_refused_for_the_words_an_aside_is_refused_for():
    # the "'s" form of a `not_with` word is the word, in a topic as in an aside
    grammar = tiny(dislocation=DISLOCATION)
    assert recognize("the radio play it", grammar).slots == {"query": "the radio"}
    assert recognize("the tv's remote play it", grammar) is None


def test_a_slot_may_not_take_words_from_both_sides_of_the_pronoun():
    # "play me <the beatles>" would give the song's name words said after the topic and the topic itself
    match = recognize("the beatles play me it", tiny(dislocation=DISLOCATION))
    assert match is None or match.slots.get("query") != "me the beatles"


def test_a_long_utterance_is_not_searched_for_a_topic():
    from voxline.intents.recognize import MAX_DISLOCATION_WORDS

    grammar = tiny(dislocation=DISLOCATION)
    short = "the garage lights can you turn them off please"
    assert recognize(short, grammar).intent == "l.off"
    padding = " please" * (MAX_DISLOCATION_WORDS + 1 - len(short.split()))
    assert recognize(short + padding, grammar) is None


def test_dislocation_is_a_grammar_field_that_changes_the_version():
    assert tiny().version != tiny(dislocation=DISLOCATION).version
    with pytest.raises(GrammarError, match="single words"):
        tiny(dislocation={"topics": ["the"], "pronouns": ["that one"]})
    with pytest.raises(Exception, match="unknown key"):
        compile_documents([{"language": "en", "intents": {}, "dislocation": {"nouns": ["it"]}}])


@pytest.mark.parametrize("text, intent, slots", [
    ("the bedroom lamp could you switch it off", "lights.off", {"area": "bedroom"}),
    ("the lights in here turn them on please", "lights.on", {}),
    ("the volume can you bring it down a bit", "media.volume_down", {}),
    ("the volume put it on forty", "media.volume_set", {"level": 40}),
    ("my timer cancel it", "timer.cancel", {}),
    ("the music pause it for a sec", "media.pause", {}),
    ("that song skip it", "media.next", {}),
    ("the sound turn it back on", "media.unmute", {}),
    # beside an aside
    ("the bedroom lights switch them off we're off to bed", "lights.off", {"area": "bedroom"}),
    ("the baby's asleep the music turn it down", "media.volume_down", {}),
])
def test_builtin_grammar_hears_the_dislocated_command(grammar, text, intent, slots):
    match = recognize(text, grammar)
    assert match is not None and (match.intent, match.slots) == (intent, slots), (text, match)


@pytest.mark.parametrize("text", [
    "the tv turn it down",
    "the oven switch it off",
    "the lights are too bright turn them off in an hour",
    "the kids love it",
    "the song what do you think of it",
    "my sister always turns it up",
])
def test_builtin_grammar_refuses_what_is_no_dislocated_command(grammar, text):
    assert recognize(text, grammar) is None, text


@pytest.mark.parametrize("text, intent, slots", [
    ("are you able to pause the music", "media.pause", {}),
    ("is it okay if you turn the kitchen lights off", "lights.off", {"area": "kitchen"}),
    ("do you mind muting it", "media.mute", {}),
    ("would you be able to set a timer for five minutes", "timer.set", {"seconds": 300}),
    ("turn it up a bit if you can", "media.volume_up", {}),
])
def test_builtin_grammar_hears_a_command_asked_as_whether_it_can_be_done(grammar, text, intent, slots):
    match = recognize(text, grammar)
    assert match is not None and (match.intent, match.slots) == (intent, slots), (text, match)


@pytest.mark.parametrize("text, intent, slots", [
    ("the song's far too loud", "media.volume_down", {}),
    ("the volume's a bit too low", "media.volume_up", {}),
    ("shut the egg timer off", "timer.cancel", {}),
    ("knock off the countdown", "timer.cancel", {}),
    ("switch the lamps in the study on", "lights.on", {"area": "office"}),
    ("shut the lights in the garage off", "lights.off", {"area": "garage"}),
    ("cut the bedroom lights", "lights.off", {"area": "bedroom"}),
    ("keep playing the song", "media.resume", {}),
    ("keep the tunes going", "media.resume", {}),
    ("hello could you turn it up a wee bit", "media.volume_up", {}),
    ("good evening lights on in the dining room", "lights.on", {"area": "dining_room"}),
])
def test_builtin_grammar_hears_the_classes_set_g_lacked(grammar, text, intent, slots):
    match = recognize(text, grammar)
    assert match is not None and (match.intent, match.slots) == (intent, slots), (text, match)


@pytest.mark.parametrize("text, kind", [
    ("she skipped my favourite song", "statement"),
    ("somebody turned the heating down", "statement"),
    ("if it starts raining turn the lights on", "condition"),
    ("as soon as the kettle boils pause the music", "condition"),
])
def test_what_someone_else_did_and_a_command_on_a_condition_open_as_no_command(grammar, text, kind):
    from voxline.intents import normalize

    assert recognize(text, grammar) is None
    assert grammar.language("en").no_command_kind(normalize(text).split()) == kind


def test_a_condition_on_the_listener_is_still_asked_now(grammar):
    assert recognize("if you could pause the music", grammar).intent == "media.pause"


@pytest.mark.parametrize("text, intent", [
    ("i hate that one skip it", "media.next"),
    ("i love this one turn it up", "media.volume_up"),
    ("that one was awful next song please", "media.next"),
])
def test_one_after_a_determiner_in_an_aside_is_a_pronoun_not_a_number(grammar, text, intent):
    match = recognize(text, grammar)
    assert match is not None and match.intent == intent, (text, match)


def test_a_number_in_an_aside_still_bars_it(grammar):
    # a value the command could have taken is no aside: "for five minutes" may be the timer's
    assert recognize("for five minutes set a timer", grammar) is None
    assert recognize("in the kitchen turn on the lights", grammar) is None
