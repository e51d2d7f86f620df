"""[iseg] (Darknet's `iseg_layer.c`): instance segmentation, per-pixel class masks (logistic)
plus an `ids`-dimensional embedding per pixel trained to cluster by instance (see
kernels/iseg.py). truths per image = 90·(w·h + 1); the deltas are in output space and backward
adds them unchanged. cost = |delta|². Darknet's forward reads the truth even in test mode; ours
stops after the activations when there is no truth or no training. No data loader here reads
instance masks: the layer is for use from Python.
"""
import numpy as np

from ..errors import DataError
from ..kernels.activations import LOGISTIC, activate_array
from ..kernels.blas import axpy_cpu, copy_cpu
from ..kernels.iseg import MAX_INSTANCES, iseg_deltas
from ..kernels.yolo import sum_squares
from .base import Layer, require_image_input


class IsegLayer(Layer):
    type = "iseg"

    def __init__(self, batch, w, h, classes, ids):
        self.batch, self.classes, self.ids = batch, classes, ids
        self.cost = 0.0
        self.resize(w, h)

    def resize(self, w, h):
        self.w = self.out_w = w
        self.h = self.out_h = h
        self.c = self.out_c = self.classes + self.ids
        self.outputs = self.inputs = w * h * self.c
        self.truths = MAX_INSTANCES * (w * h + 1)
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        classes, ids = s.find_int("classes", 20, at_least=1), s.find_int("ids", 32, at_least=0)
        if params.c != classes + ids:
            raise s.error(None, f"the layer before this iseg layer has {params.c} filters, but "
                                f"classes + ids = {classes} + {ids} = {classes + ids} are needed")
        return cls(params.batch, params.w, params.h, classes, ids)

    def forward(self, net):
        """forward_iseg_layer"""
        copy_cpu(self.batch * self.outputs, net.input, self.output)
        wh = self.w * self.h
        for b in range(self.batch):
            activate_array(self.output[b * self.outputs:], self.classes * wh, LOGISTIC)
        if not net.train:       # Darknet zeroes delta here too; nothing reads it before training
            return
        self.delta[:] = 0.0
        if net.truth is None:
            return
        self.check_truth(net)
        iseg_deltas(self.output, net.truth, self.batch, self.classes, self.ids, wh, self.truths,
                    self.delta)
        self.cost = float(np.float32(sum_squares(self.delta, self.delta.size)))

    def check_truth(self, net):
        """Every instance's class id (those before the first negative or NaN one) must be a
        class of the layer: the kernel writes that class's mask deltas."""
        per = self.w * self.h + 1
        ids = net.truth[:self.batch * self.truths].reshape(self.batch, MAX_INSTANCES, per)[..., 0]
        with np.errstate(invalid="ignore"):
            live = np.logical_and.accumulate(ids >= 0, axis=1)
            bad = np.argwhere(live & ~(ids < self.classes))
        if bad.size:
            b, t = (int(v) for v in bad[0])
            raise DataError(f"[iseg] layer {getattr(net, 'index', '?')}: truth of image {b} of "
                            f"the batch, instance {t}: class {float(ids[b, t]):g}; expected a "
                            f"class in 0..{self.classes - 1} (a negative id ends the list)")

    def backward(self, net):
        """backward_iseg_layer"""
        if net.delta is not None:
            axpy_cpu(self.batch * self.inputs, 1.0, self.delta, net.delta)

    def describe(self):
        return "iseg"
