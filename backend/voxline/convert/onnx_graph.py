"""A small builder for ONNX graphs written node by node (the converters' shared tool)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEFAULT_OPSET = 17  # LayerNormalization needs 17; kept low for onnxruntime-web.


class GraphBuilder:
    """Accumulates nodes and initializers; every generated name comes from a counter, never from id() or time."""

    def __init__(self, opset: int = DEFAULT_OPSET) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()
        self._counter = 0
        self._consts: dict[tuple, str] = {}

    def _fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{hint}_{self._counter}"

    def weight(self, name: str, array: np.ndarray) -> str:
        if name in self._names:
            raise ValueError(f"duplicate initializer {name}")
        self._names.add(name)
        # np.array, not np.ascontiguousarray: the latter turns 0-d scalars into shape [1].
        self.initializers.append(numpy_helper.from_array(np.array(array, order="C"), name))
        return name

    def half_weight(self, name: str, array: np.ndarray) -> str:
        """A float32 weight whose values are all float16 numbers (CTranslate2 stores Whisper in float16), kept as
        float16 and cast back in the graph: half the bytes, the same float32 values (a session with constant folding
        folds the Cast once; the browser's, whose optimizer is off, casts at each run: `voxline.convert.optimize`).
        Refuses an array float16 cannot hold exactly."""
        full = np.asarray(array, dtype=np.float32)
        half = full.astype(np.float16)
        if not np.array_equal(half.astype(np.float32), full):
            raise ValueError(f"{name} is not exactly representable in float16; store it with weight()")
        return self.op("Cast", [self.weight(f"{name}/float16", half)], to=TensorProto.FLOAT, name=name)

    def const(self, value: Sequence[int | float] | int | float, dtype=np.int64) -> str:
        """A small shared constant (shape vectors, scalars); identical values reuse one initializer."""
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            self._consts[key] = self.weight(self._fresh("const"), array)
        return self._consts[key]

    def op(self, op_type: str, inputs: Sequence[str], n_out: int = 1, name: str | None = None, **attrs):
        """Append one node; returns its output name (or tuple of names when n_out > 1)."""
        node_name = name or self._fresh(op_type)
        outputs = [f"{node_name}:{i}" if n_out > 1 else node_name for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, name=node_name, **attrs))
        return outputs[0] if n_out == 1 else tuple(outputs)

    def model(self, inputs, outputs, doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "main", inputs, outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="voxline")
        model.ir_version = 8  # readable by every onnxruntime-web release of the last years
        model.doc_string = doc
        onnx.checker.check_model(model)
        return model
