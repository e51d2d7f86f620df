"""[dropout] (Darknet's `dropout_layer.c`). Shares its output and delta with the layer before
it (Darknet aliases the buffers); in train mode it zeroes inputs with probability p and
scales the rest by 1/(1-p), in place."""
import numpy as np

from .base import Layer


class DropoutLayer(Layer):
    type = "dropout"
    draws_random = True

    def __init__(self, batch, inputs, probability, prev):
        self.batch, self.inputs, self.outputs = batch, inputs, inputs
        self.probability = probability
        self.scale = 1.0 / (1.0 - probability) if probability < 1 else 0.0
        self.train_buffer("rand", batch * inputs, "dropout draws")
        self.output = prev.output             # aliases, as in Darknet's parser
        self.train_alias("delta", prev)
        self.out_w, self.out_h, self.out_c = prev.out_w, prev.out_h, prev.out_c
        self.w, self.h, self.c = prev.out_w, prev.out_h, prev.out_c
        self.rng = np.random.default_rng(0)

    @classmethod
    def from_cfg(cls, s, params):
        if params.index == 0:
            raise s.error(None, "a dropout layer cannot be the first layer")
        p = s.find_float("probability", 0.5)
        if not 0 <= p < 1:
            raise s.error("probability", f"must be in [0, 1), found {p}")
        return cls(params.batch, params.inputs, p, params.net.layers[params.index - 1])

    def resize_in(self, layers, w, h):
        """Its output and delta stay the previous layer's (aliases, as in Darknet)."""
        prev = layers[-1]
        self.output = prev.output
        self.train_alias("delta", prev)

    def forward(self, net):
        if not net.train:
            return
        n = self.batch * self.inputs
        self.rand[:] = self.rng.random(n, dtype=np.float32)
        keep = self.rand >= self.probability
        x = net.input[:n]
        x *= np.where(keep, np.float32(self.scale), np.float32(0.0))

    def backward(self, net):
        if net.delta is None:
            return
        n = self.batch * self.inputs
        keep = self.rand >= self.probability
        net.delta[:n] *= np.where(keep, np.float32(self.scale), np.float32(0.0))

    def describe(self):
        return f"dropout       p = {self.probability:.2f}               {self.inputs:4d}  ->  {self.inputs:4d}"
