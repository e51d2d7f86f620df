"""[crop] (Darknet's `crop_layer.c`): a crop_height x crop_width window of the input, and
(unless noadjust=1) the values mapped from [0,1] to [-1,1] by x·2 - 1.

Training: one random offset and (with flip=1) one coin-flip mirror for the whole batch, drawn
per forward. Test: the centred window, no flip. Darknet's backward does nothing (the crop layer
is meant to sit first); `angle`, `saturation`, `exposure`, `shift` are read and unused on the
CPU. The random draws come from the layer's own numpy generator (seeded at build).
"""
import numpy as np

from ..kernels.crop import crop_cpu
from .base import Layer, require_image_input


class CropLayer(Layer):
    type = "crop"
    draws_random = True

    def __init__(self, batch, h, w, c, crop_height, crop_width, flip=False, noadjust=False,
                 seed=0):
        if crop_height > h or crop_width > w:
            raise ValueError(f"crop {crop_width}x{crop_height} is larger than the "
                             f"{w}x{h} input")
        self.batch, self.c, self.out_c = batch, c, c
        self.flip, self.noadjust = bool(flip), bool(noadjust)
        self.scale = crop_height / h
        self.rng = np.random.default_rng(seed)
        self.w, self.h = w, h
        self.out_w, self.out_h = crop_width, crop_height
        self._sized()

    def _sized(self):
        self.inputs = self.w * self.h * self.c
        self.outputs = self.out_w * self.out_h * self.out_c
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        ch = s.find_int("crop_height", 1, at_least=1)
        cw = s.find_int("crop_width", 1, at_least=1)
        flip = s.find_int("flip", 0)
        for key, default in (("angle", 0.0), ("saturation", 1.0), ("exposure", 1.0), ("shift", 0.0)):
            s.find_float(key, default)
        try:
            return cls(params.batch, params.h, params.w, params.c, ch, cw, flip,
                       s.find_int("noadjust", 0))
        except ValueError as e:
            raise s.error(None, str(e)) from None

    def resize(self, w, h):
        """resize_crop_layer: keeps the height ratio (Darknet uses it for both sides)."""
        self.w, self.h = w, h
        self.out_w, self.out_h = int(self.scale * w), int(self.scale * h)
        self._sized()

    def forward(self, net):
        """forward_crop_layer"""
        if net.train:
            flip = self.flip and self.rng.integers(2) == 1
            dh = int(self.rng.integers(self.h - self.out_h + 1))
            dw = int(self.rng.integers(self.w - self.out_w + 1))
        else:
            flip, dh, dw = False, (self.h - self.out_h) // 2, (self.w - self.out_w) // 2
        scale, trans = (1.0, 0.0) if self.noadjust else (2.0, -1.0)
        crop_cpu(net.input, self.batch, self.c, self.h, self.w, self.out_h, self.out_w, dh, dw,
                 bool(flip), scale, trans, self.output)

    def backward(self, net):
        """backward_crop_layer: nothing."""

    def describe(self):
        return f"Crop Layer: {self.h} x {self.w} -> {self.out_h} x {self.out_w} x {self.c} image"
