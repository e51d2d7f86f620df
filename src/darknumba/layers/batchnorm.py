"""[batchnorm] (Darknet's `batchnorm_layer.c`): batch normalisation on its own, no activation.

Quirks of the C code, noted: on the CPU make_batchnorm_layer never allocates x / x_norm, so a
training forward crashes there; it has no update function, so scales and biases never learn;
its .weights record is scales, rolling_mean, rolling_variance (no biases); backward *copies*
its delta over the previous layer's. We train scales and biases like a conv layer's BN (SGD
with momentum, no decay) and add the delta; compat="darknet-cpu" copies it and skips the update.
"""
import numpy as np

from ..kernels.activations import ACTIVATIONS
from ..kernels.blas import copy_cpu, sgd_update_cpu
from .base import DEFAULT_QUIRKS, Layer, pass_delta, require_image_input
from .memory import zeros
from .convolutional import alloc_batchnorm, backward_batchnorm, forward_batchnorm


class BatchnormLayer(Layer):
    type = "batchnorm"

    def __init__(self, batch, w, h, c, quirks=DEFAULT_QUIRKS):
        self.batch, self.c, self.quirks = batch, c, quirks
        self.n = self.out_c = c
        self.batch_normalize = True
        self.activation, self.activation_id = "linear", ACTIVATIONS["linear"]
        self.biases, self.bias_updates = zeros(c), zeros(c)
        alloc_batchnorm(self, c)
        self.learning_rate_scale = 1.0
        self.resize(w, h)

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        return cls(params.batch, params.w, params.h, params.c, params.net.quirks)

    def resize(self, w, h):
        self.w = self.out_w = w
        self.h = self.out_h = h
        self.inputs = self.outputs = w * h * self.c
        self._alloc_io()
        self.x = zeros(self.batch * self.outputs)

    def forward(self, net):
        """forward_batchnorm_layer"""
        copy_cpu(self.batch * self.outputs, net.input, self.output)
        forward_batchnorm(self, net)

    def backward(self, net):
        """backward_batchnorm_layer"""
        backward_batchnorm(self, net)
        pass_delta(net, self.delta, self.batch * self.outputs, self.quirks.overwrite_delta)

    def update(self, a):
        if self.quirks.overwrite_delta:
            return
        f32 = np.float32
        step = f32(f32(a.learning_rate) * f32(self.learning_rate_scale) / f32(a.batch))
        sgd_update_cpu(self.c, step, 0.0, a.momentum, self.biases, self.bias_updates)
        sgd_update_cpu(self.c, step, 0.0, a.momentum, self.scales, self.scale_updates)

    def weight_records(self):
        return [("scales", self.scales), ("rolling_mean", self.rolling_mean),
                ("rolling_variance", self.rolling_variance)]

    def describe(self):
        return f"Batch Normalization Layer: {self.w} x {self.h} x {self.c} image"
