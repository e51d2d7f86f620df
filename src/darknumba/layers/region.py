"""[region] (Darknet's `region_layer.c`): the YOLOv2 loss and detections.

Per image the output is [n][coords + 1 + classes][h][w]; logistic on x, y and objectness,
softmax over the classes with softmax=1 (else logistic). Anchors are in grid cells (not
pixels as in [yolo]). truths = 30 x (coords + 1) per image.

Training deltas are in output space (see kernels/region.py). Quirk: pjreddie's CPU
backward_region_layer is commented out, so a CPU-built Darknet never back-propagates a
[region] loss; the GPU build multiplies the x, y and objectness deltas by σ'(output) and adds
them. We do what the GPU build does; compat="darknet-cpu" passes nothing, as the CPU build.
With `tree=` (YOLO9000's class hierarchy, e.g. data/9k.tree) the classes get a softmax per
group of siblings, the class deltas follow the truth class's path to the root, truths with
x, y > 100000 are classification-only (trained at the best-scoring prediction), and detections
report the top class of the hierarchy; this follows Darknet's GPU path (its CPU branch indexes
the buffer inconsistently). `map=` maps training class ids (data/coco9k.map).
"""
import math

import numpy as np

from ..detections import Detections, letterbox_size
from ..kernels.blas import axpy_cpu, copy_cpu
from ..kernels.box import correct_yolo_boxes_cpu
from ..kernels.region import (MAX_TRUTHS, N_STATS, S_ANYOBJ, S_CLASS, S_CLASS_COUNT, S_COUNT,
                              S_IOU, S_OBJ, S_RECALL, activate_region_output, get_region_detections_cpu,
                              get_region_detections_tree_cpu, region_deltas, region_gradient,
                              RegionLossParams, RegionSizes, RegionTree,
                              region_tree_class_only, softmax_tree_cpu)
from ..kernels.softmax import softmax_cpu
from ..kernels.yolo import sum_squares
from ..tree import read_map, read_tree, resolve
from .base import DEFAULT_QUIRKS, Layer, require_image_input
from .memory import full
from .truth import box_rows, check_box_truth

_NO_INTS = np.zeros(0, dtype=np.int64)


def read_scales(l, s):
    """The loss scales and bias_match both forks' parse_region read, with their defaults."""
    l.coord_scale = s.find_float("coord_scale", 1)
    l.object_scale = s.find_float("object_scale", 1)
    l.noobject_scale = s.find_float("noobject_scale", 1)
    l.mask_scale = s.find_float("mask_scale", 1)
    l.class_scale = s.find_float("class_scale", 1)
    l.bias_match = s.find_int("bias_match", 0)


def read_class_map(l, s, params, classes):
    """map=: the class-id map file, relative to the cfg, every id within the layer's classes."""
    if s.has("map"):
        l.map = read_map(resolve(s.find_str("map"), params.path))
        bad = l.map[(l.map < 0) | (l.map >= classes)]
        if bad.size:
            raise s.error("map", f"the class map sends ids to {int(bad[0])}, outside the "
                                 f"layer's classes 0..{classes - 1}")


class RegionLayer(Layer):
    type = "region"
    detector_head = makes_detections = True

    def __init__(self, batch, w, h, n, classes, coords=4, anchors=None, quirks=DEFAULT_QUIRKS):
        self.batch, self.n, self.classes, self.coords = batch, n, classes, coords
        self.biases = full(n * 2, 0.5, "anchors")
        if anchors is not None:
            self.biases[:len(anchors)] = anchors
        self.truths = MAX_TRUTHS * (coords + 1)
        self.quirks = quirks
        self.softmax = self.background = self.rescore = self.bias_match = 0
        self.max_boxes, self.jitter, self.thresh, self.random = 30, 0.2, 0.5, 0
        self.coord_scale = self.object_scale = self.noobject_scale = 1.0
        self.mask_scale = self.class_scale = 1.0
        self.tree = None
        self.map = _NO_INTS
        self.cost = 0.0
        self.stats = None
        self.resize(w, h)

    def resize(self, w, h):
        self.w = self.out_w = w
        self.h = self.out_h = h
        self.c = self.out_c = self.n * (self.classes + self.coords + 1)
        self.outputs = self.inputs = w * h * self.c
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        coords = s.find_int("coords", 4, at_least=4)
        classes = s.find_int("classes", 20, at_least=1)
        num = s.find_int("num", 1, at_least=1)
        expected = num * (classes + coords + 1)
        if params.c != expected:
            raise s.error(None, f"the layer before this region layer has {params.c} filters, but "
                                f"num*(classes+coords+1) = {num}*({classes}+{coords}+1) = "
                                f"{expected} are needed")
        anchors = s.find_list("anchors", float, None, above=0)
        if anchors is not None and len(anchors) > 2 * num:
            raise s.error("anchors", f"num={num} takes {2 * num} anchor values, found {len(anchors)}")
        l = cls(params.batch, params.w, params.h, num, classes, coords, anchors, params.net.quirks)
        s.find_int("log", 0)
        s.find_int("sqrt", 0)
        l.softmax = s.find_int("softmax", 0)
        l.background = s.find_int("background", 0)
        l.max_boxes = s.find_int("max", 30, at_least=0)
        l.jitter = s.find_float("jitter", 0.2, at_least=0)
        l.rescore = s.find_int("rescore", 0)
        l.thresh = s.find_float("thresh", 0.5)
        s.find_int("classfix", 0)
        s.find_int("absolute", 0)
        l.random = s.find_int("random", 0)
        read_scales(l, s)
        if s.has("tree"):
            l.tree = read_tree(resolve(s.find_str("tree"), params.path))
            if l.tree.n != classes:
                raise s.error("tree", f"the tree has {l.tree.n} classes, the layer classes={classes}")
        read_class_map(l, s, params, classes)
        return l

    def forward(self, net):
        """forward_region_layer"""
        wh = self.w * self.h
        copy_cpu(self.batch * self.outputs, net.input, self.output)
        activate_region_output(self.output, self.batch, self.n, self.coords, self.classes, wh,
                               self.background, not self.softmax)
        if self.tree is not None:
            t = self.tree
            softmax_tree_cpu(net.input, self.output, self.batch, self.n, self.c // self.n, wh,
                             self.coords + 1, t.group_offset, t.group_size)
        elif self.softmax:
            index = (self.coords + (0 if self.background else 1)) * wh
            softmax_cpu(net.input[index:], self.classes + self.background, self.batch * self.n,
                        self.inputs // self.n, wh, 1, wh, 1.0, self.output[index:])
        if not net.train:       # Darknet zeroes delta here too; nothing reads it before training
            return
        self.delta[:] = 0.0
        if net.truth is None:
            return
        self.check_truth(net)
        stats = np.zeros(N_STATS, dtype=np.float64)
        skip = np.zeros(self.batch, dtype=np.int64)
        t = self.tree
        tree = dict(parent=t.parent, group=t.group, group_offset=t.group_offset,
                    group_size=t.group_size) if t is not None else \
            dict(parent=_NO_INTS, group=_NO_INTS, group_offset=_NO_INTS, group_size=_NO_INTS)
        if t is not None:
            region_tree_class_only(self.output, net.truth, self.batch, self.n, self.w, self.h,
                                   self.coords, self.classes, self.truths, self.map,
                                   self.noobject_scale, self.class_scale, **tree,
                                   delta=self.delta, stats=stats, done=skip)
        sizes = RegionSizes(self.batch, self.n, self.w, self.h, self.coords, self.classes,
                            self.truths)
        p = RegionLossParams(
            thresh=self.thresh, prior=net.seen < 12800, coord_scale=self.coord_scale,
            object_scale=self.object_scale, noobject_scale=self.noobject_scale,
            class_scale=self.class_scale, mask_scale=self.mask_scale,
            bias_match=bool(self.bias_match), rescore=bool(self.rescore),
            background=bool(self.background), tag=not self.softmax)
        region_deltas(self.output, net.truth, self.biases, sizes, p, self.map,
                      RegionTree(t is not None, **tree), skip, self.delta, stats)
        self.cost = float(np.float32(sum_squares(self.delta, self.delta.size)))
        count, class_count = stats[S_COUNT], stats[S_CLASS_COUNT]
        per = (lambda v: v / count) if count else (lambda v: math.nan)
        iou, recall, cat, obj, anyobj = (stats[S_IOU], stats[S_RECALL], stats[S_CLASS],
                                         stats[S_OBJ], stats[S_ANYOBJ])
        self.stats = {"avg_iou": per(iou), "class": cat / class_count if class_count else math.nan,
                      "obj": per(obj),
                      "no_obj": anyobj / (wh * self.n * self.batch), "recall": per(recall),
                      "count": int(count)}

    def check_truth(self, net):
        """Refuse truths whose cell or class would index outside the output (with a tree,
        a classification-only truth, x and y > 100000, has only its class checked)."""
        per = self.coords + 1
        class_only = None
        if self.tree is not None:
            rows, _ = box_rows(net.truth, self.batch, self.truths, per, MAX_TRUTHS)
            class_only = (rows[..., 0] > 100000) & (rows[..., 1] > 100000)
        check_box_truth(net.truth, f"[region] layer {getattr(net, 'index', '?')}", self.batch, self.truths, per,
                        MAX_TRUTHS, self.classes, self.coords,
                        self.map.size if self.map.size else None, class_only)

    def stats_line(self) -> str:
        """Darknet's print-out of the last training forward."""
        s = self.stats
        if s is None:
            return ""
        return (f"Region Avg IOU: {s['avg_iou']:f}, Class: {s['class']:f}, Obj: {s['obj']:f}, "
                f"No Obj: {s['no_obj']:f}, Avg Recall: {s['recall']:f},  count: {s['count']}")

    def backward(self, net):
        """backward_region_layer_gpu (see the module docstring for the CPU quirk)."""
        if net.delta is None or self.quirks.region_no_backward:
            return
        region_gradient(self.output, self.delta, self.batch, self.n, self.coords, self.classes,
                        self.w * self.h, bool(self.background))
        axpy_cpu(self.batch * self.inputs, 1.0, self.delta, net.delta)

    def detections(self, net, w, h, thresh, hier, relative, b, letterbox):
        return self.get_detections(w, h, net.w, net.h, thresh, relative, b, letterbox, hier)

    def get_detections(self, w, h, netw, neth, thresh, relative=True, b=0, letterbox=True,
                       hier=0.5):
        """get_region_detections + correct_region_boxes for image b, as a box.Detections of
        all n·w·h candidates (objectness 0 below thresh); `hier` is the tree threshold
        (compared in float32, as the C's float).
        Darknet averages with a flipped copy when the batch is 2; here each image is decoded
        on its own."""
        k = self.n * self.w * self.h
        dets = Detections(np.empty((k, 4), np.float32), np.empty(k, np.float32),
                          np.empty((k, self.classes), np.float32))
        if self.tree is not None:
            t = self.tree
            get_region_detections_tree_cpu(dets.bbox, dets.objectness, dets.prob, self.output,
                                           b * self.outputs, self.n, self.w, self.h, self.coords,
                                           self.classes, self.biases, np.float32(thresh),
                                           np.float32(hier),
                                           t.parent, t.child, t.group_offset, t.group_size)
        else:
            get_region_detections_cpu(dets.bbox, dets.objectness, dets.prob, self.output,
                                      b * self.outputs, self.n, self.w, self.h, self.coords,
                                      self.classes, self.biases, np.float32(thresh),
                                      bool(self.background))
        new_w, new_h = letterbox_size(w, h, netw, neth) if letterbox else (netw, neth)
        correct_yolo_boxes_cpu(dets.bbox, w, h, netw, neth, new_w, new_h, relative)
        return dets

    def describe(self):
        return "detection"
