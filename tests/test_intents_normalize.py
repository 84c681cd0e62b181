"""The normalisation spec, checked against the vectors the browser's implementation also reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from voxline.intents.normalize import is_cjk, normalize

VECTORS_PATH = Path(__file__).parent / "vectors" / "normalize.json"
VECTORS = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))


def test_vectors_cover_the_spec():
    assert len(VECTORS) >= 40
    assert all(set(vector) <= {"input", "output", "note"} for vector in VECTORS)
    inputs = [vector["input"] for vector in VECTORS]
    assert len(inputs) == len(set(inputs)), "duplicate vector"


@pytest.mark.parametrize("vector", VECTORS, ids=[repr(v["input"])[:40] for v in VECTORS])
def test_vector(vector):
    assert normalize(vector["input"]) == vector["output"]


@pytest.mark.parametrize("vector", VECTORS, ids=[repr(v["input"])[:40] for v in VECTORS])
def test_idempotent(vector):
    assert normalize(vector["output"]) == vector["output"]


def test_output_is_single_spaced_tokens():
    for vector in VECTORS:
        output = vector["output"]
        assert output == output.strip()
        assert "  " not in output


def test_apostrophes_join_contractions():
    assert normalize("What's") == normalize("whats") == normalize("What\u2019s") == "whats"


def test_percent_is_a_token_of_its_own():
    assert normalize("30%") == normalize("30 %") == normalize("30\uff05") == "30 %"


def test_cjk_ranges():
    assert is_cjk("灯") and is_cjk("カ") and is_cjk("〇") and is_cjk("\U00020000")
    assert not is_cjk("a") and not is_cjk("한") and not is_cjk("。")
