"""[softmax] (Darknet's `softmax_layer.c`). With a truth it computes the cross-entropy delta
t - p during forward; backward passes that delta through unchanged (no Jacobian), as Darknet."""
import numpy as np

from ..kernels.blas import axpy_cpu
from ..kernels.softmax import softmax_cpu, softmax_tree_groups_cpu, softmax_x_ent_cpu
from .base import Layer
from .memory import zeros


class SoftmaxLayer(Layer):
    type = "softmax"

    def __init__(self, batch, inputs, groups=1, temperature=1.0):
        self.batch, self.inputs, self.outputs = batch, inputs, inputs
        self.groups = groups
        self.temperature = temperature
        self.noloss = 0
        self.softmax_tree = None          # a class tree (tree=): one softmax per sibling group
        self.spatial = 0
        self.loss = zeros(batch * inputs)
        self.cost = 0.0
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        groups = s.find_int("groups", 1)
        if groups < 1 or params.inputs % groups:
            raise s.error("groups", f"{params.inputs} inputs cannot be split into {groups} groups")
        l = cls(params.batch, params.inputs, groups, s.find_float("temperature", 1.0, above=0))
        if s.has("tree"):
            from ..tree import read_tree
            l.softmax_tree = read_tree(s.find_str("tree"))
            covered = int(l.softmax_tree.group_size.sum())
            if covered != params.inputs:
                raise s.error("tree", f"the tree has {covered} classes, the layer has "
                                      f"{params.inputs} inputs")
        l.w, l.h, l.c = params.w, params.h, params.c
        l.spatial = s.find_float("spatial", 0)
        l.noloss = s.find_int("noloss", 0)
        return l

    def forward(self, net):
        """forward_softmax_layer"""
        if self.softmax_tree is not None:
            t = self.softmax_tree
            softmax_tree_groups_cpu(net.input, self.batch, self.inputs, t.group_offset,
                                    t.group_size, self.temperature, self.output)
        else:
            n = self.inputs // self.groups
            softmax_cpu(net.input, n, self.batch, self.inputs, self.groups, n, 1,
                        self.temperature, self.output)
        if net.truth is not None and not self.noloss:
            softmax_x_ent_cpu(self.batch * self.inputs, self.output, net.truth, self.delta, self.loss)
            self.cost = float(np.sum(self.loss, dtype=np.float64))

    def backward(self, net):
        """backward_softmax_layer"""
        if net.delta is not None:
            axpy_cpu(self.batch * self.inputs, 1.0, self.delta, net.delta)

    def describe(self):
        return f"softmax                                        {self.inputs:4d}"
