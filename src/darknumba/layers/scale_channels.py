"""AlexeyAB's [sam] (`sam_layer.c`) and [scale_channels] (`scale_channels_layer.c`): the
`from` layer's output multiplied by the previous layer's, elementwise (sam: the same shape),
per channel (scale_channels: the previous layer is 1 x 1 x c) or per pixel (scale_channels
scale_wh=1: it is w x h x 1). The output has the `from` layer's shape; then an elementwise
activation (default linear). Backward adds into both inputs' deltas (the true gradient;
AlexeyAB's CPU [sam] *writes* the from layer's delta: quirks.sam_overwrites_from_delta)."""
import numpy as np

from ..kernels.activations import ACTIVATIONS, activate_array, gradient_array
from ..kernels.scale_channels import (backward_sam_cpu, backward_scale_channels_cpu,
                                      forward_sam_cpu, forward_scale_channels_cpu)
from .base import DEFAULT_QUIRKS, Layer
from .activate import get_activation

_EMPTY = np.empty(0, np.float32)


class SamLayer(Layer):
    type = "sam"

    def __init__(self, batch, index, w, h, c, activation="linear", quirks=DEFAULT_QUIRKS):
        self.batch, self.index, self.quirks = batch, index, quirks
        self.activation, self.activation_id = activation, ACTIVATIONS[activation]
        self.scale_wh = 0
        self.c = self.out_c = c
        self._sized(w, h)

    def _sized(self, w, h):
        self.w = self.out_w = w
        self.h = self.out_h = h
        self.outputs = self.inputs = w * h * self.out_c
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        i, src = _from_layer(s, params)
        if (src.out_w, src.out_h, src.out_c) != (params.w, params.h, params.c):
            raise s.error("from", f"layer {i} is {src.out_w}x{src.out_h}x{src.out_c}, the "
                                  f"previous layer {params.w}x{params.h}x{params.c}: [sam] "
                                  f"multiplies maps of one shape")
        act = get_activation(s, default="linear")
        return cls(params.batch, i, params.w, params.h, params.c, act, params.net.quirks)

    def resize_in(self, layers, w, h):
        self._sized(w, h)

    def forward(self, net):
        """forward_sam_layer"""
        n = self.batch * self.outputs
        forward_sam_cpu(n, net.input, net.layers[self.index].output, self.output)
        activate_array(self.output, n, self.activation_id)

    def backward(self, net):
        """backward_sam_layer"""
        n = self.batch * self.outputs
        gradient_array(self.output, n, self.activation_id, self.delta)
        src = net.layers[self.index]
        backward_sam_cpu(n, self.delta, net.input, src.output,
                         _EMPTY if net.delta is None else net.delta, src.delta,
                         self.quirks.sam_overwrites_from_delta)

    def describe(self):
        return f"scale Layer: {self.index}"


class ScaleChannelsLayer(SamLayer):
    type = "scale_channels"

    def __init__(self, batch, index, w, h, c, w2, h2, c2, scale_wh=0, activation="linear"):
        self.batch, self.index, self.scale_wh = batch, index, scale_wh
        self.activation, self.activation_id = activation, ACTIVATIONS[activation]
        self.c = c
        self.out_c = c2
        self._sized(w2, h2)

    def _sized(self, w, h):
        self.out_w, self.out_h = w, h
        self.w, self.h = (w, h) if self.scale_wh else (1, 1)
        self.outputs = self.inputs = w * h * self.out_c
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        i, src = _from_layer(s, params)
        scale_wh = s.find_int("scale_wh", 0)
        if scale_wh:
            ok = params.c == 1 and (params.w, params.h) == (src.out_w, src.out_h)
            want = f"{src.out_w}x{src.out_h}x1"
        else:
            ok = params.w == 1 and params.h == 1 and params.c == src.out_c
            want = f"1x1x{src.out_c}"
        if not ok:
            raise s.error("from", f"the previous layer outputs {params.w}x{params.h}x{params.c}; "
                                  f"scaling layer {i} ({src.out_w}x{src.out_h}x{src.out_c}) "
                                  f"{'per pixel' if scale_wh else 'per channel'} needs {want}")
        act = get_activation(s, default="linear")
        return cls(params.batch, i, params.w, params.h, params.c, src.out_w, src.out_h,
                   src.out_c, scale_wh, act)

    def resize_in(self, layers, w, h):
        src = layers[self.index]
        self._sized(src.out_w, src.out_h)

    def forward(self, net):
        """forward_scale_channels_layer"""
        forward_scale_channels_cpu(self.batch, self.out_c, self.out_w * self.out_h, self.scale_wh,
                                   net.input, net.layers[self.index].output, self.output)
        activate_array(self.output, self.batch * self.outputs, self.activation_id)

    def backward(self, net):
        """backward_scale_channels_layer"""
        gradient_array(self.output, self.batch * self.outputs, self.activation_id, self.delta)
        src = net.layers[self.index]
        backward_scale_channels_cpu(self.batch, self.out_c, self.out_w * self.out_h,
                                    self.scale_wh, self.delta, net.input, src.output,
                                    _EMPTY if net.delta is None else net.delta, src.delta)


def _from_layer(s, params):
    v = s.find_int("from")
    i = params.index + v if v < 0 else v
    if not 0 <= i < params.index:
        raise s.error("from", f"layer index {v} points to layer {i}, but only layers "
                              f"0..{params.index - 1} come before this layer ({params.index})")
    return i, params.net.layers[i]
