"""[upsample] (Darknet's `upsample_layer.c`): nearest neighbour x stride, times `scale`;
a negative stride downsamples by summing stride x stride blocks."""
from ..kernels.blas import fill_cpu, upsample_cpu
from .base import Layer, require_image_input


class UpsampleLayer(Layer):
    type = "upsample"
    output_can_be_view = True

    def __init__(self, batch, w, h, c, stride, scale=1.0):
        self.batch, self.w, self.h, self.c = batch, w, h, c
        self.reverse = stride < 0
        self.stride = -stride if stride < 0 else stride
        self.scale = scale
        self._set_sizes()

    def _set_sizes(self):
        if self.reverse:
            self.out_w, self.out_h = self.w // self.stride, self.h // self.stride
        else:
            self.out_w, self.out_h = self.w * self.stride, self.h * self.stride
        self.out_c = self.c
        self.inputs = self.w * self.h * self.c
        self.outputs = self.out_w * self.out_h * self.out_c
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        stride = s.find_int("stride", 2)
        if stride == 0:
            raise s.error("stride", "must not be 0")
        return cls(params.batch, params.w, params.h, params.c, stride, s.find_float("scale", 1.0))

    def resize(self, w, h):
        self.w, self.h = w, h
        self._set_sizes()

    def forward(self, net):
        if self.reverse:
            fill_cpu(self.outputs * self.batch, 0.0, self.output)
            upsample_cpu(self.output, self.out_w, self.out_h, self.c, self.batch, self.stride, 0,
                         self.scale, net.input)
        else:
            upsample_cpu(net.input, self.w, self.h, self.c, self.batch, self.stride, 1,
                         self.scale, self.output)

    def backward(self, net):
        if net.delta is None:
            return
        if self.reverse:
            upsample_cpu(self.delta, self.out_w, self.out_h, self.c, self.batch, self.stride, 1,
                         self.scale, net.delta)
        else:
            upsample_cpu(net.delta, self.w, self.h, self.c, self.batch, self.stride, 0,
                         self.scale, self.delta)

    def describe(self):
        kind = "downsample" if self.reverse else "upsample  "
        return (f"{kind}         {self.stride:2d}x  {self.w:4d} x{self.h:4d} x{self.c:4d}   ->  "
                f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")
