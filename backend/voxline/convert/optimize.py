"""onnxruntime's graph optimizer, run once when a browser model is built instead of in every browser that loads it.

Creating an onnxruntime-web session optimizes the graph first (fusions such as MatMulInteger + its scale into
MatMulIntegerToFloat, or DynamicQuantizeLinear + MatMulInteger into DynamicQuantizeMatMul). In the browser that is
about half of a session's start: the optimizer's passes are wasm compiled and run on first use in each worker
(measured in node with onnxruntime-web 1.30, one thread, Whisper tiny's encoder and decoder: ~450-550 ms to create
both with `all`, ~250-290 ms with the graph optimized here and the browser's optimizer off). So the server's build
writes the optimized graph (`optimize_file`), the browser manifest says so (`graph_optimization`) and the page
creates the session with its optimizer off (`web/voxline/ort.js`).

What is kept out, and why:
- **Constant folding.** It would store the float32 results of what the graphs compute from smaller initializers (the
  float16 weights of `GraphBuilder.half_weight`, the STFT basis of `whisper_onnx.dft_basis_node`), undoing those
  smaller files; those few nodes run at each inference instead: +2.3 ms on a 2 s encoder run (43.4 → 45.7 ms, node,
  one thread; the decoder's steps and smart-turn's run are unchanged within noise).
  A model whose manifest entry says `constant_folding` is folded all the same: Silero VAD (`silero_vad.py`), which
  keeps its weights as `Constant` nodes fed through shape arithmetic, has no such tables, and runs slower unfolded.
- **The layout level** (`all`): it rewrites for the instruction set of the machine that runs it (NCHWc blocking).
  The `extended` graphs built here compute, in onnxruntime-web with its optimizer off, exactly what the unoptimized
  graphs compute there with `all` (cross K/V, logits, smart-turn's logit: bit for bit). Should a machine's onnxruntime
  optimize differently, the pinned digests stop the build with a DigestMismatch rather than install it.

The optimized graph uses operators of onnxruntime's `com.microsoft` domain, which onnxruntime-web's wasm build runs;
it stays a plain ONNX file that onnxruntime in Python loads as well. The output is deterministic (a pinned digest).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from voxline.models.manifest import GRAPH_OPTIMIZATION_LEVELS

KEPT_OUT = ["ConstantFolding"]
"""Optimizers not run unless asked for (see the module docstring)."""


def optimize_file(path: Path, level: str, fold_constants: bool = False) -> None:
    """Rewrite the ONNX file at `path` with its graph optimized by onnxruntime's CPU provider at `level`, constant
    folding included only when `fold_constants`."""
    import onnxruntime as ort

    if level not in GRAPH_OPTIMIZATION_LEVELS:
        raise ValueError(f"unknown graph optimization level {level!r} (known: {', '.join(GRAPH_OPTIMIZATION_LEVELS)})")
    path = Path(path)
    options = ort.SessionOptions()
    options.graph_optimization_level = {
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    }[level]
    options.intra_op_num_threads = 1
    options.log_severity_level = 3  # the optimizer's notes on nodes it leaves alone are not problems
    fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=path.parent)
    os.close(fd)
    try:
        options.optimized_model_filepath = tmp
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                             disabled_optimizers=[] if fold_constants else KEPT_OUT)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
