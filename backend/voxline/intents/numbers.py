"""Spoken numbers and durations, in English and Chinese, as slot values.

Everything here works on normalised tokens (see `normalize`): English words are separate tokens, Chinese
characters are one token each, and a digit group such as ``25`` or ``2.5`` is one token. Each parser is exact: it
accepts a token sequence only if the whole sequence is one number or one duration, and returns ``None`` otherwise,
so the matcher can try every span and let the rest of the template decide where a slot ends.

The ``could_continue_*`` helpers answer the endpointing question "could more tokens turn this into a longer
value?". They only check the vocabulary, so they can only be too lenient (say yes when no longer value exists,
which costs a little waiting), never too strict.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

Number = int | float

MAX_NUMBER_TOKENS = 8
"""Longest span tried as one number ("nine thousand nine hundred and ninety nine" is 7 tokens)."""

MAX_DURATION_TOKENS = 16
"""Longest span tried as one duration (Chinese counts one token per character)."""

SECONDS_PER_UNIT = {"hour": 3600, "minute": 60, "second": 1}

_DIGITS = re.compile(r"[0-9]+(\.[0-9]+)?")

_EN_ONES = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
}
_EN_TEENS = {
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
_EN_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
}
_EN_ARTICLES = frozenset({"a", "an"})
_EN_NUMBER_WORDS = frozenset(_EN_ONES) | frozenset(_EN_TEENS) | frozenset(_EN_TENS) | {"hundred", "thousand", "and"}
_EN_UNITS = {
    "hour": 3600, "hours": 3600, "hr": 3600, "hrs": 3600,
    "minute": 60, "minutes": 60, "min": 60, "mins": 60,
    "second": 1, "seconds": 1, "sec": 1, "secs": 1,
}
_EN_DURATION_WORDS = _EN_NUMBER_WORDS | _EN_ARTICLES | frozenset(_EN_UNITS) | {"half", "quarter", "quarters", "of",
                                                                               "couple"}

_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000}
_ZH_TEN_THOUSAND = "万"
_ZH_NUMBER_CHARS = frozenset(_ZH_DIGITS) | frozenset(_ZH_UNITS) | {_ZH_TEN_THOUSAND}
_ZH_DURATION_UNITS = (
    (("小", "时"), 3600),
    (("钟", "头"), 3600),
    (("刻", "钟"), 900),
    (("刻",), 900),
    (("分", "钟"), 60),
    (("分",), 60),
    (("秒", "钟"), 1),
    (("秒",), 1),
)
_ZH_HALF = "半"
_ZH_MEASURE = "个"
_ZH_DURATION_CHARS = _ZH_NUMBER_CHARS | {c for unit, _ in _ZH_DURATION_UNITS for c in unit} | {_ZH_HALF, _ZH_MEASURE}


# --- numbers -------------------------------------------------------------------------------------------------


def parse_number(tokens: Sequence[str], lang: str) -> Number | None:
    """The value of `tokens` read as one number ("twenty five", "25", "2.5", "三十"), else ``None``."""
    if not tokens:
        return None
    if len(tokens) == 1 and _DIGITS.fullmatch(tokens[0]):
        return _digits_value(tokens[0])
    if lang == "zh":
        return _zh_number("".join(tokens)) if all(len(t) == 1 for t in tokens) else None
    return _en_number(list(tokens))


def could_continue_number(tokens: Sequence[str], lang: str) -> bool:
    """Whether more tokens after `tokens` might still make one number (vocabulary check, lenient)."""
    vocabulary = _ZH_NUMBER_CHARS if lang == "zh" else _EN_NUMBER_WORDS | _EN_ARTICLES
    return all(t in vocabulary or _DIGITS.fullmatch(t) for t in tokens)


def _digits_value(token: str) -> Number:
    return float(token) if "." in token else int(token)


def _en_number(tokens: list[str]) -> int | None:
    if "thousand" not in tokens:
        return _en_below_thousand(tokens)
    split = tokens.index("thousand")
    head = 1 if tokens[:split] in (["a"], ["one"]) else _en_below_thousand(tokens[:split])
    if not head:
        return None
    rest = tokens[split + 1 :]
    if not rest:
        return head * 1000
    if rest[0] == "and":
        rest = rest[1:]
    tail = _en_below_thousand(rest)
    return head * 1000 + tail if tail else None


def _en_below_thousand(tokens: list[str]) -> int | None:
    if "hundred" not in tokens:
        return _en_below_hundred(tokens)
    split = tokens.index("hundred")
    if split != 1:
        return None
    head = 1 if tokens[0] in _EN_ARTICLES else _EN_ONES.get(tokens[0])
    if not head:
        return None
    rest = tokens[2:]
    if not rest:
        return head * 100
    if rest[0] == "and":
        rest = rest[1:]
    tail = _en_below_hundred(rest)
    return head * 100 + tail if tail else None


def _en_below_hundred(tokens: list[str]) -> int | None:
    if len(tokens) == 1:
        word = tokens[0]
        for table in (_EN_ONES, _EN_TEENS, _EN_TENS):
            if word in table:
                return table[word]
        return None
    if len(tokens) == 2 and tokens[0] in _EN_TENS and _EN_ONES.get(tokens[1], 0) > 0:
        return _EN_TENS[tokens[0]] + _EN_ONES[tokens[1]]
    return None


def _zh_number(text: str) -> int | None:
    if _ZH_TEN_THOUSAND not in text:
        return _zh_below_ten_thousand(text)
    head, _, tail = text.partition(_ZH_TEN_THOUSAND)
    high = _zh_below_ten_thousand(head)
    if not high:
        return None
    if not tail:
        return high * 10000
    if len(tail) == 1 and _ZH_DIGITS.get(tail, 0) > 0:
        # "一万五" is colloquial for 15000: a lone digit after a unit counts in the next lower unit.
        return high * 10000 + _ZH_DIGITS[tail] * 1000
    low = _zh_below_ten_thousand(tail.removeprefix("零"))
    return high * 10000 + low if low else None


def _zh_below_ten_thousand(text: str) -> int | None:
    if text in ("零", "〇"):
        return 0
    total = 0
    pending: int | None = None
    last_unit = 10000
    after_zero = False
    for index, char in enumerate(text):
        if char in _ZH_DIGITS:
            digit = _ZH_DIGITS[char]
            if digit == 0:
                # 零 only fills a skipped unit between two others ("一百零五").
                if pending is not None or index == 0 or after_zero:
                    return None
                after_zero = True
            elif pending is not None:
                return None
            else:
                pending = digit
        elif char in _ZH_UNITS:
            unit = _ZH_UNITS[char]
            if unit >= last_unit:
                return None
            if pending is None:
                if not (unit == 10 and index == 0):
                    return None
                pending = 1  # "十五" is fifteen: a leading 十 means one ten.
            total += pending * unit
            pending, last_unit, after_zero = None, unit, False
        else:
            return None
    if pending is None:
        return None if after_zero or not text else total
    if after_zero or last_unit in (10, 10000):
        return total + pending
    # "三百五" is colloquial for 350: a lone trailing digit counts in the next lower unit.
    return total + pending * last_unit // 10


# --- durations -----------------------------------------------------------------------------------------------


def parse_duration(tokens: Sequence[str], lang: str) -> float | None:
    """Seconds spoken by `tokens` as one duration ("an hour and a half" → 5400.0), else ``None``.

    A duration is one or more parts with strictly decreasing units ("1 hour 30 minutes"); a sequence that reads
    two ways with different values is rejected rather than guessed.
    """
    tokens = list(tokens)
    if not tokens or len(tokens) > MAX_DURATION_TOKENS:
        return None
    part_reader = _zh_duration_parts if lang == "zh" else _en_duration_parts
    joiners = ("零",) if lang == "zh" else ("and",)
    totals: set[float] = set()

    def walk(position: int, last_unit: int, total: float) -> None:
        if position == len(tokens):
            totals.add(total)
            return
        if lang != "zh" and last_unit in (3600, 60):
            # "one minute thirty", "an hour fifteen": a bare count after the last part is of the next smaller unit.
            rest = parse_number(tokens[position:], "en")
            if isinstance(rest, int) and 0 < rest < 60:
                totals.add(total + rest * last_unit // 60)
        starts = [position]
        if last_unit < 10**9 and tokens[position] in joiners:
            starts.append(position + 1)
        for start in starts:
            for end, seconds, unit in part_reader(tokens, start):
                if unit < last_unit:
                    walk(end, unit, total + seconds)

    walk(0, 10**9, 0.0)
    if len(totals) != 1:
        return None
    seconds = totals.pop()
    return seconds if seconds > 0 else None


def could_continue_duration(tokens: Sequence[str], lang: str) -> bool:
    """Whether more tokens after `tokens` might still make one duration (vocabulary check, lenient)."""
    vocabulary = _ZH_DURATION_CHARS if lang == "zh" else _EN_DURATION_WORDS
    return all(t in vocabulary or _DIGITS.fullmatch(t) for t in tokens)


def _en_duration_parts(tokens: list[str], start: int) -> list[tuple[int, float, int]]:
    """Every (end, seconds, unit seconds) for one English duration part beginning at `start`."""
    found: list[tuple[int, float, int]] = []
    for end, quantity in _en_quantities(tokens, start):
        unit = _EN_UNITS.get(tokens[end]) if end < len(tokens) else None
        if unit is None:
            continue
        found.append((end + 1, quantity * unit, unit))
        for fraction, part in _EN_FRACTIONS_AFTER.items():
            if tuple(tokens[end + 1 : end + 1 + len(fraction)]) == fraction:
                found.append((end + 1 + len(fraction), (quantity + part) * unit, unit))
    return found


_EN_FRACTIONS_AFTER = {("and", "a", "half"): 0.5, ("and", "a", "quarter"): 0.25, ("and", "three", "quarters"): 0.75,
                       ("and", "half"): 0.5}
"""What a unit or an amount may be followed by: "an hour and a quarter", "two and a half minutes", and as learners
say it, "one hour and half"."""
_EN_COUPLE = (["a", "couple", "of"], ["couple", "of"], ["a", "couple"])
"""Two, as said in front of a unit: "a couple of minutes", "a couple minutes" (not "a few": no one number)."""


def _en_quantities(tokens: list[str], start: int) -> list[tuple[int, float]]:
    """Every (end, amount) for the amount in front of a unit: "a", "ten", "two and a half", "half an"."""
    found: list[tuple[int, float]] = []
    window = tokens[start : start + 4]
    if window[:1] and window[0] in _EN_ARTICLES:
        found.append((start + 1, 1.0))
    if start == 0 and len(window) == 4 and window[0] in _EN_UNITS and tuple(window[1:]) in _EN_FRACTIONS_AFTER:
        found.append((start, 1.0))  # "hour and a half": the unit alone, but only where a fraction follows it
    if len(window) >= 2 and window[0] == "half" and window[1] in _EN_ARTICLES:
        found.append((start + 2, 0.5))
    if window[:2] == ["a", "half"]:
        found.append((start + 2, 0.5))
    for quarter in (["a", "quarter", "of", "an"], ["quarter", "of", "an"], ["a", "quarter"], ["quarter"]):
        if window[: len(quarter)] == quarter:
            found.append((start + len(quarter), 0.25))
    for quarters in (["three", "quarters", "of", "an"], ["three", "quarters", "of", "a"]):
        if window[: len(quarters)] == quarters:
            found.append((start + len(quarters), 0.75))
    for couple in _EN_COUPLE:
        if window[: len(couple)] == couple:
            found.append((start + len(couple), 2.0))
    for end in range(start + 1, min(len(tokens), start + MAX_NUMBER_TOKENS) + 1):
        value = parse_number(tokens[start:end], "en")
        if value is None:
            continue
        found.append((end, float(value)))
        for fraction, part in _EN_FRACTIONS_AFTER.items():
            if tuple(tokens[end : end + len(fraction)]) == fraction:
                found.append((end + len(fraction), value + part))
    return found


def _zh_duration_parts(tokens: list[str], start: int) -> list[tuple[int, float, int]]:
    """Every (end, seconds, unit seconds) for one Chinese duration part beginning at `start`."""
    found: list[tuple[int, float, int]] = []
    quantities: list[tuple[int, float]] = []
    if start < len(tokens) and tokens[start] == _ZH_HALF:
        quantities.append((start + 1, 0.5))
    for end in range(start + 1, min(len(tokens), start + MAX_NUMBER_TOKENS) + 1):
        value = parse_number(tokens[start:end], "zh")
        if value is not None:
            quantities.append((end, float(value)))
    for end, quantity in quantities:
        if end < len(tokens) and tokens[end] == _ZH_MEASURE:
            end += 1
        if quantity >= 1 and end < len(tokens) and tokens[end] == _ZH_HALF:
            # "一个半小时": the half comes before the unit it halves.
            quantity, end = quantity + 0.5, end + 1
        for unit_tokens, unit in _ZH_DURATION_UNITS:
            unit_end = end + len(unit_tokens)
            if tuple(tokens[end:unit_end]) != unit_tokens:
                continue
            found.append((unit_end, quantity * unit, unit))
            if quantity.is_integer() and unit_end < len(tokens) and tokens[unit_end] == _ZH_HALF:
                # "一分半": a trailing half of the same unit; "一分半钟", "两分半钟": its 钟 after the half.
                found.append((unit_end + 1, (quantity + 0.5) * unit, unit))
                if unit_tokens == ("分",) and tokens[unit_end + 1 : unit_end + 2] == ["钟"]:
                    found.append((unit_end + 2, (quantity + 0.5) * unit, unit))
    return found


# --- speaking values back ------------------------------------------------------------------------------------


def spoken_duration(seconds: float, lang: str) -> str:
    """A short spoken form of a duration for confirmations: 5400 → "1 hour and 30 minutes" / "1小时30分钟"."""
    hours, rest = divmod(int(round(seconds)), 3600)
    minutes, secs = divmod(rest, 60)
    amounts = [(hours, "hour", "小时"), (minutes, "minute", "分钟"), (secs, "second", "秒")]
    present = [(n, en, zh) for n, en, zh in amounts if n]
    if not present:
        present = [(0, "second", "秒")]
    if lang == "zh":
        return "".join(f"{n}{zh}" for n, _, zh in present)
    words = [f"{n} {en}" + ("" if n == 1 else "s") for n, en, _ in present]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def spoken_number(value: Number) -> str:
    """A number as confirmations print it: integers without a decimal point."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)
