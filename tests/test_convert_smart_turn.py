"""smart-turn with the front end in the graph agrees with pipecat's own numpy features fed to the original model."""

from __future__ import annotations

import importlib.util
import zipfile

import numpy as np
import onnxruntime as ort
import pytest

from voxline import paths
from voxline.convert.smart_turn import OUTPUT_FILE, WINDOW_SAMPLES

PIPECAT_WHEEL = "pipecat_ai-1.14.0-py3-none-any.whl"
FEATURES_MEMBER = "pipecat/audio/turn/smart_turn/_whisper_features.py"
CLASSIFIER_MEMBER = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"


@pytest.fixture(scope="module")
def pipecat(tmp_path_factory):
    """pipecat's numpy feature code and the original classifier, straight out of the pinned wheel."""
    wheel = paths.downloads_dir() / PIPECAT_WHEEL
    if not wheel.exists():
        pytest.fail(f"{wheel} missing: run `voxline models fetch`")
    folder = tmp_path_factory.mktemp("pipecat")
    with zipfile.ZipFile(wheel) as zf:
        (folder / "features.py").write_bytes(zf.read(FEATURES_MEMBER))
        (folder / "classifier.onnx").write_bytes(zf.read(CLASSIFIER_MEMBER))
    spec = importlib.util.spec_from_file_location("pipecat_features", folder / "features.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, ort.InferenceSession(str(folder / "classifier.onnx"))


@pytest.fixture(scope="module")
def merged(model_dir):
    return ort.InferenceSession(str(model_dir("smart-turn-v3.2") / OUTPUT_FILE))


def _speech_like(seed: int, voiced_secs: float) -> np.ndarray:
    """Front-padded 8 s window: silence, then harmonic bursts with a syllable rhythm (not speech, but not flat)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(voiced_secs * 16000)) / 16000
    f0 = 120 + 30 * np.sin(2 * np.pi * 0.5 * t)
    voiced = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / 16000) / k for k in range(1, 6))
    voiced *= 0.5 * (1 + np.sign(np.sin(2 * np.pi * 4 * t)))  # syllables
    voiced = 0.2 * voiced + 0.01 * rng.standard_normal(t.size)
    window = np.zeros(WINDOW_SAMPLES, np.float32)
    window[-voiced.size:] = voiced
    return window


@pytest.mark.parametrize("seed,voiced_secs", [(0, 1.5), (1, 3.0), (2, 7.9)])
def test_graph_front_end_matches_pipecat(pipecat, merged, seed, voiced_secs):
    features_module, classifier = pipecat
    samples = _speech_like(seed, voiced_secs)
    features = features_module.compute_whisper_log_mel_features(samples, do_normalize=True)[None]
    expected = classifier.run(None, {"input_features": features})[0]
    got = merged.run(None, {"samples": samples[None]})[0]
    assert got.shape == expected.shape == (1, 1)
    # The quantised classifier amplifies feature noise (MODELS.md): 0.01 apart on one CPU, 0.05 on an AMD EPYC
    # (other int8 kernels); 0.1 is still well inside the margin the page trusts it by (turnCompleteProb 0.7).
    assert abs(float(got[0, 0]) - float(expected[0, 0])) < 0.1


def test_merged_model_takes_samples_only(merged):
    (only,) = merged.get_inputs()
    assert (only.name, only.shape) == ("samples", [1, WINDOW_SAMPLES])
    assert [o.name for o in merged.get_outputs()] == ["logits"]
