"""The detection heads as ONNX nodes: [yolo] (pjreddie's and AlexeyAB's) and [region].

Raw: the layer's output as Darknet's forward pass leaves it, NCHW with channels
[anchor][x, y, w, h, objectness, classes...]: logistic on x, y, objectness and classes (none
under new_coords), then x, y <- scale_x_y * x - (scale_x_y - 1) / 2 for AlexeyAB's [yolo];
[region] applies a softmax over each anchor's classes (softmax=1) or the logistic.

Decoded ([yolo] only): one (batch, boxes, 5 + classes) tensor, a row per anchor and cell in
Darknet's order (get_yolo_detections: cell by cell, row by row, the anchors of a cell
together), heads after one another: centre x, centre y, width, height in
pixels of the network input (get_yolo_box times the input size), objectness, then each class's
score. Darknet's probability of class k is objectness * score_k, kept where objectness >
thresh (get_yolo_detections); NMS is left to the caller.
"""
from __future__ import annotations

import numpy as np

from . import ExportError


def _channel_vector(values, n_per_anchor, n):
    """A (1, n * entries, 1, 1) constant repeating one anchor's per-entry values."""
    return np.tile(np.asarray(values, np.float32), n).reshape(1, n * n_per_anchor, 1, 1)


def yolo_raw(g, l, x: str) -> str:
    """forward_yolo_layer's activations on x (the previous layer's output)."""
    entries = 4 + 1 + l.classes
    new_coords = bool(getattr(l, "new_coords", 0))
    if not new_coords:
        m = np.ones(entries, np.float32)
        m[2:4] = 0.0                                     # w and h stay raw
        sig = g.op("Mul", [g.op("Sigmoid", [x]), g.const(_channel_vector(m, entries, l.n))])
        keep = g.op("Mul", [x, g.const(_channel_vector(1.0 - m, entries, l.n))])
        x = g.op("Add", [sig, keep])
    s = float(np.float32(getattr(l, "scale_x_y", 1.0)))
    if s != 1.0:
        scale = np.ones(entries, np.float32)
        shift = np.zeros(entries, np.float32)
        scale[:2] = s
        shift[:2] = np.float32(-0.5 * (s - 1.0))
        x = g.op("Add", [g.op("Mul", [x, g.const(_channel_vector(scale, entries, l.n))]),
                         g.const(_channel_vector(shift, entries, l.n))])
    return x


def region_raw(g, l, x: str, where: str) -> str:
    """forward_region_layer's activations: logistic on x, y and objectness; the classes get a
    softmax per anchor and cell (softmax=1) or the logistic."""
    if l.tree is not None or l.background:
        raise ExportError(f"{where}: [region] with tree= or background=1 is not exportable")
    entries = l.coords + 1 + l.classes
    m = np.zeros(entries, np.float32)
    m[[0, 1, l.coords]] = 1.0
    if not l.softmax:
        m[l.coords + 1:] = 1.0
    sig = g.op("Mul", [g.op("Sigmoid", [x]), g.const(_channel_vector(m, entries, l.n))])
    out = g.op("Add", [sig, g.op("Mul", [x, g.const(_channel_vector(1.0 - m, entries, l.n))])])
    if not l.softmax:
        return out
    per_anchor = g.reshape(out, [0, l.n, entries, -1])             # B, n, entries, h*w
    head = g.slice(per_anchor, 0, l.coords + 1, 2)
    classes = g.op("Softmax", [g.slice(per_anchor, l.coords + 1, entries, 2)], axis=2)
    joined = g.op("Concat", [head, classes], axis=2)
    return g.op("Reshape", [joined, g.op("Shape", [x])])


class Grid:
    """The cell indices of a head and the input size, as constants (static shapes) or computed
    from the tensors' shapes (dynamic)."""

    def __init__(self, g, net_input: str, dynamic: bool, net_w: int, net_h: int):
        self.g, self.net_input, self.dynamic = g, net_input, dynamic
        self.net_w, self.net_h = net_w, net_h

    def _float_dim(self, x, axis):
        return self.g.op("Cast", [self.g.dim(x, axis)], to=1)          # 1 = FLOAT

    def cells(self, x: str, lw: int, lh: int):
        """(column, row) of every cell, flattened row by row, each (1, 1, 1, h*w); and the
        pixels per cell across and down."""
        g = self.g
        if not self.dynamic:
            idx = np.arange(lw * lh, dtype=np.float32)
            col, row = idx % lw, idx // lw
            return (g.const(col.reshape(1, 1, 1, -1)), g.const(row.reshape(1, 1, 1, -1)),
                    g.const(np.float32(self.net_w / lw)), g.const(np.float32(self.net_h / lh)))
        fw, fh = self._float_dim(x, 3), self._float_dim(x, 2)
        count = g.op("Squeeze", [g.op("Mul", [fw, fh]), g.const([0], dtype=np.int64)])
        idx = g.op("Range", [g.const(np.float32(0.0)), count, g.const(np.float32(1.0))])
        row = g.op("Floor", [g.op("Div", [idx, fw])])
        col = g.op("Sub", [idx, g.op("Mul", [row, fw])])
        col, row = (g.reshape(v, [1, 1, 1, -1]) for v in (col, row))
        step_x = g.op("Div", [self._float_dim(self.net_input, 3), fw])
        step_y = g.op("Div", [self._float_dim(self.net_input, 2), fh])
        return col, row, step_x, step_y


def yolo_decoded(g, l, y: str, grid: Grid) -> str:
    """(batch, n*h*w, 5 + classes) rows from the activated head y (see the module docstring)."""
    entries = 4 + 1 + l.classes
    t = g.reshape(y, [0, l.n, entries, -1])                           # B, n, entries, h*w
    col, row, step_x, step_y = grid.cells(y, l.w, l.h)
    part = [g.slice(t, k, k + 1, 2) for k in range(4)]
    bx = g.op("Mul", [g.op("Add", [part[0], col]), step_x])
    by = g.op("Mul", [g.op("Add", [part[1], row]), step_y])
    anchors = np.asarray(l.biases, np.float32).reshape(-1, 2)[np.asarray(l.mask)]
    aw, ah = (anchors[:, k].reshape(1, l.n, 1, 1) for k in (0, 1))
    if getattr(l, "new_coords", 0):             # w = 4 t^2 anchor (the conv is logistic)
        bw = g.op("Mul", [g.op("Mul", [part[2], part[2]]), g.const(4.0 * aw)])
        bh = g.op("Mul", [g.op("Mul", [part[3], part[3]]), g.const(4.0 * ah)])
    else:
        bw = g.op("Mul", [g.op("Exp", [part[2]]), g.const(aw)])
        bh = g.op("Mul", [g.op("Exp", [part[3]]), g.const(ah)])
    rows = g.op("Concat", [bx, by, bw, bh, g.slice(t, 4, entries, 2)], axis=2)
    rows = g.op("Transpose", [rows], perm=[0, 3, 1, 2])                # B, h*w, n, entries
    return g.reshape(rows, [0, -1, entries])
