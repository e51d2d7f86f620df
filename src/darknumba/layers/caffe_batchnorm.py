"""[caffe_batchnorm]: Caffe's BatchNorm followed by its Scale layer (BVLC caffe's
batch_norm_layer.cpp, scale_layer.cpp), as `darknumba import caffe --keep-bn` writes it: what
Darknet's batch norm computes differently, computed as Caffe does (docs/caffe.md).

    inference  y = scales * (x - mean) / sqrt(var + eps) + biases,
               mean = mean_sum / scale_factor, var = variance_sum / scale_factor
    training   the batch's mean and *biased* variance (/ m, m = batch x spatial) in their
               place; then scale_factor <- f * scale_factor + 1, mean_sum <- f * mean_sum +
               mean, variance_sum <- f * variance_sum + m / (m - 1) * variance
               (f = moving_average_fraction, 0.999 by default)
Darknet's instead: the unbiased variance in training too, eps 1e-6 outside the square root
(pjreddie) or 1e-5 inside (AlexeyAB), rolling averages 0.99 / 0.01 (0.9 / 0.1) with no
start-up correction. Keys: eps (1e-5), moving_average_fraction (0.999), use_global_stats
(0; 1: the running statistics in training too, and left unchanged: Caffe's frozen batch
norm). .weights records: biases, scales, mean_sum, variance_sum, scale_factor (one value):
Caffe's three blobs as they are, so training goes on from them. scales and biases learn by Darknet's SGD with momentum
(no decay), as its [batchnorm] layer's.
"""
import numpy as np

from ..kernels.blas import sgd_update_cpu
from ..kernels.caffe import (caffe_bn_backward_cpu, caffe_bn_forward_cpu,
                             caffe_bn_global_stats_cpu, caffe_bn_moving_average_cpu,
                             caffe_bn_stats_cpu)
from .base import Layer, pass_delta, require_image_input
from .memory import full, zeros


class CaffeBatchnormLayer(Layer):
    type = "caffe_batchnorm"

    def __init__(self, batch, w, h, c, eps=1e-5, moving_average_fraction=0.999,
                 use_global_stats=False):
        self.batch, self.c = batch, c
        self.use_global_stats = bool(use_global_stats)
        self.n = self.out_c = c
        self.eps, self.moving_average_fraction = float(eps), float(moving_average_fraction)
        self.biases, self.bias_updates = zeros(c, "biases"), zeros(c, "bias updates")
        self.scales, self.scale_updates = full(c, 1.0, "scales"), zeros(c, "scale updates")
        self.mean_sum, self.variance_sum = zeros(c, "mean sums"), zeros(c, "variance sums")
        self.scale_factor = zeros(1, "scale factor")
        self.mean, self.variance = zeros(c, "mean"), zeros(c, "variance")
        self.learning_rate_scale = 1.0
        self.resize(w, h)

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        eps = s.find_float("eps", 1e-5, above=0)
        fraction = s.find_float("moving_average_fraction", 0.999, at_least=0)
        if fraction > 1:
            raise s.error("moving_average_fraction", f"must be at most 1, found {fraction}")
        return cls(params.batch, params.w, params.h, params.c, eps, fraction,
                   s.find_int("use_global_stats", 0))

    def batch_stats(self, net) -> bool:
        return bool(net.train) and not self.use_global_stats

    def resize(self, w, h):
        self.w = self.out_w = w
        self.h = self.out_h = h
        self.inputs = self.outputs = w * h * self.c
        self._alloc_io()
        self.x_normalized = zeros(self.batch * self.outputs, "normalised input")

    def forward(self, net):
        """BatchNormLayer::Forward_cpu, then ScaleLayer::Forward_cpu."""
        spatial = self.out_h * self.out_w
        if self.batch_stats(net):
            caffe_bn_stats_cpu(net.input, self.batch, self.c, spatial, self.mean, self.variance)
            caffe_bn_moving_average_cpu(self.mean, self.variance, self.batch * spatial,
                                        self.moving_average_fraction, self.mean_sum,
                                        self.variance_sum, self.scale_factor)
        else:
            caffe_bn_global_stats_cpu(self.mean_sum, self.variance_sum, self.scale_factor,
                                      self.mean, self.variance)
        caffe_bn_forward_cpu(net.input, self.batch, self.c, spatial, self.mean, self.variance,
                             self.eps, self.scales, self.biases, self.x_normalized, self.output)

    def backward(self, net):
        """ScaleLayer::Backward_cpu, then BatchNormLayer::Backward_cpu (through the batch
        statistics in training, the running ones at inference)."""
        caffe_bn_backward_cpu(self.delta, self.x_normalized, self.batch, self.c,
                              self.out_h * self.out_w, self.variance, self.eps, self.scales,
                              self.batch_stats(net), self.bias_updates, self.scale_updates)
        pass_delta(net, self.delta, self.batch * self.outputs)

    def update(self, a):
        f32 = np.float32
        step = f32(f32(a.learning_rate) * f32(self.learning_rate_scale) / f32(a.batch))
        sgd_update_cpu(self.c, step, 0.0, a.momentum, self.biases, self.bias_updates)
        sgd_update_cpu(self.c, step, 0.0, a.momentum, self.scales, self.scale_updates)

    def weight_records(self):
        return [("biases", self.biases), ("scales", self.scales), ("mean_sum", self.mean_sum),
                ("variance_sum", self.variance_sum), ("scale_factor", self.scale_factor)]

    def describe(self):
        return f"Caffe BatchNorm + Scale: {self.w} x {self.h} x {self.c} image"
