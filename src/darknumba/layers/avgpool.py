"""[avgpool] (Darknet's `avgpool_layer.c`): global average, c x h x w -> c."""
from ..kernels.pool import backward_avgpool_cpu, forward_avgpool_cpu
from .base import Layer, require_image_input


class AvgpoolLayer(Layer):
    type = "avgpool"

    def __init__(self, batch, w, h, c):
        self.batch, self.h, self.w, self.c = batch, h, w, c
        self._set_sizes()

    def _set_sizes(self):
        self.out_w = self.out_h = 1
        self.out_c = self.c
        self.inputs = self.h * self.w * self.c
        self.outputs = self.out_c
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        return cls(params.batch, params.w, params.h, params.c)

    def resize(self, w, h):
        self.w, self.h = w, h
        self._set_sizes()

    def forward(self, net):
        forward_avgpool_cpu(net.input, self.batch, self.c, self.h * self.w, self.output)

    def backward(self, net):
        if net.delta is None:
            return
        backward_avgpool_cpu(self.delta, self.batch, self.c, self.h * self.w, net.delta)

    def describe(self):
        return f"avg                     {self.w:4d} x{self.h:4d} x{self.c:4d}   ->  {self.c:4d}"
