"""[maxpool] (Darknet's `maxpool_layer.c`). padding defaults to size-1, so size=2 stride=1
keeps the input size (yolov3-tiny's layer 11); AlexeyAB computes the same sizes and windows.
AlexeyAB adds `maxpool_depth=1 out_channels=N` (a maximum over channel groups at each pixel,
the map size unchanged), `antialiasing` (layers/antialias.py), and [local_avgpool]: the mean
over each window's cells inside the image."""
import numpy as np

from ..kernels.pool import (backward_local_avgpool_cpu, backward_maxpool_cpu,
                            forward_local_avgpool_cpu, forward_maxpool2_cpu,
                            forward_maxpool2_same_cpu, forward_maxpool_cpu,
                            forward_maxpool_depth_cpu, forward_maxpool_rows_cpu)
from .antialias import Antialiased
from .base import Layer, require_image_input
from .convolutional import ConvolutionalLayer
from .memory import SizeError, zeros

INT32_MAX = 2 ** 31 - 1
TWO_PASS_MIN = 3            # windows larger than this take the two-pass (rows, then columns) kernel
ROW_GROUPS = 64             # its parallel iterations (each with a plane of scratch)


def read_pool_keys(s, params):
    """(size, stride, padding) as parse_maxpool / parse_local_avgpool read them."""
    stride = s.find_int("stride", 1, at_least=1)
    sx = s.find_int("stride_x", stride, at_least=1)
    sy = s.find_int("stride_y", stride, at_least=1)
    if sx != sy:
        raise s.error("stride_x", f"stride_x={sx} with stride_y={sy} is not supported yet "
                                  f"(only equal strides)")
    size = s.find_int("size", sx, at_least=1)
    padding = s.find_int("padding", size - 1, at_least=0)
    require_image_input(s, params)
    return size, sx, padding


class MaxpoolLayer(Layer):
    type = "maxpool"
    output_can_be_view = True

    def __init__(self, batch, h, w, c, size, stride, padding, maxpool_depth=0, out_channels=1):
        self.batch, self.h, self.w, self.c = batch, h, w, c
        self.size, self.stride, self.pad = size, stride, padding
        self.maxpool_depth, self.out_channels = maxpool_depth, out_channels
        self._set_sizes()

    def _set_sizes(self):
        if self.maxpool_depth:
            self.out_w, self.out_h, self.out_c = self.w, self.h, self.out_channels
        else:
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
        # forward_maxpool_rows_cpu's scratch: a plane's row maxima for each group of planes
        self.groups = min(self.batch * self.c, ROW_GROUPS) if self._two_pass() else 0
        self.rows_max = zeros(self.groups * self.h * self.out_w, "maxpool row maxima")
        self.rows_idx = zeros(self.groups * self.h * self.out_w, "maxpool row maxima", np.int32)

    def _two_pass(self):
        """Large windows (SPP's 5, 9, 13) take forward_maxpool_rows_cpu."""
        return self.type == "maxpool" and not self.maxpool_depth and self.size > TWO_PASS_MIN

    @classmethod
    def from_cfg(cls, s, params):
        size, stride, padding = read_pool_keys(s, params)
        depth = s.find_int("maxpool_depth", 0)
        out_channels = s.find_int("out_channels", 1)
        antialiasing = s.find_int("antialiasing", 0)
        if depth and out_channels < 1:
            raise s.error("out_channels", f"must be at least 1, found {out_channels}")
        if antialiasing not in (0, 1, 2):
            raise s.error("antialiasing", f"expected 0, 1 (3x3 blur) or 2 (2x2 blur), found "
                                          f"{antialiasing}")
        if s.find_int("maxpool_zero_nonmax", 0):
            raise s.error("maxpool_zero_nonmax", "is not supported yet (AlexeyAB computes it "
                                                 "in its GPU build only)")
        try:
            l = cls(params.batch, params.h, params.w, params.c, size,
                    1 if antialiasing else stride, padding, depth, out_channels)
        except ValueError as e:
            raise s.error(None, str(e)) from None
        if antialiasing:
            return Antialiased(l, ConvolutionalLayer, (stride, stride), antialiasing,
                               params.net.quirks)
        return l

    def resize(self, w, h):
        self.w, self.h = w, h
        self._set_sizes()

    def forward_kernel(self):
        """The kernel forward runs for this layer's shape (vision/compile_ahead.py asks too)."""
        if self.maxpool_depth:
            return forward_maxpool_depth_cpu
        if self.size == 2 and self.stride == 1 and self.pad == 1:
            return forward_maxpool2_same_cpu
        if self._two_pass():
            return forward_maxpool_rows_cpu
        return forward_maxpool2_cpu if self.size == 2 else forward_maxpool_cpu

    def forward(self, net):
        """forward_maxpool_layer"""
        kernel = self.forward_kernel()
        if kernel is forward_maxpool_depth_cpu:
            forward_maxpool_depth_cpu(net.input, self.batch, self.c, self.h * self.w,
                                      self.out_c, self.output, self.indexes)
            return
        if kernel is forward_maxpool2_same_cpu:
            # indexes None at inference: the kernel's signature without them compiles less
            forward_maxpool2_same_cpu(net.input, self.batch, self.c, self.h, self.w, self.output,
                                      self.indexes if net.train else None, net.train)
            return
        if kernel is forward_maxpool_rows_cpu:
            forward_maxpool_rows_cpu(net.input, self.batch, self.c, self.h, self.w, self.size,
                                     self.stride, self.pad, self.out_h, self.out_w, self.output,
                                     self.indexes, self.groups, self.rows_max, self.rows_idx,
                                     net.train)
            return
        if kernel is forward_maxpool2_cpu:
            forward_maxpool2_cpu(net.input, self.batch, self.c, self.h, self.w, self.stride,
                                 self.pad, self.out_h, self.out_w, self.output,
                                 self.indexes if net.train else None, net.train)
            return
        forward_maxpool_cpu(net.input, self.batch, self.c, self.h, self.w, self.size, self.stride,
                            self.pad, self.out_h, self.out_w, self.output, self.indexes,
                            net.train)

    def backward(self, net):
        """backward_maxpool_layer: each output's delta goes to the input that won."""
        if net.delta is None:
            return
        # a spatial maxpool's winners lie in the output's own plane, maxpool_depth's in its image
        parts = self.batch if self.maxpool_depth else self.batch * self.c
        backward_maxpool_cpu(self.delta, self.indexes, net.delta, parts,
                             self.batch * self.outputs // parts)

    def describe(self):
        shape = (f"{self.w:4d} x{self.h:4d} x{self.c:4d}   ->  "
                 f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")
        if self.maxpool_depth:
            return f"max-depth    {self.size:2d}x{self.size:2d}/{self.stride:2d}  {shape}"
        return f"max          {self.size} x {self.size} / {self.stride}  {shape}"


class LocalAvgpoolLayer(MaxpoolLayer):
    """[local_avgpool] (AlexeyAB's forward/backward_local_avgpool_layer): a maxpool-shaped
    window mean; its backward spreads delta / (size*size) over the window's cells inside the
    image, not the gradient of the forward's mean at the borders."""
    type = "local_avgpool"

    @classmethod
    def from_cfg(cls, s, params):
        size, stride, padding = read_pool_keys(s, params)
        if (padding + 1) // 2 > size - 1:
            raise s.error("padding", f"{padding} leaves windows with no cell inside the image "
                                     f"(at most {2 * (size - 1)} for size={size})")
        try:
            return cls(params.batch, params.h, params.w, params.c, size, stride, padding)
        except ValueError as e:
            raise s.error(None, str(e)) from None

    def forward_kernel(self):
        return forward_local_avgpool_cpu

    def forward(self, net):
        forward_local_avgpool_cpu(net.input, self.batch, self.c, self.h, self.w, self.size,
                                  self.stride, self.pad, self.out_h, self.out_w, self.output)

    def backward(self, net):
        if net.delta is None:
            return
        backward_local_avgpool_cpu(self.delta, self.batch, self.c, self.h, self.w, self.size,
                                   self.stride, self.pad, self.out_h, self.out_w, net.delta)

    def describe(self):
        return (f"avg          {self.size:2d}x{self.size:2d}/{self.stride:2d}  "
                f"{self.w:4d} x{self.h:4d} x{self.c:4d}   ->  "
                f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")
