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
from .xnor import setup as setup_xnor


class CRNNLayer(RNNLayer):
    type = "crnn"

    def __init__(self, batch, h, w, c, hidden_filters, output_filters, steps, activation,
                 batch_normalize=False, quirks=DEFAULT_QUIRKS, size=3, padding=1, dilation=1,
                 groups=1, xnor=False):
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
            return ConvolutionalLayer(self.batch, h, w, cin, n, groups, size, 1, padding,
                                      activation, batch_normalize, quirks=quirks,
                                      dilation=dilation)
        self.input_layer = conv(c, hidden_filters)
        self.self_layer = conv(hidden_filters, hidden_filters)
        self.output_layer = conv(hidden_filters, output_filters)
        if xnor:        # make_crnn_layer passes xnor to its convolutions (layers/xnor.py)
            for l in (self.input_layer, self.self_layer, self.output_layer):
                setup_xnor(l, False)
        self._init_steps()

    @classmethod
    def from_cfg(cls, s, params):
        """parse_crnn: pjreddie's reads output_filters and hidden_filters (3x3, pad 1);
        AlexeyAB's (quirks.crnn_alexeyab_keys) output, hidden, size, pad/padding, dilation
        and groups, with its defaults (size 3, no padding)."""
        require_image_input(s, params)
        quirks = params.net.quirks
        if quirks.crnn_alexeyab_keys:
            out_f = s.find_int("output", 1, at_least=1)
            hid_f = s.find_int("hidden", 1, at_least=1)
            conv = _ab_conv_keys(s, params.h, params.w)
        else:
            out_f = s.find_int("output_filters", 1, at_least=1)
            hid_f = s.find_int("hidden_filters", 1, at_least=1)
            conv = {}
        act = get_activation(s)
        bn = s.find_int("batch_normalize", 0)
        steps = params.net.time_steps
        if params.batch % steps:
            raise s.error(None, f"batch {params.batch} is not a multiple of time_steps {steps}")
        groups = conv.get("groups", 1)
        if params.c % groups or hid_f % groups or out_f % groups:
            raise s.error("groups", f"channels ({params.c}), hidden ({hid_f}) and output "
                                    f"({out_f}) must be divisible by groups ({groups})")
        l = cls(params.batch, params.h, params.w, params.c, hid_f, out_f, steps, act, bn,
                quirks, **conv)
        l.shortcut = s.find_int("shortcut", 0)
        return l

    def describe(self):
        return f"CRNN Layer: {self.h} x {self.w} x {self.c} image, {self.out_c} filters"


def _ab_conv_keys(s, h, w):
    """AlexeyAB's parse_crnn keys of the three convolutions. Its state goes back through the
    self layer, so the convolution must keep h x w: AlexeyAB builds any other shape and reads
    past its buffers; here that is an error."""
    xnor = bool(s.find_int("xnor", 0))
    size = s.find_int("size", 3, at_least=1)
    dilation = s.find_int("dilation", 1, at_least=1)
    if xnor and dilation > 1:
        raise s.error("xnor", "xnor=1 with dilation is not supported (AlexeyAB's CPU build "
                              "computes it differently in training and at inference)")
    padding = s.find_int("padding", 0, at_least=0)
    if s.find_int("pad", 0):
        padding = size // 2
    groups = s.find_int("groups", 1, at_least=1)
    if xnor:
        groups = 1      # make_convolutional_layer: an xnor layer has no groups
    stride = s.find_int("stride", 1, at_least=1)
    span = dilation * (size - 1) + 1
    out_h, out_w = (h + 2 * padding - span) // stride + 1, (w + 2 * padding - span) // stride + 1
    if (out_h, out_w) != (h, w):
        raise s.error(None, f"size={size} stride={stride} dilation={dilation} padding={padding} "
                            f"turns {h} x {w} into {out_h} x {out_w}: the recurrent state must "
                            f"keep its shape (e.g. size=3 pad=1 stride=1)")
    return {"size": size, "padding": padding, "dilation": dilation, "groups": groups,
            "xnor": xnor}
