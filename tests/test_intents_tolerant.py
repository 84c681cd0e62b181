"""Tolerant matching (issue 13, item 2): skip words and fillers, more phrasings per default intent, and what must
still not match. The paraphrases here are development data written for tuning the grammar; the held-out
evaluation set lives elsewhere and is not read by any test of the grammar."""

from __future__ import annotations

import pytest

from voxline.intents import Grammar, builtin_grammar, compile_documents, is_prefix, recognize
from voxline.intents.grammar import ENGINE_REVISION


@pytest.fixture(scope="module")
def grammar() -> Grammar:
    return builtin_grammar()


def tiny(intents: dict, *, skip_words: list | None = None, fillers: list | None = None,
         lists: dict | None = None) -> Grammar:
    document = {
        "language": "en",
        "intents": {name: {"sentences": s} for name, s in intents.items()},
        "lists": lists or {},
        "skip_words": skip_words or [],
        "fillers": fillers or [],
    }
    return Grammar.from_dict(compile_documents([document]))


# --- the filler rule ----------------------------------------------------------------------------------------------


def test_a_filler_inside_is_dropped_when_nothing_matches_with_it():
    grammar = tiny({"x.down": ["turn the volume down"]}, fillers=["uh"])
    assert recognize("turn the uh volume down", grammar).intent == "x.down"
    assert recognize("uh turn the volume down uh", grammar).intent == "x.down"


def test_a_sentence_that_matches_with_its_inner_words_keeps_them():
    lists = {"q": {"wildcard": {"max_tokens": 6}}}
    grammar = tiny({"x.play": ["play {q}"]}, fillers=["just"], lists=lists)
    assert recognize("play just the way you are", grammar).slots == {"q": "just the way you are"}


def test_fillers_never_make_a_longer_sentence_a_command():
    grammar = tiny({"x.pause": ["pause"]}, fillers=["uh"])
    assert recognize("pause uh now", grammar) is None
    assert recognize("uh", grammar) is None


@pytest.mark.parametrize("text, intent, slots", [
    ("set a timer for a minute please", "timer.set", {"seconds": 60}),  # "for a minute" is a skip phrase too
    ("please set a timer for a minute please", "timer.set", {"seconds": 60}),
    ("pause for a minute please", "media.pause", {}),  # the window trimmed most is tried first
])
def test_a_skip_phrase_that_ends_the_command_is_kept_when_the_rest_needs_it(grammar, text, intent, slots):
    match = recognize(text, grammar)
    assert (match.intent, match.slots) == (intent, slots)


def test_skip_words_stay_at_the_edges():
    grammar = tiny({"x.y": ["turn it down"]}, skip_words=["please"])
    assert recognize("turn please it down", grammar) is None


def test_a_slot_span_covers_the_words_heard_even_across_a_filler():
    grammar = tiny({"x.t": ["timer for {s}"]}, fillers=["um"], lists={"s": {"duration": {"min": 1, "max": 9999}}})
    match = recognize("timer for um ten minutes", grammar)
    assert match.slots == {"s": 600}
    assert match.text[slice(*match.spans["s"])] == "ten minutes"


def test_filler_is_a_grammar_field_that_changes_the_version():
    with_fillers = tiny({"x.y": ["go"]}, fillers=["uh"])
    without = tiny({"x.y": ["go"]})
    assert with_fillers.version != without.version
    assert with_fillers.to_dict()["languages"]["en"]["fillers"] == ["uh"]
    assert with_fillers.to_dict()["engine"] == ENGINE_REVISION >= 2


def test_a_filler_that_normalises_to_nothing_is_refused():
    with pytest.raises(Exception, match="filler normalises to nothing"):
        tiny({"x.y": ["go"]}, fillers=["?!"])


# --- paraphrases of the default intents (development set) ---------------------------------------------------------

PARAPHRASES = [
    # the issue's examples
    ("can you pause it for a second", "media.pause", {}),
    ("I can barely hear it, raise the volume", "media.volume_up", {}),
    ("kill the lights in the hallway", "lights.off", {"area": "hallway"}),
    ("get rid of the timer", "timer.cancel", {}),
    ("turn the sound back on", "media.unmute", {}),
    ("I need a timer for one hour", "timer.set", {"seconds": 3600}),
    # skip words and fillers
    ("could you just pause the music", "media.pause", {}),
    ("okay turn it down a little bit", "media.volume_down", {}),
    ("go ahead and skip this song", "media.next", {}),
    ("turn the, uh, volume down", "media.volume_down", {}),
    ("please turn off the kitchen lights now", "lights.off", {"area": "kitchen"}),
    ("um stop", "assistant.stop", {}),
    ("just stop", "assistant.stop", {}),
    ("hey, can you tell me the time", "clock.time", {}),
    ("would you mind turning", None, None),  # half a command stays nothing
    ("what time is it right now", "clock.time", {}),
    ("I'd like you to play some music", "media.play", {}),
    ("pause the music for a moment please", "media.pause", {}),
    # synonyms
    ("switch off the music", "media.stop", {}),
    ("shut off the lights", "lights.off", {}),
    ("put out the bedroom lights", "lights.off", {"area": "bedroom"}),
    ("turn off all the lights", "lights.off", {}),
    ("lights out", "lights.off", {}),
    ("cut the music", "media.stop", {}),
    ("kill the sound", "media.mute", {}),
    ("it's way too loud", "media.volume_down", {}),
    ("it's a bit too loud", "media.volume_down", {}),
    ("too loud", "media.volume_down", {}),
    ("the music is too quiet", "media.volume_up", {}),
    ("I can't hear it", "media.volume_up", {}),
    ("make it a little louder", "media.volume_up", {}),
    ("turn it up a little more", "media.volume_up", {}),
    ("bring the volume down a bit", "media.volume_down", {}),
    ("keep it down", "media.volume_down", {}),
    ("un-mute", "media.unmute", {}),
    ("bring the sound back", "media.unmute", {}),
    ("un-pause the music", "media.resume", {}),
    ("turn the music back on", "media.resume", {}),
    ("put it on hold", "media.pause", {}),
    ("next one", "media.next", {}),
    ("change the song", "media.next", {}),
    ("play another song", "media.next", {}),
    ("go to the previous track", "media.previous", {}),
    ("set the volume level to 40", "media.volume_set", {"level": 40}),
    ("increase volume", "media.volume_up", {}),  # as "lower volume"
    ("put the volume up to 90", "media.volume_set", {"level": 90}),  # as "turn the volume up to 90"
    ("unmute yourself", "media.unmute", {}),  # as "mute yourself"
    ("I want a five minute timer", "timer.set", {"seconds": 300}),
    ("give me a timer for 20 seconds", "timer.set", {"seconds": 20}),
    ("delete my timer", "timer.cancel", {}),
    ("I don't need the timer anymore", "timer.cancel", {}),
    ("turn the lights back on", "lights.on", {}),
    ("switch on the lights in the office", "lights.on", {"area": "office"}),
    ("tell me what time it is", "clock.time", {}),
    ("stop speaking", "assistant.stop", {}),
    ("forget about it", "assistant.stop", {}),
    ("I want to listen to some music", "media.play", {}),
    # terse, insistent and wished-for forms (2026-12-06)
    ("vol down", "media.volume_down", {}),
    ("vol at 15", "media.volume_set", {"level": 15}),
    ("lights on bedroom", "lights.on", {"area": "bedroom"}),
    ("scrap timer", "timer.cancel", {}),
    ("stop it I said", "assistant.stop", {}),
    ("I said next", "media.next", {}),
    ("I'd like it a bit quieter", "media.volume_down", {}),
    ("I want the music louder", "media.volume_up", {}),
    ("put it to volume level 20", "media.volume_set", {"level": 20}),
    ("start it from where we stopped", "media.resume", {}),
    ("no thank you", "assistant.stop", {}),
    ("a timer for twelve minutes for the rice", "timer.set", {"seconds": 720}),
    ("set a timer for an hour fifteen", "timer.set", {"seconds": 4500}),
    # a command's verb in -ing, as after "would you mind"
    ("would you mind switching the bedroom lights on", "lights.on", {"area": "bedroom"}),
    ("do me a favour and pausing the radio", "media.pause", {}),
    # a rejection, then what to do about it
    ("ugh not that one skip", "media.next", {}),
    ("i hate this track next", "media.next", {}),
    ("shut the hallway lights out", "lights.off", {"area": "hallway"}),
    ("forget i said it", "assistant.stop", {}),
    # 2026-12-06: asking whether it can be done, a wish without its subject, the verbs of a dial, telegraphic lights
    ("would it be possible to skip to the next track", "media.next", {}),
    ("is it possible for you to turn the bedroom lights off", "lights.off", {"area": "bedroom"}),
    ("when you get a chance pause the radio", "media.pause", {}),
    ("could we have the music a bit quieter", "media.volume_down", {}),
    ("can we have some tunes", "media.play", {}),
    ("dial it down a touch", "media.volume_down", {}),
    ("knock the sound up a notch", "media.volume_up", {}),
    ("take the volume down to thirty", "media.volume_set", {"level": 30}),
    ("ease off on the volume", "media.volume_down", {}),
    ("bring the volume back", "media.unmute", {}),  # not "dial it back", which is down
    ("flip the garage lights on", "lights.on", {"area": "garage"}),
    ("lights hallway off", "lights.off", {"area": "hallway"}),
    ("douse the kitchen lights", "lights.off", {"area": "kitchen"}),
    ("unpause the audiobook", "media.resume", {}),
    ("time me for forty seconds", "timer.set", {"seconds": 40}),
    ("scratch that", "assistant.stop", {}),
    ("play some lullabies for the baby", "media.play", {"query": "lullabies"}),  # who it is for is no song name
    # the sixth round's classes (2026-12-06, set F): podcasts and audiobooks, slang verbs, how completely
    ("stick on the next episode", "media.next", {}),
    ("go to the following chapter", "media.next", {}),
    ("whack on some oasis", "media.play", {"query": "oasis"}),
    ("keep going with the audiobook", "media.resume", {}),
    ("knock the radio off", "media.stop", {}),
    ("stick the speaker on mute", "media.mute", {}),
    ("get the bathroom lights off", "lights.off", {"area": "bathroom"}),
    ("hold the music a wee minute", "media.pause", {}),
    ("that's all for today thanks", "assistant.stop", {}),
    ("i'm on the phone turn it down", "media.volume_down", {}),
    ("the phone's ringing mute it", "media.mute", {}),
    ("i can't hear a word over the hoover turn it up", "media.volume_up", {}),
]


@pytest.mark.parametrize(("text", "intent", "slots"), PARAPHRASES, ids=[p[0] for p in PARAPHRASES])
def test_paraphrase(grammar, text, intent, slots):
    match = recognize(text, grammar)
    if intent is None:
        assert match is None
        return
    assert match is not None, f"{text!r} did not match"
    assert (match.intent, match.slots) == (intent, slots)


ZH_PARAPHRASES = [
    ("你能暂停一下吗", "media.pause", {}),
    ("请帮我把音乐关掉", "media.stop", {}),
    ("声音太小了", "media.volume_up", {}),
    ("听不见", "media.volume_up", {}),
    ("声音太大了", "media.volume_down", {}),
    ("把厨房的灯灭了", "lights.off", {"area": "kitchen"}),
    ("嗯关灯", "lights.off", {}),
    ("不要计时器了", "timer.cancel", {}),
    ("我要一个十分钟的计时器", "timer.set", {"seconds": 600}),
    ("设置计时器十分钟", "timer.set", {"seconds": 600}),
    ("解除静音", "media.unmute", {}),
    ("换一首", "media.next", {}),
    # 2026-12-06, written for zh.yaml's second pass (not lines of any set)
    ("那个先暂停一下吧", "media.pause", {}),  # a filler that starts with a skip word ("那个", "那")
    ("先把歌停一下", "media.pause", {}),  # both edges' skip words, each trimmed at every point
    ("歌曲接着放", "media.resume", {}),
    ("从上次停的地方继续播放", "media.resume", {}),
    ("不想听了", "media.stop", {}),
    ("来下一曲", "media.next", {}),
    ("切回前一首歌", "media.previous", {}),
    ("声音再大一些", "media.volume_up", {}),
    ("再小点声儿", "media.volume_down", {}),
    ("把声音调到最大", "media.volume_set", {"level": 100}),
    ("音量改成百分之二十", "media.volume_set", {"level": 20}),
    ("切换到静音模式", "media.mute", {}),
    ("把静音解除", "media.unmute", {}),
    ("倒计时两分半钟", "timer.set", {"seconds": 150}),
    ("三刻钟倒计时", "timer.set", {"seconds": 2700}),
    ("倒计时取消掉", "timer.cancel", {}),
    ("现在几点钟了", "clock.time", {}),
    ("把所有的灯都关上", "lights.off", {}),
    ("开下卧室的灯", "lights.on", {"area": "bedroom"}),
    ("客厅的灯关了吧", "lights.off", {"area": "living_room"}),
    ("不要讲了", "assistant.stop", {}),
    ("宝宝睡了，声音小一点", "media.volume_down", {}),  # an aside before the command
    ("暂停一下，我去开门", "media.pause", {}),  # ... and after it
    ("放首歌给孩子听", "media.play", {}),  # who it is for is no song name
    # 2026-12-06
    ("放点儿歌曲给小朋友听", "media.play", {}),
    ("停止放音乐", "media.stop", {}),
    ("大声", "media.volume_up", {}),
    ("声儿小点儿", "media.volume_down", {}),
    ("调成消音模式", "media.mute", {}),
    ("把这个电台关掉", "media.stop", {}),
    ("换下一首歌", "media.next", {}),
    ("五分钟以后叫我一声", "timer.set", {"seconds": 300}),
    ("开一下厕所的灯", "lights.on", {"area": "bathroom"}),
    ("当我没问", "assistant.stop", {}),
]


@pytest.mark.parametrize(("text", "intent", "slots"), ZH_PARAPHRASES, ids=[p[0] for p in ZH_PARAPHRASES])
def test_zh_paraphrase(grammar, text, intent, slots):
    match = recognize(text, grammar, "zh")
    assert match is not None, f"{text!r} did not match"
    assert (match.intent, match.slots) == (intent, slots)


# --- what must still not match: questions and statements about the same things ------------------------------------

NEAR_MISSES = [
    "what is a timer",
    "I play the piano",
    "the music was too loud yesterday",
    "do you like music",
    "how do I turn off the lights",
    "is the timer still running",
    "who sang this song",
    "I turned off the lights",
    "the timer went off",
    "why is it so loud",
    "what time",
    "was it too loud",
    "the lights in the hallway are broken",
    "I can't hear you over the rain, what did you say",
    "how do you cancel a timer on an iphone",
    "my neighbours kill the lights at nine",
    "get rid of the ants in the kitchen",
    "turn the sound of the rain into a song",
    "just wondering",
    "okay",
    "now",
    "um",
    "please please",
    "for a second",
    "is the volume up",
    "the next song was better",
    "what is the previous song called",
    "set the table",
    "louder than bombs is a great album",
    "play is important for children",
    "I said I was tired",
    "I want it",
    "vol",
    "a timer for the pasta",  # no duration
    "I'd like some music recommendations",
    "I love turning the lights off",  # a gerund after an aside is what someone likes doing
    "stopping the timer was a bad idea",
    "playing the guitar is hard",
    "not this one",
    "I hate this song",
    # questions about how things are, habits, and other devices' 's forms (the sixth round)
    "is the kitchen light on",
    "did you pause the music",
    "was that the last song",
    "the oven's too hot turn it down",
    "my dad always turns the music way too loud",
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_miss_is_no_match(grammar, text):
    assert recognize(text, grammar) is None


ZH_NEAR_MISSES = [
    "你喜欢音乐吗", "计时器是什么", "我在弹钢琴", "昨天音乐太大声了", "灯为什么坏了", "好",
    # 2026-12-06: a state asked about or told ("了吗", "了"), food, someone else's noise, negations, conditions,
    # someone's words, the past, later, a question
    "歌停了吗", "厨房的灯关了吗", "音乐停了", "来点吃的", "楼上放歌太吵了", "不要静音", "播放量是多少", "我不想关灯",
    "如果太黑了就开灯", "他说把灯关了", "我刚才关灯了", "等会儿再关灯", "你怎么关灯",
    # 2026-12-06: a report of what the speaker did, another device named first (the utterance's opening decides,
    # whatever clause-and-command split it has), a habit told
    "我已经把音乐暂停了", "我刚刚关了卧室的灯", "微波炉定时三分钟", "把空调调到二十六", "电视声音小一点",
    "爷爷总是把声音开得很大", "调大一点", "亮度调大一点",
]


@pytest.mark.parametrize("text", ZH_NEAR_MISSES)
def test_zh_near_miss_is_no_match(grammar, text):
    assert recognize(text, grammar, "zh") is None


def test_skip_words_do_not_delay_endpointing(grammar):
    """A finished command followed by a skip word is not a prefix of something longer."""
    assert not is_prefix("what time is it now", grammar)
    assert not is_prefix("pause the music for a second", grammar)


# --- asides: a command with a clause of its own beside it ----------------------------------------------------------
# Written for this rule, before any set was read against it (the sets are scored by `voxline bench classify`).


@pytest.mark.parametrize("text, intent", [
    ("the baby's sleeping turn it down", "media.volume_down"),
    ("turn off the bathroom light someone left it on", "lights.off"),  # an aside after, of another subject
    ("i'm going to bed turn off the lights", "lights.off"),
    ("okay the tea's done you can cancel the timer", "timer.cancel"),
    ("honestly i love this song turn it up", "media.volume_up"),
    ("the neighbours complained turn the music down", "media.volume_down"),
    ("resume the song i'm back", "media.resume"),
    ("mute it i'm on a call", "media.mute"),
    ("lights off we're leaving", "lights.off"),
    ("pause i need to take a call", "media.pause"),
    ("it's dark in here turn the lights on", "lights.on"),  # the aside says the same: fine
    # after the command, a clause with a subject of its own: a determiner, then a verb
    ("turn the music down the baby's sleeping", "media.volume_down"),
    ("pause it my husband is on a call", "media.pause"),
    ("switch the lights off the film has started", "lights.off"),
    ("that song is too loud i'm trying to sleep", "media.volume_down"),  # a command opening with a word read as another
    # a skip word at the edge between them belongs to neither ("thanks turn off the lights" is a command too)
    ("great thanks turn off the lights", "lights.off"),
    ("perfect thank you pause the music", "media.pause"),  # "you" of "thank you" is no one's subject
    ("turn off the lights thanks i'm off to bed", "lights.off"),
    # a room named in the aside is its own where the command takes no room
    ("i'm going to the kitchen pause the music", "media.pause"),
    ("mute it i'm in the bathroom", "media.mute"),
])
def test_a_command_beside_a_clause_of_its_own_is_the_command(grammar, text, intent):
    match = recognize(text, grammar)
    assert match is not None and match.intent == intent, text
    assert match.text == text.replace("'", "")  # spans index the whole utterance


@pytest.mark.parametrize("text", [
    "how do i turn off the lights",  # a question
    "turn off the lights when i leave",  # a condition
    "she said turn off the lights",  # someone else's words
    "my brother keeps saying turn it off",
    "hey google set a timer for five minutes",  # another assistant's
    "in the kitchen turn on the lights",  # the aside names a slot: not every light
    "every night at nine we turn off the lights",
    "don't turn off the lights",  # cut inside "turn off the lights"
    "dont ever turn off the lights",  # negated
    "i would never turn off the lights",
    "i turned off the lights already",  # what was done
    "last night i set a timer for ten minutes",
    "we need to pause the music",  # bound to the command
    "i think we should turn off the lights",
    "the song is called stop the music",
    "i'll go next",  # one word after an aside
    "pause the music and set a timer for ten minutes",  # two commands
    "they left all the lights on",  # a statement: the aside may not end in a determiner ("all | the lights on")
    "the kids left every light on",
    "my son never turns the lights off",  # a command's verb in another form ("turns | the lights off")
    "she keeps the lights on all night",
    "the music at the party was way too loud",  # a word of degree binds to what follows ("way | too loud")
    "pause the music the one in the car",  # no verb of a clause of its own: the rest of the command, maybe
    "turn on the lights the bedroom is dark",  # the clause names a slot value: not every light
    "we never say please turn off the lights",  # a one-word skip word ending an aside keeps its own rule
    "she asked would you turn it off",  # someone else's words, whatever phrase ends them
    "i asked you to turn off the lights",
    "thanks for turning off the lights",
    "i'm in the bedroom now turn off the lights",  # a room the command could take: which lights is not said
    "in ten minutes turn off the lights",  # a duration or a number may say when: for later
    "at 9 turn off the lights",
    "i'm five minutes away turn it down",
])
def test_a_clause_that_is_not_an_aside_makes_no_command(grammar, text):
    assert recognize(text, grammar) is None, text


def test_two_different_commands_are_no_aside_and_command():
    grammar = tiny({"m.pause": ["pause the music"], "l.on": ["it is dark"]})
    asides = {"asides": {"after_starts": ["it"]}}
    two = Grammar.from_dict(compile_documents([{
        "language": "en", "intents": {"m.pause": {"sentences": ["pause the music"]},
                                      "l.on": {"sentences": ["it is dark"]}}, **asides}]))
    assert recognize("pause the music it is dark", grammar) is None  # no asides in this grammar
    assert recognize("pause the music it is late", two).intent == "m.pause"
    assert recognize("pause the music it is dark", two) is None


def test_asides_are_a_grammar_field_that_changes_the_version():
    plain = {"language": "en", "intents": {"m.pause": {"sentences": ["pause the music"]}}}
    with_asides = plain | {"asides": {"after_starts": ["i"]}}
    assert Grammar.from_dict(compile_documents([plain])).version != \
        Grammar.from_dict(compile_documents([with_asides])).version
    merged = compile_documents([with_asides, {"language": "en", "asides": {"after_starts": ["we"]}}])
    assert merged["languages"]["en"]["asides"]["after_starts"] == ["i", "we"]
    with pytest.raises(Exception, match="unknown key"):
        compile_documents([plain | {"asides": {"before": ["x"]}}])
