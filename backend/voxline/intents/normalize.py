"""The one normalisation spec for transcripts and templates.

The same spec is implemented twice, here and in the browser (JavaScript), and both are checked against the shared
vectors in `tests/vectors/normalize.json`. The normalised text is the key of the browser's intent cache and the
only text the grammar engine ever sees, so the two implementations must agree byte for byte. Keep it that way:
every step below is expressible in JavaScript with `String.prototype.normalize("NFKC")`, `toLowerCase()` plus
the two folds named in step 2, and `\\p{General_Category}` regular expressions with the ``u`` flag.

Steps, in order:

1. **NFKC**: Unicode compatibility composition. Full-width Latin and digits become ASCII (``ＡＢＣ１２`` →
   ``ABC12``, ``％`` → ``%``), ligatures split (``ﬁ`` → ``fi``).
2. **Case fold**: full Unicode case folding (Python ``str.casefold``; ``ß`` → ``ss``). JavaScript has no
   ``casefold``; it uses ``toLowerCase()`` plus the ``ß``/``ẞ`` → ``ss`` and final-sigma ``ς`` → ``σ`` folds, which
   covers every character the vectors contain.
3. **Apostrophes are deleted**, not turned into spaces, so ``what's`` → ``whats`` and ``don't`` → ``dont``. The
   apostrophes are U+0027 ``'``, U+2018 ``‘``, U+2019 ``’`` and U+02BC ``ʼ``.
4. **Digit groups**: a ``.`` with an ASCII digit on both sides (in the case-folded text) is kept (a decimal
   point: ``2.5``); a ``,`` with an ASCII digit on both sides is deleted (a thousands separator: ``1,000`` →
   ``1000``, and so ``100,5`` → ``1005``: the spec does not guess locales). Only ASCII ``0-9`` count as digits
   here. Any other ``.`` or ``,`` falls to step 6.
5. **Percent** ``%`` is kept as a token of its own (spaces around it): ``30%`` → ``30 %``. It is the only
   punctuation or symbol character kept, because "volume to 30%" means something.
6. **Everything else that is not a word character becomes a space**: every character whose Unicode general
   category is punctuation (``P*``), symbol (``S*``, emoji included), separator (``Z*``) or other (``C*``:
   controls, format characters such as zero-width joiners, unassigned code points). Letters (``L*``), marks
   (``M*``) and numbers (``N*``) are kept.
7. **CJK characters become tokens of their own** (spaces around each; step 6 comes first, so CJK
   punctuation such as ``。`` or ``・`` is already a space), because Chinese and Japanese are written
   without spaces between words: ``打开厨房的灯`` → ``打 开 厨 房 的 灯``. The CJK ranges (closed intervals) are
   U+3005-U+3007, U+3040-U+30FF (Hiragana, Katakana), U+3400-U+4DBF, U+4E00-U+9FFF, U+F900-U+FAFF and
   U+20000-U+3FFFF. Hangul is written with spaces and is left alone.
8. **Whitespace**: after step 6 the only whitespace left is the ASCII space; runs of it collapse to one, and
   leading and trailing spaces are removed.

The output is therefore a sequence of tokens separated by single spaces, and normalising it again changes
nothing (the tests check this on every vector). Templates go through the same function, so a grammar can be
written in ordinary spelling ("What's the time?").
"""

from __future__ import annotations

import unicodedata

APOSTROPHES = frozenset("\u0027\u2018\u2019\u02bc")
"""Deleted outright, so that contractions stay one word."""

PERCENT = "%"
"""The one symbol kept, as a token of its own."""

CJK_RANGES = (
    (0x3005, 0x3007),
    (0x3040, 0x30FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x3FFFF),
)
"""Closed code point intervals whose characters each become a token."""

_DROPPED_CATEGORY_PREFIXES = ("P", "S", "Z", "C")


def is_cjk(char: str) -> bool:
    """Whether one character is in `CJK_RANGES` (and so is a token by itself)."""
    code = ord(char)
    if code < CJK_RANGES[0][0]:  # Latin and most scripts: the common case, decided without the scan
        return False
    return any(low <= code <= high for low, high in CJK_RANGES)


def normalize(text: str) -> str:
    """Return `text` normalised by the spec in this module's docstring."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    pieces: list[str] = []
    last = len(folded) - 1
    for i, char in enumerate(folded):
        if char in APOSTROPHES:
            continue
        if char in ".,":
            between_digits = 0 < i < last and _is_ascii_digit(folded[i - 1]) and _is_ascii_digit(folded[i + 1])
            if between_digits:
                if char == ".":
                    pieces.append(char)
                continue
            pieces.append(" ")
        elif char == PERCENT:
            pieces.append(f" {char} ")
        elif unicodedata.category(char).startswith(_DROPPED_CATEGORY_PREFIXES):
            pieces.append(" ")
        elif is_cjk(char):
            pieces.append(f" {char} ")
        else:
            pieces.append(char)
    return " ".join(token for token in "".join(pieces).split(" ") if token)


def tokens(text: str) -> list[str]:
    """Split already normalised text into its tokens."""
    return text.split()


def _is_ascii_digit(char: str) -> bool:
    return "0" <= char <= "9"
