"""Template syntax: parsing, expansion and the guards against runaway grammars."""

from __future__ import annotations

import pytest

from voxline.intents.errors import GrammarError
from voxline.intents.expression import (
    MAX_EXPANSIONS,
    MAX_RULE_DEPTH,
    Alternative,
    RuleRef,
    Sequence,
    SlotRef,
    Word,
    expand,
    parse_template,
    slot_refs,
)


def expansions(template: str, **rules: str) -> list[tuple]:
    parsed_rules = {name: parse_template(text) for name, text in rules.items()}
    return expand(parse_template(template), parsed_rules)


def test_words_are_normalised_tokens():
    assert parse_template("What's the TIME?") == Sequence((Word("whats"), Word("the"), Word("time")))


def test_cjk_words_split_per_character():
    assert expansions("打开灯") == [("打", "开", "灯")]


def test_alternative():
    assert expansions("(turn|switch) off") == [("turn", "off"), ("switch", "off")]


def test_optional():
    assert expansions("pause [the music]") == [("pause",), ("pause", "the", "music")]


def test_optional_alternatives_and_nesting():
    assert expansions("turn it down [a (bit|little)]") == [
        ("turn", "it", "down"),
        ("turn", "it", "down", "a", "bit"),
        ("turn", "it", "down", "a", "little"),
    ]


def test_slot_and_renamed_slot():
    assert parse_template("{area}").items == (SlotRef("area", "area"),)
    assert parse_template("{number:level}").items == (SlotRef("level", "number"),)


def test_slot_next_to_cjk_without_spaces():
    area = SlotRef("area", "area")
    assert expansions("打开{area}[的]灯") == [("打", "开", area, "灯"), ("打", "开", area, "的", "灯")]


def test_rule_reference_expands_in_place():
    assert parse_template("<volume> up").items[0] == RuleRef("volume")
    assert expansions("<volume> up", volume="(volume|sound)") == [("volume", "up"), ("sound", "up")]


def test_duplicate_expansions_are_removed_in_order():
    assert expansions("(a|a) [b|b]") == [("a",), ("a", "b")]


def test_optional_group_is_an_alternative_with_none():
    group = parse_template("[a|b]").items[0]
    assert isinstance(group, Alternative) and group.optional and len(group.options) == 2


def test_slot_refs_through_rules():
    rules = {"r": parse_template("in the {area}")}
    assert slot_refs(parse_template("lights on [<r>]"), rules) == {SlotRef("area", "area")}


@pytest.mark.parametrize(
    "template",
    ["(a|b", "a)", "[a", "a]", "{area", "area}", "<rule", "rule>", "{two words}", "{a:b:c}", "{}", "a|b", "<a b>"],
)
def test_syntax_errors(template):
    with pytest.raises(GrammarError):
        parse_template(template)


def test_syntax_error_says_where():
    with pytest.raises(GrammarError, match=r"at character \d+"):
        parse_template("turn (it down")


def test_unknown_rule():
    with pytest.raises(GrammarError, match="unknown rule <nope>"):
        expansions("<nope>")


def test_rule_cycle_is_stopped_by_the_depth_guard():
    with pytest.raises(GrammarError, match=f"deeper than {MAX_RULE_DEPTH}"):
        expansions("<a>", a="x <b>", b="y <a>")


def test_expansion_limit():
    blowup = " ".join(["(a|b|c|d)"] * 7)  # 4 ** 7 = 16384 sentences
    assert 4**7 > MAX_EXPANSIONS
    with pytest.raises(GrammarError, match="more than"):
        expansions(blowup)
