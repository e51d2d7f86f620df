"""[eltwise]: Caffe's Eltwise PROD and MAX (BVLC caffe's eltwise_layer.cpp), as `darknumba
import caffe` writes them (its SUM is Darknet's [shortcut]).

    [eltwise]
    from=-3,-5          # layers whose outputs join the previous layer's (as [shortcut]'s from)
    operation=prod      # prod: the product of all inputs; max: the largest, per element

Every input has the previous layer's shape. Backward: PROD gives each input delta x the
product of the others (Caffe's stable_prod_grad), MAX the delta to the input that was
largest (the first of equal ones, as Caffe's mask)."""
import numpy as np

from ..errors import CfgError
from ..kernels.caffe import (eltwise_max_backward_cpu, eltwise_max_cpu,
                             eltwise_prod_backward_cpu, eltwise_prod_cpu)
from .base import Layer
from .memory import zeros

OPERATIONS = ("prod", "max")


class EltwiseLayer(Layer):
    type = "eltwise"

    def __init__(self, batch, w, h, c, input_layers, operation):
        self.batch, self.c, self.out_c = batch, c, c
        self.input_layers, self.operation = list(input_layers), operation
        self._sized(w, h)

    def _sized(self, w, h):
        self.w, self.h = self.out_w, self.out_h = w, h
        self.inputs = self.outputs = w * h * self.c
        self._alloc_io()
        n = self.batch * self.outputs
        k = len(self.input_layers) + 1
        self.stacked = zeros(k * n, "the inputs side by side").reshape(k, n)
        self.mask = zeros(n if self.operation == "max" else 0, "the largest input's index",
                          np.int32)

    def resize_in(self, layers, w, h):
        for i in self.input_layers:
            if (layers[i].out_w, layers[i].out_h) != (w, h):
                raise CfgError(f"[eltwise] from layer {i}: resized to {layers[i].out_w}x"
                               f"{layers[i].out_h}, the previous layer to {w}x{h}: the inputs "
                               f"no longer have one shape")
        self._sized(w, h)

    @classmethod
    def from_cfg(cls, s, params):
        layers, idx = params.net.layers, []
        for v in s.find_list("from", int):
            i = params.index + v if v < 0 else v
            if not 0 <= i < params.index:
                raise s.error("from", f"layer index {v} points to layer {i}, but only layers "
                                      f"0..{params.index - 1} come before this layer "
                                      f"({params.index})")
            src = layers[i]
            if (src.out_w, src.out_h, src.out_c) != (params.w, params.h, params.c):
                raise s.error("from", f"layer {i} outputs {src.out_w}x{src.out_h}x{src.out_c}, "
                                      f"the previous layer {params.w}x{params.h}x{params.c}: "
                                      f"the inputs must have one shape")
            idx.append(i)
        if not idx:
            raise s.error("from", "needs at least one layer")
        op = s.find_str("operation", "prod")
        if op not in OPERATIONS:
            raise s.error("operation", f"expected {' or '.join(OPERATIONS)}, found {op!r}")
        return cls(params.batch, params.w, params.h, params.c, idx, op)

    def forward(self, net):
        """EltwiseLayer::Forward_cpu"""
        n = self.batch * self.outputs
        self.stacked[0] = net.input[:n]
        for j, i in enumerate(self.input_layers, 1):
            self.stacked[j] = net.layers[i].output[:n]
        if self.operation == "prod":
            eltwise_prod_cpu(self.stacked, n, self.output)
        else:
            eltwise_max_cpu(self.stacked, n, self.output, self.mask)

    def backward(self, net):
        """EltwiseLayer::Backward_cpu: each input's delta, added into its layer's."""
        n = self.batch * self.outputs
        targets = [net.delta] + [net.layers[i].delta for i in self.input_layers]
        for j, target in enumerate(targets):
            if target is None:
                continue
            if self.operation == "prod":
                eltwise_prod_backward_cpu(self.delta, self.stacked, n, j, target)
            else:
                eltwise_max_backward_cpu(self.delta, self.mask, n, j, target)

    def describe(self):
        return (f"eltwise {self.operation:<4} of {len(self.input_layers) + 1} "
                f"{'':>18}{self.w:4d} x{self.h:4d} x{self.c:4d}   ->  "
                f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")
