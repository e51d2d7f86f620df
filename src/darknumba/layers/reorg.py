"""[reorg] (Darknet's `reorg_layer.c`): space-to-depth by `stride` (YOLOv2's passthrough).

Quirk kept: Darknet's default (reverse=0) calls reorg_cpu with forward=0, so the output is
*not* the textbook space-to-depth: it reads the input as if it were (c/s²) x (h·s) x (w·s)
(see kernels/reorg.py). Shapes are w/s x h/s x c·s² all the same. `reverse=1` goes the other
way, `flatten=1` transposes channel-major to pixel-major, `extra=N` pads N values per image.
Backward applies the inverse permutation; Darknet *writes* it over the previous delta, we add
(compat="darknet-cpu" writes).
"""
from ..kernels.blas import copy_cpu, axpy_cpu
from ..kernels.reorg import flatten_cpu, reorg_cpu
from .base import DEFAULT_QUIRKS, Layer, require_image_input


class ReorgLayer(Layer):
    type = "reorg"

    def __init__(self, batch, w, h, c, stride, reverse=False, flatten=False, extra=0, quirks=DEFAULT_QUIRKS):
        self.batch, self.c, self.stride = batch, c, stride
        self.reverse, self.flatten, self.extra = bool(reverse), bool(flatten), extra
        self.quirks = quirks
        self.resize(w, h)

    def resize(self, w, h):
        s = self.stride
        self.w, self.h = w, h
        if self.reverse:
            self.out_w, self.out_h, self.out_c = w * s, h * s, self.c // (s * s)
        else:
            self.out_w, self.out_h, self.out_c = w // s, h // s, self.c * s * s
        self.inputs = w * h * self.c
        self.outputs = self.out_w * self.out_h * self.out_c
        if self.extra:
            self.out_w = self.out_h = self.out_c = 0
            self.outputs = self.inputs + self.extra
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        stride = s.find_int("stride", 1, at_least=1)
        reverse = s.find_int("reverse", 0)
        flatten = s.find_int("flatten", 0)
        extra = s.find_int("extra", 0, at_least=0)
        if not (flatten or extra):
            # both directions run reorg_cpu with c / stride² output channels
            if params.c % (stride * stride):
                raise s.error("stride", f"reorg needs channels ({params.c}) divisible "
                                        f"by stride² ({stride * stride})")
            if not reverse and (params.w % stride or params.h % stride):
                raise s.error("stride", f"a {params.w}x{params.h} input does not divide by "
                                        f"stride {stride}")
        return cls(params.batch, params.w, params.h, params.c, stride, reverse, flatten, extra,
                   params.net.quirks)

    def forward(self, net):
        """forward_reorg_layer"""
        b = self.batch
        if self.flatten:
            flatten_cpu(net.input, self.w * self.h, self.c, b, 0 if self.reverse else 1,
                        self.output, False)
        elif self.extra:
            for i in range(b):
                copy_cpu(self.inputs, net.input[i * self.inputs:], self.output[i * self.outputs:])
        else:
            reorg_cpu(net.input, self.w, self.h, self.c, b, self.stride, 1 if self.reverse else 0,
                      self.output, False)

    def backward(self, net):
        """backward_reorg_layer"""
        if net.delta is None:
            return
        acc = not self.quirks.overwrite_delta
        b = self.batch
        if self.flatten:
            flatten_cpu(self.delta, self.w * self.h, self.c, b, 1 if self.reverse else 0,
                        net.delta, acc)
        elif self.extra:
            for i in range(b):
                d, nd = self.delta[i * self.outputs:], net.delta[i * self.inputs:]
                if acc:
                    axpy_cpu(self.inputs, 1.0, d, nd)
                else:
                    copy_cpu(self.inputs, d, nd)
        else:
            reorg_cpu(self.delta, self.w, self.h, self.c, b, self.stride, 0 if self.reverse else 1,
                      net.delta, acc)

    def describe(self):
        if self.extra:
            return f"reorg              {self.inputs:4d}   ->  {self.outputs:4d}"
        return (f"reorg              /{self.stride:2d}  {self.w:4d} x{self.h:4d} x{self.c:4d}   ->  "
                f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")


class Reorg3dLayer(ReorgLayer):
    """AlexeyAB's [reorg3d] (its reorg_layer.c): reorg_cpu taken on the *output* shape, which
    makes it the textbook space-to-depth (each stride x stride block of pixels becomes
    stride² channels). Backward applies the inverse permutation, added (AlexeyAB's CPU
    writes it: quirks.overwrite_delta)."""
    type = "reorg3d"

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        stride = s.find_int("stride", 1)
        if stride < 1:
            raise s.error("stride", f"must be at least 1, found {stride}")
        if s.find_int("reverse", 0):
            raise s.error("reverse", "[reorg3d] reverse=1 is not supported yet")
        if params.w % stride or params.h % stride:
            raise s.error("stride", f"a {params.w}x{params.h} input does not divide by "
                                    f"stride {stride}")
        return cls(params.batch, params.w, params.h, params.c, stride, quirks=params.net.quirks)

    def forward(self, net):
        """forward_reorg_layer (AlexeyAB)"""
        reorg_cpu(net.input, self.out_w, self.out_h, self.out_c, self.batch, self.stride, 0,
                  self.output, False)

    def backward(self, net):
        """backward_reorg_layer (AlexeyAB)"""
        if net.delta is None:
            return
        reorg_cpu(self.delta, self.out_w, self.out_h, self.out_c, self.batch, self.stride, 1,
                  net.delta, not self.quirks.overwrite_delta)

    def describe(self):
        return (f"reorg3d               /{self.stride:2d}  {self.w:4d} x{self.h:4d} x{self.c:4d}"
                f"   ->  {self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")
