"""`voxline.intents.validate`: what a server's intent must satisfy before the browser caches it."""

from __future__ import annotations

import pytest

from voxline.intents import builtin_grammar
from voxline.intents.validate import intent_problem


@pytest.mark.parametrize("intent, slots", [
    ("media.pause", {}),
    ("media.volume_set", {"level": 30}),
    ("lights.off", {"area": "kitchen"}),
    ("lights.on", {}),
    ("timer.set", {"seconds": 600}),
    ("media.play", {"query": "kind of blue"}),
])
def test_intents_the_grammar_could_give_pass(intent, slots):
    assert intent_problem(builtin_grammar(), "en", intent, slots) is None


@pytest.mark.parametrize("intent, slots, problem", [
    ("media.explode", {}, "no intent"),
    ("media.volume_set", {}, "needs the slot"),
    ("media.volume_set", {"level": 250}, "outside"),
    ("media.volume_set", {"level": 30.5}, "whole number"),
    ("media.volume_set", {"level": "loud"}, "not a number"),
    ("media.volume_set", {"level": True}, "not a number"),
    ("lights.off", {"area": "moon"}, "not one of"),
    ("media.pause", {"level": 3}, "no slot"),
    ("timer.set", {"seconds": 10**9}, "outside"),
    ("media.play", {"query": ""}, "non-empty"),
    ("media.play", {"query": "one two three four five six seven eight nine ten"}, "longer than"),
])
def test_anything_else_is_refused_with_the_reason(intent, slots, problem):
    assert problem in intent_problem(builtin_grammar(), "en", intent, slots)
