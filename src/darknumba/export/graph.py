"""A small helper that assembles an ONNX graph: nodes with generated tensor names, float32 and
int64 constants as initializers, and the model with its opset and IR version."""
from __future__ import annotations

import numpy as np

# Opset 13 has every operator the exporter writes (Resize with an empty roi, Slice and
# ReduceSum taking their axes as inputs, Range) and is read by onnxruntime and OpenCV DNN.
OPSET = 13
# onnxruntime refuses models whose IR version is newer than it knows: the onnx package writes
# its own newest by default, so the version is set explicitly.
IR_VERSION = 10


def onnx_module():
    try:
        import onnx
    except ImportError:
        from . import ExportError
        raise ExportError("writing ONNX needs the onnx package: pip install darknumba[onnx] "
                          "(or pip install onnx)") from None
    return onnx


class Graph:
    """Nodes and initializers of one graph; every helper returns its output tensor's name."""

    def __init__(self):
        self.onnx = onnx_module()
        self.nodes = []
        self.initializers = []
        self._count = 0
        self._consts = {}

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, value, hint: str = "c", dtype=np.float32) -> str:
        """An initializer holding `value` (float32 unless dtype says otherwise); small
        constants with the same value and type are shared."""
        arr = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        key = None
        if arr.size <= 16:
            key = (arr.dtype.str, arr.shape, arr.tobytes())
            if key in self._consts:
                return self._consts[key]
        name = self.fresh(hint)
        self.initializers.append(self.onnx.numpy_helper.from_array(arr, name))
        if key is not None:
            self._consts[key] = name
        return name

    def op(self, op_type: str, inputs, hint: str | None = None, name: str | None = None,
           **attrs) -> str:
        """One node with a single output, called `name` or a fresh name from `hint`."""
        out = name or self.fresh(hint or op_type.lower())
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    # -- the operators written in more than one place ----------------------------------
    def scale_shift(self, x: str, scale: float, shift: float = 0.0) -> str:
        """x * scale + shift, leaving out a factor of 1 and a shift of 0."""
        if scale != 1.0:
            x = self.op("Mul", [x, self.const(scale)])
        if shift != 0.0:
            x = self.op("Add", [x, self.const(shift)])
        return x

    def slice(self, x: str, start: int, end: int, axis: int) -> str:
        return self.op("Slice", [x, self.const([start], dtype=np.int64),
                                 self.const([end], dtype=np.int64),
                                 self.const([axis], dtype=np.int64)])

    def reshape(self, x: str, shape) -> str:
        return self.op("Reshape", [x, self.const(shape, dtype=np.int64)])

    def dim(self, x: str, axis: int) -> str:
        """A 1-element int64 tensor: x's size along `axis` (for graphs of dynamic shape)."""
        return self.slice(self.op("Shape", [x]), axis, axis + 1, 0)

    def model(self, inputs, outputs, doc: str = "", metadata: dict | None = None):
        onnx = self.onnx
        graph = onnx.helper.make_graph(self.nodes, "darknumba", inputs, outputs,
                                       self.initializers)
        m = onnx.helper.make_model(graph, producer_name="darknumba", doc_string=doc,
                                   opset_imports=[onnx.helper.make_opsetid("", OPSET)])
        m.ir_version = IR_VERSION
        if metadata:
            onnx.helper.set_model_props(m, {k: str(v) for k, v in metadata.items()})
        return m
