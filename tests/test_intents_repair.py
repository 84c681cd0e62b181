"""Self-repairs (issue 13): a speaker who takes words back and says them again, or says something else instead,
is heard as the command they ended up saying (`voxline.intents.recognize._with_repair`). The sentences here are my
own, written for these tests; none is a line of an evaluation set."""

from __future__ import annotations

import pytest

from voxline.intents import Grammar, builtin_grammar, compile_documents, recognize


@pytest.fixture(scope="module")
def grammar() -> Grammar:
    return builtin_grammar()


def tiny(*, repairs: dict | None = None) -> Grammar:
    document = {
        "language": "en",
        "intents": {"m.pause": {"sentences": ["pause the music", "pause it"]},
                    "m.stop": {"sentences": ["stop the music"]},
                    "t.stop": {"sentences": ["stop the timer"]},
                    "t.set": {"sentences": ["set a timer for {n} minutes"]}},
        "lists": {"n": {"number": {"min": 1, "max": 90}}},
        "skip_words": [],
        "fillers": ["uh"],
        **({"repairs": repairs} if repairs is not None else {}),
    }
    return Grammar.from_dict(compile_documents([document]))


REPAIRS = {"corrections": ["no", "i mean"], "joiners": ["and"]}


def test_a_restart_is_the_command_said_the_second_time():
    grammar = tiny(repairs=REPAIRS)
    assert recognize("pause the uh pause it", grammar).intent == "m.pause"
    assert recognize("pause the pause it", grammar).intent == "m.pause"  # the recogniser left the "uh" out


def test_without_repairs_in_the_skill_file_only_restarts_are_undone():
    grammar = tiny()
    assert recognize("pause the uh pause it", grammar).intent == "m.pause"
    assert recognize("set a timer for five no ten minutes", grammar) is None


def test_a_corrected_value_is_the_value_said_last():
    grammar = tiny(repairs=REPAIRS)
    match = recognize("set a timer for five no ten minutes", grammar)
    assert (match.intent, match.slots) == ("t.set", {"n": 10})
    match = recognize("set a timer for five uh i mean ten minutes", grammar)
    assert (match.intent, match.slots) == ("t.set", {"n": 10})


def test_a_command_taken_back_is_replaced_by_the_next():
    grammar = tiny(repairs=REPAIRS)
    assert recognize("stop the music i mean pause it", grammar).intent == "m.pause"


def test_a_word_that_is_no_correction_takes_nothing_back():
    grammar = tiny(repairs=REPAIRS)
    # "five" and "ten" are values of one list, but nothing says the first was wrong: no repair
    assert recognize("set a timer for five ten minutes", grammar) is None


def test_two_commands_one_after_the_other_are_not_a_repair():
    grammar = tiny(repairs=REPAIRS)
    assert recognize("stop the music stop the timer", grammar) is None
    assert recognize("stop the music and stop the timer", grammar) is None
    assert recognize("stop the music and no stop the timer", grammar) is None  # a joiner: nothing taken back


def test_words_on_the_way_to_no_command_are_not_taken_back():
    grammar = tiny(repairs=REPAIRS)
    # "the weather" starts no command, so "the weather no" is not a reparandum and interregnum
    assert recognize("the weather no pause the music", grammar) is None


def test_repairs_are_a_grammar_field_that_changes_the_version():
    assert tiny().version != tiny(repairs=REPAIRS).version
    merged = compile_documents([
        {"language": "en", "intents": {"m.pause": {"sentences": ["pause"]}}, "repairs": {"corrections": ["no"]}},
        {"language": "en", "repairs": {"corrections": ["sorry"]}}])
    assert merged["languages"]["en"]["repairs"]["corrections"] == ["no", "sorry"]
    with pytest.raises(Exception, match="unknown key"):
        compile_documents([{"language": "en", "intents": {}, "repairs": {"takebacks": ["no"]}}])


@pytest.mark.parametrize("text, intent, slots", [
    ("could you turn the uh turn the kitchen lights off", "lights.off", {"area": "kitchen"}),
    ("switch off the er the hallway lights please", "lights.off", {"area": "hallway"}),
    ("set a timer for twenty no thirty seconds", "timer.set", {"seconds": 30}),
    ("set the volume to forty i mean fifty", "media.volume_set", {"level": 50}),
    ("next i mean previous song", "media.previous", {}),
    ("put on um put on some blues", "media.play", {"query": "blues"}),
    ("lights on in the bedroom sorry the office", "lights.on", {"area": "office"}),
    ("go to the uh go to the next song", "media.next", {}),
    ("mute the mute the sound", "media.mute", {}),
    # a correction of two words inside what would be a song's name takes it back
    ("play the beatles no wait play the stones", "media.play", {"query": "the stones"}),
    ("put on some reggae i mean put on some jazz", "media.play", {"query": "jazz"}),
])
def test_builtin_grammar_hears_the_repaired_command(grammar, text, intent, slots):
    match = recognize(text, grammar)
    assert match is not None and (match.intent, match.slots) == (intent, slots)


@pytest.mark.parametrize("text", [
    "pause the music pause the timer",  # two commands
    "turn on the lights turn off the lights",
    "skip the music and skip the timer",
    "i turned the the lights off",  # a statement, repaired or not
    "don't uh don't pause it",
    "play no woman no cry",  # a song's name is not a correction: played whole (below)
    "play what i mean",  # a correction with nothing said again after it
])
def test_builtin_grammar_refuses_what_is_no_repair(grammar, text):
    match = recognize(text, grammar)
    if text.startswith("play "):
        assert match is not None and match.slots == {"query": text.removeprefix("play ")}
    else:
        assert match is None


def test_an_utterance_of_endless_restarts_is_no_command(grammar):
    # every restart doubles the readings: past MAX_REPAIR_READINGS the utterance is refused, not searched on
    assert recognize("turn uh " * 11 + "turn", grammar) is None


@pytest.mark.parametrize("text, intent, slots", [
    ("把音量调到三十不对四十", "media.volume_set", {"level": 40}),
    ("暂停我是说下一首", "media.next", {}),
    ("定时五分钟不对十分钟", "timer.set", {"seconds": 600}),
    ("打开客厅不对卧室的灯", "lights.on", {"area": "bedroom"}),
    ("关灯不是开灯", "lights.on", {}),
])
def test_builtin_chinese_grammar_hears_the_repaired_command(grammar, text, intent, slots):
    match = recognize(text, grammar, "zh")
    assert match is not None and (match.intent, match.slots) == (intent, slots)
