"""[shortcut] (Darknet's `shortcut_layer.c`): out = act(alpha*prev + beta*from).

AlexeyAB's form (`from=` several layers, or `weights_type=per_feature|per_channel`,
`weights_normalization=none|relu|softmax`): out = act(w_0*prev + sum_i w_i*from_i), the from
layers of the same width and height, one with fewer values per image adding only to the first
ones (blas.c:shortcut_multilayer_cpu). Its weights (n+1, or (n+1)*c per channel; 1 at the
start) follow the layer's other records in .weights; their gradient is AlexeyAB's, w.r.t. the
normalised weights; update_shortcut_layer is SGD with momentum and decay.
"""
import numpy as np

from ..errors import CfgError
from ..kernels.activations import ACTIVATIONS
from ..kernels.blas import axpy_cpu, copy_cpu, shortcut_cpu, shortcut_same_cpu
from ..kernels.blas_ab import (NO_NORMALIZATION, RELU_NORMALIZATION, SOFTMAX_NORMALIZATION,
                               backward_shortcut_input_cpu, normalized_weights, shortcut_input_cpu,
                               shortcut_weight_updates_cpu)
from .base import Layer, sgd_update_weights
from .activate import SHORTCUT_EXCLUDED, activate_output, get_activation, gradient_output

WEIGHTS_TYPES = {"none": 0, "per_feature": 1, "per_layer": 1, "per_channel": 2}
NORMALIZATIONS = {"none": NO_NORMALIZATION, "relu": RELU_NORMALIZATION,
                  "avg_relu": RELU_NORMALIZATION, "softmax": SOFTMAX_NORMALIZATION}


def same_scale(w1, h1, w2, h2) -> bool:
    """shortcut_cpu's condition (Darknet asserts it): one map is the other sampled by the same
    integer stride in both directions, so every index it computes stays inside both maps."""
    if w1 >= w2:
        return w1 % w2 == 0 and h1 == h2 * (w1 // w2)
    return w2 % w1 == 0 and h2 == h1 * (w2 // w1)


class ShortcutLayer(Layer):
    type = "shortcut"
    output_can_be_view = True

    def __init__(self, batch, index, w, h, c, w2, h2, c2, activation="linear", alpha=1.0, beta=1.0):
        self.batch, self.index = batch, index
        self.input_layers = [index]
        self.w, self.h, self.c = w2, h2, c2          # the `from` layer's shape, as in Darknet
        self.out_w, self.out_h, self.out_c = w, h, c
        self.activation = activation
        self.activation_id = ACTIVATIONS[activation]
        self.alpha, self.beta = alpha, beta
        self.multilayer = False
        self.nweights = 0
        self.outputs = self.inputs = w * h * c
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        layers = params.net.layers
        idx = []
        for v in s.find_list("from", int):
            i = params.index + v if v < 0 else v
            if not 0 <= i < params.index:
                raise s.error("from", f"layer index {v} points to layer {i}, but only layers "
                                      f"0..{params.index - 1} come before this shortcut (layer {params.index})")
            if not (layers[i].out_w and layers[i].out_h and layers[i].out_c):
                raise s.error("from", f"layer {i} does not output an image")
            idx.append(i)
        if not idx:
            raise s.error("from", "shortcut needs at least one layer")
        act = get_activation(s, default="linear", exclude=SHORTCUT_EXCLUDED)
        wtype = _choice(s, "weights_type", WEIGHTS_TYPES)
        norm = _choice(s, "weights_normalization", NORMALIZATIONS)
        src = layers[idx[0]]
        if len(idx) > 1 or wtype:
            for i in idx:
                if (layers[i].out_w, layers[i].out_h) != (params.w, params.h):
                    raise s.error("from", f"layer {i} ({layers[i].out_w}x{layers[i].out_h}) and "
                                          f"the previous layer ({params.w}x{params.h}) differ "
                                          f"in size")
            l = cls(params.batch, idx[0], params.w, params.h, params.c, src.out_w, src.out_h,
                    src.out_c, act)
            l._make_multilayer(idx, [layers[i].outputs for i in idx], wtype, norm)
            return l
        if not same_scale(src.out_w, src.out_h, params.w, params.h):
            raise s.error("from", f"layer {idx[0]} ({src.out_w}x{src.out_h}) and the previous layer "
                                  f"({params.w}x{params.h}) do not differ by one integer scale "
                                  f"in both width and height")
        return cls(params.batch, idx[0], params.w, params.h, params.c, src.out_w, src.out_h,
                   src.out_c, act, s.find_float("alpha", 1.0), s.find_float("beta", 1.0))

    def _make_multilayer(self, input_layers, input_sizes, weights_type, normalization):
        """make_shortcut_layer with several inputs or weights."""
        self.multilayer = True
        self.input_layers, self.input_sizes = list(input_layers), list(input_sizes)
        self.w, self.h, self.c = self.out_w, self.out_h, self.out_c
        self.weights_type, self.weights_normalization = weights_type, normalization
        n = len(input_layers)
        self.nweights = (n + 1) * (self.out_c if weights_type == 2 else 1) if weights_type else 0
        if self.nweights:
            self.weights = np.ones(self.nweights, np.float32)
            self.weight_updates = np.zeros(self.nweights, np.float32)
        self.wn = np.ones(max(self.nweights, n + 1), np.float32)   # the normalised weights
        self.learning_rate_scale = 1.0

    def resize_in(self, layers, w, h):
        src = layers[self.index]
        self.out_w, self.out_h = w, h
        self.outputs = self.inputs = w * h * self.out_c
        if self.multilayer:
            self.w, self.h = w, h
            self.input_sizes = [layers[i].outputs for i in self.input_layers]
        else:
            if not same_scale(src.out_w, src.out_h, w, h):
                raise CfgError(f"[shortcut] from layer {self.index}: resized to {src.out_w}x"
                               f"{src.out_h}, the previous layer to {w}x{h}: they no longer "
                               f"differ by one integer scale")
            self.w, self.h = src.out_w, src.out_h
        self._alloc_io()

    def _steps(self):
        """(values per weight, weights per input) for the multilayer kernels."""
        layer_step = self.out_c if self.weights_type == 2 else 1
        return self.outputs // layer_step, layer_step

    def forward(self, net):
        """forward_shortcut_layer"""
        n = self.outputs * self.batch
        if self.multilayer:
            self._forward_multilayer(net)
        elif self._same_shape():
            shortcut_same_cpu(n, self.alpha, net.input, self.beta,
                              net.layers[self.index].output, self.output)
        else:
            copy_cpu(n, net.input, self.output)
            shortcut_cpu(self.batch, self.w, self.h, self.c, net.layers[self.index].output,
                         self.out_w, self.out_h, self.out_c, self.alpha, self.beta, self.output)
        activate_output(self, net.train)

    def _forward_multilayer(self, net):
        """shortcut_multilayer_cpu, one input at a time."""
        step, ls = self._steps()
        if self.nweights:
            normalized_weights(self.weights, len(self.input_layers), ls,
                               self.weights_normalization, self.wn)
        shortcut_input_cpu(self.batch, self.outputs, self.outputs, net.input, self.wn[:ls], step,
                           self.output, True)
        for i, (idx, size) in enumerate(zip(self.input_layers, self.input_sizes), start=1):
            shortcut_input_cpu(self.batch, self.outputs, size, net.layers[idx].output,
                               self.wn[i * ls:(i + 1) * ls], step, self.output, False)

    def _same_shape(self):
        return (self.w, self.h, self.c) == (self.out_w, self.out_h, self.out_c)

    def backward(self, net):
        """backward_shortcut_layer"""
        n = self.outputs * self.batch
        gradient_output(self)
        if self.multilayer:
            self._backward_multilayer(net)
            return
        if net.delta is not None:
            axpy_cpu(n, self.alpha, self.delta, net.delta)
        prev = net.layers[self.index].delta
        if self._same_shape():
            shortcut_same_cpu(n, 1.0, prev, self.beta, self.delta, prev)
        else:
            shortcut_cpu(self.batch, self.out_w, self.out_h, self.out_c, self.delta, self.w,
                         self.h, self.c, 1.0, self.beta, prev)

    def _backward_multilayer(self, net):
        """backward_shortcut_multilayer_cpu: the inputs' deltas with the forward's normalised
        weights, and (weighted) the weight gradient."""
        step, ls = self._steps()
        inputs = [(net.input, net.delta, self.outputs)] + [
            (net.layers[i].output, net.layers[i].delta, size)
            for i, size in zip(self.input_layers, self.input_sizes)]
        for i, (x, dx, size) in enumerate(inputs):
            if dx is not None:
                backward_shortcut_input_cpu(self.batch, self.outputs, size, self.delta,
                                            self.wn[i * ls:(i + 1) * ls], step, dx)
            if self.nweights:
                shortcut_weight_updates_cpu(self.batch, self.outputs, size, x, self.delta, step,
                                            self.weight_updates[i * ls:(i + 1) * ls])

    def update(self, a):
        """update_shortcut_layer: SGD with momentum and decay, also under adam=1."""
        if not self.nweights:
            return
        sgd_update_weights(self, a)

    def weight_records(self):
        return [("weights", self.weights)] if self.nweights else []

    @property
    def bflops(self):
        if not self.multilayer:
            return 0.0
        return self.outputs * len(self.input_layers) * (2 if self.weights_type else 1) / 1e9

    def describe(self):
        if self.multilayer:
            return (f"Shortcut Layer: {''.join(f'{i}, ' for i in self.input_layers)} "
                    f"wt = {self.weights_type}, wn = {self.weights_normalization}, outputs:"
                    f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d} {self.bflops:5.3f} BF")
        return (f"res  {self.index:3d}                {self.w:4d} x{self.h:4d} x{self.c:4d}   ->  "
                f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")


def _choice(s, key, table):
    name = s.find_str(key, "none")
    if name not in table:
        raise s.error(key, f"unknown {key} {name!r}; expected one of {', '.join(table)}")
    return table[name]
