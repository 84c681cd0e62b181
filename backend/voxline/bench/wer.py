"""Word error rate with a light normalisation (case, punctuation, small numbers written as digits)."""

from __future__ import annotations

import re

_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
         "seventeen eighteen nineteen".split()
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_WORD_NUMBERS = {w: i for i, w in enumerate(_UNITS)} | _TENS


def normalise(text: str) -> list[str]:
    words = re.sub(r"[^a-z0-9%' ]+", " ", text.lower().replace("-", " ")).split()
    out: list[str] = []
    for word in words:
        word = word.strip("'")
        if word in _WORD_NUMBERS:
            value = _WORD_NUMBERS[word]
            if out and out[-1].isdigit() and int(out[-1]) in _TENS.values() and value < 10:
                out[-1] = str(int(out[-1]) + value)
                continue
            word = str(value)
        elif word == "percent":
            word = "%"
        if word.endswith("%") and len(word) > 1:
            out += [word[:-1], "%"]
            continue
        if word:
            out.append(word)
    return out


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


def wer(refs: list[str], hyps: list[str]) -> float:
    errors = sum(edit_distance(normalise(r), normalise(h)) for r, h in zip(refs, hyps, strict=True))
    return errors / max(1, sum(len(normalise(r)) for r in refs))
