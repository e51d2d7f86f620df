"""[connected] (Darknet's `connected_layer.c`): output = input @ weights.T (+ batch norm or
biases), then the activation. weights: outputs x inputs."""
import math

from ..kernels.activations import ACTIVATIONS, gradient_array
from ..kernels.blas import backward_bias
from ..kernels.fused import bias_activate
from ..kernels.gemm import gemm
from .activate import get_activation
from .base import DEFAULT_QUIRKS, Layer, alloc_params, update_params
from .batchnorm import backward_batchnorm, forward_batchnorm


class ConnectedLayer(Layer):
    ab_train_unset = True        # AlexeyAB never updates it (base.skips_update)
    type = "connected"
    bn_foldable = True

    def __init__(self, batch, inputs, outputs, activation, batch_normalize=False):
        self.batch, self.inputs, self.outputs = batch, inputs, outputs
        self.h = self.w = 1
        self.c = inputs
        self.out_h = self.out_w = 1
        self.out_c = outputs
        self.activation = activation
        self.activation_id = ACTIVATIONS[activation]
        self.batch_normalize = bool(batch_normalize)
        alloc_params(self, inputs * outputs, outputs)
        if self.batch_normalize:
            self.train_buffer("x", batch * outputs, "batch norm's input")
        self.learning_rate_scale = 1.0
        self.quirks = DEFAULT_QUIRKS
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        outputs = s.find_int("output", 1, at_least=1)
        act = get_activation(s)
        l = cls(params.batch, params.inputs, outputs, act, s.find_int("batch_normalize", 0))
        l.quirks = params.net.quirks
        return l

    def forward(self, net):
        """forward_connected_layer. At inference each image's outputs are a product of its own:
        OpenBLAS sums a row of a batched product in an order that depends on the batch, and an
        image must give the same floats alone and in any slot of any batch (as in Darknet,
        whose gemm sums every output in one order)."""
        x = net.input[:self.batch * self.inputs]
        if net.train or self.batch == 1:
            gemm(0, 1, self.batch, self.outputs, self.inputs, 1.0, x, self.weights, 0.0,
                 self.output)
        else:
            for b in range(self.batch):
                gemm(0, 1, 1, self.outputs, self.inputs, 1.0,
                     x[b * self.inputs:(b + 1) * self.inputs], self.weights, 0.0,
                     self.output[b * self.outputs:(b + 1) * self.outputs])
        if self.batch_normalize:
            forward_batchnorm(self, net)
        else:
            bias_activate(self.output, self.biases, self.batch, self.outputs, 1, self.activation_id)

    def backward(self, net):
        """backward_connected_layer: delta *= act'(output); batch-norm or bias backward;
        weight_updates += delta^T @ input; net.delta += delta @ weights (unless layer 0)."""
        gradient_array(self.output, self.batch * self.outputs, self.activation_id, self.delta)
        if self.batch_normalize:
            backward_batchnorm(self, net)
        else:
            backward_bias(self.bias_updates, self.delta, self.batch, self.outputs, 1)
        x = net.input[:self.batch * self.inputs]
        gemm(1, 0, self.outputs, self.inputs, self.batch, 1.0, self.delta, x, 1.0,
             self.weight_updates)
        if net.delta is not None:
            gemm(0, 0, self.batch, self.inputs, self.outputs, 1.0, self.delta, self.weights, 1.0,
                 net.delta[:self.batch * self.inputs])

    def random_init(self, rng):
        """make_connected_layer: sqrt(2 / inputs) * U(-1, 1)."""
        self.weights[:] = math.sqrt(2.0 / self.inputs) * rng.uniform(-1, 1, self.weights.size)

    def update(self, a):
        """update_connected_layer"""
        update_params(self, a)

    def after_load(self, transpose):
        """A transposed file (see load_weights) holds the weights inputs x outputs."""
        if transpose:
            self.weights[:] = self.weights.reshape(self.inputs, self.outputs).T.reshape(-1)

    def weight_records(self):
        # Darknet stores a connected layer's batch-norm arrays *after* its weights
        recs = [("biases", self.biases), ("weights", self.weights)]
        if self.batch_normalize:
            recs += [("scales", self.scales), ("rolling_mean", self.rolling_mean),
                     ("rolling_variance", self.rolling_variance)]
        return recs

    @property
    def bflops(self):
        return 2.0 * self.inputs * self.outputs / 1e9

    def describe(self):
        return f"connected                            {self.inputs:4d}  ->  {self.outputs:4d}"
