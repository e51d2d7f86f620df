"""[normalization] (Darknet's `normalization_layer.c`): local response normalisation across
channels, out = x · (kappa + alpha·Σ x²)^-beta over a window of `size` channels, summed by
Darknet's sliding window with its off-by-one (see kernels/lrn.py; checked against C darknet).

Darknet's backward is approximate (delta · norms^-beta, the cross-channel terms dropped) and
copies over the previous delta; we keep the approximation and add (compat="darknet-cpu" copies).
"""
from ..kernels.lrn import lrn_backward_cpu, lrn_forward_cpu
from .base import DEFAULT_QUIRKS, Layer, require_image_input
from .memory import zeros


class NormalizationLayer(Layer):
    type = "normalization"

    def __init__(self, batch, w, h, c, size=5, alpha=1e-4, beta=0.75, kappa=1.0, quirks=DEFAULT_QUIRKS):
        self.batch, self.c, self.out_c = batch, c, c
        self.size, self.alpha, self.beta, self.kappa = size, alpha, beta, kappa
        self.quirks = quirks
        self.resize(w, h)

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        size = s.find_int("size", 5, at_least=1)
        return cls(params.batch, params.w, params.h, params.c, size, s.find_float("alpha", 1e-4),
                   s.find_float("beta", 0.75), s.find_float("kappa", 1.0, above=0),
                   params.net.quirks)

    def resize(self, w, h):
        self.w = self.out_w = w
        self.h = self.out_h = h
        self.inputs = self.outputs = w * h * self.c
        self.norms = zeros(self.batch * self.outputs)
        self._alloc_io()

    def forward(self, net):
        """forward_normalization_layer"""
        lrn_forward_cpu(net.input, self.batch, self.c, self.w * self.h, self.size, self.alpha,
                        self.beta, self.kappa, self.norms, self.output)

    def backward(self, net):
        """backward_normalization_layer"""
        if net.delta is not None:
            lrn_backward_cpu(self.delta, self.norms, self.batch * self.outputs, self.beta,
                             net.delta, not self.quirks.overwrite_delta)

    def describe(self):
        return f"Local Response Normalization Layer: {self.w} x {self.h} x {self.c} image, " \
               f"{self.size} size"
