"""COCO's detection metrics, computed as pycocotools' COCOeval computes them with its default
parameters (iouType 'bbox'), on darknumba's detections and label rows.

- IoU thresholds .50:.05:.95 and recall points 0:.01:1 (np.linspace, as pycocotools: arange's
  values sit slightly off); AP at each threshold is the 101-point interpolated precision
  (the precision envelope at the first rank reaching each recall point, 0 past the last).
- Matching per image and class (evaluateImg): detections by score, each takes the unmatched
  truth of highest IoU >= the threshold; a detection on a crowd or out-of-range truth is
  ignored, as is an unmatched detection outside the area range.
- maxDets 1, 10, 100: at most that many detections per image and class, highest scores first.
- Area ranges all [0, 1e10], small [0, 32^2], medium [32^2, 96^2], large [96^2, 1e10] in
  pixels^2 of the original image: truth and detection areas are box areas (w*h) in pixels,
  which needs each image's size; without sizes only `all` is measured (-1 for the others).
- A class whose truths are all ignored (none, or crowd only) is left out of the means; a
  figure with nothing to average is -1, as COCOeval prints it.

stats are COCOeval.summarize()'s 12 numbers: AP, AP50, AP75, APs, APm, APl, AR1, AR10,
AR100, ARs, ARm, ARl.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.cocoeval import coco_match_cpu

IOU_THRS = np.linspace(.5, 0.95, int(np.round((0.95 - .5) / .05)) + 1, endpoint=True)
REC_THRS = np.linspace(.0, 1.00, int(np.round((1.00 - .0) / .01)) + 1, endpoint=True)
MAX_DETS = (1, 10, 100)
AREAS = {"all": (0.0, 1e5 ** 2), "small": (0.0, 32.0 ** 2), "medium": (32.0 ** 2, 96.0 ** 2),
         "large": (96.0 ** 2, 1e5 ** 2)}
STAT_NAMES = ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm",
              "ARl")


@dataclass
class CocoEval:
    precision: np.ndarray       # (T, R, K, A, M) interpolated precision, -1 where not measured
    recall: np.ndarray          # (T, K, A, M) recall at the last detection, -1 likewise
    sized: bool                 # image sizes were known: areas in pixels, all four ranges

    def _mean(self, v):
        v = v[v > -1]
        return float(v.mean()) if v.size else -1.0

    def ap(self, iou=None, area="all", max_dets=100) -> float:
        """Mean interpolated precision over IoU thresholds (or at one), recall points and
        classes."""
        s = self.precision if iou is None else self.precision[np.isclose(IOU_THRS, iou)]
        return self._mean(s[:, :, :, list(AREAS).index(area), MAX_DETS.index(max_dets)])

    def ar(self, area="all", max_dets=100) -> float:
        return self._mean(self.recall[:, :, list(AREAS).index(area), MAX_DETS.index(max_dets)])

    def class_ap(self, c: int, iou=None) -> float:
        """Class c's AP (area all, 100 detections), over IoU .50:.95 or at one; -1 when the
        class has no truth that counts."""
        s = self.precision if iou is None else self.precision[np.isclose(IOU_THRS, iou)]
        return self._mean(s[:, :, c, 0, -1])

    @property
    def stats(self) -> np.ndarray:
        """COCOeval.summarize()'s stats."""
        ap, ar = self.ap, self.ar
        return np.array([ap(), ap(.5), ap(.75), ap(area="small"), ap(area="medium"),
                         ap(area="large"), ar(max_dets=1), ar(max_dets=10), ar(),
                         ar("small"), ar("medium"), ar("large")])

    def summary(self) -> str:
        """The 12 lines COCOeval.summarize() prints."""
        rows = [(1, None, "all", 100), (1, .5, "all", 100), (1, .75, "all", 100),
                (1, None, "small", 100), (1, None, "medium", 100), (1, None, "large", 100),
                (0, None, "all", 1), (0, None, "all", 10), (0, None, "all", 100),
                (0, None, "small", 100), (0, None, "medium", 100), (0, None, "large", 100)]
        lines = []
        for (is_ap, iou, area, m), v in zip(rows, self.stats):
            title, kind = ("Average Precision", "(AP)") if is_ap else ("Average Recall", "(AR)")
            iou_s = "0.50:0.95" if iou is None else f"{iou:0.2f}"
            lines.append(f" {title:<18} {kind} @[ IoU={iou_s:<9} | area={area:>6s} | "
                         f"maxDets={m:>3d} ] = {v:0.3f}")
        return "\n".join(lines)


def _pixel_boxes(rel, sizes, image):
    """(x0, y0, w, h) float64 from relative centre boxes, in pixels of each row's image when
    the sizes are known."""
    b = np.asarray(rel, np.float64).reshape(-1, 4)
    out = np.column_stack([b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2, b[:, 2], b[:, 3]])
    if sizes is not None and len(b):
        wh = np.asarray(sizes, np.float64)[image]
        out *= np.column_stack([wh, wh])
    return out


def coco_evaluate(detections, truths, classes: int, sizes=None, crowd=None) -> CocoEval:
    """COCOeval on darknumba's inputs: detections (n, 7) rows [image, class, score, x, y, w,
    h] (relative, centre-based; the order among equal scores is kept, as a results file's
    order is), truths a list per image of (m, 5) rows [x, y, w, h, class], sizes a (w, h) per
    image or None, crowd a list per image of m booleans (iscrowd) or None."""
    dets = np.asarray(detections, np.float64).reshape(-1, 7)
    n_img = len(truths)
    gts = [np.asarray(t, np.float64).reshape(-1, 5) for t in truths]
    g_img = np.concatenate([np.full(len(t), k) for k, t in enumerate(gts)] or [[]]).astype(np.int64)
    g_rows = np.concatenate(gts or [np.zeros((0, 5))])
    g_cls = g_rows[:, 4].astype(np.int64)
    g_crowd = (np.concatenate([np.asarray(c, bool).reshape(-1) for c in crowd] or [[]])
               .astype(bool) if crowd is not None else np.zeros(len(g_rows), bool))
    if g_crowd.size != len(g_rows):
        raise ValueError(f"crowd has {g_crowd.size} flags for {len(g_rows)} truths")
    d_img, d_cls = dets[:, 0].astype(np.int64), dets[:, 1].astype(np.int64)
    keep = (d_cls >= 0) & (d_cls < classes) & (d_img >= 0) & (d_img < n_img)
    dets, d_img, d_cls = dets[keep], d_img[keep], d_cls[keep]

    # groups (class, image); detections by score within a group, ties in input order
    d_order = np.lexsort((np.arange(len(dets)), -dets[:, 2], d_img, d_cls))
    dets, d_img, d_cls = dets[d_order], d_img[d_order], d_cls[d_order]
    g_order = np.lexsort((np.arange(len(g_rows)), g_img, g_cls))
    g_rows, g_img, g_cls, g_crowd = g_rows[g_order], g_img[g_order], g_cls[g_order], g_crowd[g_order]
    d_group, g_group = d_cls * n_img + d_img, g_cls * n_img + g_img
    n_groups = classes * n_img
    d_start = np.searchsorted(d_group, np.arange(n_groups + 1))
    rank = np.arange(len(dets)) - d_start[d_group]
    top = rank < MAX_DETS[-1]                               # computeIoU keeps maxDets[-1]
    dets, d_img, d_cls, d_group, rank = dets[top], d_img[top], d_cls[top], d_group[top], rank[top]
    d_start = np.searchsorted(d_group, np.arange(n_groups + 1))
    g_start = np.searchsorted(g_group, np.arange(n_groups + 1))

    d_box = np.ascontiguousarray(_pixel_boxes(dets[:, 3:7], sizes, d_img))
    g_box = np.ascontiguousarray(_pixel_boxes(g_rows[:, :4], sizes, g_img))
    areas = list(AREAS.values()) if sizes is not None else [AREAS["all"]]
    lo = np.array([a[0] for a in areas])
    hi = np.array([a[1] for a in areas])
    A, T = len(areas), IOU_THRS.size
    dt_m = np.zeros((A, T, len(dets)), np.bool_)
    dt_ig = np.zeros((A, T, len(dets)), np.bool_)
    gt_ig = np.zeros((A, len(g_rows)), np.bool_)
    # a diverged net's inf x 0 boxes have NaN areas (as before), without numpy's warning
    with np.errstate(invalid="ignore", over="ignore"):
        d_area, g_area = d_box[:, 2] * d_box[:, 3], g_box[:, 2] * g_box[:, 3]
    coco_match_cpu(d_box, d_area, d_start, g_box, g_area, g_crowd, g_start, lo, hi, IOU_THRS,
                   dt_m, dt_ig, gt_ig)

    precision = -np.ones((T, REC_THRS.size, classes, len(AREAS), len(MAX_DETS)))
    recall = -np.ones((T, classes, len(AREAS), len(MAX_DETS)))
    for c in range(classes):
        dsel = np.nonzero(d_cls == c)[0]                    # images in order, scores within
        gsel = g_cls == c
        for a in range(A):
            npig = int(np.count_nonzero(~gt_ig[a, gsel]))
            if npig == 0:
                continue
            for mi, m in enumerate(MAX_DETS):
                sel = dsel[rank[dsel] < m]
                order = np.argsort(-dets[sel, 2], kind="mergesort")
                matched, ignored = dt_m[a][:, sel[order]], dt_ig[a][:, sel[order]]
                tp = np.cumsum(matched & ~ignored, axis=1).astype(float)
                fp = np.cumsum(~matched & ~ignored, axis=1).astype(float)
                for t in range(T):
                    recall[t, c, a, mi] = tp[t, -1] / npig if tp.shape[1] else 0.0
                    precision[t, :, c, a, mi] = _interpolated(tp[t], fp[t], npig)
    return CocoEval(precision, recall, sizes is not None)


def _interpolated(tp, fp, npig):
    """accumulate()'s precision at the 101 recall points for one ranking."""
    q = np.zeros(REC_THRS.size)
    if not len(tp):
        return q
    rc = tp / npig
    pr = tp / (fp + tp + np.spacing(1))
    pr = np.maximum.accumulate(pr[::-1])[::-1]              # the precision envelope
    idx = np.searchsorted(rc, REC_THRS, side="left")
    ok = idx < len(pr)
    q[ok] = pr[idx[ok]]
    return q
