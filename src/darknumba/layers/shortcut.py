"""[shortcut] (Darknet's `shortcut_layer.c`): out = act(alpha*prev + beta*from)."""
from ..kernels.activations import ACTIVATIONS
from ..kernels.blas import axpy_cpu, copy_cpu, shortcut_cpu, shortcut_same_cpu
from .base import Layer
from .common import SHORTCUT_EXCLUDED, activate_output, get_activation, gradient_output


class ShortcutLayer(Layer):
    type = "shortcut"

    def __init__(self, batch, index, w, h, c, w2, h2, c2, activation="linear", alpha=1.0, beta=1.0):
        self.batch, self.index = batch, index
        self.w, self.h, self.c = w2, h2, c2          # the `from` layer's shape, as in Darknet
        self.out_w, self.out_h, self.out_c = w, h, c
        self.activation = activation
        self.activation_id = ACTIVATIONS[activation]
        self.alpha, self.beta = alpha, beta
        self.outputs = self.inputs = w * h * c
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        v = s.find_int("from")
        i = params.index + v if v < 0 else v
        if not 0 <= i < params.index:
            raise s.error("from", f"layer index {v} points to layer {i}, but only layers "
                                  f"0..{params.index - 1} come before this shortcut (layer {params.index})")
        src = params.net.layers[i]
        if not (src.out_w and src.out_h and src.out_c):
            raise s.error("from", f"layer {i} does not output an image")
        w1, w2 = src.out_w, params.w
        if (w1 >= w2 and (w1 % w2 or src.out_h % params.h)) or (w1 < w2 and (w2 % w1 or params.h % src.out_h)):
            raise s.error("from", f"layer {i} ({src.out_w}x{src.out_h}) and the previous layer "
                                  f"({params.w}x{params.h}) differ by a non-integer scale")
        act = get_activation(s, default="linear", exclude=SHORTCUT_EXCLUDED)
        return cls(params.batch, i, params.w, params.h, params.c, src.out_w, src.out_h, src.out_c,
                   act, s.find_float("alpha", 1.0), s.find_float("beta", 1.0))

    def resize_from(self, layers, w, h):
        src = layers[self.index]
        self.w, self.h = src.out_w, src.out_h
        self.out_w, self.out_h = w, h
        self.outputs = self.inputs = w * h * self.out_c
        self._alloc_io()

    def forward(self, net):
        """forward_shortcut_layer"""
        n = self.outputs * self.batch
        if self._same_shape():
            shortcut_same_cpu(n, self.alpha, net.input, self.beta,
                              net.layers[self.index].output, self.output)
        else:
            copy_cpu(n, net.input, self.output)
            shortcut_cpu(self.batch, self.w, self.h, self.c, net.layers[self.index].output,
                         self.out_w, self.out_h, self.out_c, self.alpha, self.beta, self.output)
        activate_output(self, net.train)

    def _same_shape(self):
        return (self.w, self.h, self.c) == (self.out_w, self.out_h, self.out_c)

    def backward(self, net):
        """backward_shortcut_layer"""
        n = self.outputs * self.batch
        gradient_output(self)
        if net.delta is not None:
            axpy_cpu(n, self.alpha, self.delta, net.delta)
        prev = net.layers[self.index].delta
        if self._same_shape():
            shortcut_same_cpu(n, 1.0, prev, self.beta, self.delta, prev)
        else:
            shortcut_cpu(self.batch, self.out_w, self.out_h, self.out_c, self.delta, self.w,
                         self.h, self.c, 1.0, self.beta, prev)

    def describe(self):
        return (f"res  {self.index:3d}                {self.w:4d} x{self.h:4d} x{self.c:4d}   ->  "
                f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")
