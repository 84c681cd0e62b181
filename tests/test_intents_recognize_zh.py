"""Chinese recognition with the built-in skill pack: characters are tokens, numerals and durations are spoken."""

from __future__ import annotations

import pytest

from voxline.intents import Grammar, builtin_grammar, is_prefix, recognize


@pytest.fixture(scope="module")
def grammar() -> Grammar:
    return builtin_grammar()


# (utterance, intent, slots, the text each slot's span covers in the normalised utterance)
POSITIVES = [
    ("播放音乐", "media.play", {}, {}),
    ("播放", "media.play", {}, {}),
    ("来首歌", "media.play", {}, {}),
    ("放点音乐", "media.play", {}, {}),
    # a singer's songs play by the singer's name, as "play songs by adele" plays "adele"
    ("播放周杰伦的歌", "media.play", {"query": "周杰伦"}, {"query": "周 杰 伦"}),
    ("我想听稻香", "media.play", {"query": "稻香"}, {"query": "稻 香"}),
    ("播放Taylor Swift", "media.play", {"query": "taylor swift"}, {"query": "taylor swift"}),
    ("暂停", "media.pause", {}, {}),
    ("暂停播放", "media.pause", {}, {}),
    ("请暂停一下", "media.pause", {}, {}),
    ("继续播放", "media.resume", {}, {}),
    ("继续", "media.resume", {}, {}),
    ("停止播放", "media.stop", {}, {}),
    ("关掉音乐", "media.stop", {}, {}),
    ("下一首", "media.next", {}, {}),
    ("切歌", "media.next", {}, {}),
    ("换一首", "media.next", {}, {}),
    ("上一首", "media.previous", {}, {}),
    ("播放上一首", "media.previous", {}, {}),
    ("调高音量", "media.volume_up", {}, {}),
    ("大声一点", "media.volume_up", {}, {}),
    ("音量大一点", "media.volume_up", {}, {}),
    ("调低音量", "media.volume_down", {}, {}),
    ("小声点", "media.volume_down", {}, {}),
    ("把音量调低一点", "media.volume_down", {}, {}),
    ("太吵了", "media.volume_down", {}, {}),
    ("音量调到三十", "media.volume_set", {"level": 30}, {"level": "三 十"}),
    ("音量调到百分之三十", "media.volume_set", {"level": 30}, {"level": "三 十"}),
    ("把音量调到30%", "media.volume_set", {"level": 30}, {"level": "30"}),
    ("音量五十", "media.volume_set", {"level": 50}, {"level": "五 十"}),
    ("静音", "media.mute", {}, {}),
    ("取消静音", "media.unmute", {}, {}),
    ("设一个十分钟的计时器", "timer.set", {"seconds": 600}, {"seconds": "十 分 钟"}),
    ("定时一个半小时", "timer.set", {"seconds": 5400}, {"seconds": "一 个 半 小 时"}),
    ("倒计时三十秒", "timer.set", {"seconds": 30}, {"seconds": "三 十 秒"}),
    ("十分钟后提醒我", "timer.set", {"seconds": 600}, {"seconds": "十 分 钟"}),
    ("设置一个一小时三十分钟的定时器", "timer.set", {"seconds": 5400}, {"seconds": "一 小 时 三 十 分 钟"}),
    ("取消计时器", "timer.cancel", {}, {}),
    ("现在几点了", "clock.time", {}, {}),
    ("几点了", "clock.time", {}, {}),
    ("现在什么时间", "clock.time", {}, {}),
    ("开灯", "lights.on", {}, {}),
    ("打开厨房的灯", "lights.on", {"area": "kitchen"}, {"area": "厨 房"}),
    ("把客厅的灯打开", "lights.on", {"area": "living_room"}, {"area": "客 厅"}),
    ("卧室开灯", "lights.on", {"area": "bedroom"}, {"area": "卧 室"}),
    ("关灯", "lights.off", {}, {}),
    ("关掉卫生间的灯", "lights.off", {"area": "bathroom"}, {"area": "卫 生 间"}),
    ("把书房的灯关了", "lights.off", {"area": "office"}, {"area": "书 房"}),
    ("停", "assistant.stop", {}, {}),
    ("别说了", "assistant.stop", {}, {}),
    ("算了", "assistant.stop", {}, {}),
]

NEGATIVES = [
    "珠穆朗玛峰有多高",
    "今天天气怎么样",
    "讲个故事",
    "打开",
    "音量",
    "音量调到",
    "音量调到一百五十",
    "设一个计时器",
    "设一个十个苹果的计时器",
    "几点开会",
    "厨房",
    "灯坏了",
    "停车场在哪里",
    "下一首歌是谁唱的",
    "谢谢",
]


@pytest.mark.parametrize(("text", "intent", "slots", "span_text"), POSITIVES, ids=[p[0] for p in POSITIVES])
def test_positive(grammar, text, intent, slots, span_text):
    match = recognize(text, grammar, "zh")
    assert match is not None, f"{text!r} did not match"
    assert match.intent == intent
    assert match.slots == slots
    assert {name: match.text[start:end] for name, (start, end) in match.spans.items()} == span_text


def test_every_design_intent_has_a_positive_case(grammar):
    assert {intent for _, intent, _, _ in POSITIVES} == set(grammar.language("zh").intents)


@pytest.mark.parametrize("text", NEGATIVES)
def test_negative(grammar, text):
    assert recognize(text, grammar, "zh") is None


def test_english_sentences_do_not_match_the_chinese_grammar(grammar):
    assert recognize("pause the music", grammar, "zh") is None
    assert recognize("暂停", grammar, "en") is None


@pytest.mark.parametrize(
    ("text", "confirmation"),
    [
        ("调低音量", "音量调低。"),
        ("设一个十分钟的计时器", "计时器已设置：10分钟。"),
        ("打开厨房的灯", "厨房的灯已打开。"),
        ("开灯", "灯已打开。"),
    ],
)
def test_confirmation(grammar, text, confirmation):
    assert recognize(text, grammar, "zh").confirmation == confirmation


@pytest.mark.parametrize(
    ("text", "prefix"), [("音量调到", True), ("打开厨", True), ("设一个", True), ("暂停", True), ("上一首", True),
                        ("切歌", False), ("报时", False)]
)
def test_is_prefix(grammar, text, prefix):
    assert is_prefix(text, grammar, "zh") is prefix


@pytest.mark.parametrize(("text", "intent", "slots"), [
    # the verb and its result alone, the object understood
    ("开大点", "media.volume_up", {}),
    ("再开大一点", "media.volume_up", {}),
    ("响一些", "media.volume_up", {}),
    ("关小一点", "media.volume_down", {}),
    ("再轻一点", "media.volume_down", {}),
    # a singer's songs, the name before 的
    ("放王菲的歌", "media.play", {"query": "王菲"}),
    ("听张学友的歌曲", "media.play", {"query": "张学友"}),
    # "that will do" after a setting
    ("音量调到四十就好", "media.volume_set", {"level": 40}),
])
def test_requests_of_the_eleventh_round(grammar, text, intent, slots):
    found = recognize(text, grammar, "zh")
    assert found is not None and (found.intent, found.slots) == (intent, slots)


@pytest.mark.parametrize("text", [
    "别把声音调大",  # a prohibition, not cut into "别把声音 | 调大"
    "温度调低一点",  # another quantity turned down
    "放大",  # to enlarge, not the volume
    "字大一点",
    "调小一点",  # of anything that is set: see test_intents_tolerant's "调大一点"
])
def test_what_the_eleventh_round_does_not_read(grammar, text):
    assert recognize(text, grammar, "zh") is None
