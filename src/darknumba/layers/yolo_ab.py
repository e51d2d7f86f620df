"""[yolo] as AlexeyAB's darknet computes it (its `yolo_layer.c`, `parser.c:parse_yolo`), built
for networks of the alexeyab dialect. Per image the output is [anchor][4+1+classes][h][w].

Forward: logistic (in float) on x, y, objectness and classes, none with new_coords=1 (the
convolution before is logistic), then x, y <- scale_x_y * x - (scale_x_y - 1)/2. Training: the
loss of kernels/yolo_ab_loss.py (iou_loss mse/iou/giou/diou/ciou, iou_normalizer, obj_normalizer,
cls_normalizer, max_delta, ignore rule, truth_thresh, iou_thresh, objectness_smooth,
label_smooth_eps, counters_per_class, focal_loss, map). Its deltas are w.r.t. the layer's
output and pass down unchanged (scale_x_y's factor and the logistic's derivative are not
applied, as in AlexeyAB's CPU backward). Truths: up to `max` (200) boxes of 6 floats
(x, y, w, h, class, track id).
"""
import functools
import math
import warnings

import numpy as np

from ..detections import Detections
from ..errors import DarknumbaError
from ..kernels.box import yolo_num_detections_cpu
from ..kernels.box_ab import CIOU, DEFAULT_NMS, DIOU, DIOU_NMS, GIOU, GREEDY_NMS, IOU, MSE
from ..kernels.yolo_ab import (activate_yolo_output_ab, correct_yolo_boxes_ab_cpu,
                               get_yolo_detections_ab_cpu)
from ..kernels.yolo_ab_loss import (N_STATS, S_ANYOBJ, S_BAD_CLASS, S_CAT, S_CIOU,
                                    S_CLASS_COUNT, S_COUNT, S_DIOU, S_GIOU, S_GIOU_LOSS, S_IOU,
                                    S_IOU_LOSS, S_NAN_FIXED, S_OBJ, S_RECALL, S_RECALL75,
                                    S_REWRITTEN, S_TOTAL_BBOX, YoloLossParams, YoloSizes,
                                    forward_yolo_ab_loss,
                                    yolo_delta_squares)
from ..tree import read_map, resolve
from .yolo import YoloLayer

FLT_MAX = float(np.finfo(np.float32).max)
IOU_KINDS = {"mse": MSE, "iou": IOU, "giou": GIOU, "diou": DIOU, "ciou": CIOU}
IOU_KIND_NAMES = {v: k for k, v in IOU_KINDS.items()}
# cornersnms is a [Gaussian_yolo] kind: AlexeyAB's [yolo] parser reads it as the default
NMS_KINDS = {"default": DEFAULT_NMS, "greedynms": GREEDY_NMS, "diounms": DIOU_NMS,
             "cornersnms": DEFAULT_NMS}
TRUTH_SIZE = 6


class AbYoloLayer(YoloLayer):
    """AlexeyAB's [yolo]. Fields beyond pjreddie's, with AlexeyAB's defaults:
    max_boxes 200; scale_x_y 1; new_coords 0; iou_loss "mse"; iou_normalizer 0.75;
    obj_normalizer 1; cls_normalizer 1 (only scales the truth class with counters_per_class);
    delta_normalizer 1 (only AlexeyAB's GPU backward uses it); max_delta FLT_MAX (no clip);
    iou_thresh 1 (off); iou_thresh_kind "iou"; objectness_smooth 0; label_smooth_eps 0;
    focal_loss 0; classes_multipliers from counters_per_class; nms_kind "default";
    beta_nms 0.6; resize_range (the key resize) 1; random 0 (a float); show_details 1 (the cost and line with
    class_loss / iou_loss); the tracking keys (embedding_layer, track_history_size,
    sim_thresh, dets_for_track, dets_for_show, track_ciou_norm) are kept: they serve video
    tracking only, and AlexeyAB's CPU forward never fills the embeddings."""

    def __init__(self, batch, w, h, n, total, mask, classes, anchors=None, max_boxes=200):
        super().__init__(batch, w, h, n, total, mask, classes, anchors)
        self.max_boxes = max_boxes
        self.truth_size = TRUTH_SIZE
        self.truths = max_boxes * TRUTH_SIZE
        self.random = 0.0
        self.scale_x_y = 1.0
        self.new_coords = 0
        self.iou_loss = MSE
        self.iou_thresh_kind = IOU
        self.iou_normalizer = 0.75
        self.obj_normalizer = 1.0
        self.cls_normalizer = 1.0
        self.delta_normalizer = 1.0
        self.max_delta = FLT_MAX
        self.iou_thresh = 1.0
        self.objectness_smooth = 0
        self.label_smooth_eps = 0.0
        self.focal_loss = 0
        self.classes_multipliers = np.zeros(0, np.float32)
        self.map = np.zeros(0, np.int64)
        self.nms_kind = DEFAULT_NMS
        self.beta_nms = 0.6
        self.resize_range = 1.0
        self.show_details = 1
        self.embedding_layer = None
        self.tracking = {}

    @classmethod
    def from_cfg(cls, s, params):
        """parse_yolo: every key AlexeyAB's [yolo] reads, with its defaults; an unknown value of
        iou_loss, iou_thresh_kind or nms_kind is an error (AlexeyAB falls back silently)."""
        l = cls._build(s, params)
        l.max_boxes = s.find_int("max", 200)
        if l.max_boxes < 1:
            raise s.error("max", f"must be at least 1, found {l.max_boxes}")
        l.truths = l.max_boxes * l.truth_size
        l.show_details = s.find_int("show_details", 1)
        l.new_coords = s.find_int("new_coords", 0)
        l.focal_loss = s.find_int("focal_loss", 0)
        l.read_loss_keys(s)
        l.tracking = {"track_history_size": s.find_int("track_history_size", 5),
                      "sim_thresh": s.find_float("sim_thresh", 0.8),
                      "dets_for_track": s.find_int("dets_for_track", 1),
                      "dets_for_show": s.find_int("dets_for_show", 1),
                      "track_ciou_norm": s.find_float("track_ciou_norm", 0.01)}
        if s.has("embedding_layer"):
            e = s.find_int("embedding_layer")
            e = params.index + e if e < 0 else e
            if not 0 <= e < params.index:
                raise s.error("embedding_layer", f"names layer {e}; it must be one of the "
                                                 f"layers before this one (0..{params.index - 1})")
            l.embedding_layer = e
        if s.has("map"):
            l.map = _class_map(s, params.path, l.classes)
        return l

    def read_loss_keys(self, s):
        """The keys AlexeyAB's parse_yolo and parse_gaussian_yolo both read, with the same
        defaults: the loss's settings, NMS, and the data loader's jitter and resize."""
        self.max_delta = s.find_float("max_delta", FLT_MAX)
        if s.has("counters_per_class"):
            self.classes_multipliers = _classes_multipliers(s, self.classes, self.max_delta)
        self.label_smooth_eps = s.find_float("label_smooth_eps", 0.0)
        self.scale_x_y = s.find_float("scale_x_y", 1.0)
        self.objectness_smooth = s.find_int("objectness_smooth", 0)
        self.iou_normalizer = s.find_float("iou_normalizer", 0.75)
        self.obj_normalizer = s.find_float("obj_normalizer", 1.0)
        self.cls_normalizer = s.find_float("cls_normalizer", 1.0)
        self.delta_normalizer = s.find_float("delta_normalizer", 1.0)
        self.iou_loss = _choice(s, "iou_loss", "mse", IOU_KINDS)
        self.iou_thresh_kind = _choice(s, "iou_thresh_kind", "iou",
                                       {k: v for k, v in IOU_KINDS.items() if k != "mse"})
        self.beta_nms = s.find_float("beta_nms", 0.6)
        self.nms_kind = _choice(s, "nms_kind", "default", NMS_KINDS)
        self.jitter = s.find_float("jitter", 0.2)
        self.resize_range = s.find_float("resize", 1.0)
        if not self.resize_range > 0:   # training divides by it (the crop's scale range)
            raise s.error("resize", f"must be above 0, found {self.resize_range}")
        self.ignore_thresh = s.find_float("ignore_thresh", 0.5)
        self.truth_thresh = s.find_float("truth_thresh", 1.0)
        self.iou_thresh = s.find_float("iou_thresh", 1.0)
        self.random = s.find_float("random", 0.0)

    # -- forward --------------------------------------------------------------------------
    def forward(self, net):
        """forward_yolo_layer: activations, then (train mode with truth) the loss deltas."""
        s = np.float32(self.scale_x_y)
        activate_yolo_output_ab(net.input, self.output, self.batch, self.n, self.classes,
                                self.w * self.h, bool(self.new_coords), s,
                                np.float32(-0.5 * (float(s) - 1)))
        if not net.train:                          # delta left alone, as in layers/yolo.py
            return
        self.delta[:] = 0.0
        if net.truth is None:
            return
        self.forward_loss(net)

    def forward_loss(self, net):
        """The training half of forward_yolo_layer: deltas (kernels/yolo_ab_loss.py), cost and the
        statistics of AlexeyAB's print-out (self.stats, stats_line)."""
        truth = net.truth
        self._check_truth(truth)
        f = np.float32
        stats = np.zeros((self.batch, N_STATS), np.float32)
        sizes = YoloSizes(self.n, self.total, self.w, self.h, self.classes, net.w, net.h,
                          self.truths, self.truth_size, self.max_boxes)
        p = YoloLossParams(
            f(self.ignore_thresh), f(self.truth_thresh), f(self.iou_thresh),
            self.iou_thresh_kind, f(self.iou_normalizer), f(self.obj_normalizer),
            f(self.cls_normalizer), self.iou_loss, f(self.max_delta), self.max_delta != FLT_MAX,
            bool(self.new_coords), bool(self.objectness_smooth), bool(self.focal_loss),
            f(self.label_smooth_eps))
        forward_yolo_ab_loss(self.output, self.delta, truth, self.biases, self.mask, self.batch,
                             sizes, p, self.classes_multipliers, self.map, stats)
        self._summarise(stats, net.index)

    def _summarise(self, stats, index):
        """cost and stats as AlexeyAB's forward_yolo_layer ends, in its float arithmetic: with
        show_details, cost = iou_normalizer * sum(1 - IoU) / count (GIoU for giou) +
        obj_normalizer * |class and objectness deltas|^2, or |delta|^2 for mse; without,
        |delta|^2. The per-image sums are added image by image, as the C joins its threads."""
        f = np.float32
        s = functools.reduce(np.add, stats)
        count = int(s[S_COUNT])
        n = f(max(count, 1))                    # the C divides by count, set to 1 when 0
        total_sq, class_sq = yolo_delta_squares(self.delta, self.batch * self.n,
                                                4 + 1 + self.classes, self.w * self.h)
        loss = _mag_squared(total_sq)
        class_loss = f(float(f(self.obj_normalizer)) * float(_mag_squared(class_sq)))
        if not self.show_details or self.iou_loss == MSE:
            cost = loss
        else:
            tot = s[S_GIOU_LOSS] if self.iou_loss == GIOU else s[S_IOU_LOSS]
            cost = f(self.iou_normalizer) * (tot / n) + class_loss
        self.cost = float(cost)
        bad = int(s[S_BAD_CLASS])
        if bad:
            warnings.warn("yolo truth: boxes with class ids outside 0..classes-1 are skipped "
                          "(as AlexeyAB's darknet does)", stacklevel=3)
        per = (lambda k: float(s[k] / n))
        batch = f(self.batch)
        self.stats = {
            "index": index, "count": count, "avg_iou": per(S_IOU), "giou": per(S_GIOU),
            "diou": per(S_DIOU), "ciou": per(S_CIOU),
            "class": float(s[S_CAT] / f(max(int(s[S_CLASS_COUNT]), 1))), "obj": per(S_OBJ),
            "no_obj": float(s[S_ANYOBJ] / f(self.w * self.h * self.n * self.batch)),
            "recall50": per(S_RECALL), "recall75": per(S_RECALL75),
            "loss": float(loss / batch), "class_loss": float(class_loss / batch),
            "iou_loss": float((loss - class_loss) / batch),
            "total_bbox": int(s[S_TOTAL_BBOX]), "rewritten_bbox": int(s[S_REWRITTEN]),
            "nan_deltas": int(s[S_NAN_FIXED]), "skipped_truths": bad}

    def _check_truth(self, truth):
        """Every box before an image's first x == 0 must have finite values, a centre in
        [0, 1) and a positive size (AlexeyAB prints "Wrong label" and indexes with it anyway);
        class ids outside the range are skipped by the kernel, as in the C."""
        t = truth.reshape(self.batch, self.max_boxes, self.truth_size)
        active = np.cumprod(t[..., 0] != 0, axis=1).astype(bool)
        v = t[..., :5]
        with np.errstate(invalid="ignore"):
            bad = active & ~(np.isfinite(v).all(axis=-1) & (v[..., 0] >= 0) & (v[..., 0] < 1)
                             & (v[..., 1] >= 0) & (v[..., 1] < 1) & (v[..., 2] > 0)
                             & (v[..., 3] > 0))
        if bad.any():
            b, k = (int(i) for i in np.argwhere(bad)[0])
            x, y, w, h, c = (float(q) for q in v[b, k])
            raise DarknumbaError(
                f"yolo truth: image {b}, box {k} is (x={x:g}, y={y:g}, w={w:g}, h={h:g}, "
                f"class={c:g}): centres must lie in [0, 1) and sizes be > 0, relative to the "
                f"network input (x == 0 ends an image's box list)")

    def stats_line(self) -> str:
        """AlexeyAB's line for the last training forward: `v3 (iou loss, Normalizer: (iou: ...,
        obj: ..., cls: ...) Region N Avg (IOU: ...), count: N, class_loss = ..., iou_loss =
        ..., total_loss = ...` (without class_loss and iou_loss when show_details=0)."""
        s = self.stats
        if s is None:
            return ""
        kind = {MSE: "mse", GIOU: "giou"}.get(self.iou_loss, "iou")
        head = (f"v3 ({kind} loss, Normalizer: (iou: {self.iou_normalizer:.2f}, obj: "
                f"{self.obj_normalizer:.2f}, cls: {self.cls_normalizer:.2f}) Region "
                f"{s['index']} Avg (IOU: {s['avg_iou']:f}), count: {max(s['count'], 1)}, ")
        if not self.show_details:
            return head + f"total_loss = {s['loss']:f}"
        return head + (f"class_loss = {s['class_loss']:f}, iou_loss = {s['iou_loss']:f}, "
                       f"total_loss = {s['loss']:f}")

    # -- detections -----------------------------------------------------------------------
    def get_detections(self, w, h, netw, neth, thresh, relative=True, b=0, letterbox=False):
        """get_yolo_detections_batch for image b, boxes corrected for a w x h image that was
        letterboxed (letterbox=True) or resized to the network (AlexeyAB's default)."""
        t = np.float32(thresh)
        offset = b * self.outputs
        count = yolo_num_detections_cpu(self.output, offset, self.n, self.w * self.h,
                                        self.classes, t)
        dets = Detections(np.empty((count, 4), np.float32), np.empty(count, np.float32),
                          np.empty((count, self.classes), np.float32))
        get_yolo_detections_ab_cpu(dets.bbox, dets.objectness, dets.prob, self.output, offset,
                                   self.n, self.w, self.h, self.classes, self.biases,
                                   np.ascontiguousarray(self.mask, np.int64), netw, neth, t,
                                   bool(self.new_coords))
        correct_yolo_boxes_ab_cpu(dets.bbox, w, h, netw, neth, relative, bool(letterbox))
        return dets


def _mag_squared(sum_sq):
    """pow(mag_array(x), 2) as the C rounds it: the float sqrt of the float sum, squared."""
    return np.float32(float(np.float32(math.sqrt(float(sum_sq)))) ** 2)


def _choice(s, key, default, table):
    v = s.find_str(key, default)
    if v not in table:
        raise s.error(key, f"expected one of {', '.join(table)}, found {v!r}")
    return table[v]


def _classes_multipliers(s, classes, max_delta):
    """get_classes_multipliers: one counter per class (at least 1 each); multiplier =
    max counter / counter, capped at max_delta."""
    counters = s.find_list("counters_per_class", int)
    if len(counters) != classes:
        raise s.error("counters_per_class", f"has {len(counters)} values; classes={classes} "
                                            f"needs one per class")
    c = np.maximum(np.asarray(counters, np.float32), np.float32(1))
    return np.minimum(c.max() / c, np.float32(max_delta)).astype(np.float32)


def _class_map(s, cfg_path, classes):
    """map=: a file of class ids, one per line; training class c becomes map[c]."""
    m = read_map(resolve(s.find_str("map"), cfg_path))
    if m.size < classes or np.any(m[:classes] < 0) or np.any(m[:classes] >= classes):
        raise s.error("map", f"the class map needs {classes} ids (one per class), each in "
                             f"0..{classes - 1}; found {m.size} ids"
                             + (f" from {m.min()} to {m.max()}" if m.size else ""))
    return np.ascontiguousarray(m[:classes], np.int64)
