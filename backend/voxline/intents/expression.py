"""Sentence templates: their syntax, the expression tree they parse into, and its expansion into token sequences.

Template syntax (whitespace separates words; the syntax characters also end a word):

- ``(a|b c)``: one of the alternatives, each a sequence of words and expressions.
- ``[a|b]``: optional; the same as ``(a|b|)``. ``[please]`` is one optional word.
- ``{list}``: a slot filled from the list of that name; ``{list:slot}`` names the slot differently from its list.
- ``<rule>``: the expression of a named rule, shared by many templates.
- anything else is literal text, normalised with `normalize` exactly as transcripts are, so ``what's`` matches
  "what's" and "whats", and ``打开`` becomes the two tokens ``打 开``.

Expansion turns a template into every token sequence it stands for: a tuple of literal tokens (``str``) and
`SlotRef` elements. Rules expand in place, guarded by `MAX_RULE_DEPTH`; a template that stands for more than
`MAX_EXPANSIONS` sequences is rejected rather than silently truncated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from voxline.intents.errors import GrammarError
from voxline.intents.normalize import normalize

MAX_RULE_DEPTH = 16
"""Guard against rules that reference each other (directly or in a cycle)."""

MAX_NESTING_DEPTH = 32
"""Guard against runaway bracket nesting in one template."""

MAX_EXPANSIONS = 4096
"""Most token sequences one template may stand for; more means a grammar that should use a list or a slot."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYNTAX = "()[]|{}<>"


@dataclass(frozen=True)
class Word:
    """One literal token, already normalised."""

    text: str


@dataclass(frozen=True)
class SlotRef:
    """A slot in a template: which slot it fills and from which list."""

    name: str
    """The key in `Match.slots`."""
    list_name: str
    """The list whose values (or number, duration, free text) fill it."""


@dataclass(frozen=True)
class RuleRef:
    """A reference to a named rule, expanded in place."""

    name: str


@dataclass(frozen=True)
class Sequence:
    """Expressions that follow one another."""

    items: tuple[Expression, ...]


@dataclass(frozen=True)
class Alternative:
    """Exactly one of several sequences; an optional group also allows none."""

    options: tuple[Sequence, ...]
    optional: bool = False
    """True for ``[...]``: the empty sequence is one more option."""


Expression = Word | SlotRef | RuleRef | Sequence | Alternative
Element = str | SlotRef
"""One step of an expanded template: a literal token or a slot."""


def parse_template(text: str) -> Sequence:
    """Parse one template into its expression tree, or raise `GrammarError` saying where it is malformed."""
    parser = _Parser(text)
    sequence = parser.sequence(depth=0)
    if parser.position != len(text):
        raise parser.error(f"unexpected {text[parser.position]!r}")
    return sequence


def expand(expression: Expression, rules: Mapping[str, Sequence]) -> list[tuple[Element, ...]]:
    """Every token sequence `expression` stands for, in template order, without duplicates."""
    found = _expand(expression, rules, depth=0)
    return list(dict.fromkeys(found))


def slot_refs(expression: Expression, rules: Mapping[str, Sequence], depth: int = 0) -> set[SlotRef]:
    """Every slot an expression may fill (through rules too)."""
    if isinstance(expression, SlotRef):
        return {expression}
    if isinstance(expression, RuleRef):
        return slot_refs(_rule(expression, rules, depth), rules, depth + 1)
    if isinstance(expression, Sequence):
        return set().union(*(slot_refs(item, rules, depth) for item in expression.items))
    if isinstance(expression, Alternative):
        return set().union(*(slot_refs(option, rules, depth) for option in expression.options))
    return set()


def _expand(expression: Expression, rules: Mapping[str, Sequence], depth: int) -> list[tuple[Element, ...]]:
    if isinstance(expression, Word):
        return [(expression.text,)]
    if isinstance(expression, SlotRef):
        return [(expression,)]
    if isinstance(expression, RuleRef):
        return _expand(_rule(expression, rules, depth), rules, depth + 1)
    if isinstance(expression, Alternative):
        found = [] if not expression.optional else [()]
        for option in expression.options:
            found.extend(_expand(option, rules, depth))
            _check_count(len(found))
        return found
    combined: list[tuple[Element, ...]] = [()]
    for item in expression.items:
        tails = _expand(item, rules, depth)
        _check_count(len(combined) * len(tails))
        combined = [head + tail for head in combined for tail in tails]
    return combined


def _rule(reference: RuleRef, rules: Mapping[str, Sequence], depth: int) -> Sequence:
    if depth >= MAX_RULE_DEPTH:
        raise GrammarError(
            f"rule <{reference.name}> nested deeper than {MAX_RULE_DEPTH}: do rules reference each other?"
        )
    if reference.name not in rules:
        raise GrammarError(f"unknown rule <{reference.name}>")
    return rules[reference.name]


def _check_count(count: int) -> None:
    if count > MAX_EXPANSIONS:
        raise GrammarError(f"a template stands for more than {MAX_EXPANSIONS} sentences: use a list or a slot")


class _Parser:
    """Recursive descent over the template characters."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.position = 0

    def error(self, message: str) -> GrammarError:
        return GrammarError(f"template {self.text!r}, at character {self.position}: {message}")

    def sequence(self, depth: int) -> Sequence:
        if depth > MAX_NESTING_DEPTH:
            raise self.error(f"brackets nested deeper than {MAX_NESTING_DEPTH}")
        items: list[Expression] = []
        while self.position < len(self.text):
            char = self.text[self.position]
            if char in ")]|":
                break
            if char in "([":
                items.append(self.group(depth))
            elif char == "{":
                items.append(self.slot())
            elif char == "<":
                items.append(RuleRef(self.name_until(">")))
            elif char in "}>":
                raise self.error(f"unmatched {char!r}")
            else:
                items.extend(self.words())
        return Sequence(tuple(items))

    def group(self, depth: int) -> Alternative:
        opening = self.text[self.position]
        closing = ")" if opening == "(" else "]"
        self.position += 1
        options = [self.sequence(depth + 1)]
        while self.position < len(self.text) and self.text[self.position] == "|":
            self.position += 1
            options.append(self.sequence(depth + 1))
        if self.position >= len(self.text) or self.text[self.position] != closing:
            raise self.error(f"{opening!r} is not closed by {closing!r}")
        self.position += 1
        return Alternative(tuple(options), optional=opening == "[")

    def slot(self) -> SlotRef:
        inside = self.name_until("}", allow_colon=True)
        list_name, _, slot_name = inside.partition(":")
        return SlotRef(name=slot_name or list_name, list_name=list_name)

    def name_until(self, closing: str, allow_colon: bool = False) -> str:
        end = self.text.find(closing, self.position + 1)
        if end < 0:
            raise self.error(f"{self.text[self.position]!r} is not closed by {closing!r}")
        inside = self.text[self.position + 1 : end].strip()
        parts = inside.split(":") if allow_colon else [inside]
        if len(parts) > 2 or not all(_NAME.fullmatch(part) for part in parts):
            raise self.error(f"bad name {inside!r}")
        self.position = end + 1
        return inside

    def words(self) -> list[Word]:
        start = self.position
        while self.position < len(self.text) and self.text[self.position] not in _SYNTAX:
            self.position += 1
        return [Word(token) for token in normalize(self.text[start : self.position]).split(" ") if token]
