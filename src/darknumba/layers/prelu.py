"""[prelu]: Caffe's PReLU (BVLC caffe's prelu_layer.cpp), as `darknumba import caffe` writes
it: y = x where x > 0, else a x, with a learned slope a per channel (or one for all:
channel_shared=1). .weights record: the slopes (`weights`, c values or 1; Caffe starts them
at 0.25). They learn by Darknet's SGD step with momentum and decay, as a convolution's
weights."""
import numpy as np

from ..kernels.caffe import prelu_backward_cpu, prelu_forward_cpu, prelu_slope_updates_cpu
from .base import Layer, require_image_input, sgd_update_weights
from .memory import full, zeros

INITIAL_SLOPE = 0.25            # Caffe's default filler for the slopes


class PreluLayer(Layer):
    type = "prelu"

    def __init__(self, batch, w, h, c, channel_shared=False):
        self.batch, self.c = batch, c
        self.out_c = c
        self.channel_shared = bool(channel_shared)
        self.nweights = 1 if self.channel_shared else c
        self.weights = full(self.nweights, INITIAL_SLOPE, "slopes")
        self.weight_updates = zeros(self.nweights, "slope updates")
        self.learning_rate_scale = 1.0
        self.resize(w, h)

    def resize(self, w, h):
        self.w, self.h = self.out_w, self.out_h = w, h
        self.inputs = self.outputs = w * h * self.c
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        return cls(params.batch, params.w, params.h, params.c, s.find_int("channel_shared", 0))

    def random_init(self, rng):
        self.weights[:] = np.float32(INITIAL_SLOPE)

    def forward(self, net):
        """PReLULayer::Forward_cpu"""
        prelu_forward_cpu(net.input, self.batch, self.c, self.h * self.w, self.weights,
                          self.channel_shared, self.output)

    def backward(self, net):
        """PReLULayer::Backward_cpu: the slopes' gradient, then the input's."""
        spatial = self.h * self.w
        prelu_slope_updates_cpu(net.input, self.delta, self.batch, self.c, spatial,
                                self.channel_shared, self.weight_updates)
        if net.delta is not None:
            prelu_backward_cpu(net.input, self.delta, self.batch, self.c, spatial, self.weights,
                               self.channel_shared, net.delta)

    def update(self, a):
        sgd_update_weights(self, a)

    def weight_records(self):
        return [("weights", self.weights)]

    def describe(self):
        return (f"prelu {'shared' if self.channel_shared else 'per channel':<12}{'':>20}"
                f"{self.w:4d} x{self.h:4d} x{self.c:4d}   ->  "
                f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")
