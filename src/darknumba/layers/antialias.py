"""AlexeyAB's `antialiasing=1|2` on [convolutional] and [maxpool] (make_convolutional_layer /
make_maxpool_layer): the layer runs with stride 1, then a fixed depthwise blur with the stride
the cfg gave it makes the output: antialiasing=1 a 3x3 [1 2 1]x[1 2 1]/16 blur with padding 1,
antialiasing=2 a 2x2 box (1/4) without padding. The blur has no parameters in .weights and is
never updated.

Backward goes through the blur into the layer (what AlexeyAB's GPU build does; its CPU
backward ignores the blur). The layers after it see the blurred size, as AlexeyAB's parser
passes them; a [route] or [shortcut] that names this layer also gets the blurred output here
(AlexeyAB's gives it the stride-1 size with the blurred values in front).
"""
import numpy as np

from .base import Layer
from .steps import step_net

_BLUR = {
    1: (3, 1, np.outer([1, 2, 1], [1, 2, 1]).ravel() / 16.0),
    2: (2, 0, np.full(4, 0.25)),
}


class Antialiased(Layer):
    """`host` (built with stride 1) followed by the blur, a `conv_class` layer with `stride`
    (x, y). Anything not defined here (weights, filters, flipped...) is the host's."""

    def __init__(self, host, conv_class, stride, kind, quirks):
        self.host, self.blur_stride, self.antialiasing = host, stride, kind
        self.conv_class, self.quirks = conv_class, quirks
        self.type = host.type
        self._build_blur()

    def _build_blur(self):
        h = self.host
        size, pad, taps = _BLUR[self.antialiasing]
        sx, sy = self.blur_stride
        self.blur = self.conv_class(h.batch, h.out_h, h.out_w, h.out_c, h.out_c, h.out_c,
                                    size, sx, pad, "linear", quirks=self.quirks, stride_y=sy)
        self.blur.weights[:] = np.tile(taps, h.out_c).astype(np.float32)
        self.batch, self.h, self.w, self.c, self.inputs = h.batch, h.h, h.w, h.c, h.inputs
        b = self.blur
        self.out_h, self.out_w, self.out_c, self.outputs = b.out_h, b.out_w, b.out_c, b.outputs
        self.output = b.output
        self.train_alias("delta", b)
        self.workspace_size = max(h.workspace_size, b.workspace_size)

    def __getattr__(self, name):
        if name == "host":                 # not yet set (copy / unpickling): no recursion
            raise AttributeError(name)
        if name in (vars(self).get("_deferred") or ()):     # its own delta, on first read
            return Layer.__getattr__(self, name)
        return getattr(self.host, name)

    @property
    def stride_x(self):
        """The layer's stride as a whole (the blur's; the host runs at stride 1)."""
        return self.blur_stride[0]

    @property
    def stride_y(self):
        return self.blur_stride[1]

    @property
    def learning_rate_scale(self):
        return self.host.learning_rate_scale

    @learning_rate_scale.setter
    def learning_rate_scale(self, v):
        self.host.learning_rate_scale = v

    def random_init(self, rng):
        self.host.random_init(rng)

    def forward(self, net):
        self.host.forward(net)
        self.blur.forward(step_net(net, self.host.output))

    def backward(self, net):
        """The blur's backward into the host's delta, then the host's. AlexeyAB's CPU build
        has no blur backward: the next layer's gradient (blurred layout) lands in the first
        values of the host-sized delta, read as the host's (quirks.antialias_no_blur_backward)."""
        self.host.delta.fill(0)
        if self.quirks.antialias_no_blur_backward:
            # its forward also copied the blurred output over the start of the host's output,
            # which the host's activation gradient then reads
            self.host.delta[:self.delta.size] = self.delta
            self.host.output[:self.output.size] = self.output
        else:
            self.blur.backward(step_net(net, self.host.output, self.host.delta))
        self.host.backward(net)

    def update(self, a):
        self.host.update(a)

    def resize(self, w, h):
        self.host.resize(w, h)
        self._build_blur()

    def weight_records(self):
        return self.host.weight_records()

    @property
    def bflops(self):
        return self.host.bflops + self.blur.bflops

    def describe(self):
        return f"{self.host.describe()}\n      AA:  {self.blur.describe()}"
