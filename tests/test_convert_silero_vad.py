"""The browser's Silero VAD (its 16 kHz model alone, optimized when built) computes what the published graph does."""

from __future__ import annotations

import shutil
import subprocess
import wave

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from voxline.convert.silero_vad import OUTPUT_FILE, sixteen_khz_graph

FRAME = 512
CONTEXT = 64
SR = 16000


def _session(path, level):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def published(model_dir):
    return model_dir("silero-vad-v5") / "silero_vad_v5.onnx"


@pytest.fixture(scope="module")
def speech(tmp_path_factory) -> np.ndarray:
    """A sentence of espeak-ng speech at 16 kHz between stretches of silence and of faint noise."""
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is required to synthesise test speech (apt-get install {tool})")
    folder = tmp_path_factory.mktemp("vad")
    raw, out = folder / "raw.wav", folder / "clip.wav"
    subprocess.run(["espeak-ng", "-v", "en-gb", "-w", str(raw), "stop. turn the volume down, please"], check=True,
                   capture_output=True)
    subprocess.run(["sox", str(raw), "-r", str(SR), "-c", "1", "-b", "16", str(out)], check=True, capture_output=True)
    with wave.open(str(out)) as w:
        voiced = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    noise = 0.003 * np.random.default_rng(3).standard_normal(SR).astype(np.float32)
    return np.concatenate([np.zeros(SR // 2, np.float32), voiced, noise, voiced[: SR // 2]])


def _probabilities(session, samples: np.ndarray, with_rate: bool) -> tuple[np.ndarray, np.ndarray]:
    """Run frame by frame as the page does (64 samples of the previous frame in front, the state carried)."""
    state = np.zeros((2, 1, 128), np.float32)
    context = np.zeros(CONTEXT, np.float32)
    probs = []
    for start in range(0, samples.size - FRAME + 1, FRAME):
        frame = samples[start:start + FRAME]
        feed = {"input": np.concatenate([context, frame])[None], "state": state}
        if with_rate:
            feed["sr"] = np.array(SR, np.int64)
        out, state = session.run(None, feed)
        probs.append(out[0, 0])
        context = frame[-CONTEXT:]
    return np.array(probs), state


def test_the_built_model_computes_what_the_published_one_does_at_16_khz(model_dir, published, speech):
    built = _session(model_dir("silero-vad-v5-16k") / OUTPUT_FILE, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    source = _session(published, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)  # as the page created it before
    expected, expected_state = _probabilities(source, speech, with_rate=True)
    got, got_state = _probabilities(built, speech, with_rate=False)
    assert expected.max() > 0.9 and expected.min() < 0.1  # the clip has speech and silence in it
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got_state, expected_state)


def test_the_built_model_is_the_16_khz_model_alone_and_optimized(model_dir, published):
    model = onnx.load(str(model_dir("silero-vad-v5-16k") / OUTPUT_FILE))
    assert [i.name for i in model.graph.input] == ["input", "state"]
    assert [o.name for o in model.graph.output] == ["output", "stateN"]
    ops = {n.op_type for n in model.graph.node}
    assert "Constant" not in ops and "FusedConv" in ops  # folded and fused when built, not in every browser
    assert (model_dir("silero-vad-v5-16k") / OUTPUT_FILE).stat().st_size < published.stat().st_size


def test_a_graph_that_tests_another_rate_is_refused(published):
    model = onnx.load(str(published))
    rate = next(n for n in model.graph.node if n.op_type == "Constant")
    rate.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(8000, np.int64)))
    with pytest.raises(ValueError, match="sr == 16000"):
        sixteen_khz_graph(model)


def test_a_graph_of_other_inputs_is_refused(published):
    model = onnx.load(str(published))
    del model.graph.input[2]
    with pytest.raises(ValueError, match="inputs input, state, sr"):
        sixteen_khz_graph(model)
