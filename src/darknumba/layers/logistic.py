"""[logistic] (Darknet's `logistic_layer.c`, "logistic x entropy"): output = σ(input); with a
truth, delta = t - p (the binary cross-entropy gradient w.r.t. the logit) and
cost = Σ -t·log p - (1-t)·log(1-p). Backward passes the delta through unchanged."""
import numpy as np

from ..kernels.activations import LOGISTIC, activate_array
from ..kernels.blas import axpy_cpu, copy_cpu
from ..kernels.logistic import logistic_x_ent_cpu
from .base import Layer
from .memory import zeros


class LogisticLayer(Layer):
    type = "logistic"

    def __init__(self, batch, w, h, c, inputs):
        self.batch, self.c, self.out_c = batch, c, c
        self.cost = 0.0
        self._sized(w, h, inputs)

    def _sized(self, w, h, inputs):
        self.w = self.out_w = w
        self.h = self.out_h = h
        self.inputs = self.outputs = inputs
        self.loss = zeros(self.batch * inputs)
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        return cls(params.batch, params.w, params.h, params.c, params.inputs)

    def resize(self, w, h):
        self._sized(w, h, w * h * self.c)

    def forward(self, net):
        """forward_logistic_layer"""
        n = self.batch * self.inputs
        copy_cpu(n, net.input, self.output)
        activate_array(self.output, n, LOGISTIC)
        if net.truth is not None:
            logistic_x_ent_cpu(n, self.output, net.truth, self.delta, self.loss)
            self.cost = float(np.sum(self.loss, dtype=np.float64))

    def backward(self, net):
        """backward_logistic_layer"""
        if net.delta is not None:
            axpy_cpu(self.batch * self.inputs, 1.0, self.delta, net.delta)

    def describe(self):
        return f"logistic x entropy                             {self.inputs:4d}"
