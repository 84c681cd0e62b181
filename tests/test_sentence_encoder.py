"""The sentence encoder (voxline/sentence_encoder.py): all-MiniLM-L6-v2's forward pass in numpy, on the real model."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest

from voxline.sentence_encoder import HIDDEN, SentenceEncoder, _erf, read_safetensors


@pytest.fixture(scope="module")
def encoder(model_dir):
    return SentenceEncoder(model_dir("minilm-l6-v2"))


def test_erf_is_exact_enough_for_gelu():
    xs = np.linspace(-6, 6, 2001)
    assert np.max(np.abs(_erf(xs) - np.array([math.erf(x) for x in xs]))) < 2e-7


def test_safetensors_are_read_by_their_header(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([7, 8], dtype=np.int64)
    header = {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
              "b": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]}, "__metadata__": {"format": "pt"}}
    raw = json.dumps(header).encode() + b" "  # an odd header length: the data after it is unaligned
    path = tmp_path / "t.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + a.tobytes() + b.tobytes())
    tensors = read_safetensors(path)
    assert set(tensors) == {"a", "b"}
    np.testing.assert_array_equal(tensors["a"], a)
    np.testing.assert_array_equal(tensors["b"], b)
    assert tensors["a"].flags.aligned and tensors["a"].flags.writeable


def test_embeddings_are_unit_vectors_one_per_text(encoder):
    vectors = encoder.encode(["pause the music", "what is the capital of France"])
    assert vectors.shape == (2, HIDDEN) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert encoder.encode([]).shape == (0, HIDDEN)


def test_padding_in_a_batch_changes_nothing(encoder):
    texts = ["stop", "could you turn the volume down a little bit for me please"]
    together = encoder.encode(texts)
    alone = np.concatenate([encoder.encode([t]) for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_paraphrases_are_nearer_than_other_topics(encoder):
    anchor, paraphrase, other = encoder.encode(
        ["turn the volume down", "make it quieter please", "who wrote Pride and Prejudice"])
    assert anchor @ paraphrase > 0.5 > 0.1 > anchor @ other
