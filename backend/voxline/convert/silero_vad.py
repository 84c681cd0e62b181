"""Silero VAD v5 for the browser: the 16 kHz model alone, optimized when built.

The published graph holds two models behind one `If` on its `sr` input (`sr == 16000`: the 16 kHz model, else the
8 kHz one), each with its own weights as `Constant` nodes. The page only ever runs 16 kHz frames (the capture
resamples to 16 kHz), yet every visit downloaded, hashed and optimized both: 2.33 MB, and creating the session took
~160-240 ms in onnxruntime-web (node, one thread; most of it the optimizer, wasm compiled on first use, over both
branches). `build` keeps the 16 kHz branch as the graph itself (inputs `input` [1, 576] and `state` [2, 1, 128];
`sr` is gone, since the graph no longer reads it), and `voxline models fetch` then runs onnxruntime's optimizer on it
with constant folding (the manifest's `constant_folding`): Silero keeps its weights as `Constant` nodes and feeds
some through shape arithmetic, which only folding turns into plain initializers; without it the per-frame run is
slower (0.68 against 0.52 ms). Built this way the session is created with the browser's optimizer off in ~20-45 ms,
and computes exactly what the published graph computes at 16 kHz (tests/test_convert_silero_vad.py). The file is
1.8 MB (folding writes the LSTM's weights into both branches of an inner `If` that torch's export left), 0.96 MB
brotli'd against 1.78 MB for the published one.

Output of `build(onnx_path, out_dir)`: `silero_vad_v5_16k.onnx`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import onnx
from onnx import helper, numpy_helper

OUTPUT_FILE = "silero_vad_v5_16k.onnx"
SAMPLE_RATE_HZ = 16000
KEPT_INPUTS = ("input", "state")
OUTPUTS = ("output", "stateN")


def sixteen_khz_graph(published: onnx.ModelProto) -> onnx.ModelProto:
    """The published model's 16 kHz branch as a model of its own; refuses a graph laid out otherwise."""
    graph = published.graph
    by_output = {o: n for n in graph.node for o in n.output}
    branch_node = next((n for n in graph.node if n.op_type == "If"), None)
    if branch_node is None or [i.name for i in graph.input] != ["input", "state", "sr"]:
        raise ValueError("expected Silero VAD v5's graph: inputs input, state, sr and one If on the sample rate")
    condition = by_output.get(branch_node.input[0])
    rate = _sample_rate_compared(condition, by_output) if condition is not None else None
    if rate != SAMPLE_RATE_HZ:
        raise ValueError(f"expected the If to test sr == {SAMPLE_RATE_HZ}, it tests {rate!r}")
    branch = next(a.g for a in branch_node.attribute if a.name == "then_branch")
    produced = {o for n in branch.node for o in n.output}
    outer = {i for n in branch.node for i in n.input if i} - produced - {t.name for t in branch.initializer}
    if not outer <= set(KEPT_INPUTS):
        raise ValueError(f"the 16 kHz branch reads {sorted(outer - set(KEPT_INPUTS))} from outside it")
    nodes = list(branch.node) + [helper.make_node("Identity", [src.name], [dst], name=f"{dst}_out")
                                 for src, dst in zip(branch.output, OUTPUTS, strict=True)]
    inputs = [i for i in graph.input if i.name in KEPT_INPUTS]
    outputs = [next(o for o in graph.output if o.name == name) for name in OUTPUTS]
    model = helper.make_model(
        helper.make_graph(nodes, "silero_vad_v5_16k", inputs, outputs, list(branch.initializer),
                          value_info=list(branch.value_info)),
        opset_imports=list(published.opset_import), producer_name="voxline")
    model.ir_version = published.ir_version
    model.doc_string = "Silero VAD v5, its 16 kHz model alone (512-sample frames plus 64 of context)."
    onnx.checker.check_model(model)
    return model


def _sample_rate_compared(node: onnx.NodeProto, by_output: dict[str, onnx.NodeProto]) -> int | None:
    """The constant an `Equal(sr, constant)` node compares `sr` with, else None."""
    if node.op_type != "Equal" or "sr" not in node.input:
        return None
    other = next(i for i in node.input if i != "sr")
    const = by_output.get(other)
    if const is None or const.op_type != "Constant":
        return None
    return int(numpy_helper.to_array(const.attribute[0].t))


def build(published_path: Path, out_dir: Path, log: Callable[[str], None] = print) -> list[Path]:
    """Write `silero_vad_v5_16k.onnx` into `out_dir` (the optimizer runs after, as the manifest says)."""
    started = time.perf_counter()
    out = Path(out_dir) / OUTPUT_FILE
    onnx.save(sixteen_khz_graph(onnx.load(str(published_path))), str(out))
    log(f"{OUTPUT_FILE}: {out.stat().st_size / 1e6:.1f} MB ({time.perf_counter() - started:.1f} s)")
    return [out]
