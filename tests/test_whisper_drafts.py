"""Drafted tokens in the browser's Whisper decoder (web/voxline/whisper.js, "Drafts"), on the real Whisper tiny.en
model, run by node as `voxline bench readings` runs it: with the tokens of a partial decode of the same utterance
(as the ASR worker passes them), the final decode checks several tokens per decoder run and must give the words
that one run per token gives, in fewer runs; without them it is the decode it always was."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from voxline.bench.readings import _clip, decode
from voxline.intents import builtin_grammar, normalize

SAID = [("turn off the kitchen lights", "hibari"), ("set a timer for ten minutes", "espeak-gb"),
        ("what is the capital of spain", "hibari"), ("how many legs does a spider have", "espeak-us-f3")]


def test_a_partials_tokens_give_the_same_words_in_fewer_decoder_runs(tmp_path):
    clips = []
    for i, (text, voice) in enumerate(SAID):
        clips.append(tmp_path / f"{i}.f32")
        _clip(text, voice, seed=i).astype(np.float32).tofile(clips[-1])
    out = decode(clips, {"one-token-runs": {"draftTokens": 0}, "no-partial": {},
                         "after-a-partial": {"partialFirst": 0.7}}, builtin_grammar())
    for (text, voice), single, alone, hinted in zip(SAID, *out.values()):
        # nothing to draft from: the same decode, token for token, one run per token and the end of text
        assert alone["ids"] == single["ids"] and alone["runs"] == single["runs"] == len(single["ids"]) + 1
        assert alone["drafted"] == single["drafted"] == 0
        # the same words (a near tie of case or punctuation may differ: int8 activations share one scale per run)
        assert normalize(hinted["text"]) == normalize(single["text"]), (text, voice, hinted["text"], single["text"])
        # each run yields the drafted tokens it kept and one token of its own (or the end of text)
        assert hinted["runs"] + hinted["kept"] == len(hinted["ids"]) + 1, (text, hinted)
        assert hinted["runs"] <= single["runs"], (text, voice)
    runs = {name: [r["runs"] for r in rows] for name, rows in out.items()}
    assert sum(runs["after-a-partial"]) < sum(runs["one-token-runs"]), runs
