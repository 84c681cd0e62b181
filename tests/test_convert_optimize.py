"""Browser models optimized when built (voxline/convert/optimize.py): same outputs, deterministic, no folded tables."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from voxline.convert.optimize import optimize_file
from voxline.convert.onnx_graph import GraphBuilder
from voxline.convert.whisper_onnx import ENCODER_FILE, quantize
from voxline.models.manifest import load_manifest
from voxline.server.app import browser_manifest


def _small_int8_model(tmp_path):
    """y = gelu(x · W1) · W2 with float16-stored W1 (cast in the graph), dynamically quantized as Whisper is."""
    rng = np.random.default_rng(7)
    g = GraphBuilder()
    w1 = g.half_weight("w1", rng.normal(size=(16, 32)).astype(np.float16).astype(np.float32))
    w2 = g.weight("w2", rng.normal(size=(32, 8)).astype(np.float32))
    h = g.op("MatMul", ["x", w1], name="h")
    erf = g.op("Erf", [g.op("Div", [h, g.const(np.sqrt(2.0), np.float32)])])
    gelu = g.op("Mul", [g.op("Mul", [h, g.const(0.5, np.float32)]), g.op("Add", [erf, g.const(1.0, np.float32)])])
    g.op("MatMul", [gelu, w2], name="y")
    fp32 = g.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 16])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8])], doc="test")
    path = tmp_path / "small.onnx"
    quantize(fp32, tmp_path, path)
    return path


def _run(path, x, level):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_optimized_graph_computes_the_same_and_keeps_its_half_weights(tmp_path):
    path = _small_int8_model(tmp_path)
    x = np.random.default_rng(1).normal(size=(5, 16)).astype(np.float32)
    before = _run(path, x, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    optimize_file(path, "extended")
    model = onnx.load(str(path))
    ops = {n.op_type for n in model.graph.node}
    # Fused by onnxruntime's extended level (the work the browser no longer does) ...
    assert not {"MatMulInteger", "DynamicQuantizeLinear"} <= ops and ops & {"DynamicQuantizeMatMul", "MatMulIntegerToFloat"}
    # ... but constant folding stayed off: the float16 weight is still float16, cast in the graph.
    assert any(t.data_type == TensorProto.FLOAT16 for t in model.graph.initializer)
    assert "Cast" in ops
    after = _run(path, x, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)  # as the browser creates it
    np.testing.assert_array_equal(after, before)


def test_optimizing_is_deterministic(tmp_path):
    first, second = (tmp_path / "a", tmp_path / "b")
    for folder in (first, second):
        folder.mkdir()
        optimize_file(_small_int8_model(folder), "extended")
    assert hashlib.sha256((first / "small.onnx").read_bytes()).digest() == \
        hashlib.sha256((second / "small.onnx").read_bytes()).digest()


def test_unknown_level_is_refused_and_the_file_kept(tmp_path):
    path = _small_int8_model(tmp_path)
    original = path.read_bytes()
    with pytest.raises(ValueError, match="unknown graph optimization level 'all'"):
        optimize_file(path, "all")
    assert path.read_bytes() == original
    assert list(tmp_path.glob("tmp*.onnx")) == []


def test_manifest_refuses_an_unknown_level(tmp_path):
    raw = json.loads(load_manifest().path.read_text())
    raw["models"][0]["graph_optimization"] = "all"
    bad = tmp_path / "manifest.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="unknown graph_optimization 'all'"):
        load_manifest(bad)


def test_the_page_learns_which_models_were_optimized_when_built():
    served = {m["role"]: m["graph_optimization"] for m in browser_manifest(load_manifest())["models"]}
    # Every browser model's session starts with the browser's optimizer off (Silero VAD's graph has its constants
    # folded too: see convert/silero_vad.py).
    assert served == {"browser-asr": "extended", "browser-turn": "extended", "browser-vad": "extended"}


def test_the_built_encoder_is_the_optimized_graph(model_dir):
    model = onnx.load(str(model_dir("whisper-tiny-en-onnx") / ENCODER_FILE))
    ops = {n.op_type for n in model.graph.node}
    assert {"MatMulIntegerToFloat", "DynamicQuantizeMatMul"} <= ops and "MatMulInteger" not in ops
    assert any(t.data_type == TensorProto.FLOAT16 for t in model.graph.initializer)
