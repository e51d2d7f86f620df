"""[convolutional] (Darknet's `convolutional_layer.c`): im2col + one BLAS GEMM per image and group,
then batch norm (or biases) and the activation.

weights: n x (c/groups) x size x size; output: batch x n x out_h x out_w.
"""
from __future__ import annotations

import numpy as np

from ..kernels.activations import ACTIVATIONS, activate_array
from ..kernels.blas import (add_bias, copy_cpu, mean_cpu, normalize_cpu, scal_cpu, axpy_cpu,
                            scale_bias, variance_cpu)
from ..kernels.fused import batchnorm_bias_activate, bias_activate
from ..kernels.gemm import gemm
from ..kernels.im2col import im2col_cpu
from .base import Layer, require_image_input, zeros


def get_activation(section, key="activation", default="logistic"):
    name = section.find_str(key, default)
    if name not in ACTIVATIONS:
        raise section.error(key, f"unknown activation {name!r}; expected one of "
                                 f"{', '.join(sorted(ACTIVATIONS))}")
    return name


def forward_batchnorm(l, net):
    """forward_batchnorm_layer for conv/connected outputs already in l.output (then activation).

    Train mode: batch mean and *unbiased* variance, rolling stats updated 0.99/0.01 during the
    forward pass, x and x_norm kept for backward. Test mode: rolling statistics."""
    n, spatial, total = l.out_c, l.out_h * l.out_w, l.batch * l.outputs
    if net.train:
        copy_cpu(total, l.output, l.x)
        mean_cpu(l.output, l.batch, n, spatial, l.mean)
        variance_cpu(l.output, l.mean, l.batch, n, spatial, l.variance)
        scal_cpu(n, 0.99, l.rolling_mean)
        axpy_cpu(n, 0.01, l.mean, l.rolling_mean)
        scal_cpu(n, 0.99, l.rolling_variance)
        axpy_cpu(n, 0.01, l.variance, l.rolling_variance)
        normalize_cpu(l.output, l.mean, l.variance, l.batch, n, spatial)
        copy_cpu(total, l.output, l.x_norm)
        scale_bias(l.output, l.scales, l.batch, n, spatial)
        add_bias(l.output, l.biases, l.batch, n, spatial)
        activate_array(l.output, total, l.activation_id)
    else:
        batchnorm_bias_activate(l.output, l.rolling_mean, l.rolling_variance, l.scales, l.biases,
                                l.batch, n, spatial, l.activation_id)


class ConvolutionalLayer(Layer):
    type = "convolutional"

    def __init__(self, batch, h, w, c, n, groups, size, stride, padding, activation,
                 batch_normalize=False, compat=None):
        if c % groups or n % groups:
            raise ValueError(f"channels ({c}) and filters ({n}) must be divisible by groups ({groups})")
        self.batch, self.h, self.w, self.c = batch, h, w, c
        self.n, self.groups, self.size, self.stride, self.pad = n, groups, size, stride, padding
        self.activation = activation
        self.activation_id = ACTIVATIONS[activation]
        self.batch_normalize = bool(batch_normalize)
        self.compat = compat
        self.nweights = c // groups * n * size * size
        self.nbiases = n
        self.weights = zeros(self.nweights)
        self.weight_updates = zeros(self.nweights)
        self.biases = zeros(n)
        self.bias_updates = zeros(n)
        if self.batch_normalize:
            self.scales = np.ones(n, dtype=np.float32)
            self.scale_updates = zeros(n)
            self.mean = zeros(n)
            self.variance = zeros(n)
            self.mean_delta = zeros(n)
            self.variance_delta = zeros(n)
            self.rolling_mean = zeros(n)
            self.rolling_variance = zeros(n)
        self.learning_rate_scale = 1.0
        self._set_sizes()

    def _set_sizes(self):
        self.out_h = (self.h + 2 * self.pad - self.size) // self.stride + 1
        self.out_w = (self.w + 2 * self.pad - self.size) // self.stride + 1
        if self.out_h < 1 or self.out_w < 1:
            raise ValueError(f"a {self.size}x{self.size}/{self.stride} convolution of a "
                             f"{self.w}x{self.h} input has no output pixels")
        self.out_c = self.n
        self.inputs = self.h * self.w * self.c
        self.outputs = self.out_h * self.out_w * self.out_c
        self._alloc_io()
        if self.batch_normalize:
            self.x = zeros(self.batch * self.outputs)
            self.x_norm = zeros(self.batch * self.outputs)
        self.workspace_size = 0 if self._direct_1x1() else \
            self.out_h * self.out_w * self.size * self.size * self.c // self.groups

    def _direct_1x1(self) -> bool:
        """1x1 convolutions multiply the input itself, without im2col. Darknet's CPU code does
        this even for stride > 1, reading the wrong pixels; we do it only where it is exact,
        unless compat="darknet-cpu" asks for Darknet's behaviour."""
        if self.size != 1:
            return False
        return (self.stride == 1 and self.pad == 0) or self.compat == "darknet-cpu"

    @classmethod
    def from_cfg(cls, s, params):
        n = s.find_int("filters", 1)
        size = s.find_int("size", 1)
        stride = s.find_int("stride", 1)
        pad = s.find_int("pad", 0)
        padding = s.find_int("padding", 0)
        groups = s.find_int("groups", 1)
        if pad:
            padding = size // 2
        activation = get_activation(s)
        require_image_input(s, params)
        bn = s.find_int("batch_normalize", 0)
        for key in ("binary", "xnor"):
            if s.find_int(key, 0):
                raise s.error(key, f"{key} convolutions are not supported")
        for key, v in (("filters", n), ("size", size), ("stride", stride), ("groups", groups)):
            if v < 1:
                raise s.error(key, f"must be at least 1, found {v}")
        if params.c % groups or n % groups:
            raise s.error("groups", f"input channels ({params.c}) and filters ({n}) must both be "
                                    f"divisible by groups={groups}")
        try:
            l = cls(params.batch, params.h, params.w, params.c, n, groups, size, stride, padding,
                    activation, bn, compat=params.net.compat)
        except ValueError as e:
            raise s.error(None, str(e)) from None
        l.flipped = s.find_int("flipped", 0)
        return l

    def resize(self, w, h):
        self.w, self.h = w, h
        self._set_sizes()

    # -- forward ---------------------------------------------------------------------------
    def forward(self, net):
        """forward_convolutional_layer"""
        m = self.n // self.groups
        k = self.size * self.size * self.c // self.groups
        n = self.out_h * self.out_w
        cg = self.c // self.groups
        x, out = net.input, self.output
        ws = net.workspace
        for b in range(self.batch):
            for g in range(self.groups):
                a = self.weights[g * m * k:(g + 1) * m * k]
                im = x[(b * self.groups + g) * cg * self.h * self.w:][:cg * self.h * self.w]
                c = out[(b * self.groups + g) * m * n:][:m * n]
                if self._direct_1x1():
                    col = im[:k * n]
                else:
                    im2col_cpu(im, cg, self.h, self.w, self.size, self.stride, self.pad, ws)
                    col = ws[:k * n]
                gemm(0, 0, m, n, k, 1.0, a, col, 0.0, c)
        if self.batch_normalize:
            forward_batchnorm(self, net)
        else:
            bias_activate(out, self.biases, self.batch, self.n, n, self.activation_id)

    # -- weights and reporting -------------------------------------------------------------
    def weight_records(self):
        recs = [("biases", self.biases)]
        if self.batch_normalize:
            recs += [("scales", self.scales), ("rolling_mean", self.rolling_mean),
                     ("rolling_variance", self.rolling_variance)]
        recs.append(("weights", self.weights))
        return recs

    @property
    def bflops(self):
        return (2.0 * self.n * self.size * self.size * self.c / self.groups
                * self.out_h * self.out_w) / 1e9

    def describe(self):
        return (f"conv  {self.n:5d} {self.size:2d} x{self.size:2d} /{self.stride:2d}  "
                f"{self.w:4d} x{self.h:4d} x{self.c:4d}   ->  "
                f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}  {self.bflops:5.3f} BFLOPs")
