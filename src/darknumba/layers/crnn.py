"""[crnn] (Darknet's `crnn_layer.c`): [rnn] with 3x3 same-padding convolutions instead of
connected layers: input (c -> hidden_filters), self (hidden -> hidden), output (hidden ->
output_filters), all with the cfg's activation and batch norm. The state is an h x w x
hidden_filters image per sequence. .weights: the three conv records in that order. Training,
test-mode state and the backward order are as in layers/rnn.py.
"""
from .base import DEFAULT_QUIRKS, require_image_input
from .activate import get_activation
from .convolutional import ConvolutionalLayer
from .rnn import RNNLayer


class CRNNLayer(RNNLayer):
    type = "crnn"

    def __init__(self, batch, h, w, c, hidden_filters, output_filters, steps, activation,
                 batch_normalize=False, quirks=DEFAULT_QUIRKS):
        if batch % steps:
            raise ValueError(f"batch {batch} is not a multiple of time_steps {steps}")
        self.steps, self.batch = steps, batch // steps
        self.h, self.w, self.c = h, w, c
        self.out_h, self.out_w, self.out_c = h, w, output_filters
        self.inputs, self.outputs = h * w * c, h * w * output_filters
        self.hidden = h * w * hidden_filters
        self.activation, self.quirks, self.shortcut = activation, quirks, 0
        self.batch_normalize = bool(batch_normalize)

        def conv(cin, n):
            return ConvolutionalLayer(self.batch, h, w, cin, n, 1, 3, 1, 1, activation,
                                      batch_normalize, quirks=quirks)
        self.input_layer = conv(c, hidden_filters)
        self.self_layer = conv(hidden_filters, hidden_filters)
        self.output_layer = conv(hidden_filters, output_filters)
        self._init_steps()

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        out_f = s.find_int("output_filters", 1, at_least=1)
        hid_f = s.find_int("hidden_filters", 1, at_least=1)
        act = get_activation(s)
        bn = s.find_int("batch_normalize", 0)
        steps = params.net.time_steps
        if params.batch % steps:
            raise s.error(None, f"batch {params.batch} is not a multiple of time_steps {steps}")
        l = cls(params.batch, params.h, params.w, params.c, hid_f, out_f, steps, act, bn,
                params.net.quirks)
        l.shortcut = s.find_int("shortcut", 0)
        return l

    def describe(self):
        return f"CRNN Layer: {self.h} x {self.w} x {self.c} image, {self.out_c} filters"
