"""Spoken numbers and durations: each parser is exact, so anything that is not wholly a value is None."""

from __future__ import annotations

import pytest

from voxline.intents.normalize import normalize
from voxline.intents.numbers import (
    could_continue_duration,
    could_continue_number,
    parse_duration,
    parse_number,
    spoken_duration,
    spoken_number,
)


def tokens(text: str) -> list[str]:
    return normalize(text).split(" ")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("25", 25),
        ("007", 7),
        ("2.5", 2.5),
        ("zero", 0),
        ("seven", 7),
        ("ten", 10),
        ("nineteen", 19),
        ("thirty", 30),
        ("twenty five", 25),
        ("twenty-five", 25),
        ("ninety nine", 99),
        ("a hundred", 100),
        ("one hundred", 100),
        ("one hundred and five", 105),
        ("one hundred five", 105),
        ("two hundred and thirty four", 234),
        ("a thousand", 1000),
        ("three thousand and twelve", 3012),
        ("nine thousand nine hundred and ninety nine", 9999),
    ],
)
def test_english_numbers(text, value):
    assert parse_number(tokens(text), "en") == value


@pytest.mark.parametrize(
    "text",
    ["", "a", "and", "hundred", "twenty twenty", "five twenty", "thirty zero", "one two", "ten five",
     "hundred and five", "zero hundred", "one hundred and", "twenty five minutes", "fifty percent", "2.5.1", "x"],
)
def test_not_english_numbers(text):
    assert parse_number(tokens(text) if text else [], "en") is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("零", 0),
        ("五", 5),
        ("两", 2),
        ("十", 10),
        ("十五", 15),
        ("二十", 20),
        ("三十", 30),
        ("二十五", 25),
        ("一百", 100),
        ("一百零五", 105),
        ("一百五十", 150),
        ("三百五", 350),
        ("两千", 2000),
        ("一千零五十", 1050),
        ("一万", 10000),
        ("一万五", 15000),
        ("30", 30),
    ],
)
def test_chinese_numbers(text, value):
    assert parse_number(tokens(text), "zh") == value


@pytest.mark.parametrize("text", ["三三", "百", "十百", "一百十", "零五", "五零", "一百零", "分", "三十分"])
def test_not_chinese_numbers(text):
    assert parse_number(tokens(text), "zh") is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("ten minutes", 600),
        ("10 minutes", 600),
        ("ten minute", 600),
        ("a minute", 60),
        ("one minute", 60),
        ("90 seconds", 90),
        ("ninety seconds", 90),
        ("thirty secs", 30),
        ("an hour", 3600),
        ("2 hours", 7200),
        ("an hour and a half", 5400),
        ("one and a half hours", 5400),
        ("1.5 hours", 5400),
        ("half an hour", 1800),
        ("a half hour", 1800),
        ("a quarter of an hour", 900),
        ("a minute and a half", 90),
        ("two and a half minutes", 150),
        ("1 hour 30 minutes", 5400),
        ("an hour and thirty minutes", 5400),
        ("2 minutes and 30 seconds", 150),
        ("one hour twenty five minutes and ten seconds", 5110),
        ("twenty five minutes", 1500),
        ("5 mins", 300),
        ("1 hr", 3600),
        # a bare count after the last unit is of the next smaller one, as on a clock face
        ("one minute thirty", 90),
        ("an hour fifteen", 4500),
        ("2 hours 45", 9900),
        # a unit alone, where a half follows it
        ("hour and a half", 5400),
        ("minute and a half", 90),
        # two, said as a couple; and a half without its article, as learners say it
        ("a couple of minutes", 120),
        ("a couple minutes", 120),
        ("couple of hours", 7200),
        ("one hour and half", 5400),
        ("two and half minutes", 150),
    ],
)
def test_english_durations(text, seconds):
    assert parse_duration(tokens(text), "en") == seconds


@pytest.mark.parametrize(
    "text",
    ["ten", "minutes", "a", "half", "and a half", "thirty minutes one hour", "ten minutes ten minutes",
     "an hour and", "five apples", "minus five minutes", "zero seconds", "a half",
     "hour", "minute", "ten seconds five", "one minute seventy", "one minute zero", "hour and a half and",
     "a couple", "a couple of", "a few minutes", "couple"],
)
def test_not_english_durations(text):
    assert parse_duration(tokens(text), "en") is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("十分钟", 600),
        ("10分钟", 600),
        ("两分钟", 120),
        ("三十秒", 30),
        ("三十秒钟", 30),
        ("90秒", 90),
        ("一小时", 3600),
        ("一个小时", 3600),
        ("一个钟头", 3600),
        ("半小时", 1800),
        ("半个小时", 1800),
        ("一个半小时", 5400),
        ("一小时三十分钟", 5400),
        ("一个小时零五分钟", 3900),
        ("一分半", 90),
        ("五分钟三十秒", 330),
        ("一分半钟", 90),  # the 钟 of 分钟 after its half
        ("两分半钟", 150),
        ("一刻钟", 900),  # a quarter of an hour
        ("三刻钟", 2700),
        ("一个小时一刻", 4500),
    ],
)
def test_chinese_durations(text, seconds):
    assert parse_duration(tokens(text), "zh") == seconds


@pytest.mark.parametrize("text", ["十", "分钟", "半", "三十分钟一小时", "十分钟十分钟", "十个", "一刻钟一小时", "一分钟半钟"])
def test_not_chinese_durations(text):
    assert parse_duration(tokens(text), "zh") is None


def test_could_continue_is_a_vocabulary_check():
    assert could_continue_number(tokens("twenty"), "en")
    assert could_continue_number(tokens("one hundred and"), "en")
    assert not could_continue_number(tokens("twenty apples"), "en")
    assert could_continue_duration(tokens("an hour and a"), "en")
    assert could_continue_duration(tokens("ten"), "en")
    assert not could_continue_duration(tokens("ten apples"), "en")
    assert could_continue_duration(tokens("一个半"), "zh")
    assert not could_continue_duration(tokens("一个苹果"), "zh")


@pytest.mark.parametrize(
    ("seconds", "lang", "spoken"),
    [
        (600, "en", "10 minutes"),
        (60, "en", "1 minute"),
        (5400, "en", "1 hour and 30 minutes"),
        (3661, "en", "1 hour, 1 minute and 1 second"),
        (45, "en", "45 seconds"),
        (600, "zh", "10分钟"),
        (5400, "zh", "1小时30分钟"),
    ],
)
def test_spoken_duration(seconds, lang, spoken):
    assert spoken_duration(seconds, lang) == spoken


def test_spoken_number():
    assert spoken_number(30) == "30"
    assert spoken_number(30.0) == "30"
    assert spoken_number(2.5) == "2.5"
