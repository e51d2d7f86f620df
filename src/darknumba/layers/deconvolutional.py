"""[deconvolutional] (Darknet's `deconvolutional_layer.c`): transposed convolution.

weights: c x n x size x size (one c x (n·size²) matrix); per image the (n·size²) x (h·w) product
Wᵀ·input is folded into the output with col2im; out = (in - 1)·stride + size - 2·pad.
Batch norm, update and .weights layout as [convolutional] (Darknet loads both with the same
function). `pad=1` means padding = size/2.
"""

from ..kernels.activations import ACTIVATIONS, gradient_array
from ..kernels.blas import backward_bias, fill_cpu
from ..kernels.fused import bias_activate
from ..kernels.gemm import gemm
from ..kernels.im2col import col2im_cpu, im2col_cpu
from .base import DEFAULT_QUIRKS, Layer, require_image_input
from .activate import get_activation
from .base import alloc_params, update_params
from .batchnorm import backward_batchnorm, forward_batchnorm
from .convolutional import conv_weight_records


class DeconvolutionalLayer(Layer):
    ab_train_unset = True        # AlexeyAB never updates it (base.skips_update)
    type = "deconvolutional"

    def __init__(self, batch, h, w, c, n, size, stride, padding, activation,
                 batch_normalize=False, quirks=DEFAULT_QUIRKS):
        self.batch, self.c, self.n = batch, c, n
        self.size, self.stride, self.pad = size, stride, padding
        self.groups = 1
        self.activation, self.activation_id = activation, ACTIVATIONS[activation]
        self.batch_normalize = bool(batch_normalize)
        self.quirks = quirks
        alloc_params(self, c * n * size * size, n)
        self.learning_rate_scale = 1.0
        self.resize(w, h)

    def resize(self, w, h):
        self.w, self.h = w, h
        self.out_h = (h - 1) * self.stride + self.size - 2 * self.pad
        self.out_w = (w - 1) * self.stride + self.size - 2 * self.pad
        if self.out_h < 1 or self.out_w < 1:
            raise ValueError(f"a {self.size}x{self.size}/{self.stride} deconvolution of a "
                             f"{w}x{h} input has no output pixels")
        self.out_c = self.n
        self.inputs = w * h * self.c
        self.outputs = self.out_w * self.out_h * self.n
        self._alloc_io()
        if self.batch_normalize:
            self.train_buffer("x", self.batch * self.outputs, "batch norm's input")
        self.workspace_size = h * w * self.size * self.size * self.n

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        n = s.find_int("filters", 1, at_least=1)
        size = s.find_int("size", 1, at_least=1)
        stride = s.find_int("stride", 1, at_least=1)
        act = get_activation(s)
        bn = s.find_int("batch_normalize", 0)
        pad, padding = s.find_int("pad", 0), s.find_int("padding", 0, at_least=0)
        if pad:
            padding = size // 2
        try:
            return cls(params.batch, params.h, params.w, params.c, n, size, stride, padding, act,
                       bn, params.net.quirks)
        except ValueError as e:
            raise s.error(None, str(e)) from None

    def forward(self, net):
        """forward_deconvolutional_layer"""
        m, n, k = self.size * self.size * self.n, self.h * self.w, self.c
        ws = net.workspace[:m * n]
        fill_cpu(self.batch * self.outputs, 0.0, self.output)
        for b in range(self.batch):
            x = net.input[b * self.inputs:(b + 1) * self.inputs]
            gemm(1, 0, m, n, k, 1.0, self.weights, x, 0.0, ws)
            col2im_cpu(ws, self.n, self.out_h, self.out_w, self.size, self.stride, self.pad,
                       self.output[b * self.outputs:(b + 1) * self.outputs])
        if self.batch_normalize:
            forward_batchnorm(self, net)
        else:
            bias_activate(self.output, self.biases, self.batch, self.n, self.out_h * self.out_w,
                          self.activation_id)

    def backward(self, net):
        """backward_deconvolutional_layer"""
        gradient_array(self.output, self.batch * self.outputs, self.activation_id, self.delta)
        if self.batch_normalize:
            backward_batchnorm(self, net)
        else:
            backward_bias(self.bias_updates, self.delta, self.batch, self.n,
                          self.out_w * self.out_h)
        m, n, k = self.c, self.size * self.size * self.n, self.h * self.w
        ws = net.workspace[:n * k]
        for b in range(self.batch):
            im2col_cpu(self.delta[b * self.outputs:(b + 1) * self.outputs], self.n, self.out_h,
                       self.out_w, self.size, self.stride, self.pad, ws)
            x = net.input[b * self.inputs:(b + 1) * self.inputs]
            gemm(0, 1, m, n, k, 1.0, x, ws, 1.0, self.weight_updates)
            if net.delta is not None:
                gemm(0, 0, m, k, n, 1.0, self.weights, ws, 1.0,
                     net.delta[b * self.inputs:(b + 1) * self.inputs])

    def random_init(self, rng):
        """make_deconvolutional_layer's 0.02·N(0,1), scaled by out_w·out_h / (w·h)."""
        self.weights[:] = 0.02 * rng.standard_normal(self.weights.size) * \
            (self.out_w * self.out_h) / (self.w * self.h)

    def update(self, a):
        """update_deconvolutional_layer (SGD; Darknet has no CPU Adam here either)."""
        update_params(self, a)

    def weight_records(self):
        return conv_weight_records(self)           # the same layout as a convolution's

    @property
    def bflops(self):
        return 2.0 * self.nweights * self.h * self.w / 1e9

    def describe(self):
        return (f"deconv{self.n:5d} {self.size:2d} x{self.size:2d} /{self.stride:2d}  "
                f"{self.w:4d} x{self.h:4d} x{self.c:4d}   ->  "
                f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")
