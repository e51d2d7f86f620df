"""[detection] (Darknet's `detection_layer.c`): the YOLOv1 loss on a connected layer's output.

The output is the input (optionally a softmax over each cell's classes); no activation. With
truth in training mode the deltas are plain L2 targets in output space (no sigmoid anywhere:
YOLOv1's connected layer is linear), and backward adds them unchanged. cost = |delta|².
truths per image = side²·(1 + coords + classes). Quirk kept: the delta is only cleared in
training mode (test-mode forwards leave it as it was).
"""
import math

import numpy as np

from ..detections import Detections
from ..kernels.blas import axpy_cpu, copy_cpu
from ..kernels.detection import detection_deltas, get_detection_detections_cpu
from ..kernels.softmax import softmax_cpu
from ..kernels.yolo import sum_squares
from .base import Layer


class DetectionLayer(Layer):
    type = "detection"
    makes_detections = draws_random = True

    def __init__(self, batch, inputs, n, side, classes, coords, rescore=0, seed=0):
        self.batch, self.inputs, self.outputs = batch, inputs, inputs
        self.n, self.side, self.classes, self.coords, self.rescore = n, side, classes, coords, rescore
        self.w = self.h = side
        self.truths = side * side * (1 + coords + classes)
        self.softmax = self.sqrt = self.forced = self.random = self.reorg = 0
        self.max_boxes, self.jitter = 90, 0.2
        self.coord_scale = self.object_scale = self.noobject_scale = self.class_scale = 1.0
        self.rng = np.random.default_rng(seed)
        self.cost = 0.0
        self.stats = None
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        coords, classes = s.find_int("coords", 1), s.find_int("classes", 1, at_least=1)
        rescore = s.find_int("rescore", 0)
        num, side = s.find_int("num", 1, at_least=1), s.find_int("side", 7, at_least=1)
        expected = side * side * ((1 + coords) * num + classes)
        if params.inputs != expected:
            raise s.error(None, f"the layer before this detection layer outputs {params.inputs} "
                                f"values, but side²·((1+coords)·num + classes) = {side}²·((1+"
                                f"{coords})·{num} + {classes}) = {expected} are needed")
        if coords != 4:
            raise s.error("coords", f"only coords=4 boxes are supported, found {coords}")
        l = cls(params.batch, params.inputs, num, side, classes, coords, rescore)
        l.softmax = s.find_int("softmax", 0)
        l.sqrt = s.find_int("sqrt", 0)
        l.max_boxes = s.find_int("max", 90, at_least=0)
        l.coord_scale = s.find_float("coord_scale", 1)
        l.forced = s.find_int("forced", 0)
        l.object_scale = s.find_float("object_scale", 1)
        l.noobject_scale = s.find_float("noobject_scale", 1)
        l.class_scale = s.find_float("class_scale", 1)
        l.jitter = s.find_float("jitter", 0.2, at_least=0)
        l.random = s.find_int("random", 0)
        l.reorg = s.find_int("reorg", 0)
        return l

    def forward(self, net):
        """forward_detection_layer"""
        copy_cpu(self.batch * self.outputs, net.input, self.output)
        L = self.side * self.side
        if self.softmax:
            for b in range(self.batch):
                off = b * self.inputs
                softmax_cpu(net.input[off:], self.classes, L, self.classes, 1, 0, 1, 1.0,
                            self.output[off:])
        if not net.train:
            return
        self.delta[:] = 0.0
        if net.truth is None:
            return
        pick = np.full(self.batch * L, -1, dtype=np.int64)
        if self.random and net.seen < 64000:
            pick[:] = self.rng.integers(self.n, size=pick.size)
        stats = np.zeros(6, dtype=np.float64)
        detection_deltas(self.output, net.truth, self.batch, self.inputs, self.side, self.n,
                         self.classes, self.coords, bool(self.sqrt), bool(self.rescore),
                         bool(self.forced), pick, self.coord_scale, self.object_scale,
                         self.noobject_scale, self.class_scale, self.delta, stats)
        self.cost = float(np.float32(sum_squares(self.delta, self.delta.size)))
        iou, cat, allcat, obj, anyobj, count = stats
        per = (lambda v: v / count) if count else (lambda v: math.nan)
        self.stats = {"avg_iou": per(iou), "pos_cat": per(cat),
                      "all_cat": allcat / (count * self.classes) if count else math.nan,
                      "pos_obj": per(obj), "any_obj": anyobj / (self.batch * L * self.n),
                      "count": int(count)}

    def stats_line(self) -> str:
        s = self.stats
        if s is None:
            return ""
        return (f"Detection Avg IOU: {s['avg_iou']:f}, Pos Cat: {s['pos_cat']:f}, All Cat: "
                f"{s['all_cat']:f}, Pos Obj: {s['pos_obj']:f}, Any Obj: {s['any_obj']:f}, "
                f"count: {s['count']}")

    def backward(self, net):
        """backward_detection_layer"""
        if net.delta is not None:
            axpy_cpu(self.batch * self.inputs, 1.0, self.delta, net.delta)

    def detections(self, net, w, h, thresh, hier, relative, b, letterbox):
        return self.get_detections(thresh, b)

    def get_detections(self, thresh, b=0):
        """get_detection_detections for image b, boxes relative to the image (0..1). (Darknet
        multiplies these by the image size even when get_network_boxes asks for relative
        boxes, so its own `detect` draws YOLOv1 boxes scaled twice; we return relative ones.)"""
        k = self.side * self.side * self.n
        dets = Detections(np.empty((k, 4), np.float32), np.empty(k, np.float32),
                          np.empty((k, self.classes), np.float32))
        get_detection_detections_cpu(dets.bbox, dets.objectness, dets.prob,
                                     self.output[b * self.outputs:], self.side, self.n,
                                     self.classes, bool(self.sqrt), np.float32(thresh))
        return dets

    def describe(self):
        return "Detection Layer"
