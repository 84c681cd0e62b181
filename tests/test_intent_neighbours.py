"""The intent neighbours (voxline/server/intent_neighbours.py): the grammar's sentences as examples, and the
nearest intent by meaning, on the real sentence encoder."""

from __future__ import annotations

import pytest

from voxline.intents import builtin_grammar, load_grammar
from voxline.intents.grammar import builtin_skill_paths
from voxline.server.intent_neighbours import WORDINGS_PER_TEMPLATE, IntentNeighbours, example_sentences


@pytest.fixture(scope="module")
def grammar():
    return builtin_grammar()


@pytest.fixture(scope="module")
def encoder(model_dir):
    from voxline.sentence_encoder import SentenceEncoder

    return SentenceEncoder(model_dir("minilm-l6-v2"))


@pytest.fixture(scope="module")
def neighbours(encoder, grammar):
    return IntentNeighbours(encoder, grammar)


def test_every_intent_has_examples_with_slots_filled(grammar):
    examples = example_sentences(grammar)
    language = grammar.language("en")
    assert {intent for intent, _ in examples} == set(language.intents)
    assert not any("{" in sentence for _, sentence in examples)
    assert len(examples) <= WORDINGS_PER_TEMPLATE * len(language.templates)
    assert example_sentences(grammar) == examples  # seeded: the same index every time
    assert ("timer.set", "set a timer for 10 minutes") in examples


def test_a_grammar_sentence_is_nearest_to_its_own_intent(neighbours):
    nearest = neighbours.nearest("set a timer for 10 minutes")
    assert nearest.intent == "timer.set" and nearest.similarity > 0.99 and nearest.margin > 0


def test_a_paraphrase_finds_its_intent(neighbours):
    assert neighbours.nearest("my ears hurt, could you make it quieter").intent == "media.volume_down"


def test_a_question_is_far_from_every_command(neighbours):
    assert neighbours.nearest("who wrote Pride and Prejudice").similarity < 0.4


def test_nothing_to_compare_gives_no_neighbour(neighbours):
    assert neighbours.nearest("  ") is None


def test_intents_a_site_adds_get_neighbours_too(encoder, tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("language: en\nintents:\n  garden.water:\n    sentences:\n      - water the garden\n"
                    "      - (start | turn on) the sprinklers\n", encoding="utf-8")
    grammar = load_grammar([*builtin_skill_paths(), mine])
    nearest = IntentNeighbours(encoder, grammar).nearest("could you give the plants outside some water")
    assert nearest.intent == "garden.water"
