"""The encoder's silent tail in the browser's Whisper (web/voxline/whisper.js, "The encoder's silent tail"), on the
real Whisper tiny.en model, run by node as `voxline bench readings` runs it: a command in the smallest window goes
through the encoder only as far as its audio and the margin, and is heard as the whole window hears it; a longer
utterance, whose window is larger, runs whole."""

from __future__ import annotations

import math

import numpy as np

from voxline.bench.readings import _clip, decode
from voxline.convert.whisper_onnx import SAMPLE_RATE, SAMPLES_PER_POSITION, TAIL_MARGIN_POSITIONS
from voxline.intents import builtin_grammar, normalize

SAID = [("turn off the kitchen lights", "hibari"), ("pause the music", "espeak-gb"),
        ("set a timer for ten minutes", "espeak-us-f3"), ("what is the capital of spain", "hibari")]
LONG = ("could you tell me how many legs a spider has and whether they are insects or not", "hibari")


def test_a_command_is_encoded_as_far_as_its_audio_and_heard_as_the_whole_window_hears_it(tmp_path):
    clips, lengths = [], []
    for i, (text, voice) in enumerate([*SAID, LONG]):
        clip = _clip(text, voice, seed=i).astype(np.float32)
        clips.append(tmp_path / f"{i}.f32")
        clip.tofile(clips[-1])
        lengths.append(clip.size)
    out = decode(clips, {"tail": {}, "whole": {"encoderTail": False}}, builtin_grammar())
    heard_alike = 0
    for (text, voice), length, tail, whole in zip(SAID, lengths, out["tail"], out["whole"]):
        assert whole["windowSecs"] == tail["windowSecs"] == 8 and whole["encodedSecs"] == 8
        # the page's margin (settings.js encoderTailMarginSecs) is the reference runtime's
        want = (math.ceil(length / SAMPLES_PER_POSITION) + TAIL_MARGIN_POSITIONS) * SAMPLES_PER_POSITION / SAMPLE_RATE
        assert tail["encodedSecs"] == min(8, want) < 8, (text, tail["encodedSecs"])
        heard_alike += normalize(tail["text"]) == normalize(whole["text"])
    # one near tie may go the other way (the features are gain-normalised, the tail approximated)
    assert heard_alike >= len(SAID) - 1, [(t["text"], w["text"]) for t, w in zip(out["tail"], out["whole"])]
    long_tail, long_whole = out["tail"][-1], out["whole"][-1]
    assert long_tail["windowSecs"] > 8 and long_tail["encodedSecs"] == long_tail["windowSecs"]
    assert long_tail["ids"] == long_whole["ids"]  # a larger window runs whole: the same decode
