"""AlexeyAB's [empty] / [silence]: passes the previous layer through; its output and delta are
the previous layer's buffers (as the parser aliases them), so forward and backward do nothing."""
from .base import Layer


class EmptyLayer(Layer):
    type = "empty"

    def __init__(self, index, prev):
        self.index = index
        self._alias(prev)

    def _alias(self, prev):
        self.batch = prev.batch
        self.w = self.out_w = prev.out_w
        self.h = self.out_h = prev.out_h
        self.c = self.out_c = prev.out_c
        self.inputs = self.outputs = prev.outputs
        self.output = prev.output
        self.train_alias("delta", prev)

    @classmethod
    def from_cfg(cls, s, params):
        if params.index == 0:
            raise s.error(None, f"[{s.type}] cannot be the first layer")
        return cls(params.index, params.net.layers[params.index - 1])

    def resize_in(self, layers, w, h):
        self._alias(layers[self.index - 1])

    def forward(self, net):
        return None

    def backward(self, net):
        return None

    def describe(self):
        return "empty"
