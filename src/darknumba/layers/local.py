"""[local] (Darknet's `local_layer.c`): a convolution whose filters are not shared: every
output location has its own n x (size²·c) weights, and every output value its own bias.

Quirks kept: `pad` is a flag used directly as the padding amount (1), and the output size is
(h - 1)/stride + 1 with pad, (h - size)/stride + 1 without. .weights record: biases[outputs],
then weights [location][filter][c][ky][kx].
"""
import numpy as np

from ..kernels.activations import ACTIVATIONS, activate_array, gradient_array
from ..kernels.blas import axpy_cpu, copy_cpu, sgd_update_cpu
from ..kernels.im2col import col2im_cpu, im2col_cpu
from ..kernels.local import local_forward_cpu, local_input_grad_cpu, local_weight_grad_cpu
from .base import Layer, require_image_input
from .activate import get_activation
from .memory import zeros


class LocalLayer(Layer):
    ab_train_unset = True        # AlexeyAB never updates it (base.skips_update)
    type = "local"

    def __init__(self, batch, h, w, c, n, size, stride, pad, activation):
        self.batch, self.h, self.w, self.c = batch, h, w, c
        self.n, self.size, self.stride, self.pad = n, size, stride, pad
        self.activation, self.activation_id = activation, ACTIVATIONS[activation]
        self.out_h = ((h - 1) if pad else (h - size)) // stride + 1
        self.out_w = ((w - 1) if pad else (w - size)) // stride + 1
        if self.out_h < 1 or self.out_w < 1:
            raise ValueError(f"a {size}x{size}/{stride} local layer of a {w}x{h} input has no "
                             f"output pixels")
        self.out_c = n
        self.inputs = h * w * c
        self.outputs = self.out_h * self.out_w * n
        self.locations = self.out_h * self.out_w
        self.nweights = c * n * size * size * self.locations
        self.weights = zeros(self.nweights, "weights")
        self.train_buffer("weight_updates", self.nweights, "weight updates")
        self.biases = zeros(self.outputs, "biases")
        self.bias_updates = zeros(self.outputs, "bias updates")
        self.workspace_size = self.locations * size * size * c
        self.learning_rate_scale = 1.0
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        n, size = s.find_int("filters", 1, at_least=1), s.find_int("size", 1, at_least=1)
        stride, pad = s.find_int("stride", 1, at_least=1), s.find_int("pad", 0)
        act = get_activation(s)
        try:
            return cls(params.batch, params.h, params.w, params.c, n, size, stride, pad, act)
        except ValueError as e:
            raise s.error(None, str(e)) from None

    def forward(self, net):
        """forward_local_layer"""
        k, L = self.size * self.size * self.c, self.locations
        ws = net.workspace
        for b in range(self.batch):
            out = self.output[b * self.outputs:(b + 1) * self.outputs]
            copy_cpu(self.outputs, self.biases, out)
            im2col_cpu(net.input[b * self.inputs:(b + 1) * self.inputs], self.c, self.h, self.w,
                       self.size, self.stride, self.pad, ws)
            local_forward_cpu(ws, self.weights, self.n, k, L, out)
        activate_array(self.output, self.batch * self.outputs, self.activation_id)

    def backward(self, net):
        """backward_local_layer"""
        k, L = self.size * self.size * self.c, self.locations
        ws = net.workspace
        gradient_array(self.output, self.batch * self.outputs, self.activation_id, self.delta)
        for b in range(self.batch):
            d = self.delta[b * self.outputs:(b + 1) * self.outputs]
            axpy_cpu(self.outputs, 1.0, d, self.bias_updates)
            im = net.input[b * self.inputs:(b + 1) * self.inputs]
            im2col_cpu(im, self.c, self.h, self.w, self.size, self.stride, self.pad, ws)
            local_weight_grad_cpu(d, ws, self.n, k, L, self.weight_updates)
            if net.delta is not None:
                local_input_grad_cpu(self.weights, d, self.n, k, L, ws)
                col2im_cpu(ws, self.c, self.h, self.w, self.size, self.stride, self.pad,
                           net.delta[b * self.inputs:(b + 1) * self.inputs])

    def random_init(self, rng):
        """make_local_layer's sqrt(2/(size²·c))·U(-1,1). (Darknet fills only the first
        c·n·size² weights, one location's worth, and leaves the others 0; we fill all.)"""
        scale = np.sqrt(2.0 / (self.size * self.size * self.c))
        self.weights[:] = scale * rng.uniform(-1, 1, self.weights.size)

    def update(self, a):
        """update_local_layer: SGD with momentum; decay on the weights; no Adam."""
        f32 = np.float32
        step = f32(f32(a.learning_rate) * f32(self.learning_rate_scale) / f32(a.batch))
        sgd_update_cpu(self.outputs, step, 0.0, a.momentum, self.biases, self.bias_updates)
        decay = f32(-f32(a.decay) * f32(a.batch))
        sgd_update_cpu(self.nweights, step, decay, a.momentum, self.weights, self.weight_updates)

    def weight_records(self):
        return [("biases", self.biases), ("weights", self.weights)]

    @property
    def bflops(self):
        return 2.0 * self.nweights / 1e9

    def describe(self):
        return (f"Local Layer: {self.h} x {self.w} x {self.c} image, {self.n} filters -> "
                f"{self.out_h} x {self.out_w} x {self.n} image")
