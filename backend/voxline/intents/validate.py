"""Checking an intent that did not come from this grammar's matcher (a server's answer) against the grammar.

The browser learns server-resolved commands into its cache, and the cache then acts on them with no network at
all; an entry whose intent or slot values the local grammar could never produce (a name it does not have, a level
of 250, an area it does not know) must not enter it. `intent_problem` says what is wrong, or ``None``.

Which way it errs: it checks names, types and ranges, not whether some sentence would produce exactly these
values, so it may let through a combination no template makes (never one outside the slots' own ranges or lists).
"""

from __future__ import annotations

from collections.abc import Mapping

from voxline.intents.expression import SlotRef
from voxline.intents.grammar import Grammar, LanguageGrammar
from voxline.intents.slots import DurationRange, NumberRange, SlotList, ValueList, Wildcard


def intent_problem(grammar: Grammar, lang: str, intent: str, slots: Mapping[str, object]) -> str | None:
    """Why (`intent`, `slots`) is not something `grammar` could recognise in `lang`, or ``None`` when it could."""
    language = grammar.language(lang)
    spec = language.intents.get(intent)
    if spec is None:
        return f"the grammar has no intent {intent!r}"
    lists = _slot_lists(language, intent)
    missing = sorted(spec.requires - set(slots))
    if missing:
        return f"{intent} needs the slot(s) {', '.join(missing)}"
    for name, value in slots.items():
        if name not in lists:
            return f"{intent} has no slot {name!r}"
        # A slot may be filled from more than one list ("{level}", "{level_word:level}"): any of them will do.
        problems = [_value_problem(slot_list, value) for slot_list in lists[name]]
        if all(problems):
            return f"slot {name!r}: {problems[0]}"
    return None


def _slot_lists(language: LanguageGrammar, intent: str) -> dict[str, list[SlotList]]:
    lists: dict[str, list[SlotList]] = {}
    for template in language.intents[intent].templates:
        for expansion in template.expansions:
            for element in expansion:
                if isinstance(element, SlotRef):
                    found = lists.setdefault(element.name, [])
                    if language.lists[element.list_name] not in found:
                        found.append(language.lists[element.list_name])
    return lists


def _value_problem(slot_list: SlotList, value: object) -> str | None:
    if isinstance(slot_list, ValueList):
        known = {entry.value for entry in slot_list.values}
        return None if value in known else f"{value!r} is not one of the list's values"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return f"{value!r} is not a number or text"
    if isinstance(slot_list, (NumberRange, DurationRange)):
        if not isinstance(value, (int, float)):
            return f"{value!r} is not a number"
        if not slot_list.min <= value <= slot_list.max:
            return f"{value} is outside {slot_list.min:g}..{slot_list.max:g}"
        if isinstance(slot_list, NumberRange) and slot_list.integer and value != int(value):
            return f"{value} is not a whole number"
        return None
    if isinstance(slot_list, Wildcard):
        if not isinstance(value, str) or not value.strip():
            return "free text must be a non-empty string"
        if len(value.split()) > slot_list.max_tokens:
            return f"free text is longer than {slot_list.max_tokens} words"
        return None
    return f"unknown slot kind {slot_list.kind!r}"
