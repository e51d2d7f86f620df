"""Detector evaluation: AlexeyAB's `detector map` figures and pjreddie's `detector recall`.

A detection is (image index, class, score, x, y, w, h) with the box relative and centre-based;
truths are the label rows [x, y, w, h, class]. Matching is VOC's: per class, detections sorted by
score, each takes the unmatched truth of its image it overlaps most if IoU > iou_thresh, else
it is a false positive.

* AP@0.5: VOC all-point interpolation (the precision envelope integrated over recall), as
  AlexeyAB's `validate_detector_map` with `-points 0`.
* mAP@[.5:.95]: COCO's definition, the mean over IoU thresholds .50:.05:.95 of the per-class AP
  with 101-point interpolation.
* At a confidence threshold: TP, FP, FN, precision, recall, F1 and the average IoU of the true
  positives (AlexeyAB's `for conf_thresh = 0.25` line).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def box_iou(a, b) -> np.ndarray:
    """IoU of centre-based boxes: a (n,4) vs b (m,4) -> (n,m); 0 where the union is empty or
    not a number (zero-area or non-finite boxes)."""
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    al, ar = a[:, 0] - a[:, 2] / 2, a[:, 0] + a[:, 2] / 2
    at, ab = a[:, 1] - a[:, 3] / 2, a[:, 1] + a[:, 3] / 2
    bl, br = b[:, 0] - b[:, 2] / 2, b[:, 0] + b[:, 2] / 2
    bt, bb = b[:, 1] - b[:, 3] / 2, b[:, 1] + b[:, 3] / 2
    iw = np.clip(np.minimum(ar[:, None], br[None]) - np.maximum(al[:, None], bl[None]), 0, None)
    ih = np.clip(np.minimum(ab[:, None], bb[None]) - np.maximum(at[:, None], bt[None]), 0, None)
    with np.errstate(invalid="ignore", over="ignore"):      # inf/NaN boxes of a diverged net
        inter = iw * ih
        union = (a[:, 2] * a[:, 3])[:, None] + (b[:, 2] * b[:, 3])[None] - inter
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def voc_ap(recall, precision) -> float:
    """All-point interpolated AP: area under the monotone precision envelope."""
    mrec = np.concatenate([[0.0], recall, [1.0]])
    mpre = np.concatenate([[0.0], precision, [0.0]])
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    i = np.nonzero(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1]))


def coco_ap(recall, precision) -> float:
    """101-point interpolated AP (pycocotools' accumulate)."""
    if len(recall) == 0:
        return 0.0
    env = np.maximum.accumulate(np.asarray(precision, np.float64)[::-1])[::-1]
    pts = np.linspace(0, 1, 101)
    idx = np.searchsorted(recall, pts, side="left")
    return float(np.mean(np.where(idx < len(env), env[np.minimum(idx, len(env) - 1)], 0.0)))


def match_class(dets, truths, iou_thresh):
    """dets: (k, 6) rows [image, score, x, y, w, h] of one class; truths: {image: (m,4)}.
    Returns (tp flags in score order, iou of each tp, scores sorted)."""
    order = np.argsort(-dets[:, 1], kind="stable")
    dets = dets[order]
    used = {img: np.zeros(len(t), bool) for img, t in truths.items()}
    tp = np.zeros(len(dets), bool)
    ious = np.zeros(len(dets))
    for k, d in enumerate(dets):
        img = int(d[0])
        t = truths.get(img)
        if t is None or not len(t):
            continue
        ov = box_iou(d[2:6], t)[0]
        j = int(np.argmax(ov))
        if ov[j] > iou_thresh and not used[img][j]:
            used[img][j] = True
            tp[k] = True
            ious[k] = ov[j]
    return tp, ious, dets[:, 1]


@dataclass
class MapResult:
    names: list
    ap50: np.ndarray            # per class AP@0.5 (VOC all-point)
    ap_coco: np.ndarray         # per class AP averaged over IoU .50:.95 (101-point)
    truths_per_class: np.ndarray
    thresh: float
    tp: int
    fp: int
    fn: int
    avg_iou: float

    @property
    def map50(self) -> float:
        v = self.ap50[self.truths_per_class > 0]
        return float(v.mean()) if len(v) else 0.0

    @property
    def map_coco(self) -> float:
        v = self.ap_coco[self.truths_per_class > 0]
        return float(v.mean()) if len(v) else 0.0

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def report(self) -> str:
        lines = []
        for c, name in enumerate(self.names):
            lines.append(f"class_id = {c}, name = {name}, ap = {100 * self.ap50[c]:.2f}%   "
                         f"(truths: {int(self.truths_per_class[c])})")
        t = self.thresh
        lines.append(f" for conf_thresh = {t:.2f}, precision = {self.precision:.2f}, recall = "
                     f"{self.recall:.2f}, F1-score = {self.f1:.2f}")
        lines.append(f" for conf_thresh = {t:.2f}, TP = {self.tp}, FP = {self.fp}, FN = "
                     f"{self.fn}, average IoU = {100 * self.avg_iou:.2f} %")
        lines.append(f" mean average precision (mAP@0.50) = {self.map50:.6f}, or "
                     f"{100 * self.map50:.2f} %")
        lines.append(f" COCO-style mAP@[.50:.95] = {self.map_coco:.6f}, or "
                     f"{100 * self.map_coco:.2f} %")
        return "\n".join(lines)


def compute_map(detections, truths, classes: int, names=None, thresh: float = 0.25,
                iou_thresh: float = 0.5) -> MapResult:
    """detections: (n, 7) rows [image, class, score, x, y, w, h]; truths: list per image of
    (m, 5) rows [x, y, w, h, class]."""
    dets = np.asarray(detections, np.float64).reshape(-1, 7)
    names = list(names) if names is not None else [str(i) for i in range(classes)]
    ap50 = np.zeros(classes)
    ap_coco = np.zeros(classes)
    npos = np.zeros(classes, int)
    tp_n = fp_n = 0
    iou_sum = 0.0
    for c in range(classes):
        tr = {i: np.asarray(t, np.float64).reshape(-1, 5) for i, t in enumerate(truths)}
        tr = {i: t[t[:, 4].astype(int) == c, :4] for i, t in tr.items()}
        npos[c] = sum(len(t) for t in tr.values())
        d = dets[dets[:, 1].astype(int) == c][:, [0, 2, 3, 4, 5, 6]]
        coco = []
        for k, thr in enumerate(np.arange(0.5, 0.951, 0.05)):
            tp, ious, scores = match_class(d, tr, thr)
            ctp = np.cumsum(tp)
            rec = ctp / npos[c] if npos[c] else np.zeros(len(tp))
            prec = ctp / np.arange(1, len(tp) + 1)
            if k == 0:
                ap50[c] = voc_ap(rec, prec) if npos[c] else 0.0
                at = scores >= thresh
                tp_n += int(tp[at].sum())
                fp_n += int((~tp[at]).sum())
                iou_sum += float(ious[at & tp].sum())
            coco.append(coco_ap(rec, prec) if npos[c] else 0.0)
        ap_coco[c] = float(np.mean(coco))
    fn = int(npos.sum()) - tp_n
    return MapResult(names, ap50, ap_coco, npos, thresh, tp_n, fp_n, fn,
                     iou_sum / tp_n if tp_n else 0.0)


def recall_stats(proposals, truths, iou_thresh: float = 0.5):
    """validate_detector_recall for one image: proposals (k,4) boxes above threshold, truths
    (m,5). Returns (number of truths, correct, sum of best IoUs)."""
    t = np.asarray(truths, np.float64).reshape(-1, 5)
    if not len(t):
        return 0, 0, 0.0
    if not len(proposals):
        return len(t), 0, 0.0
    best = box_iou(t[:, :4], proposals).max(axis=1)
    return len(t), int((best > iou_thresh).sum()), float(best.sum())


# -- running a network over a list -------------------------------------------------------------
def detect_list(net, paths, thresh: float, nms: float = 0.45, progress=None):
    """Darknet's test path (letterbox, forward, get_network_boxes, do_nms_sort) over a list, in
    batches of net.batch: yields (index, path, (w, h), boxes (k,4) relative, probs (k,C),
    objectness (k,))."""
    from ..vision.box import detect
    from ..vision.image import load_image
    for start in range(0, len(paths), net.batch):
        chunk = paths[start:start + net.batch]
        ims = [load_image(p, c=net.c) for p in chunk]
        for j, (p, im, d) in enumerate(zip(chunk, ims, detect(net, ims, thresh, 0.5, nms))):
            if progress:
                progress(1)
            yield start + j, p, (im.shape[2], im.shape[1]), d.bbox, d.prob, d.objectness


def evaluate_map(net, paths, truths, classes, names=None, thresh=0.25, iou_thresh=0.5,
                 det_thresh=0.005, nms=0.45, progress=None) -> MapResult:
    """validate_detector_map over images `paths` with label rows `truths`."""
    rows = []
    for k, _, _, boxes, probs, _ in detect_list(net, paths, det_thresh, nms, progress):
        i, c = np.nonzero(probs > 0)
        if len(i):
            rows.append(np.column_stack([np.full(len(i), k), c, probs[i, c], boxes[i]]))
    dets = np.concatenate(rows) if rows else np.zeros((0, 7))
    return compute_map(dets, truths, classes, names, thresh, iou_thresh)
