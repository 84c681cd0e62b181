"""smart-turn v3.2 with its log-mel front end inside the graph, so the browser passes raw samples.

The classifier out of the pipecat wheel takes `input_features` [1, 80, 800]: the Whisper log-mel of the last 8 s,
computed the way transformers' WhisperFeatureExtractor does it (pipecat vendors that recipe): the waveform is
first normalised to zero mean and unit variance, then reflect-padded by 200, framed by a periodic Hann STFT
(n_fft 400, hop 160), projected on 80 Slaney mel filters, log10 with a 1e-10 floor, floored at max - 8, and
scaled by (x + 4) / 4; the last of the 801 frames is dropped. This differs from faster-whisper's recipe (no
waveform normalisation, 160 zeros appended), which is why it is not the Whisper encoder's front end. The model is
very sensitive to small feature differences, so the test checks this graph against pipecat's own numpy code.

Output of `build(onnx_path, out_dir)`: `smart-turn-v3.2.onnx`, input `samples` float32 [1, 128000], output
`logits` [1, 1] (already the probability that the turn is complete).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from voxline.convert.onnx_graph import GraphBuilder
from voxline.convert.whisper_onnx import HOP_LENGTH, N_FFT, dft_basis_node, mel_filters

OUTPUT_FILE = "smart-turn-v3.2.onnx"
WINDOW_SAMPLES = 8 * 16000
N_MELS = 80
NORM_VARIANCE_EPS = 1e-7
CLASSIFIER_INPUT = "input_features"


def frontend_nodes(g: GraphBuilder, samples: str) -> str:
    """samples [1, N] → transformers-style log-mel [1, 80, N // 160], named `input_features`."""
    n_freq = N_FFT // 2 + 1
    mean = g.op("ReduceMean", [samples], keepdims=1, name="turn_frontend/mean")
    centred = g.op("Sub", [samples, mean], name="turn_frontend/centre")
    var = g.op("ReduceMean", [g.op("Mul", [centred, centred], name="turn_frontend/sq")], keepdims=1,
               name="turn_frontend/var")
    std = g.op("Sqrt", [g.op("Add", [var, g.const(NORM_VARIANCE_EPS, np.float32)], name="turn_frontend/var_eps")],
               name="turn_frontend/std")
    x = g.op("Div", [centred, std], name="turn_frontend/normalised")
    x = g.op("Pad", [x, g.const([0, N_FFT // 2, 0, N_FFT // 2])], mode="reflect", name="turn_frontend/pad_reflect")
    x = g.op("Unsqueeze", [x, g.const([1])], name="turn_frontend/unsqueeze")
    spec = g.op("Conv", [x, dft_basis_node(g, "turn_frontend")], strides=[HOP_LENGTH],
                name="turn_frontend/stft")
    power = g.op("Mul", [spec, spec], name="turn_frontend/square")
    re2 = g.op("Slice", [power, g.const([0]), g.const([n_freq]), g.const([1])], name="turn_frontend/re2")
    im2 = g.op("Slice", [power, g.const([n_freq]), g.const([2 * n_freq]), g.const([1])], name="turn_frontend/im2")
    power = g.op("Add", [re2, im2], name="turn_frontend/power")
    mel = g.op("MatMul", [g.weight("turn_frontend/mel_filters", mel_filters(N_MELS)), power], name="turn_frontend/mel")
    log = g.op("Log", [g.op("Max", [mel, g.const(1e-10, np.float32)], name="turn_frontend/clamp")],
               name="turn_frontend/log")
    log10 = g.op("Mul", [log, g.const(1.0 / math.log(10.0), np.float32)], name="turn_frontend/log10")
    # transformers drops the trailing frame before taking the max.
    log10 = g.op("Slice", [log10, g.const([0]), g.const([-1]), g.const([2])], name="turn_frontend/drop_last")
    floor = g.op("Sub", [g.op("ReduceMax", [log10], keepdims=1, name="turn_frontend/max"),
                         g.const(8.0, np.float32)], name="turn_frontend/floor")
    floored = g.op("Max", [log10, floor], name="turn_frontend/floored")
    shifted = g.op("Add", [floored, g.const(4.0, np.float32)], name="turn_frontend/shift")
    return g.op("Mul", [shifted, g.const(0.25, np.float32)], name=CLASSIFIER_INPUT)


def with_frontend(classifier: onnx.ModelProto) -> onnx.ModelProto:
    """The classifier with `samples` as its only input and the front end computing its `input_features`."""
    opset = next(o.version for o in classifier.opset_import if o.domain in ("", "ai.onnx"))
    g = GraphBuilder(opset=opset)
    frontend_nodes(g, "samples")
    graph = classifier.graph
    if [i.name for i in graph.input] != [CLASSIFIER_INPUT]:
        raise ValueError(f"expected the smart-turn classifier to take only {CLASSIFIER_INPUT!r}, "
                         f"it takes {[i.name for i in graph.input]}")
    merged = helper.make_graph(
        list(g.nodes) + list(graph.node),
        "smart_turn_with_frontend",
        [helper.make_tensor_value_info("samples", TensorProto.FLOAT, [1, WINDOW_SAMPLES])],
        list(graph.output),
        list(g.initializers) + list(graph.initializer),
        value_info=list(graph.value_info),
    )
    model = helper.make_model(merged, opset_imports=list(classifier.opset_import), producer_name="voxline")
    model.ir_version = classifier.ir_version
    model.doc_string = "smart-turn v3.2 (pipecat) with a transformers-style Whisper log-mel front end; samples in."
    onnx.checker.check_model(model)
    return model


def build(classifier_path: Path, out_dir: Path, log: Callable[[str], None] = print) -> list[Path]:
    """Write `smart-turn-v3.2.onnx` (front end + classifier) into `out_dir`."""
    started = time.perf_counter()
    model = with_frontend(onnx.load(str(classifier_path)))
    out = Path(out_dir) / OUTPUT_FILE
    onnx.save(model, str(out))
    log(f"{OUTPUT_FILE}: {out.stat().st_size / 1e6:.1f} MB ({time.perf_counter() - started:.1f} s)")
    return [out]
