"""Drafted tokens in the browser's Whisper decoder (web/voxline/whisper.js, "Drafts"), on the real Whisper tiny.en
model, run by node as `voxline bench readings` runs it: a decoder run that also checks the tokens that probably come
next must give the transcript that one run per token gives, in fewer runs; drafts from a partial decode of the same
utterance (as the ASR worker passes them) must cut the final decode's runs further."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from voxline.bench.readings import _clip, decode
from voxline.intents import builtin_grammar, normalize

SAID = [("turn off the kitchen lights", "hibari"), ("set a timer for ten minutes", "espeak-gb"),
        ("what is the capital of spain", "hibari"), ("turn the volume down", "espeak-us-f3")]


def _clips(tmp_path: Path) -> list[Path]:
    paths = []
    for i, (text, voice) in enumerate(SAID):
        paths.append(tmp_path / f"{i}.f32")
        _clip(text, voice, seed=i).astype(np.float32).tofile(paths[-1])
    return paths


def test_drafted_tokens_give_the_same_words_in_fewer_decoder_runs(tmp_path):
    out = decode(_clips(tmp_path), {"drafts": {}, "one-token-runs": {"draftTokens": 0},
                                    "after-a-partial": {"partialFirst": 0.7}}, builtin_grammar())
    drafted, single, hinted = out["drafts"], out["one-token-runs"], out["after-a-partial"]
    for (text, voice), now, before, later in zip(SAID, drafted, single, hinted):
        # the same words (a near tie of case or punctuation may differ: int8 activations share one scale per run)
        assert normalize(now["text"]) == normalize(before["text"]) == normalize(later["text"]), (text, voice)
        assert (now["command"] or {}).get("text", "").lower() == (before["command"] or {}).get("text", "").lower()
        # one run per token and end of text without drafts; with them, the tokens a run's drafts held are kept
        assert before["runs"] == len(before["ids"]) + 1 and before["drafted"] == 0
        assert now["runs"] + now["kept"] == len(now["ids"]) + 1, (text, now)
    runs = {name: [r["runs"] for r in rows] for name, rows in out.items()}
    assert sum(runs["drafts"]) < sum(runs["one-token-runs"]), runs
    # a partial's tokens draft much of the final decode: fewer runs still, at most 60 % of one token per run
    assert sum(runs["after-a-partial"]) < sum(runs["drafts"]), runs
    assert sum(runs["after-a-partial"]) <= 0.6 * sum(runs["one-token-runs"]), runs
