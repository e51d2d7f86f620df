"""[l2norm] (Darknet's `l2norm_layer.c`): each pixel's channel vector divided by its L2 norm.

Darknet's backward passes the delta through unchanged (the Jacobian of the normalisation is
not applied; the `scales` buffer it fills with (1-x)/||x|| is never used). We keep that."""
from ..kernels.blas import axpy_cpu, copy_cpu
from ..kernels.lrn import l2normalize_cpu
from .base import Layer
from .memory import zeros


class L2normLayer(Layer):
    type = "l2norm"

    def __init__(self, batch, w, h, c, inputs):
        self.batch, self.c, self.out_c = batch, c, c
        self._sized(w, h, inputs)

    def _sized(self, w, h, inputs):
        self.w = self.out_w = w
        self.h = self.out_h = h
        self.inputs = self.outputs = inputs
        self.scales = zeros(self.batch * inputs)
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        return cls(params.batch, params.w, params.h, params.c, params.inputs)

    def resize(self, w, h):
        self._sized(w, h, w * h * self.c)

    def forward(self, net):
        """forward_l2norm_layer"""
        copy_cpu(self.batch * self.outputs, net.input, self.output)
        c, spatial = (self.out_c, self.out_w * self.out_h) if self.out_c else (self.outputs, 1)
        l2normalize_cpu(self.output, self.scales, self.batch, c, spatial)

    def backward(self, net):
        """backward_l2norm_layer: the delta, unchanged."""
        if net.delta is not None:
            axpy_cpu(self.batch * self.inputs, 1.0, self.delta, net.delta)

    def describe(self):
        return f"l2norm                                         {self.inputs:4d}"
