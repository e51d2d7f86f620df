"""AlexeyAB's [implicit] (`representation_layer.c`): a learned 1 x atoms x filters tensor,
the same for every image, whatever the input. Its `filters*atoms` weights are a .weights record;
they start at mean + U(-std, std); backward sums the delta over the batch into their gradient;
update_implicit_layer is SGD with momentum and decay (also under adam=1, on a CPU)."""
import numpy as np

from ..kernels.scale_channels import backward_implicit_cpu
from .base import Layer, sgd_update_weights


class ImplicitLayer(Layer):
    type = "implicit"

    def __init__(self, batch, filters, atoms=1, mean=0.0, std=0.2):
        self.batch, self.mean, self.std = batch, mean, std
        self.w = self.h = self.c = self.inputs = 1
        self.out_w, self.out_h, self.out_c = 1, atoms, filters
        self.n = filters                  # as the layer table names it (filters)
        self.outputs = self.nweights = atoms * filters
        self.weights = np.zeros(self.nweights, np.float32)
        self.weight_updates = np.zeros(self.nweights, np.float32)
        self.learning_rate_scale = 1.0
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        mean, std = s.find_float("mean", 0.0), s.find_float("std", 0.2)
        filters, atoms = s.find_int("filters", 128), s.find_int("atoms", 1)
        for key, v in (("filters", filters), ("atoms", atoms)):
            if v < 1:
                raise s.error(key, f"must be at least 1, found {v}")
        return cls(params.batch, filters, atoms, mean, std)

    def random_init(self, rng):
        """make_implicit_layer: mean + rand_uniform(-std, std)."""
        self.weights[:] = self.mean + rng.uniform(-self.std, self.std, self.nweights)

    def resize(self, w, h):
        return None

    def forward(self, net):
        """forward_implicit_layer"""
        self.output.reshape(self.batch, self.nweights)[:] = self.weights

    def backward(self, net):
        """backward_implicit_layer: no input gradient."""
        backward_implicit_cpu(self.batch, self.nweights, self.delta, self.weight_updates)

    def update(self, a):
        """update_implicit_layer (never called by AlexeyAB's update_network, which skips a
        layer with l.train = 0: quirks.implicit_not_updated)"""
        if self.quirks.implicit_not_updated:
            return
        sgd_update_weights(self, a)

    def weight_records(self):
        return [("weights", self.weights)]

    def describe(self):
        return (f"implicit Layer: {self.out_c} x {self.out_h} \t mean={self.mean:.2f}, "
                f"std={self.std:.2f}")
