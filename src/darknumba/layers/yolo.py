"""[yolo] (Darknet's `yolo_layer.c`). Per image the output is [anchor][4+1+classes][h][w];
logistic is applied to x, y, objectness and classes only (w, h stay raw)."""
import math
import warnings

import numpy as np

from ..detections import Detections, letterbox_size
from ..errors import CfgWarning
from ..kernels.box import correct_yolo_boxes_cpu, get_yolo_detections_cpu, yolo_num_detections_cpu
from ..kernels.yolo import (
    activate_yolo_output,
    sum_squares,
    yolo_objectness_deltas,
    yolo_truth_deltas,
)
from .base import Layer, require_image_input
from .memory import full
from .truth import check_box_truth

# [yolo] keys only AlexeyAB's darknet reads (layers/yolo_ab.py)
AB_YOLO_KEYS = ("scale_x_y", "new_coords", "nms_kind", "beta_nms", "max_delta", "iou_thresh",
                "iou_thresh_kind", "iou_loss", "iou_normalizer", "cls_normalizer",
                "obj_normalizer", "delta_normalizer", "objectness_smooth", "label_smooth_eps",
                "counters_per_class", "resize", "focal_loss", "show_details", "embedding_layer",
                "track_history_size", "sim_thresh", "dets_for_track", "dets_for_show",
                "track_ciou_norm")


def _warn_anchor_count(s, total, found):
    """Both parse_yolo read what the list holds over make_yolo_layer's 0.5s: a short list
    (AlexeyAB's cspx-p7-mish_hp.cfg has 31 values for num=16) leaves the last anchors at 0.5.
    AlexeyAB's ignores values past num*2; pjreddie's writes them past its buffer (we drop them)."""
    what = (f"the anchors past value {found} stay 0.5, as Darknet leaves them" if found < 2 * total
            else f"values past {2 * total} are ignored")
    warnings.warn(CfgWarning(f"{s.where('anchors')}: num={total} needs {2 * total} anchor "
                             f"values, found {found}; {what}"), stacklevel=5)


def anchor_slots(total, mask) -> int:
    """Anchors the layer holds: num, or more when the mask names anchors past num."""
    return max(total, max(mask, default=-1) + 1)


def _warn_mask_past_num(s, mask, total, found):
    """Both forks build a mask past num (AlexeyAB's cspx-p7-mish.cfg: mask=16,17,18,19 with
    num=16) and read those anchors past their num*2 values, whatever memory holds there; here
    they are the anchors list's values past num*2 (0.5 past its end). Outputs do not depend on
    anchors, boxes and losses do."""
    hi = max(mask)
    have = "from the anchors list" if found >= 2 * (hi + 1) else \
        f"from the anchors list where it has them ({found} values), else 0.5"
    warnings.warn(CfgWarning(f"{s.where('mask')}: mask names anchors up to {hi}, past num={total}; "
                             f"Darknet reads them past its {2 * total} anchor values (whatever "
                             f"memory holds there), darknumba {have}"), stacklevel=5)


class YoloLayer(Layer):
    type = "yolo"
    detector_head = makes_detections = True

    def __init__(self, batch, w, h, n, total, mask, classes, anchors=None):
        self.batch, self.w, self.h = batch, w, h
        self.n, self.total, self.classes = n, total, classes
        self.mask = np.asarray(mask if mask is not None else range(n), dtype=np.int32)
        self.biases = full(2 * anchor_slots(total, self.mask), 0.5, "anchors")
        if anchors is not None:
            self.biases[:len(anchors)] = anchors
        self.max_boxes = 90
        self.truths = 90 * (4 + 1)
        self.jitter = 0.2
        self.ignore_thresh = 0.5
        self.truth_thresh = 1.0
        self.random = 0
        self.cost = 0.0
        self.stats = None
        self._set_sizes()

    def _set_sizes(self):
        self.c = self.out_c = self.n * (self.classes + 4 + 1)
        self.out_w, self.out_h = self.w, self.h
        self.outputs = self.inputs = self.h * self.w * self.c
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        """parse_yolo, pjreddie's: AlexeyAB's own keys are refused. (Under a dialect whose
        [yolo] is AlexeyAB's, LAYER_TYPES builds yolo_ab.AbYoloLayer instead.)"""
        for key in AB_YOLO_KEYS:
            if s.has(key):
                raise s.error(key, "is a key of AlexeyAB's darknet: load the network with "
                                   "dialect='alexeyab' (--dialect alexeyab)")
        l = cls._build(s, params)
        l.max_boxes = s.find_int("max", 90, at_least=0)
        l.jitter = s.find_float("jitter", 0.2, at_least=0)
        l.ignore_thresh = s.find_float("ignore_thresh", 0.5)
        l.truth_thresh = s.find_float("truth_thresh", 1.0)
        l.random = s.find_int("random", 0)
        if s.has("map"):
            raise s.error("map", "class maps (map=) are not supported")
        return l

    @classmethod
    def _build(cls, s, params):
        """The layer from classes, num, mask and anchors, its input checked against them."""
        require_image_input(s, params)
        classes = s.find_int("classes", 20, at_least=1)
        total = s.find_int("num", 1, at_least=1)
        mask = s.find_list("mask", int, None)
        n = len(mask) if mask else total
        anchors = s.find_list("anchors", float, None, above=0)
        if mask and min(mask) < 0:
            raise s.error("mask", f"mask {mask} names a negative anchor (num={total})")
        slots = anchor_slots(total, mask or ())
        if slots > total:
            _warn_mask_past_num(s, mask, total, len(anchors) if anchors else 0)
        elif anchors is not None and len(anchors) != 2 * total:
            _warn_anchor_count(s, total, len(anchors))
        expected = n * (classes + 5)
        if params.c != expected:
            raise s.error(None, f"the layer before this yolo layer has {params.c} filters, but "
                                f"(classes+5)*len(mask) = ({classes}+5)*{n} = {expected} are needed")
        return cls(params.batch, params.w, params.h, n, total, mask, classes,
                   anchors[:2 * slots] if anchors else None)

    def resize(self, w, h):
        self.w, self.h = w, h
        self._set_sizes()

    def forward(self, net):
        """forward_yolo_layer: activations, then (train mode with truth) the loss deltas.
        Darknet zeroes delta before it returns in test mode too; here delta is left alone
        then (nothing reads it before the next training forward zeroes it)."""
        activate_yolo_output(net.input, self.output, self.batch, self.n, self.classes,
                             self.w * self.h)
        if not net.train:
            return
        self.delta[:] = 0.0
        if net.truth is None:
            return
        self.forward_loss(net)

    def forward_loss(self, net):
        """The training half of forward_yolo_layer: objectness deltas for every prediction
        (ignore_thresh, truth_thresh), then box, objectness and class deltas for each truth
        at its cell and best anchor over all anchors; self.cost = sum of squared deltas;
        self.stats = what Darknet prints (see stats_line)."""
        truth = net.truth
        check_box_truth(truth, f"[yolo] layer {getattr(net, 'index', '?')}", self.batch, self.truths, 5,
                        self.max_boxes, self.classes, 4)
        anyobj = np.zeros(self.batch * self.n * self.h, dtype=np.float64)
        stats = np.zeros((self.batch, 6), dtype=np.float64)
        args = (self.batch, self.n, self.w, self.h, self.classes, net.w, net.h, self.truths,
                self.max_boxes)
        yolo_objectness_deltas(self.output, truth, self.biases, self.mask, *args,
                               self.ignore_thresh, self.truth_thresh, self.delta, anyobj)
        yolo_truth_deltas(self.output, truth, self.biases, self.mask, self.total, *args,
                          self.delta, stats)
        with np.errstate(over="ignore"):          # a diverging run gives inf, as in C
            self.cost = float(np.float32(sum_squares(self.delta, self.delta.size)))
        s_iou, s_cat, s_obj, r50, r75, count = stats.sum(axis=0)
        count = int(count)
        per = (lambda v: v / count) if count else (lambda v: math.nan)
        cells = self.w * self.h * self.n * self.batch
        self.stats = {"index": net.index, "avg_iou": per(s_iou), "class": per(s_cat),
                      "obj": per(s_obj), "no_obj": anyobj.sum() / cells,
                      "recall50": per(r50), "recall75": per(r75), "count": count}

    def stats_line(self) -> str:
        """Darknet's print-out of the last training forward: `Region NN Avg IOU: ...`."""
        s = self.stats
        if s is None:
            return ""
        return (f"Region {s['index']} Avg IOU: {s['avg_iou']:f}, Class: {s['class']:f}, "
                f"Obj: {s['obj']:f}, No Obj: {s['no_obj']:f}, .5R: {s['recall50']:f}, "
                f".75R: {s['recall75']:f},  count: {s['count']}")

    def backward(self, net):
        """backward_yolo_layer: the deltas are already w.r.t. the logits; add them unchanged."""
        if net.delta is not None:
            net.delta[:self.batch * self.inputs] += self.delta

    def get_detections(self, w, h, netw, neth, thresh, relative=True, b=0, letterbox=True):
        """get_yolo_detections + correct_yolo_boxes for image b (see get_yolo_detections)."""
        return get_yolo_detections(self, w, h, netw, neth, thresh, relative, b, letterbox)

    def detections(self, net, w, h, thresh, hier, relative, b, letterbox):
        return self.get_detections(w, h, net.w, net.h, thresh, relative, b, letterbox)

    def describe(self):
        return "yolo"


def get_yolo_detections(l, w: int, h: int, netw: int, neth: int, thresh: float,
                        relative: bool = True, b: int = 0, letterbox: bool = True) -> Detections:
    """get_yolo_detections for image b of the batch, then correct_yolo_boxes for a w x h
    image (letterboxed into the network, or resized when not `letterbox`).

    Darknet averages the output with a horizontally flipped copy when the layer's batch is
    2 (avg_flipped_yolo, meant for flip test-time augmentation); here every image of a
    batch is decoded on its own, so batch 2 gives what batch 1 gives."""
    t = np.float32(thresh)
    offset = b * l.outputs
    count = yolo_num_detections_cpu(l.output, offset, l.n, l.w * l.h, l.classes, t)
    dets = Detections(np.empty((count, 4), np.float32), np.empty(count, np.float32),
                      np.empty((count, l.classes), np.float32))
    get_yolo_detections_cpu(dets.bbox, dets.objectness, dets.prob, l.output, offset, l.n, l.w,
                            l.h, l.classes, np.ascontiguousarray(l.biases, np.float32),
                            np.ascontiguousarray(l.mask, np.int64), netw, neth, t)
    new_w, new_h = letterbox_size(w, h, netw, neth) if letterbox else (netw, neth)
    correct_yolo_boxes_cpu(dets.bbox, w, h, netw, neth, new_w, new_h, relative)
    return dets
