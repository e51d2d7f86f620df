"""Detector evaluation: AlexeyAB's `detector map` figures, COCO's (pycocotools' COCOeval, in
cocoeval.py) and pjreddie's `detector recall`.

A detection is (image index, class, score, x, y, w, h) with the box relative and centre-based;
truths are the label rows [x, y, w, h, class].

Which AP each number is:
* AlexeyAB's per-class `ap` and `mAP@0.50` (its validate_detector_map): VOC matching (per
  class, detections by score, each takes the same-class truth of its image it overlaps most,
  if IoU > iou_thresh, strictly; a truth found twice makes the second a false positive; every
  detection counts) and, by `points`, VOC 2010+'s all-point interpolation (0, the default:
  the area under the precision envelope at every unique recall), VOC 2007's 11 points or
  101 points. The mean is over every class, those without truths counting 0.
* COCO AP@[.50:.95], AP50, AP75, APs/m/l, AR: exactly COCOeval's (see cocoeval.py): its own
  matching (the best *unmatched* truth with IoU >= the threshold), 101-point interpolation,
  at most 100 detections per image and class, crowd truths ignored, means over the classes
  with truths. Its AP50 differs from AlexeyAB's mAP@0.50 in matching, interpolation and the
  classes averaged.
* At a confidence threshold: TP, FP, FN, precision, recall, F1 and the average IoU of the true
  positives (AlexeyAB's `for conf_thresh = 0.25` line).
Crowd truths (an optional flag per truth; Darknet's label files have none) are ignored by
COCO's figures and are VOC's "difficult" truths in AlexeyAB's: not counted, and a detection
that takes one is neither a true nor a false positive.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dialect import ALEXEYAB, defaults_for
from ..errors import DataError
from ..outputs import atomic_output, atomic_write
from .cocoeval import CocoEval, coco_evaluate

AB = defaults_for(ALEXEYAB)      # validate_detector_map's defaults (dialect.Defaults)


IOU_BLOCK = 1 << 22      # IoU entries computed at once (32 MiB of float64 per temporary)


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


def iou_rows(a, b) -> np.ndarray:
    """IoU of row i of a with row i of b (centre-based boxes, (n, 4) each)."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    iw = np.clip(np.minimum(a[:, 0] + a[:, 2] / 2, b[:, 0] + b[:, 2] / 2)
                 - np.maximum(a[:, 0] - a[:, 2] / 2, b[:, 0] - b[:, 2] / 2), 0, None)
    ih = np.clip(np.minimum(a[:, 1] + a[:, 3] / 2, b[:, 1] + b[:, 3] / 2)
                 - np.maximum(a[:, 1] - a[:, 3] / 2, b[:, 1] - b[:, 3] / 2), 0, None)
    union = a[:, 2] * a[:, 3] + b[:, 2] * b[:, 3] - iw * ih
    return np.where(union > 0, iw * ih / np.where(union > 0, union, 1), 0.0)


def voc_ap(recall, precision) -> float:
    """All-point interpolated AP: area under the monotone precision envelope."""
    mrec = np.concatenate([[0.0], recall, [1.0]])
    mpre = np.concatenate([[0.0], precision, [0.0]])
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    i = np.nonzero(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1]))


def ap_points(recall, precision, points: int = 0) -> float:
    """AlexeyAB's AP of one class from its ranked recall/precision: points=0 the area under the
    precision envelope at every unique recall (VOC 2010+, ImageNet), else the mean over
    `points` evenly spaced recalls r of the best precision at recall >= r (11: VOC 2007,
    101: MS COCO)."""
    recall = np.asarray(recall, np.float64)
    precision = np.asarray(precision, np.float64)
    if not len(recall):
        return 0.0
    if points == 0:
        return voc_ap(recall, precision)
    r = np.linspace(0, 1, points)[:, None]
    return float(np.where(recall[None] >= r, precision[None], 0).max(axis=1).mean())


def _match(dets, truths, iou_thresh):
    """Each detection's truth (a global index into the stacked truths, -1 for none): the
    same-class truth of its image with the largest IoU > iou_thresh, as validate_detector_map
    picks it (used or not: duplicates are sorted out by rank)."""
    keys = np.full(len(dets), -1, np.int64)
    offset = 0
    for img, t in enumerate(truths):
        t = np.asarray(t, np.float64).reshape(-1, 5)
        sel = np.nonzero(dets[:, 0] == img)[0]
        # in blocks of detections: a diverged network's hundred thousand candidates against a
        # thousand truths would be gigabytes of IoU at once
        step = max(1, IOU_BLOCK // max(len(t), 1))
        for lo in range(0, len(sel) if len(t) else 0, step):
            part = sel[lo:lo + step]
            iou = box_iou(dets[part, 3:7], t[:, :4])
            iou[(dets[part, 1][:, None] != t[None, :, 4]) | ~(iou > iou_thresh)] = -1
            best = iou.argmax(axis=1)
            hit = iou[np.arange(len(part)), best] > 0
            keys[part[hit]] = offset + best[hit]
        offset += len(t)
    return keys


def _first(keys):
    """True where a key >= 0 occurs for the first time in this order."""
    first = np.zeros(len(keys), bool)
    have = np.nonzero(keys >= 0)[0]
    _, idx = np.unique(keys[have], return_index=True)
    first[have[idx]] = True
    return first


def _ranked_pr(score, keys, npos):
    """Recall and precision down one class's ranking (score descending; ties keep the
    detector's order): the first detection of a truth is a TP, later ones FP."""
    order = np.argsort(-score, kind="stable")
    ctp = np.cumsum(_first(keys[order]))
    return ctp / npos, ctp / np.arange(1, len(ctp) + 1)


@dataclass
class MapResult:
    names: list
    ap: np.ndarray              # per class AP at iou_thresh (AlexeyAB's `points` rule)
    truths_per_class: np.ndarray   # crowd truths not counted
    tp_per_class: np.ndarray    # at score > thresh
    fp_per_class: np.ndarray
    thresh: float
    iou_thresh: float
    points: int
    tp: int
    fp: int
    fn: int
    avg_iou: float              # AlexeyAB's: IoU summed over TPs / (TP + FP), at thresh
    coco: CocoEval              # pycocotools' COCOeval figures (cocoeval.py)

    @property
    def mean_ap(self) -> float:
        """mAP@iou_thresh as AlexeyAB prints it: the mean over all classes."""
        return float(self.ap.mean()) if len(self.ap) else 0.0

    @property
    def map_coco(self) -> float:
        """COCO AP@[.50:.95] (COCOeval's stats[0]); -1 without truths."""
        return self.coco.ap()

    @property
    def ap50_coco(self) -> float:
        """COCO AP50 (COCOeval's stats[1]): 101-point, COCO's matching; not mean_ap."""
        return self.coco.ap(.5)

    @property
    def ap_coco(self) -> np.ndarray:
        """Per class COCO AP@[.50:.95]; -1 for a class without truths."""
        return np.array([self.coco.class_ap(c) for c in range(len(self.names))])

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
        """AlexeyAB's validate_detector_map print-out, then COCOeval's summary."""
        lines = []
        for c, name in enumerate(self.names):
            lines.append(f"class_id = {c}, name = {name}, ap = {100 * self.ap[c]:.2f}%   \t "
                         f"(TP = {int(self.tp_per_class[c])}, FP = {int(self.fp_per_class[c])}) ")
        t = self.thresh
        lines.append(f"\n for conf_thresh = {t:.2f}, precision = {self.precision:.2f}, recall = "
                     f"{self.recall:.2f}, F1-score = {self.f1:.2f} ")
        lines.append(f" for conf_thresh = {t:.2f}, TP = {self.tp}, FP = {self.fp}, FN = "
                     f"{self.fn}, average IoU = {100 * self.avg_iou:.2f} % ")
        how = (f"used {self.points} Recall-points" if self.points
               else "used Area-Under-Curve for each unique Recall")
        lines.append(f"\n IoU threshold = {100 * self.iou_thresh:2.0f} %, {how} ")
        lines.append(f" mean average precision (mAP@{self.iou_thresh:0.2f}) = {self.mean_ap:f}, "
                     f"or {100 * self.mean_ap:.2f} % ")
        areas = "areas in pixels" if self.coco.sized else "image sizes unknown: area=all only"
        lines.append(f"\nCOCO (as pycocotools' COCOeval: 101-point AP, its matching, at most "
                     f"100 detections per image and class, {areas}):")
        lines.append(self.coco.summary())
        return "\n".join(lines)


def compute_map(detections, truths, classes: int, names=None, thresh: float = 0.25,
                iou_thresh: float = 0.5, points: int = 0, sizes=None, crowd=None) -> MapResult:
    """AlexeyAB's validate_detector_map on given detections, and COCOeval's figures on the
    same. detections: (n, 7) rows [image, class, score, x, y, w, h] in the order the detector
    produced them; truths: list per image of (m, 5) rows [x, y, w, h, class]; sizes: (w, h)
    of each image (COCO's area ranges), or None; crowd: per image, m iscrowd flags, or None.

    A detection hits the same-class truth of its image with the largest IoU > iou_thresh;
    down each class's ranking the first detection of a truth is a TP, later ones FP. At
    `thresh` (score > thresh) a detection is a TP when no earlier detection of its image (in
    the detector's order, any score) hit the same truth; its avg IoU divides by TP + FP. A
    detection that hits a crowd truth counts as neither."""
    dets = np.asarray(detections, np.float64).reshape(-1, 7)
    names = list(names) if names is not None else [str(i) for i in range(classes)]
    cls = dets[:, 1].astype(np.int64)
    stacked = np.concatenate([np.asarray(t, np.float64).reshape(-1, 5) for t in truths]
                             or [np.zeros((0, 5))])
    is_crowd = (np.concatenate([np.asarray(c, bool).reshape(-1) for c in crowd] or [[]])
                .astype(bool) if crowd is not None else np.zeros(len(stacked), bool))
    npos = np.bincount(stacked[~is_crowd, 4].astype(np.int64), minlength=classes)[:classes]
    keys = _match(dets, truths, iou_thresh)
    counted = (keys < 0) | ~is_crowd[np.maximum(keys, 0)]
    ap = np.zeros(classes)
    for c in np.nonzero(npos)[0]:
        sel = (cls == c) & counted
        ap[c] = ap_points(*_ranked_pr(dets[sel, 2], keys[sel], npos[c]), points)
    at = (dets[:, 2] > thresh) & counted
    hit = _first(keys) & at                  # first in the detector's order, any score
    tp_c = np.bincount(cls[hit], minlength=classes)[:classes]
    fp_c = np.bincount(cls[at & ~hit], minlength=classes)[:classes]
    iou_sum = float(iou_rows(dets[hit, 3:7], stacked[keys[hit], :4]).sum())
    tp, fp = int(tp_c.sum()), int(fp_c.sum())
    return MapResult(names, ap, npos, tp_c, fp_c, thresh, iou_thresh, points, tp, fp,
                     int(npos.sum()) - tp, iou_sum / (tp + fp) if tp + fp else 0.0,
                     coco_evaluate(dets, truths, classes, sizes, crowd))


def recall_stats(proposals, truths, iou_thresh: float = 0.5):
    """validate_detector_recall for one image: proposals (k,4) boxes above threshold, truths
    (m,5). Returns (number of truths, correct, sum of best IoUs)."""
    t = np.asarray(truths, np.float64).reshape(-1, 5)
    if not len(t):
        return 0, 0, 0.0
    if not len(proposals):
        return len(t), 0, 0.0
    step = max(1, IOU_BLOCK // len(proposals))          # in blocks of truths (see _match)
    best = np.concatenate([box_iou(t[lo:lo + step, :4], proposals).max(axis=1)
                           for lo in range(0, len(t), step)])
    return len(t), int((best > iou_thresh).sum()), float(best.sum())


# -- running a network over a list -------------------------------------------------------------
def detect_list(net, paths, thresh: float, nms: float = 0.45, progress=None,
                decoder: str | None = None):
    """Darknet's test path (letterbox, forward, get_network_boxes, do_nms_sort) over a list, in
    batches of net.batch (files decoded ahead by vision.detector.Detector, JPEGs by `decoder`:
    "stb", "pillow", None for the network's rule, vision.image.pick_decoder): yields (index,
    path, (w, h), boxes (k,4) relative, probs (k,C), objectness (k,)). An unreadable image
    raises DataError."""
    from ..vision.box import detection_layers
    from ..vision.detector import Detector
    numbers = [str(c) for c in range(detection_layers(net)[-1].classes)]
    detector = Detector(net, thresh=thresh, nms=nms, names=numbers, decoder=decoder)
    for k, p in enumerate(detector.run(paths)):
        if p.error is not None:
            raise DataError(p.error)
        if progress:
            progress(1)
        d = p.detections
        yield k, p.source, (p.image.shape[2], p.image.shape[1]), d.bbox, d.prob, d.objectness


def evaluate_map(net, paths, truths, classes, names=None, thresh=AB.map_thresh,
                 iou_thresh=AB.map_iou_thresh, det_thresh=AB.map_det_thresh, nms=AB.map_nms,
                 progress=None, points=AB.map_points, decoder: str | None = None) -> MapResult:
    """validate_detector_map over images `paths` with label rows `truths` (JPEGs decoded by
    `decoder`, as detect_list)."""
    rows, sizes = [], []
    for k, _, size, boxes, probs, _ in detect_list(net, paths, det_thresh, nms, progress,
                                                   decoder):
        sizes.append(size)
        i, c = np.nonzero(probs > 0)
        if len(i):
            rows.append(np.column_stack([np.full(len(i), k), c, probs[i, c], boxes[i]]))
    dets = np.concatenate(rows) if rows else np.zeros((0, 7))
    return compute_map(dets, truths, classes, names, thresh, iou_thresh, points, sizes)



@dataclass
class RecallTotals:
    """validate_detector_recall's running totals after image k."""
    k: int
    correct: int
    total: int
    proposals: int
    iou_sum: float

    def line(self) -> str:
        """The line Darknet prints after each image."""
        n = max(self.total, 1)
        return (f"{self.k:5d} {self.correct:5d} {self.total:5d}\tRPs/Img: "
                f"{self.proposals / (self.k + 1):.2f}\tIOU: {100 * self.iou_sum / n:.2f}%\t"
                f"Recall:{100 * self.correct / n:.2f}%")


def validate_detector_recall(net, paths, truths, thresh: float = 0.001,
                             iou_thresh: float = 0.5, nms: float = 0.4,
                             decoder: str | None = None):
    """validate_detector_recall: per image, the truths found by a proposal (objectness >
    thresh) with IoU > iou_thresh; yields the running RecallTotals after each image (JPEGs
    decoded by `decoder`, as detect_list)."""
    total = correct = proposals = 0
    iou_sum = 0.0
    for k, _, _, boxes, _, objs in detect_list(net, paths, thresh, nms, decoder=decoder):
        keep = objs > thresh
        proposals += int(keep.sum())
        n, c, s = recall_stats(boxes[keep], truths[k], iou_thresh)
        total, correct, iou_sum = total + n, correct + c, iou_sum + s
        yield RecallTotals(k, correct, total, proposals, iou_sum)


# -- result files (validate_detector) ----------------------------------------------------------
COCO_IDS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
            25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49,
            50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74,
            75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90)


def class_file_stems(names: list[str]) -> list[str]:
    """validate_detector's per-class file names (`<prefix><name>.txt`) made safe: a name is one
    file name inside the output folder (no '/', '\\', NUL or other control characters, no
    leading dots, so no '..'), at most 100 characters; names that end up equal (or empty)
    get their class index appended."""
    stems = [re.sub(r"[/\\\x00-\x1f\x7f]", "_", name).lstrip(".")[:100] for name in names]
    counts = {s: stems.count(s) for s in stems}
    return [s if s and counts[s] == 1 else f"{s}_{c}" if s else f"class_{c}"
            for c, s in enumerate(stems)]


def coco_image_id(path: str) -> int:
    """get_coco_image_id: the number after the last '_' (or after the folder) in the name."""
    name = os.path.splitext(os.path.basename(path))[0]
    digits = name.rsplit("_", 1)[-1]
    try:
        return int(digits)
    except ValueError:
        return 0


def validate_detector(net, paths, names, out, prefix: str = "comp4_det_test_",
                      thresh: float = 0.005, nms: float = 0.45, coco: bool = False,
                      progress=None, decoder: str | None = None) -> int:
    """validate_detector: per-class result files `out/<prefix><name>.txt` (the name made one
    safe file name by class_file_stems; image stem, score, xmin ymin xmax ymax in 1-based
    pixels clipped to the image), or with `coco` out/coco_results.json (category ids mapped to COCO's when there are 80 classes). Returns
    the number of detections written. JPEGs are decoded by `decoder`, as detect_list."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    classes = len(names)
    results = []
    written = 0
    with contextlib.ExitStack() as stack:
        files = {} if coco else {c: stack.enter_context(atomic_output(out / f"{prefix}{stem}.txt",
                                                                      "w"))
                                 for c, stem in enumerate(class_file_stems(names))}
        for _, p, (w, h), boxes, probs, _ in detect_list(net, paths, thresh, nms, progress,
                                                         decoder):
            stem = os.path.splitext(os.path.basename(p))[0]
            for b, pr in zip(boxes, probs):
                x0, x1 = (b[0] - b[2] / 2) * w, (b[0] + b[2] / 2) * w
                y0, y1 = (b[1] - b[3] / 2) * h, (b[1] + b[3] / 2) * h
                for c in pr.nonzero()[0]:
                    if coco:
                        x0c, y0c = max(x0, 0.0), max(y0, 0.0)
                        x1c, y1c = min(x1, w), min(y1, h)
                        results.append({"image_id": coco_image_id(p),
                                        "category_id": COCO_IDS[c] if classes == 80 else int(c),
                                        "bbox": [float(v) for v in (x0c, y0c, x1c - x0c,
                                                                     y1c - y0c)],
                                        "score": float(pr[c])})
                    else:
                        files[c].write(f"{stem} {pr[c]:f} {max(x0 + 1, 1):f} {max(y0 + 1, 1):f} "
                                       f"{min(x1 + 1, w):f} {min(y1 + 1, h):f}\n")
                        written += 1
    if coco:
        atomic_write(out / "coco_results.json", json.dumps(results).encode())
        written = len(results)
    return written
