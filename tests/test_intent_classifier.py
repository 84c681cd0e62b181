"""The server's intent classifier (voxline/server/intent_classifier.py): its pure decisions without a model, then
the real LLM on a few paraphrases and out-of-domain questions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from voxline.config import Settings
from voxline.intents import builtin_grammar, recognize
from voxline.server.intent_classifier import (
    CANONICAL_COMMANDS,
    EXAMPLES,
    NONE,
    ClassifierConfig,
    LLMClassifier,
    accept,
    classifier_for,
    command_lines,
    grounded,
    parse_command,
    without_free_text,
)
from wsframes import drain


@pytest.fixture(scope="module")
def grammar():
    return builtin_grammar()


# --- pure decisions ------------------------------------------------------------------------------------------------


def test_every_default_intent_has_a_canonical_command_the_grammar_reads_as_that_intent(grammar):
    samples = {"<artist or song>": "miles davis", "<0-100>": "30", "<duration>": "ten minutes", "<room>": "kitchen"}
    assert set(CANONICAL_COMMANDS) == set(grammar.language("en").intents)
    for intent, commands in CANONICAL_COMMANDS.items():
        for command in commands:
            for placeholder, value in samples.items():
                command = command.replace(placeholder, value)
            match = recognize(command, grammar)
            assert match is not None and match.intent == intent, command


def test_every_example_answer_is_a_command_or_none(grammar):
    for said, command in EXAMPLES:
        assert command == NONE or parse_command(command, grammar) is not None, command
        assert recognize(said, grammar) is None or command != NONE, said


def test_the_prompt_lists_every_command(grammar):
    lines = command_lines(grammar)
    assert "set a timer for <duration>" in lines and "stop talking" in lines and len(lines) == 20


@pytest.mark.parametrize(
    ("reply", "intent", "slots"),
    [
        ("volume down", "media.volume_down", {}),
        ("Set a timer for 25 minutes.", "timer.set", {"seconds": 1500}),
        ("turn off the kitchen lights\nand more", "lights.off", {"area": "kitchen"}),
        ("play Miles Davis", "media.play", {"query": "miles davis"}),
    ],
)
def test_a_reply_is_parsed_by_the_grammar(grammar, reply, intent, slots):
    match = parse_command(reply, grammar)
    assert (match.intent, match.slots) == (intent, slots)


@pytest.mark.parametrize("reply", ["none", "None.", "", "   ", "I think you want music",
                                   "set the volume to 150 percent", "set a timer for 0 seconds",
                                   "turn off the moon lights"])
def test_none_chat_and_slot_values_out_of_range_are_no_command(grammar, reply):
    assert parse_command(reply, grammar) is None


@pytest.mark.parametrize(
    ("command", "utterance", "lang", "ok"),
    [
        ("set a timer for 25 minutes", "I need twenty five minutes on the clock", "en", True),
        ("set a timer for 25 minutes", "I need a timer for the pasta", "en", False),  # invented duration
        ("set the volume to 50 percent", "put the volume at fifty", "en", True),
        ("set the volume to 50 percent", "put the volume in the middle", "en", False),
        ("turn off the kitchen lights", "darken the kitchen", "en", True),
        ("turn off the kitchen lights", "darken the room", "en", False),  # invented room
        ("turn off the living room lights", "lounge lights off now", "en", True),  # a synonym of the same value
        ("play miles davis", "throw on some Miles Davis", "en", True),
        ("play miles davis", "throw on some jazz", "en", False),
        ("turn off the kitchen lights", "把厨房弄暗", "zh", True),
        ("set a timer for 10 minutes", "十分钟以后叫我", "zh", True),
        ("volume down", "anything at all", "en", True),  # no slots: nothing to ground
    ],
)
def test_slot_values_must_be_said(grammar, command, utterance, lang, ok):
    match = recognize(command, grammar)
    assert grounded(match, utterance, grammar, lang) is ok


def test_acceptance_needs_a_parse_the_probability_and_grounding(grammar):
    config = ClassifierConfig(min_command_prob=0.5)
    match = recognize("volume down", grammar)
    assert accept(match, 0.9, True, config) == "accepted"
    assert accept(None, 0.9, True, config) == "unparsed"
    assert accept(match, 0.49, True, config) == "low_probability"
    assert accept(match, 0.9, False, config) == "ungrounded"


def test_how_sure_the_model_is_of_the_command_leaves_out_the_words_of_a_song_name(grammar):
    import math

    # "play the beatles": sure of "play", unsure how to spell the name ("the" or not)
    steps = (("play", math.log(0.9)), ("play the", math.log(0.3)), ("play the beatles", math.log(0.95)),
             ("play the beatles", math.log(0.98)))  # the end token adds no text
    whole = math.exp(sum(lp for _, lp in steps))
    match = parse_command("play the beatles", grammar)
    assert math.isclose(without_free_text(whole, steps, match, grammar), 0.9 * 0.98)
    # a command without free text keeps the whole probability, as do steps that do not add up to it
    volume = parse_command("set the volume to 80 percent", grammar)
    assert without_free_text(0.5, (("set the volume to 80 percent", math.log(0.5)),), volume, grammar) == 0.5
    assert without_free_text(0.5, steps, match, grammar) == 0.5


def test_an_unsure_command_is_accepted_only_when_its_nearest_intent_by_meaning_agrees(grammar):
    from voxline.server.intent_neighbours import Neighbour

    config = ClassifierConfig(min_command_prob=0.7, agree_min_prob=0.3, agree_min_similarity=0.5)
    match = recognize("volume down", grammar)
    same = Neighbour("media.volume_down", similarity=0.6, margin=0.05)
    assert accept(match, 0.4, True, config, same) == "agreed"
    assert accept(match, 0.9, True, config, same) == "accepted"  # sure by itself: the neighbour is not needed
    assert accept(match, 0.4, True, config, Neighbour("media.volume_up", 0.9, 0.2)) == "low_probability"
    assert accept(match, 0.4, True, config, Neighbour("media.volume_down", 0.45, 0.2)) == "low_probability"
    assert accept(match, 0.29, True, config, same) == "low_probability"
    assert accept(match, 0.4, False, config, same) == "ungrounded"
    assert accept(match, 0.4, True, config, None) == "low_probability"


def test_the_setting_off_means_no_classifier():
    class Bare:
        settings = Settings(intent_classifier="off")

    assert classifier_for(Bare()) is None


def test_an_llm_it_was_not_calibrated_for_is_not_asked():
    class FakeLLM:  # only its name is read before the decision
        name = "smollm2-135m-instruct-ct2"
        generator = tokenizer = format = neutralize = None

    class Bare:
        settings = Settings()
        llm = FakeLLM()

    assert classifier_for(Bare()) is None


def test_the_setting_is_checked():
    assert Settings.from_env({"VOXLINE_INTENT_CLASSIFIER": "off"}).intent_classifier == "off"
    assert Settings().intent_classifier == "llm"
    with pytest.raises(ValueError, match="intent_classifier"):
        Settings(intent_classifier="bert")


# --- with the real model -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def classifier(model_dir, grammar):
    from voxline.llm import LLM

    return LLMClassifier(LLM(model_dir("qwen2.5-0.5b-instruct-ct2"), threads=1), grammar)


@pytest.mark.parametrize(
    ("text", "intent", "slots"),
    [
        ("put the volume at fifty", "media.volume_set", {"level": 50}),
        ("put on a timer of two hours", "timer.set", {"seconds": 7200}),
        ("give me some light in the bedroom", "lights.on", {"area": "bedroom"}),
        ("it's too dark in the kitchen, turn the lights on", "lights.on", {"area": "kitchen"}),
    ],
)
def test_paraphrases_are_resolved(classifier, text, intent, slots):
    verdict = classifier.classify(text)
    assert verdict.match is not None, verdict
    assert (verdict.match.intent, verdict.match.slots) == (intent, slots)
    assert verdict.reason == "accepted" and verdict.command_prob >= classifier.config.min_command_prob


@pytest.mark.parametrize("text", ["what is a timer", "who invented the light bulb", "the music was too loud yesterday",
                                  "do you like music", "what is the capital of France"])
def test_out_of_domain_stays_out(classifier, text):
    assert classifier.classify(text).match is None


class RecordingGenerator:
    """The real CTranslate2 generator, noting the static prompt of every call."""

    def __init__(self, real) -> None:
        self.real, self.static_prompts = real, []

    def generate_batch(self, *args, **kwargs):
        self.static_prompts.append(kwargs.get("static_prompt"))
        return self.real.generate_batch(*args, **kwargs)


def test_the_warm_up_prefills_the_static_prompt_on_the_model(classifier):
    real = classifier.llm.generator
    classifier.llm.generator = recording = RecordingGenerator(real)
    try:
        classifier.warm_up()
        classifier.classify("hello")  # what the warm-up once was: turned away before the model
    finally:
        classifier.llm.generator = real
    assert recording.static_prompts == [classifier._static]


def test_overlong_text_is_not_asked(classifier):
    verdict = classifier.classify("please " * 40 + "pause")
    assert verdict.reason == "too_long" and verdict.match is None


# --- in the server's turn ------------------------------------------------------------------------------------------


def _turn_frames(engines, text: str) -> list[dict]:
    import asyncio
    import json

    from voxline.server import protocol as p
    from voxline.server.outbox import Outbox
    from voxline.server.session import Session

    async def scenario() -> list[dict]:
        outbox = Outbox()
        session = Session(engines, outbox)
        await session.receive_text(json.dumps({"type": "hello", "v": 1, "capabilities": {"reply_audio": False}}))
        await session.dispatch(p.TextTurn(turn_id=1, text=text))
        await session.turn.task
        frames, _ = await drain(outbox)
        return [f for f in frames if f.get("type") != "hello"]

    return asyncio.run(scenario())


@pytest.fixture(scope="module")
def server_engines(model_dir):
    from voxline.server.engines import Engines

    return Engines.load(Settings(tts_engine="espeak"), model_dir)


def test_a_paraphrase_the_grammar_misses_comes_back_as_an_intent_not_a_chat_reply(server_engines):
    frames = _turn_frames(server_engines, "darken the living room")
    kinds = [f["type"] for f in frames]
    assert "reply.delta" not in kinds, frames
    intent = next(f for f in frames if f["type"] == "intent")
    assert intent["intent"] == "lights.off" and intent["slots"] == {"area": "living_room"}
    assert intent["grammar_version"] == server_engines.grammar.version


def test_with_the_classifier_off_the_same_words_go_to_the_chat(server_engines):
    from voxline.server.engines import Engines

    off = Engines(replace(server_engines.settings, intent_classifier="off"), server_engines.grammar,
                  server_engines.resolver, server_engines.llm, server_engines.tts, server_engines.asr)
    kinds = [f["type"] for f in _turn_frames(off, "darken the living room")]
    assert "intent" not in kinds and "reply.delta" in kinds


def test_the_classifier_is_not_asked_about_utterances_that_name_nothing_of_the_domain():
    from voxline.server.intent_classifier import could_be_command, domain_vocabulary

    vocabulary = domain_vocabulary(builtin_grammar())
    for question in ["what is the capital of france", "tell me a joke", "how do i make pancakes",
                     "what is the weather like tomorrow", "who wrote hamlet", "remind me to call my mother"]:
        assert not could_be_command(question, vocabulary), question
    for paraphrase in ["darken the kitchen", "freeze the music", "twenty five minutes on the clock for the pasta",
                       "i'd like the lights on in the bedroom", "what does mute mean"]:
        assert could_be_command(paraphrase, vocabulary), paraphrase


@pytest.mark.parametrize("text, why", [
    ("what does mute mean", "question"), ("how do timers work", "question"), ("why is the music so loud", "question"),
    ("ask mum to turn off the kitchen lights", "someone_else"), ("tell dad to turn the music down", "someone_else"),
    ("please don't mute yourself", "negated"), ("do not turn off the lights", "negated"),
    ("turn off my alarm", "something_else"), ("mute the tv", "something_else"),
    ("switch the webcam off", "something_else"), ("turn my notifications off", "something_else"),
    # what someone else did, and a command on a condition
    ("he paused the film halfway", "statement"), ("they muted the match", "statement"),
    ("if it gets late switch the lights off", "condition"), ("unless i say so keep the music on", "condition"),
    ("if you could turn it down", None),
    # what someone else told the speaker, a wish about what cannot be (the eighth round); not the speaker's own
    # request said again
    ("my boss told me to mute the call", None), ("he told me to skip the intro", "reported"),
    ("she asked me to turn the lights off", "reported"), ("i wish i could skip mondays", "wish"),
    ("if only the timer had gone off", "wish"), ("i told you to pause it", None),
    # what the speakers do themselves, said of themselves
    ("i paused the movie for a snack", "statement"), ("we turned the heating off", "statement"),
    ("i set a timer for ten minutes", "statement"), ("i'd like the music paused", None),
    # "unpause", "unmute" as Whisper often hears them: the command after "and" is the opposite of what was said
    ("and pause", "sound_alike"), ("and mute the music", "sound_alike"), ("please and pause", "sound_alike"),
    ("and play the beatles", None), ("and set a timer for ten minutes", None),
    ("i need a reminder in five minutes for the eggs set a timer", None),
    ("pause for a bit would you", None), ("i don't want any more music", None), ("never mind the timer", None),
    ("how late is it right now", None), ("tell me the time", None), ("can you stop the song for a little while", None),
    # a suggestion: the skip phrase "why don't you" is longer than the question's "why" (the eleventh round)
    ("why don't you put on something relaxing", None), ("why do you keep stopping", "question"),
])
def test_plain_questions_messages_and_negated_requests_are_not_asked(grammar, text, why):
    from voxline.server.intent_classifier import not_a_request

    assert not_a_request(text, grammar.language("en")) == why


def test_the_refused_openings_are_the_skill_files_not_the_classifiers(tmp_path):
    """The classifier refuses by the openings (and their kinds) of the grammar it serves, which are those the browser
    reads no command after: a skill file that adds one changes both, and a bare list is of one kind."""
    from voxline.intents import builtin_skill_paths, load_grammar
    from voxline.server.intent_classifier import not_a_request

    extra = tmp_path / "mine.yaml"
    extra.write_text("language: en\nno_command_openings:\n  someone_else: [remind grandad]\n  rhetorical: [guess what]\n")
    english = load_grammar([*builtin_skill_paths(), extra]).language("en")
    assert not_a_request("remind grandad to turn off the lights", english) == "someone_else"
    assert not_a_request("guess what turn the music up", english) == "rhetorical"
    assert not_a_request("why is the music so loud", english) == "question"  # the built-in kinds are kept
    bare = tmp_path / "bare.yaml"
    bare.write_text("language: en\nno_command_openings: [guess what]\nintents: {a.b: {sentences: [turn it up]}}\n")
    assert not_a_request("guess what turn it up", load_grammar([bare]).language("en")) == "no_command"
    assert not_a_request("turn it up", load_grammar([bare]).language("en")) is None


def test_a_question_about_a_command_word_is_refused_before_the_model(classifier, monkeypatch):
    def unasked(text):
        raise AssertionError(f"the model was asked about {text!r}")

    monkeypatch.setattr(classifier, "rewrite", unasked)
    verdict = classifier.classify("what does mute mean")
    assert verdict.match is None and verdict.reason == "question"


# --- the chat beside the classifier ----------------------------------------------------------------------------------


class VerdictAfterTheChatSpoke:
    """The server's real classifier, whose verdict is handed over only once the chat started beside it has generated
    `deltas` reply tokens (or has finished): so a test sees what the turn does with a chat that is already talking,
    whatever the machine's speed. It only waits; the verdict is the model's."""

    def __init__(self, real, turn, deltas: int = 3) -> None:
        self.real, self.turn, self.deltas = real, turn, deltas

    def screen(self, text, lang="en"):
        return self.real.screen(text, lang)

    def classify(self, text, lang="en"):
        import time

        verdict = self.real.classify(text, lang)
        deadline = time.monotonic() + 120
        while (turn := self.turn()) is not None and turn.deltas < self.deltas and turn.verdict_end is None:
            assert time.monotonic() < deadline, "the chat beside the classifier generated nothing in 120 s"
            time.sleep(0.005)
        return verdict


def _turn_beside_chat(engines, text: str, *, wait_for_chat: bool, **settings):
    """One text turn through a real session on `engines` (with `settings` changed; two LLM slots unless they say
    otherwise, whatever this machine's cores), reply audio on: the JSON frames, the reply audio frames, the timings
    message and the session's history afterwards."""
    import asyncio
    import json

    from voxline.server import protocol as p
    from voxline.server.engines import Engines
    from voxline.server.outbox import Outbox
    from voxline.server.session import Session

    real = classifier_for(engines)  # built (and warmed up) once per module: the same model, the same verdicts
    engines = Engines(replace(engines.settings, **{"llm_parallel_batches": 2, **settings}), engines.grammar,
                      engines.resolver, engines.llm, engines.tts, engines.asr)

    async def scenario():
        outbox = Outbox()
        session = Session(engines, outbox)
        engines.__dict__["_intent_classifier"] = (VerdictAfterTheChatSpoke(real, lambda: session.turn)
                                                  if wait_for_chat else real)
        await session.receive_text(json.dumps({"type": "hello", "v": 1, "capabilities": {"reply_audio": True}}))
        await session.dispatch(p.TextTurn(turn_id=1, text=text))
        await session.turn.task
        frames, audio = await drain(outbox)
        return [f for f in frames if f["type"] != "hello"], audio, session.history.exchanges

    frames, audio, history = asyncio.run(scenario())
    timings = next(f for f in frames if f["type"] == "timings")
    return frames, audio, timings, history


def test_a_command_found_while_the_chat_already_talked_leaves_no_trace_of_the_chat(server_engines):
    frames, audio, timings, history = _turn_beside_chat(server_engines, "darken the living room", wait_for_chat=True)
    kinds = [f["type"] for f in frames]
    assert "reply.delta" not in kinds, frames
    intent = next(f for f in frames if f["type"] == "intent")
    assert (intent["intent"], intent["slots"]) == ("lights.off", {"area": "living_room"})
    done = next(f for f in frames if f["type"] == "reply.done")
    assert done["text"] == (intent["confirmation"] or "") and not done["interrupted"]
    # Only the confirmation is heard, numbered from the turn's first frame; the chat's generation left no mark.
    assert [a.seq for a in audio] == list(range(len(audio)))
    assert {a.clause for a in audio} <= {0}
    assert not history
    assert "classify_ms" in timings and not {"llm_queued_ms", "llm_first_token_ms", "llm_tokens"} & {
        k for k, v in timings.items() if v is not None}


def test_a_question_the_classifier_is_asked_about_is_answered_by_the_chat_started_beside_it(server_engines):
    question = "do you like music"  # names the domain, opens as no refused question: the model must be asked
    assert classifier_for(server_engines).screen(question) is None
    frames, audio, timings, history = _turn_beside_chat(server_engines, question, wait_for_chat=True)
    kinds = [f["type"] for f in frames]
    assert "intent" not in kinds and "reply.delta" in kinds
    done = next(f for f in frames if f["type"] == "reply.done")
    deltas = "".join(f["text"] for f in frames if f["type"] == "reply.delta")
    assert done["text"] and done["text"] == deltas.strip()
    assert audio and [a.seq for a in audio] == list(range(len(audio)))
    assert [(e.user, e.assistant) for e in history] == [(question, done["text"])]
    # The chat was queued before the verdict came, and had talked by then (the wrapper saw to that).
    assert timings["llm_queued_ms"] < timings["classify_ms"]
    assert timings["llm_first_token_ms"] <= timings["classify_ms"]


@pytest.mark.parametrize("settings", [{"classify_beside_chat": False},
                                      {"batching": False},              # one LLM slot: the two would queue
                                      {"llm_parallel_batches": 1}])
def test_with_the_setting_off_or_one_llm_slot_the_chat_starts_after_the_verdict(server_engines, settings):
    frames, _, timings, _ = _turn_beside_chat(server_engines, "do you like music", wait_for_chat=False, **settings)
    assert "reply.delta" in [f["type"] for f in frames]
    assert timings["llm_queued_ms"] >= timings["classify_ms"]


def test_a_speculative_turn_cancelled_while_the_verdict_is_out_sends_nothing_and_leaves_no_history(server_engines):
    """The page went on speaking while the server was still deciding whether its words were a command, the chat
    already talking beside the classifier: the cancel stops both, and the next turn is served as usual."""
    import asyncio
    import json
    import threading
    import time

    from voxline.server import protocol as p
    from voxline.server.engines import Engines
    from voxline.server.outbox import Outbox
    from voxline.server.session import Session

    real = classifier_for(server_engines)
    released = threading.Event()

    class VerdictWithheld:
        def screen(self, text, lang="en"):
            return real.screen(text, lang)

        def classify(self, text, lang="en"):
            released.wait(120)
            return real.classify(text, lang)

    engines = Engines(replace(server_engines.settings, llm_parallel_batches=2), server_engines.grammar,
                      server_engines.resolver, server_engines.llm, server_engines.tts, server_engines.asr)
    engines.__dict__["_intent_classifier"] = VerdictWithheld()

    async def scenario():
        outbox = Outbox()
        session = Session(engines, outbox)
        await session.receive_text(json.dumps({"type": "hello", "v": 1, "capabilities": {"reply_audio": True}}))
        await outbox.get()  # welcome
        await session.dispatch(p.TurnStart(turn_id=1, transcript="do you like music", confidence=0.95,
                                           speculative=True))
        turn, deadline = session.turn, time.monotonic() + 120
        while turn.deltas < 2:  # the chat beside the classifier is talking; the verdict is still out
            assert time.monotonic() < deadline, "the chat generated nothing in 120 s"
            await asyncio.sleep(0.01)
        await session.dispatch(p.TurnCancel(turn_id=1))
        released.set()
        leaked = [outbox._items.popleft() for _ in range(len(outbox._items))]
        await session.dispatch(p.TextTurn(turn_id=2, text="what is the capital of spain"))
        await session.turn.task
        return turn, leaked, session.history.exchanges

    try:
        turn, leaked, history = asyncio.run(scenario())
    finally:
        released.set()
    assert leaked == [], leaked
    assert turn.verdict_held is None and turn.task.done()
    assert [e.user for e in history] == ["what is the capital of spain"]
