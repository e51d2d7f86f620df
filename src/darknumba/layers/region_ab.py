"""[region] as AlexeyAB's darknet computes it (`region_layer.c`, `parser.c:parse_region`,
`network.c:custom_get_region_detections`); kernels in kernels/region_ab.py.

AlexeyAB's [region] is the YOLOv2 layer before pjreddie's later rewrite, and both of its builds
(CPU and GPU) keep the output *flattened*, [cell][anchor][4 + 1 + classes] per image
(`flatten()` on the CPU, `flatten_ongpu` on the GPU), with only the objectness (logistic) and,
with softmax=1, the classes (softmax) activated: x, y, w, h stay as the convolution gave them
and get_region_box applies logistic / exp when it reads a box. Its detections
(custom_get_region_detections -> get_region_boxes) read that same flattened layout, give every
candidate objectness 1 and prob = obj * p_class over thresh. (Its get_region_detections, which
would read the buffer as if it were not flattened, is not called: fill_network_boxes has that
call commented out.) The loss is computed in the flattened layout with the logistic's
derivative inside the deltas, no (2 - w*h) box scale, AlexeyAB's classfix and focal_loss; the
deltas are put back in the convolution's layout and the backward only adds them. Truths: up
to `max` (200) boxes of 6 floats (x, y, w, h, class, track id).

This class is the alexeyab dialect's [region] (quirks.region_alexeyab), with or without
compat: it is not a CPU quirk but what both of AlexeyAB's builds compute. pjreddie's dialect
keeps layers/region.py.
Not reproduced: tree= (YOLO9000's class hierarchy) and coords other than 4 (AlexeyAB indexes
the objectness and classes at +4 / +5 whatever coords says): pjreddie's [region] computes
such a layer, with a warning naming the cfg line (under compat="darknet-cpu": refused); for
image b > 0 detections read image b's output (AlexeyAB's custom_get_region_detections always
reads the first image's).
"""
import math
import warnings

import numpy as np

from ..detections import Detections
from ..errors import CfgWarning, DataError
from ..kernels.box_ab import DEFAULT_NMS
from ..kernels.region_ab import (N_STATS, S_ANYOBJ, S_BAD_CLASS, S_CLASS, S_CLASS_COUNT,
                                 S_COUNT, S_IOU, S_OBJ, S_RECALL, RegionAbParams,
                                 RegionAbSizes, activate_region_ab, flatten_cpu,
                                 get_region_boxes_ab, region_ab_deltas)
from ..kernels.blas import axpy_cpu
from ..kernels.yolo import sum_squares
from ..kernels.yolo_ab import correct_yolo_boxes_ab_cpu
from .base import require_image_input, scratch_of
from .region import RegionLayer, read_class_map, read_scales

TRUTH_SIZE = 6


class AbRegionLayer(RegionLayer):
    """AlexeyAB's [region]: keys and defaults of its parse_region (max 200, classfix 0,
    focal_loss 0, random a float; `log`, `sqrt`, `absolute`, `resize` read and unused)."""

    def __init__(self, batch, w, h, n, classes, anchors=None, max_boxes=200):
        super().__init__(batch, w, h, n, classes, 4, anchors)
        self.max_boxes = max_boxes
        self.truth_size = TRUTH_SIZE
        self.truths = max_boxes * TRUTH_SIZE
        self.classfix = self.focal_loss = 0
        self.nms_kind, self.beta_nms = DEFAULT_NMS, 0.6     # make_region_layer leaves them 0
        self.resize_range = 1.0

    @classmethod
    def from_cfg(cls, s, params):
        """parse_region: AlexeyAB's keys; anchors past num*2 values are ignored, as it does."""
        require_image_input(s, params)
        coords = s.find_int("coords", 4)
        unreproduced = None                 # (key, what) AlexeyAB computes that is not built
        if coords != 4:
            unreproduced = ("coords", f"AlexeyAB's [region] indexes the objectness and classes "
                                      f"as if coords=4; coords={coords} is not reproduced")
        elif s.has("tree"):
            unreproduced = ("tree", "AlexeyAB's [region] with a class tree (YOLO9000) is not "
                                    "reproduced")
        if unreproduced and params.net.quirks.compat is not None:
            raise s.error(*unreproduced)
        if unreproduced:        # the layer as pjreddie's rewrite computes it, said once
            warnings.warn(CfgWarning(f"{s.where(unreproduced[0])}: {unreproduced[1]}; "
                                     f"pjreddie's [region] computes this layer"), stacklevel=5)
            return RegionLayer.from_cfg(s, params)
        classes = s.find_int("classes", 20, at_least=1)
        num = s.find_int("num", 1, at_least=1)
        max_boxes = s.find_int("max", 200, at_least=1)
        expected = num * (classes + 4 + 1)
        if params.c != expected:
            raise s.error(None, f"the layer before this region layer has {params.c} filters, but "
                                f"num*(classes+coords+1) = {num}*({classes}+4+1) = {expected} "
                                f"are needed")
        anchors = s.find_list("anchors", float, None, above=0)
        l = cls(params.batch, params.w, params.h, num, classes,
                anchors[:2 * num] if anchors is not None else None, max_boxes)
        for key in ("log", "sqrt", "absolute"):
            s.find_int(key, 0)
        l.softmax = s.find_int("softmax", 0)
        l.focal_loss = s.find_int("focal_loss", 0)
        l.jitter = s.find_float("jitter", 0.2)
        l.resize_range = s.find_float("resize", 1.0)
        l.rescore = s.find_int("rescore", 0)
        l.thresh = s.find_float("thresh", 0.5)
        l.classfix = s.find_int("classfix", 0)
        l.random = s.find_float("random", 0.0)
        read_scales(l, s)
        read_class_map(l, s, params, classes)
        return l

    @property
    def size(self) -> int:
        return 4 + 1 + self.classes

    def forward(self, net):
        """forward_region_layer (CPU build): output = the input flattened per image, logistic
        on the objectness, softmax over the classes (softmax=1); in training the loss."""
        wh = self.w * self.h
        flatten_cpu(net.input, wh, self.size * self.n, self.batch, True, self.output)
        activate_region_ab(self.output, self.batch, self.outputs, wh * self.n, self.size,
                           self.classes, bool(self.softmax))
        if not net.train:
            return
        self.delta[:] = 0.0
        if net.truth is None:
            return
        self._check_truth(net)
        flat = scratch_of(net)("region_ab_delta", self.batch * self.outputs)
        flat[:] = 0.0
        stats = np.zeros(N_STATS, dtype=np.float64)
        f = np.float32
        sizes = RegionAbSizes(self.batch, self.n, self.w, self.h, self.classes, self.max_boxes,
                              self.truth_size, self.truths)
        p = RegionAbParams(
            thresh=f(self.thresh), prior=net.seen < 12800, coord_scale=f(self.coord_scale),
            object_scale=f(self.object_scale), noobject_scale=f(self.noobject_scale),
            class_scale=f(self.class_scale), bias_match=bool(self.bias_match),
            rescore=bool(self.rescore), classfix=int(self.classfix),
            focal_loss=bool(self.focal_loss))
        region_ab_deltas(self.output, net.truth, self.biases, sizes, p,
                         np.ascontiguousarray(self.map, np.int64), flat, stats)
        flatten_cpu(flat, wh, self.size * self.n, self.batch, False, self.delta)
        # pow(mag_array(delta), 2): the float square root of the sum, squared
        mag = float(np.float32(math.sqrt(sum_squares(self.delta, self.delta.size))))
        self.cost = float(np.float32(mag * mag))
        count, class_count = stats[S_COUNT], stats[S_CLASS_COUNT]
        per = (lambda v: v / count) if count else (lambda v: math.nan)
        self.stats = {"avg_iou": per(stats[S_IOU]),
                      "class": stats[S_CLASS] / class_count if class_count else math.nan,
                      "obj": per(stats[S_OBJ]),
                      "no_obj": stats[S_ANYOBJ] / (wh * self.n * self.batch),
                      "recall": per(stats[S_RECALL]), "count": int(count),
                      "class_count": int(class_count),
                      "skipped_truths": int(stats[S_BAD_CLASS])}

    def _check_truth(self, net):
        """Every box before an image's first x == 0 (boxes with a class id >= classes apart,
        which AlexeyAB skips with a warning) must have a centre in [0, 1), a positive finite
        size and a class id >= 0: AlexeyAB indexes the grid and the class map with them."""
        t = net.truth[:self.batch * self.truths].reshape(self.batch, self.max_boxes,
                                                        self.truth_size)
        with np.errstate(invalid="ignore"):
            counted = ~(t[..., 4] >= self.classes)
            live = np.logical_and.accumulate((t[..., 0] != 0) | ~counted, axis=1) & counted
            x, y, w, h, c = (t[..., k] for k in range(5))
            ok = ((x >= 0) & (x < 1) & (y >= 0) & (y < 1) & (w > 0) & (h > 0) & np.isfinite(w)
                  & np.isfinite(h) & (c > -1))
            if self.map.size:
                ok &= c < self.map.size
        bad = np.argwhere(live & ~ok)
        if bad.size:
            b, k = (int(v) for v in bad[0])
            vals = ", ".join(f"{name}={float(v):g}" for name, v in zip("xywh", t[b, k, :4]))
            raise DataError(
                f"[region] layer {getattr(net, 'index', '?')}: truth of image {b} of the batch, "
                f"box {k}: {vals}, class={float(t[b, k, 4]):g}; expected x, y in [0, 1) "
                f"(relative to the network input; x == 0 ends an image's box list), w, h > 0 "
                f"and a class id >= 0")

    def backward(self, net):
        """backward_region_layer: add the (unflattened) delta to the previous layer's."""
        if net.delta is None:
            return
        axpy_cpu(self.batch * self.inputs, 1.0, self.delta, net.delta)

    def detections(self, net, w, h, thresh, hier, relative, b, letterbox):
        return self.get_detections(w, h, net.w, net.h, thresh, relative, b, letterbox)

    def get_detections(self, w, h, netw, neth, thresh, relative=True, b=0, letterbox=False,
                       hier=0.5):
        """custom_get_region_detections for image b: all n*w*h candidates in AlexeyAB's order
        (cell, then anchor), objectness 1, boxes by correct_yolo_boxes (letterbox: undo a
        letterbox; else the image was resized to the network)."""
        k = self.n * self.w * self.h
        dets = Detections(np.empty((k, 4), np.float32), np.ones(k, np.float32),
                          np.empty((k, self.classes), np.float32))
        get_region_boxes_ab(dets.bbox, dets.prob, self.output, b * self.outputs, self.n,
                            self.w, self.h, self.classes, self.biases, np.float32(thresh),
                            int(self.classfix))
        correct_yolo_boxes_ab_cpu(dets.bbox, w, h, netw, neth, relative, bool(letterbox))
        return dets
