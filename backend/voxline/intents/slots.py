"""Slot lists: what may fill a ``{slot}`` in a template, and how many tokens it takes.

Four kinds, each built from its compiled (JSON-able) form by `slot_list_from_dict`:

- ``values``: a closed list of values, each spoken as one or more synonyms ("living room", "lounge" →
  ``living_room``).
- ``number``: a spoken or written number within ``min``..``max`` ("thirty", "30", "三十").
- ``duration``: a spoken duration in seconds within ``min``..``max`` ("an hour and a half" → 5400).
- ``wildcard``: free text of 1..``max_tokens`` tokens, such as a song to play. Free text is where a grammar loses
  precision, so a wildcard may not begin with a word of ``exclude_first`` nor be one of ``exclude_values`` whole
  (nor one of them, a word of ``exclude_values_then`` and more), and the grammar only accepts a wildcard right
  after a literal word (a verb anchors it).

Every kind answers two questions about the tokens from a position on: `consume` (every way a value may end
there, with its value) and `can_extend` (could these remaining tokens be the start of a longer value; used by
endpointing, and allowed to be too lenient, never too strict).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from voxline.intents import numbers
from voxline.intents.errors import GrammarError
from voxline.intents.normalize import is_cjk, normalize

SlotValue = str | int | float | bool

WILDCARD_DEFAULT_MAX_TOKENS = 8


@dataclass(frozen=True)
class ListValue:
    """One value of a ``values`` list and the phrases that say it."""

    value: SlotValue
    synonyms: tuple[str, ...]
    """As written in the grammar; the first is the spoken form used in confirmations."""


@dataclass(frozen=True)
class ValueList:
    """A closed list of values, matched by their normalised synonyms."""

    values: tuple[ListValue, ...]
    kind: str = field(default="values", init=False)
    _phrases: dict[tuple[str, ...], tuple[SlotValue, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _prefixes: frozenset[tuple[str, ...]] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        phrases: dict[tuple[str, ...], list[SlotValue]] = {}
        for entry in self.values:
            for synonym in entry.synonyms:
                key = tuple(normalize(synonym).split(" "))
                if key == ("",):
                    raise GrammarError(f"list value {entry.value!r} has an empty synonym")
                if entry.value not in phrases.setdefault(key, []):
                    phrases[key].append(entry.value)
        prefixes = {key[:cut] for key in phrases for cut in range(1, len(key))}
        object.__setattr__(self, "_phrases", {key: tuple(found) for key, found in phrases.items()})
        object.__setattr__(self, "_prefixes", frozenset(prefixes))

    @property
    def longest(self) -> int:
        """Tokens in the longest synonym."""
        return max((len(key) for key in self._phrases), default=0)

    def consume(self, tokens: Sequence[str], start: int) -> list[tuple[int, SlotValue]]:
        """Every (end, value) whose synonym is `tokens[start:end]`; one synonym of two values yields both."""
        found = []
        for end in range(start + 1, min(len(tokens), start + self.longest) + 1):
            for value in self._phrases.get(tuple(tokens[start:end]), ()):
                found.append((end, value))
        return found

    def can_extend(self, tokens: Sequence[str], start: int) -> bool:
        """Whether `tokens[start:]` is a strict prefix of some synonym (exact)."""
        return tuple(tokens[start:]) in self._prefixes

    def spoken(self, value: SlotValue, lang: str) -> str:
        """The first synonym of `value`."""
        for entry in self.values:
            if entry.value == value:
                return entry.synonyms[0]
        return str(value)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "values": [{"value": v.value, "synonyms": list(v.synonyms)} for v in self.values]}


@dataclass(frozen=True)
class NumberRange:
    """A spoken or written number within ``min``..``max`` inclusive."""

    lang: str
    min: float
    max: float
    integer: bool = True
    """Reject fractions ("2.5") when the slot only makes sense whole."""
    kind: str = field(default="number", init=False)

    def consume(self, tokens: Sequence[str], start: int) -> list[tuple[int, SlotValue]]:
        found = []
        for end in range(start + 1, min(len(tokens), start + numbers.MAX_NUMBER_TOKENS) + 1):
            value = numbers.parse_number(tokens[start:end], self.lang)
            if value is None or not self.min <= value <= self.max:
                continue
            if isinstance(value, float):
                if value.is_integer():
                    value = int(value)
                elif self.integer:
                    continue
            found.append((end, value))
        return found

    def can_extend(self, tokens: Sequence[str], start: int) -> bool:
        return numbers.could_continue_number(tokens[start:], self.lang)

    def spoken(self, value: SlotValue, lang: str) -> str:
        return numbers.spoken_number(value)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "min": self.min, "max": self.max, "integer": self.integer}


@dataclass(frozen=True)
class DurationRange:
    """A spoken duration, as whole seconds within ``min``..``max`` inclusive."""

    lang: str
    min: float
    max: float
    kind: str = field(default="duration", init=False)

    def consume(self, tokens: Sequence[str], start: int) -> list[tuple[int, SlotValue]]:
        found = []
        for end in range(start + 1, min(len(tokens), start + numbers.MAX_DURATION_TOKENS) + 1):
            seconds = numbers.parse_duration(tokens[start:end], self.lang)
            if seconds is not None and self.min <= seconds <= self.max:
                found.append((end, int(round(seconds))))
        return found

    def can_extend(self, tokens: Sequence[str], start: int) -> bool:
        return numbers.could_continue_duration(tokens[start:], self.lang)

    def spoken(self, value: SlotValue, lang: str) -> str:
        return numbers.spoken_duration(float(value), lang)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "min": self.min, "max": self.max}


@dataclass(frozen=True)
class Wildcard:
    """Free text of 1..``max_tokens`` tokens, as its surface text (CJK characters joined without spaces)."""

    max_tokens: int = WILDCARD_DEFAULT_MAX_TOKENS
    exclude_first: frozenset[str] = frozenset()
    """Normalised words a value may not begin with ("play with the dog" is not a song)."""
    exclude_values: frozenset[tuple[str, ...]] = frozenset()
    """Normalised phrases a value may not be, whole ("play chess", "play the piano": a game, an instrument); a
    longer value that begins with one is still a value ("play chess club radio")..."""
    exclude_values_then: frozenset[str] = frozenset()
    """... unless the word after it is one of these ("play chess with me", "play football against the wall": a game
    played with someone), and then no value that goes on past that word is one either."""
    kind: str = field(default="wildcard", init=False)

    def consume(self, tokens: Sequence[str], start: int) -> list[tuple[int, SlotValue]]:
        if start >= len(tokens) or tokens[start] in self.exclude_first:
            return []
        last = min(len(tokens), start + self.max_tokens)
        if self.exclude_values_then:
            # past an excluded value and the word after it, nothing is a value
            last = min([last, *(start + len(value) for value in self.exclude_values
                                if start + len(value) < len(tokens) and tokens[start + len(value)] in
                                self.exclude_values_then and tuple(tokens[start:start + len(value)]) == value)])
        return [(end, surface(tokens[start:end])) for end in range(start + 1, last + 1)
                if tuple(tokens[start:end]) not in self.exclude_values]

    def can_extend(self, tokens: Sequence[str], start: int) -> bool:
        rest = tokens[start:]
        return len(rest) < self.max_tokens and not (rest and rest[0] in self.exclude_first)

    def spoken(self, value: SlotValue, lang: str) -> str:
        return str(value)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "max_tokens": self.max_tokens, "exclude_first": sorted(self.exclude_first),
                **({"exclude_values": sorted(" ".join(v) for v in self.exclude_values)} if self.exclude_values else {}),
                **({"exclude_values_then": sorted(self.exclude_values_then)} if self.exclude_values_then else {})}


SlotList = ValueList | NumberRange | DurationRange | Wildcard


def surface(tokens: Sequence[str]) -> str:
    """Tokens joined back into text: a space between words, none between two CJK characters."""
    text = ""
    for token in tokens:
        if text and not (is_cjk(text[-1]) and is_cjk(token[0])):
            text += " "
        text += token
    return text


def slot_list_from_dict(name: str, data: Any, lang: str) -> SlotList:
    """Build a slot list from its compiled form (see the `grammar` module for the source forms)."""
    if not isinstance(data, dict) or "kind" not in data:
        raise GrammarError(f"list {name!r}: expected a mapping with a 'kind'")
    kind = data["kind"]
    try:
        if kind == "values":
            entries = tuple(
                ListValue(value=entry["value"], synonyms=tuple(str(s) for s in entry["synonyms"]))
                for entry in data["values"]
            )
            if any(not entry.synonyms for entry in entries):
                raise GrammarError(f"list {name!r}: a value without synonyms")
            return ValueList(entries)
        if kind == "number":
            return NumberRange(lang, data["min"], data["max"], bool(data.get("integer", True)))
        if kind == "duration":
            return DurationRange(lang, data["min"], data["max"])
        if kind == "wildcard":
            excluded = frozenset(normalize(str(word)) for word in data.get("exclude_first", ()))
            not_values = frozenset(tuple(normalize(str(phrase)).split(" "))
                                   for phrase in data.get("exclude_values", ()))
            then = frozenset(normalize(str(word)) for word in data.get("exclude_values_then", ()))
            return Wildcard(int(data.get("max_tokens", WILDCARD_DEFAULT_MAX_TOKENS)), excluded, not_values, then)
    except (KeyError, TypeError, ValueError) as error:
        raise GrammarError(f"list {name!r} of kind {kind!r} is malformed: {error!r}") from error
    raise GrammarError(f"list {name!r}: unknown kind {kind!r} (values, number, duration or wildcard)")
