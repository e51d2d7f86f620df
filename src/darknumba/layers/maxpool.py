"""[maxpool] (Darknet's `maxpool_layer.c`). padding defaults to size-1, so size=2 stride=1
keeps the input size (yolov3-tiny's layer 11)."""
import numpy as np

from ..kernels.pool import (MAXPOOL2_MAX_W, backward_maxpool_cpu, forward_maxpool2_cpu,
                            forward_maxpool_cpu)
from .base import Layer, require_image_input
from .memory import SizeError, zeros

INT32_MAX = 2 ** 31 - 1


class MaxpoolLayer(Layer):
    type = "maxpool"

    def __init__(self, batch, h, w, c, size, stride, padding):
        self.batch, self.h, self.w, self.c = batch, h, w, c
        self.size, self.stride, self.pad = size, stride, padding
        self._set_sizes()

    def _set_sizes(self):
        self.out_w = (self.w + self.pad - self.size) // self.stride + 1
        self.out_h = (self.h + self.pad - self.size) // self.stride + 1
        self.out_c = self.c
        self.inputs = self.h * self.w * self.c
        self.outputs = self.out_h * self.out_w * self.out_c
        if self.batch * self.inputs > INT32_MAX:
            raise SizeError(f"the winners' indexes are int32 (as Darknet's ints): a {self.w} x "
                            f"{self.h} x {self.c} input at batch {self.batch} has more values "
                            f"than they can index")
        self._alloc_io()
        self.indexes = zeros(self.batch * self.outputs, "indexes", np.int32)

    @classmethod
    def from_cfg(cls, s, params):
        stride = s.find_int("stride", 1, at_least=1)
        size = s.find_int("size", stride, at_least=1)
        padding = s.find_int("padding", size - 1, at_least=0)
        require_image_input(s, params)
        return cls(params.batch, params.h, params.w, params.c, size, stride, padding)

    def resize(self, w, h):
        self.w, self.h = w, h
        self._set_sizes()

    def forward(self, net):
        """forward_maxpool_layer"""
        if self.size == 2 and self.out_w <= MAXPOOL2_MAX_W:
            forward_maxpool2_cpu(net.input, self.batch, self.c, self.h, self.w, self.stride,
                                 self.pad, self.out_h, self.out_w, self.output, self.indexes,
                                 net.train)
            return
        forward_maxpool_cpu(net.input, self.batch, self.c, self.h, self.w, self.size, self.stride,
                            self.pad, self.out_h, self.out_w, self.output, self.indexes,
                            net.train)

    def backward(self, net):
        """backward_maxpool_layer: each output's delta goes to the input that won."""
        if net.delta is None:
            return
        backward_maxpool_cpu(self.delta, self.indexes, self.batch * self.outputs, net.delta,
                             self.batch, self.inputs, self.outputs)

    def describe(self):
        return (f"max          {self.size} x {self.size} / {self.stride}  "
                f"{self.w:4d} x{self.h:4d} x{self.c:4d}   ->  "
                f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")
