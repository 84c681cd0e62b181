"""The intent neighbours (voxline/server/intent_neighbours.py): the grammar's sentences as examples, and the
nearest intent by meaning, on the real sentence encoder; the built index kept on disk."""

from __future__ import annotations

import os

import numpy as np
import pytest

from voxline.intents import builtin_grammar, load_grammar
from voxline.intents.grammar import builtin_skill_paths
from voxline.server.intent_neighbours import (
    KEPT_INDEXES,
    WORDINGS_PER_TEMPLATE,
    IndexCache,
    IntentNeighbours,
    encoder_digest,
    example_sentences,
    index_key,
)

LIGHTS = "language: en\nintents:\n  lights.on:\n    sentences:\n      - turn on the lights\n" \
         "  lights.off:\n    sentences:\n      - (turn | switch) off the lights\n"
"""A grammar of three sentences: the cache tests embed it in milliseconds."""


@pytest.fixture(scope="module")
def grammar():
    return builtin_grammar()


@pytest.fixture(scope="module")
def encoder(model_dir):
    from voxline.sentence_encoder import SentenceEncoder

    return SentenceEncoder(model_dir("minilm-l6-v2"))


@pytest.fixture(scope="module")
def model_cache(model_dir):
    """The model cache's indexes, as the server reads them: a full grammar is embedded once per machine, not per
    run (the cache tests below embed a tiny grammar each time)."""
    return IndexCache.for_encoder(model_dir("minilm-l6-v2"))


@pytest.fixture(scope="module")
def neighbours(encoder, grammar, model_cache):
    return IntentNeighbours(encoder, grammar, cache=model_cache)


class CountingEncoder:
    """The real encoder, counting the sentences it is asked to embed."""

    def __init__(self, encoder) -> None:
        self.encoder = encoder
        self.sentences = 0

    def encode(self, texts):
        self.sentences += len(texts)
        return self.encoder.encode(texts)


def tiny_grammar(tmp_path, text=LIGHTS):
    path = tmp_path / "lights.yaml"
    path.write_text(text, encoding="utf-8")
    return load_grammar([path])


def test_every_intent_has_examples_with_slots_filled(grammar):
    examples = example_sentences(grammar)
    language = grammar.language("en")
    assert {intent for intent, _ in examples} == set(language.intents)
    assert not any("{" in sentence for _, sentence in examples)
    assert len(examples) <= WORDINGS_PER_TEMPLATE * len(language.templates)
    assert example_sentences(grammar) == examples  # seeded: the same index every time
    assert ("timer.set", "set a timer for 10 minutes") in examples


def test_a_template_added_leaves_the_other_templates_examples_as_they_were(tmp_path):
    many = "(turn | switch | flick | put) (on | up) (the | my | our | all the) (lights | lamps | light | lamp)"
    text = f"language: en\nintents:\n  lights.on:\n    sentences:\n      - \"{many}\"\n"
    before = example_sentences(tiny_grammar(tmp_path, text))
    (tmp_path / "more").mkdir()
    after = example_sentences(tiny_grammar(tmp_path / "more", text.replace(
        "    sentences:\n", f"    sentences:\n      - \"{many.replace('lights', 'bulbs')} now\"\n")))
    assert len(before) == WORDINGS_PER_TEMPLATE and set(before) < set(after)


def test_a_grammar_sentence_is_nearest_to_its_own_intent(neighbours):
    nearest = neighbours.nearest("set a timer for 10 minutes")
    assert nearest.intent == "timer.set" and nearest.similarity > 0.99 and nearest.margin > 0


def test_a_paraphrase_finds_its_intent(neighbours):
    assert neighbours.nearest("my ears hurt, could you make it quieter").intent == "media.volume_down"


def test_a_question_is_far_from_every_command(neighbours):
    assert neighbours.nearest("who wrote Pride and Prejudice").similarity < 0.4


def test_nothing_to_compare_gives_no_neighbour(neighbours):
    assert neighbours.nearest("  ") is None


def test_intents_a_site_adds_get_neighbours_too(encoder, model_cache, tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("language: en\nintents:\n  garden.water:\n    sentences:\n      - water the garden\n"
                    "      - (start | turn on) the sprinklers\n", encoding="utf-8")
    grammar = load_grammar([*builtin_skill_paths(), mine])
    neighbours = IntentNeighbours(encoder, grammar, cache=model_cache)
    assert neighbours.nearest("could you give the plants outside some water").intent == "garden.water"


def test_a_second_build_reads_the_index_from_disk_without_embedding(encoder, tmp_path):
    grammar, cache = tiny_grammar(tmp_path), IndexCache("encoder-a", tmp_path / "neighbours")
    first, second = CountingEncoder(encoder), CountingEncoder(encoder)
    built = IntentNeighbours(first, grammar, cache=cache)
    read = IntentNeighbours(second, grammar, cache=cache)
    assert first.sentences == 3 and built.loaded_from is None
    assert second.sentences == 0 and read.loaded_from == cache.path(example_sentences(grammar), 64)
    assert read._vectors.dtype == np.float32 and np.array_equal(read._vectors, built._vectors)
    assert read.intents == built.intents and np.array_equal(read._owner, built._owner)
    assert read.nearest("switch the lights off") == built.nearest("switch the lights off")


def test_any_change_of_what_was_embedded_changes_the_key(tmp_path):
    examples = example_sentences(tiny_grammar(tmp_path))
    reworded = example_sentences(tiny_grammar(tmp_path, LIGHTS.replace("turn on the lights", "turn the lights on")))
    relabelled = [("lights.toggle" if intent == "lights.on" else intent, text) for intent, text in examples]
    key = index_key(examples, "encoder-a", 64)
    assert key == index_key(list(examples), "encoder-a", 64)
    assert len({key, index_key(reworded, "encoder-a", 64), index_key(relabelled, "encoder-a", 64),
                index_key(examples, "encoder-b", 64), index_key(examples, "encoder-a", 32)}) == 5


def test_a_changed_grammar_is_embedded_again(encoder, tmp_path):
    cache = IndexCache("encoder-a", tmp_path / "neighbours")
    IntentNeighbours(encoder, tiny_grammar(tmp_path), cache=cache)
    counting = CountingEncoder(encoder)
    changed = IntentNeighbours(counting, tiny_grammar(tmp_path, LIGHTS.replace("on the lights", "on the lamps")),
                               cache=cache)
    assert counting.sentences == 3 and changed.loaded_from is None
    assert len(list(cache.folder.glob("*.npz"))) == 2


def test_the_encoder_digest_covers_its_weights_and_tokenizer(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "tokenizer.json").write_text("{}")
    before = encoder_digest(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"changed": 1}')
    assert encoder_digest(tmp_path) != before and IndexCache.for_encoder(tmp_path).encoder_digest != before


@pytest.mark.parametrize("damage", ["garbage", "truncated", "another index", "not unit vectors"])
def test_a_damaged_cache_file_is_rebuilt(encoder, tmp_path, damage, caplog):
    grammar, cache = tiny_grammar(tmp_path), IndexCache("encoder-a", tmp_path / "neighbours")
    built = IntentNeighbours(encoder, grammar, cache=cache)
    path = cache.path(example_sentences(grammar), 64)
    if damage == "garbage":
        path.write_bytes(b"not an npz file")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
    elif damage == "another index":
        np.savez(path, vectors=built._vectors, intents=np.array(["x"] * 3), sentences=np.array(["y"] * 3))
    else:
        with np.load(path) as stored:
            np.savez(path, **{**stored, "vectors": stored["vectors"] * 2})
    counting = CountingEncoder(encoder)
    rebuilt = IntentNeighbours(counting, grammar, cache=cache)
    assert counting.sentences == 3 and rebuilt.loaded_from is None and "rebuilding" in caplog.text
    assert np.array_equal(rebuilt._vectors, built._vectors)
    assert IntentNeighbours(CountingEncoder(encoder), grammar, cache=cache).loaded_from == path  # written anew


def test_a_cache_that_cannot_be_written_still_gives_the_index(encoder, tmp_path, caplog):
    blocked = tmp_path / "a file"
    blocked.write_text("")
    neighbours = IntentNeighbours(encoder, tiny_grammar(tmp_path), cache=IndexCache("encoder-a", blocked))
    assert neighbours.nearest("turn off the lights").intent == "lights.off" and "not cached" in caplog.text
    assert not list(tmp_path.glob("**/*.part"))


def test_only_the_most_recently_used_indexes_are_kept(encoder, tmp_path):
    grammar, folder = tiny_grammar(tmp_path), tmp_path / "neighbours"
    examples = example_sentences(grammar)
    caches = [IndexCache(f"encoder-{n}", folder) for n in range(KEPT_INDEXES + 1)]
    for n, cache in enumerate(caches[:KEPT_INDEXES]):
        IntentNeighbours(encoder, grammar, cache=cache)
        os.utime(cache.path(examples, 64), (1000 + n, 1000 + n))  # written in this order, a second apart
    assert IntentNeighbours(encoder, grammar, cache=caches[0]).loaded_from is not None  # used: now the newest
    IntentNeighbours(encoder, grammar, cache=caches[KEPT_INDEXES])
    assert len(list(folder.glob("*.npz"))) == KEPT_INDEXES
    assert caches[0].path(examples, 64).exists() and not caches[1].path(examples, 64).exists()


def test_a_half_written_file_left_by_a_killed_server_goes_when_stale(encoder, tmp_path):
    grammar, folder = tiny_grammar(tmp_path), tmp_path / "neighbours"
    folder.mkdir()
    (folder / "left.part").write_bytes(b"half")
    (folder / "writing.part").write_bytes(b"half")
    os.utime(folder / "left.part", (1000, 1000))
    IntentNeighbours(encoder, grammar, cache=IndexCache("encoder-a", folder))
    assert sorted(p.name for p in folder.glob("*.part")) == ["writing.part"]
