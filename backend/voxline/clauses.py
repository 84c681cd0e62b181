"""Cutting a streamed reply into clauses that text-to-speech can say on their own, as early as is safe.

The first clause decides when the user hears anything, so the splitter hands a clause over the moment its end is
certain. Certain means: a boundary mark followed by white space, because a mark alone is ambiguous while the
stream is still arriving ("3." may become "3.14", "10:" may become "10:30", "." may become "...").

Boundaries, in the order they are judged:

- `.` `!` `?` `;` `:` followed (after any closing quotes or brackets) by white space; a line break; the CJK
  full stops `。！？；` at once.
- `,` followed by white space, once the clause already has `min_comma_words` words (short comma phrases read
  badly on their own: "Well," "Yes,").
- Never: inside numbers (3.14, 1,000, 10:30: no white space follows the mark), after an abbreviation or initials
  (Dr., e.g., U.S., a.m.), inside or after an ellipsis (... or …), after a lone list number ("1.").
- Optionally (`first_clause_max_words`), the first clause of a reply ends after that many words even without a
  mark, so that speech can start before the model finishes its first sentence; the cut moves past words that
  cannot end a phrase ("the", "of", "is"...) so that the fragment still sounds like one.

A missed boundary only delays audio by one clause; a wrong one breaks the prosody of a sentence, so every doubtful
case is "no split". The splitter is a pure function of the text: how the deltas are chunked never changes the
clauses (the tests check it against every cut of each sentence).
"""

from __future__ import annotations

import re

DEFAULT_MIN_COMMA_WORDS = 5
"""A comma ends a clause only once the clause has this many words."""
MAX_WEAK_EXTENSION_WORDS = 3
"""How many words past `first_clause_max_words` the cut may move to avoid ending on a weak word."""

WEAK_ENDINGS = frozenset({
    "a", "an", "the", "of", "to", "in", "on", "at", "for", "with", "from", "by", "as", "into", "about", "than",
    "and", "or", "but", "nor", "so", "if", "that", "which", "who", "is", "are", "was", "were", "be", "been", "am",
    "has", "have", "had", "do", "does", "did", "will", "would", "can", "could", "should", "may", "might", "must",
    "my", "your", "his", "her", "its", "our", "their", "this", "these", "those", "very", "not", "no", "it's", "i",
    "you", "we", "they", "he", "she", "it", "there", "what", "how", "when", "where", "why",
})
"""Words a spoken fragment should not end on: articles, prepositions, auxiliaries, pronouns awaiting a verb."""

_TERMINAL = ".!?;:"
_CJK_TERMINAL = "。！？；"
_CLOSERS = "\"')]}”’»"
_ELLIPSIS = "…"
_OPENERS = "\"'([{“‘«"

ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "ft", "vs", "etc", "approx", "dept", "est", "fig",
    "inc", "ltd", "co", "corp", "gov", "gen", "col", "lt", "sgt", "capt", "rev", "hon", "no", "nos", "vol", "pp",
    "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
    "mon", "tue", "tues", "wed", "thu", "thurs", "fri", "sat", "sun", "ave", "blvd", "rd", "min", "max", "cf",
})
"""Words that end in a period without ending a sentence. "No." counts: "No. 5" is common in generated text, and a
reply that starts with a bare "No." loses only a few milliseconds by waiting for the next mark."""

_INITIALS = re.compile(r"(?:[A-Za-z]\.)*[A-Za-z]")
"""A single letter, or letters joined by periods, before the period being judged: "U.S", "e.g", "a.m", "J"."""
_LIST_NUMBER = re.compile(r"\d{1,3}")
_SPEAKABLE = re.compile(r"\w")


class ClauseSplitter:
    """Feed text deltas in; get complete clauses out, in order; `flush` at the end of the reply for the rest."""

    def __init__(
        self, min_comma_words: int = DEFAULT_MIN_COMMA_WORDS, first_clause_max_words: int | None = None
    ) -> None:
        self.min_comma_words = min_comma_words
        self.first_clause_max_words = first_clause_max_words
        self._buffer = ""
        self._scanned = 0
        """Everything before this index was judged "not a boundary"; judging resumes here."""
        self._released = 0
        """Clauses released since the last flush (the word limit applies to the first only)."""

    def feed(self, delta: str) -> list[str]:
        """Add text; return the clauses whose end is now certain (often none)."""
        self._buffer += delta
        clauses = []
        while (end := self._next_boundary()) is not None:
            clause, self._buffer = self._buffer[:end].strip(), self._buffer[end:].lstrip()
            self._scanned = 0
            if _SPEAKABLE.search(clause):
                clauses.append(clause)
                self._released += 1
        return clauses

    def flush(self) -> list[str]:
        """The end of the reply: whatever is left is the last clause."""
        rest, self._buffer, self._scanned, self._released = self._buffer.strip(), "", 0, 0
        return [rest] if _SPEAKABLE.search(rest) else []

    def _next_boundary(self) -> int | None:
        """End index of the first certain clause in the buffer, or None (recording how far it is known to be none)."""
        text = self._buffer
        limit = self._word_limit(text) if self.first_clause_max_words and not self._released else None
        i = self._scanned
        while i < len(text):
            if limit is not None and i >= limit:
                return limit  # no mark within the first words: cut after them
            verdict = self._judge(text, i)
            if verdict is _WAIT:
                break
            if verdict is not None:
                return verdict
            i += 1
        self._scanned = i
        return None

    def _word_limit(self, text: str) -> int | None:
        """Where the first clause ends by word count: after its N-th complete word, or a few later if that is weak."""
        words = list(re.finditer(r"\S+", text))
        last = self.first_clause_max_words + MAX_WEAK_EXTENSION_WORDS
        for count, word in enumerate(words[self.first_clause_max_words - 1 : last], self.first_clause_max_words):
            if word.end() == len(text):
                return None  # the word may still grow ("Par" → "Paris")
            if count == last or not _is_weak(word.group(), text[: word.end() - 1]):
                return word.end()
        return None

    def _judge(self, text: str, i: int) -> int | object | None:
        """At `text[i]`: the clause end index, None (not a boundary), or _WAIT (cannot tell until more text)."""
        mark = text[i]
        if mark == "\n":
            return i + 1
        if mark in _CJK_TERMINAL:
            return _after_closers(text, i + 1, need_space=False)  # CJK text puts no space after its marks
        if mark == ",":
            if len(text[:i].split()) < self.min_comma_words:
                return None
            return _after_closers(text, i + 1, need_space=True)
        if mark not in _TERMINAL:
            return None
        if mark == ".":
            if text[i - 1 : i] in (".", _ELLIPSIS):
                return None  # the tail of an ellipsis: trailing-off speech usually goes on
            if i + 1 == len(text):
                return _WAIT  # "3." / "U." / "." may still become "3.14" / "U.S." / "..."
            if text[i + 1] == ".":
                return None
            if _is_abbreviation(text[:i]):
                return None
        return _after_closers(text, i + 1, need_space=True)


_WAIT = object()


def _after_closers(text: str, j: int, *, need_space: bool) -> int | object | None:
    """The clause end after any closing quotes/brackets at `j`; with `need_space`, only if white space follows."""
    while j < len(text) and text[j] in _CLOSERS:
        j += 1
    if j == len(text):
        return _WAIT  # a closing quote may still arrive, and it belongs to this clause
    if not need_space:
        return j
    return j if text[j].isspace() else None


def _is_weak(word: str, before_last_char: str) -> bool:
    """Whether a fragment must not end on `word`: a function word, or an abbreviation ("Dr." wants its name)."""
    if word.lower().strip(_CLOSERS + _OPENERS) in WEAK_ENDINGS:
        return True
    return word.endswith(".") and _is_abbreviation(before_last_char)


def _is_abbreviation(before: str) -> bool:
    """Whether the word just before a period makes the period part of the word rather than a sentence end."""
    words = before.split()
    if not words:
        return True  # a period with nothing before it ends nothing
    word = words[-1].lstrip(_OPENERS)
    if word.lower() in ABBREVIATIONS or _INITIALS.fullmatch(word):
        return True
    # "1." opening a clause is list numbering ("1. Preheat the oven"), not a sentence.
    return len(words) == 1 and bool(_LIST_NUMBER.fullmatch(word))


_MARKDOWN = re.compile(r"[*_#`~]+|^\s*[-•]\s+|\[(.*?)\]\(.*?\)", re.MULTILINE)


def speakable(clause: str) -> str:
    """The clause as it should be spoken: markdown emphasis, headings, bullets and link targets removed.

    The system prompt asks for plain speech, but small models slip; reading "asterisk" aloud is worse than dropping it.
    """
    return _MARKDOWN.sub(lambda m: m.group(1) or "", clause).strip()
