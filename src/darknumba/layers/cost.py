"""[cost] (Darknet's `cost_layer.c`). Its output is the per-element error, not its input;
without a truth it does nothing."""
import numpy as np

from ..kernels.blas import axpy_cpu
from ..kernels.softmax import l1_cpu, l2_cpu, smooth_l1_cpu
from .base import Layer

COST_TYPES = ("sse", "masked", "smooth", "L1", "seg", "wgan")
SECRET_NUM = np.float32(-1234)


class CostLayer(Layer):
    type = "cost"
    is_cost_layer = True

    def __init__(self, batch, inputs, cost_type="sse", scale=1.0):
        self.batch, self.inputs, self.outputs = batch, inputs, inputs
        self.cost_type = cost_type
        self.scale = scale
        self.cost = 0.0
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        t = s.find_str("type", "sse")
        if t not in COST_TYPES:
            raise s.error("type", f"unknown cost type {t!r}; expected one of {', '.join(COST_TYPES)}")
        l = cls(params.batch, params.inputs, t, s.find_float("scale", 1.0))
        l.ratio = s.find_float("ratio", 0.0)
        l.noobject_scale = s.find_float("noobj", 1.0)
        l.thresh = s.find_float("thresh", 0.0)
        return l

    def forward(self, net):
        """forward_cost_layer"""
        if net.truth is None:
            return
        n = self.batch * self.inputs
        x = net.input
        if self.cost_type == "masked":
            x[:n][net.truth[:n] == SECRET_NUM] = SECRET_NUM
        if self.cost_type == "smooth":
            smooth_l1_cpu(n, x, net.truth, self.delta, self.output)
        elif self.cost_type == "L1":
            l1_cpu(n, x, net.truth, self.delta, self.output)
        else:
            l2_cpu(n, x, net.truth, self.delta, self.output)
        self.cost = float(np.sum(self.output[:n], dtype=np.float64))

    def backward(self, net):
        if net.delta is not None:
            axpy_cpu(self.batch * self.inputs, self.scale, self.delta, net.delta)

    def describe(self):
        return f"cost                                           {self.inputs:4d}"
