"""[activation] (Darknet's `activation_layer.c`): output = act(input), default linear.
Backward multiplies by act'(output) and *copies* into the previous delta in Darknet; we add
(compat="darknet-cpu" copies).

AlexeyAB's swish, mish and hard_mish differentiate from what the forward kept (as in its
convolution). Its own [activation] layer has no case for them (nor, on the CPU, for relu6)
and outputs 0 with a zero gradient: compat="darknet-cpu" reproduces that
(quirks.activate_lacks_ab_cases); by default they compute what they name."""
from ..kernels.activations import ACTIVATIONS, KEEPS_INPUT, activate_array, gradient_array
from ..kernels.blas import copy_cpu
from .activate import (ACTIVATION_LAYER_EXCLUDED, ZEROED_IN_ACTIVATION_LAYER, activate_output,
                       get_activation, gradient_output, zeroed)
from .base import DEFAULT_QUIRKS, Layer, pass_delta


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
        act = get_activation(s, default="linear", exclude=ACTIVATION_LAYER_EXCLUDED)
        return cls(params.batch, params.w, params.h, params.c, params.inputs, act, params.net.quirks)

    def resize(self, w, h):
        self._sized(w, h, w * h * self.c)

    def forward(self, net):
        """forward_activation_layer"""
        n = self.batch * self.outputs
        if zeroed(self, ZEROED_IN_ACTIVATION_LAYER):
            self.output[:n] = 0
            return
        copy_cpu(n, net.input, self.output)
        if self.activation_id in KEEPS_INPUT:
            activate_output(self, net.train)
        else:
            activate_array(self.output, n, self.activation_id)

    def backward(self, net):
        """backward_activation_layer"""
        n = self.batch * self.outputs
        if zeroed(self, ZEROED_IN_ACTIVATION_LAYER):
            self.delta[:n] = 0
        elif self.activation_id in KEEPS_INPUT:
            gradient_output(self)
        else:
            gradient_array(self.output, n, self.activation_id, self.delta)
        pass_delta(net, self.delta, n, self.quirks.overwrite_delta)

    def describe(self):
        return f"Activation Layer: {self.inputs} inputs"
