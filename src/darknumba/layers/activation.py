"""[activation] (Darknet's `activation_layer.c`): output = act(input), default linear.
Backward multiplies by act'(output) and *copies* into the previous delta in Darknet; we add
(compat="darknet-cpu" copies)."""
from ..kernels.activations import ACTIVATIONS, activate_array, gradient_array
from ..kernels.blas import copy_cpu
from .base import DEFAULT_QUIRKS, Layer, pass_delta
from .activate import get_activation


class ActivationLayer(Layer):
    type = "activation"

    def __init__(self, batch, w, h, c, inputs, activation, quirks=DEFAULT_QUIRKS):
        self.batch, self.quirks = batch, quirks
        self.activation, self.activation_id = activation, ACTIVATIONS[activation]
        self.c = self.out_c = c
        self._sized(w, h, inputs)

    def _sized(self, w, h, inputs):
        self.w = self.out_w = w
        self.h = self.out_h = h
        self.inputs = self.outputs = inputs
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        act = get_activation(s, default="linear")
        return cls(params.batch, params.w, params.h, params.c, params.inputs, act, params.net.quirks)

    def resize(self, w, h):
        self._sized(w, h, w * h * self.c)

    def forward(self, net):
        """forward_activation_layer"""
        n = self.batch * self.outputs
        copy_cpu(n, net.input, self.output)
        activate_array(self.output, n, self.activation_id)

    def backward(self, net):
        """backward_activation_layer"""
        n = self.batch * self.outputs
        gradient_array(self.output, n, self.activation_id, self.delta)
        pass_delta(net, self.delta, n, self.quirks.overwrite_delta)

    def describe(self):
        return f"Activation Layer: {self.inputs} inputs"
