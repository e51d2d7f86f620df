"""[Gaussian_yolo] as AlexeyAB's darknet computes it (Gaussian YOLOv3: its
`gaussian_yolo_layer.c`, `parser.c:parse_gaussian_yolo`). Per image the output is
[anchor][8+1+classes][h][w]: x, its uncertainty, y, its uncertainty, w, its uncertainty, h,
its uncertainty, objectness, classes (legend in kernels/gaussian_yolo.py).

Forward: logistic on x, y, the four uncertainties, objectness and classes (w, h raw), then x, y
<- scale_x_y * x - (scale_x_y - 1)/2. Training: the Gaussian negative log-likelihood on the
boxes (kernels/gaussian_yolo_loss.py; the IoU kinds replace it for x, y, w, h), objectness and
class deltas as [yolo]'s; they pass down unchanged. Detections: prob = objectness * p_class *
(1 - the mean of the four uncertainties), so an uncertain box scores lower.
"""
import functools
import math

import numpy as np

from ..detections import Detections
from ..kernels.gaussian_yolo import (YOLO_CENTER, YOLO_LEFT_TOP, YOLO_RIGHT_BOTTOM,
                                     activate_gaussian_yolo_output,
                                     correct_gaussian_yolo_boxes_cpu, gaussian_delta_squares,
                                     gaussian_yolo_num_detections_cpu,
                                     get_gaussian_yolo_detections_cpu)
from ..kernels.gaussian_yolo_loss import (G_ANYOBJ, G_CAT, G_CLASS_COUNT, G_COUNT, G_IOU, G_OBJ,
                                          G_RECALL, G_RECALL75, N_GSTATS, GaussianLossParams,
                                          GaussianSizes, forward_gaussian_yolo_loss)
from .base import require_image_input
from .truth import check_box_truth
from .yolo import _warn_anchor_count
from .yolo_ab import FLT_MAX, AbYoloLayer, _choice, _class_map

POINTS = {"center": YOLO_CENTER, "left_top": YOLO_LEFT_TOP, "right_bottom": YOLO_RIGHT_BOTTOM}


class GaussianYoloLayer(AbYoloLayer):
    """AlexeyAB's [Gaussian_yolo]. The keys its parser reads, with its defaults: classes 20,
    num 1, mask, anchors, max 200, max_delta FLT_MAX, counters_per_class, label_smooth_eps 0,
    scale_x_y 1, objectness_smooth 0, uc_normalizer 1, iou_normalizer 0.75, obj_normalizer 1,
    cls_normalizer 1, delta_normalizer 1 (GPU only), iou_loss mse, iou_thresh_kind iou,
    beta_nms 0.6, nms_kind default, yolo_point center, jitter 0.2, resize 1, ignore_thresh 0.5,
    truth_thresh 1, iou_thresh 1 (off), random 0, map. An unknown iou_loss, iou_thresh_kind,
    nms_kind or yolo_point is an error (AlexeyAB falls back silently)."""
    type = "gaussian_yolo"

    def __init__(self, batch, w, h, n, total, mask, classes, anchors=None, max_boxes=200):
        self.uc_normalizer = 1.0
        self.yolo_point = YOLO_CENTER
        super().__init__(batch, w, h, n, total, mask, classes, anchors, max_boxes)

    def _set_sizes(self):
        self.c = self.out_c = self.n * (self.classes + 8 + 1)
        self.out_w, self.out_h = self.w, self.h
        self.outputs = self.inputs = self.h * self.w * self.c
        self._alloc_io()

    @classmethod
    def from_cfg(cls, s, params):
        """parse_gaussian_yolo."""
        require_image_input(s, params)
        classes = s.find_int("classes", 20, at_least=1)
        total = s.find_int("num", 1, at_least=1)
        mask = s.find_list("mask", int, None)
        n = len(mask) if mask else total
        if mask and any(m < 0 or m >= total for m in mask):
            raise s.error("mask", f"mask {mask} names anchors outside 0..{total - 1} (num={total})")
        anchors = s.find_list("anchors", float, None, above=0)
        if anchors is not None and len(anchors) != 2 * total:
            _warn_anchor_count(s, total, len(anchors))
        expected = n * (classes + 9)
        if params.c != expected:
            raise s.error(None, f"the layer before this Gaussian_yolo layer has {params.c} "
                                f"filters, but (classes+9)*len(mask) = ({classes}+9)*{n} = "
                                f"{expected} are needed")
        max_boxes = s.find_int("max", 200)
        if max_boxes < 1:
            raise s.error("max", f"must be at least 1, found {max_boxes}")
        l = cls(params.batch, params.w, params.h, n, total, mask, classes,
                anchors[:2 * total] if anchors else None, max_boxes)
        l.read_loss_keys(s)
        l.uc_normalizer = s.find_float("uc_normalizer", 1.0)
        l.yolo_point = _choice(s, "yolo_point", "center", POINTS)
        if s.has("map"):
            l.map = _class_map(s, params.path, l.classes)
        return l

    # -- forward --------------------------------------------------------------------------
    def forward(self, net):
        """forward_gaussian_yolo_layer: activations, then (train mode with truth) the loss."""
        s = np.float32(self.scale_x_y)
        activate_gaussian_yolo_output(net.input, self.output, self.batch, self.n, self.classes,
                                      self.w * self.h, s, np.float32(-0.5 * (float(s) - 1)))
        if not net.train:
            return
        self.delta[:] = 0.0
        if net.truth is None:
            return
        self.forward_loss(net)

    def forward_loss(self, net):
        """The training half of forward_gaussian_yolo_layer: deltas, cost, statistics."""
        truth = net.truth
        check_box_truth(truth, f"[Gaussian_yolo] layer {net.index}", self.batch, self.truths,
                        self.truth_size, self.max_boxes, self.classes, 4)
        f = np.float32
        stats = np.zeros((self.batch, N_GSTATS), np.float32)
        sizes = GaussianSizes(self.n, self.total, self.w, self.h, self.classes, net.w, net.h,
                              self.truths, self.truth_size, self.max_boxes)
        p = GaussianLossParams(
            f(self.ignore_thresh), f(self.truth_thresh), f(self.iou_thresh),
            self.iou_thresh_kind, f(self.iou_normalizer), f(self.uc_normalizer),
            f(self.obj_normalizer), f(self.cls_normalizer), self.iou_loss, f(self.max_delta),
            self.max_delta != FLT_MAX, bool(self.objectness_smooth), f(self.label_smooth_eps),
            self.yolo_point)
        forward_gaussian_yolo_loss(self.output, self.delta, truth, self.biases,
                                   np.ascontiguousarray(self.mask, np.int64), self.batch, sizes,
                                   p, self.classes_multipliers, self.map, stats)
        self._summarise(stats, net.index)

    def _summarise(self, stats, index):
        """cost = |delta|^2 and the figures of AlexeyAB's print-out: class_loss (objectness and
        classes), iou_loss (x, y and their uncertainties), uc_loss (w, h and theirs: the C's
        split), total_loss, each / batch."""
        f = np.float32
        s = functools.reduce(np.add, stats)
        total, cls_sq, except_uc = gaussian_delta_squares(self.delta, self.batch * self.n,
                                                          9 + self.classes, self.w * self.h)
        loss, class_loss, except_uc = (_mag_squared(v) for v in (total, cls_sq, except_uc))
        self.cost = float(loss)
        count = int(s[G_COUNT])
        per = (lambda k: float(s[k]) / count if count else math.nan)
        batch = f(self.batch)
        self.stats = {
            "index": index, "count": count, "avg_iou": per(G_IOU),
            "class": (float(s[G_CAT]) / int(s[G_CLASS_COUNT]) if s[G_CLASS_COUNT] else math.nan),
            "obj": per(G_OBJ),
            "no_obj": float(s[G_ANYOBJ] / f(self.w * self.h * self.n * self.batch)),
            "recall50": per(G_RECALL), "recall75": per(G_RECALL75),
            "loss": float(loss / batch), "class_loss": float(class_loss / batch),
            "iou_loss": float((except_uc - class_loss) / batch),
            "uc_loss": float((loss - except_uc) / batch)}

    def stats_line(self) -> str:
        """AlexeyAB's line: `Region N Avg IOU: ..., Class: ..., Obj: ..., No Obj: ..., .5R:
        ..., .75R: ...,  count: N, class_loss = ..., iou_loss = ..., uc_loss = ...,
        total_loss = ...`."""
        s = self.stats
        if s is None:
            return ""
        f = {k: _c_float(v) for k, v in s.items() if isinstance(v, float)}
        return (f"Region {s['index']} Avg IOU: {f['avg_iou']}, Class: {f['class']}, "
                f"Obj: {f['obj']}, No Obj: {f['no_obj']}, .5R: {f['recall50']}, "
                f".75R: {f['recall75']},  count: {s['count']}, class_loss = "
                f"{s['class_loss']:.2f}, iou_loss = {s['iou_loss']:.2f}, uc_loss = "
                f"{s['uc_loss']:.2f}, total_loss = {s['loss']:.2f}")

    # -- detections -----------------------------------------------------------------------
    def get_detections(self, w, h, netw, neth, thresh, relative=True, b=0, letterbox=False):
        """get_gaussian_yolo_detections for image b (AlexeyAB's reads image 0), boxes
        corrected for a w x h image letterboxed or resized into the network."""
        dets, _ = self.detections_with_uncertainty(w, h, netw, neth, thresh, relative, b,
                                                   letterbox)
        return dets

    def detections_with_uncertainty(self, w, h, netw, neth, thresh, relative=True, b=0,
                                    letterbox=False):
        """(Detections, uc): uc[k] holds box k's four uncertainties (x, y, w, h: AlexeyAB's
        dets[k].uc), which its prob already discounts."""
        t = np.float32(thresh)
        offset = b * self.outputs
        count = gaussian_yolo_num_detections_cpu(self.output, offset, self.n, self.w * self.h,
                                                 self.classes, t)
        dets = Detections(np.empty((count, 4), np.float32), np.empty(count, np.float32),
                          np.empty((count, self.classes), np.float32))
        uc = np.empty((count, 4), np.float32)
        get_gaussian_yolo_detections_cpu(dets.bbox, dets.objectness, dets.prob, uc,
                                         self.output, offset, self.n, self.w, self.h,
                                         self.classes, self.biases,
                                         np.ascontiguousarray(self.mask, np.int64), netw, neth,
                                         t, self.yolo_point)
        correct_gaussian_yolo_boxes_cpu(dets.bbox, w, h, netw, neth, relative, bool(letterbox))
        return dets, uc

    def describe(self):
        return "Gaussian_yolo"


def _c_float(v: float) -> str:
    """printf's %f of the C's float: 0.f / 0 (no truth in the batch) is x86's default NaN,
    whose sign bit is set: glibc prints -nan."""
    return "-nan" if math.isnan(v) else f"{v:f}"


def _mag_squared(sum_sq):
    """pow(mag_array(x), 2) as the C rounds it: the float sqrt of the float sum, squared."""
    return np.float32(float(np.float32(math.sqrt(float(sum_sq)))) ** 2)
