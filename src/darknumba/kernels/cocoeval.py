"""COCO's per-image matching (pycocotools' COCOeval.computeIoU + evaluateImg), for every
(class, image) group of detections and truths at once.

Legend: G groups; group g owns detections det_start[g]:det_start[g+1] (sorted by score, highest
first, ties in input order, at most maxDets) and truths gt_start[g]:gt_start[g+1]. Boxes are
(x0, y0, w, h) in float64. A areas ranges, T IoU thresholds.
"""
import numpy as np
from numba import njit, prange


@njit(cache=True)
def _box_iou(d, g, crowd):
    """maskApi's bbIou: intersection over union, or over the detection's area for a crowd
    truth; 0 when the boxes do not overlap."""
    w = min(d[0] + d[2], g[0] + g[2]) - max(d[0], g[0])
    if w <= 0:
        return 0.0
    h = min(d[1] + d[3], g[1] + g[3]) - max(d[1], g[1])
    if h <= 0:
        return 0.0
    inter = w * h
    union = d[2] * d[3] if crowd else d[2] * d[3] + g[2] * g[3] - inter
    return inter / union


@njit(parallel=True, cache=True)
def coco_match_cpu(det_box, det_area, det_start, gt_box, gt_area, gt_crowd, gt_start,
                   area_lo, area_hi, iou_thrs, dt_matched, dt_ignore, gt_ignore):
    """dt_matched[a, t, d], dt_ignore[a, t, d] and gt_ignore[a, k] for every area range a and
    IoU threshold t, as evaluateImg sets them: truths outside the area range or crowd are
    ignored and tried last; each detection, best score first, takes the truth of highest
    IoU >= t (the later one on a tie) not yet taken (crowd truths can be taken again),
    stopping at the ignored truths once it holds a regular one; a detection on an ignored
    truth, or unmatched and outside the area range, is ignored."""
    n_groups = det_start.size - 1
    n_thr = iou_thrs.size
    for g in prange(n_groups):
        d0, d1 = det_start[g], det_start[g + 1]
        g0, g1 = gt_start[g], gt_start[g + 1]
        nd, ng = d1 - d0, g1 - g0
        if nd == 0 and ng == 0:
            continue
        iou = np.zeros((nd, ng))
        for i in range(nd):
            for j in range(ng):
                iou[i, j] = _box_iou(det_box[d0 + i], gt_box[g0 + j], gt_crowd[g0 + j])
        order = np.empty(ng, np.int64)
        taken = np.zeros(ng, np.bool_)
        for a in range(area_lo.size):
            ig = np.empty(ng, np.bool_)
            for j in range(ng):
                ig[j] = gt_crowd[g0 + j] or gt_area[g0 + j] < area_lo[a] \
                    or gt_area[g0 + j] > area_hi[a]
                gt_ignore[a, g0 + j] = ig[j]
            k = 0
            for flag in (False, True):            # regular truths first, in input order
                for j in range(ng):
                    if ig[j] == flag:
                        order[k] = j
                        k += 1
            for t in range(n_thr):
                taken[:] = False
                for i in range(nd):
                    best = min(iou_thrs[t], 1 - 1e-10)
                    m = -1
                    for j in order:
                        if taken[j] and not gt_crowd[g0 + j]:
                            continue
                        if m > -1 and not ig[m] and ig[j]:
                            break
                        if iou[i, j] < best:
                            continue
                        best = iou[i, j]
                        m = j
                    if m == -1:
                        outside = det_area[d0 + i] < area_lo[a] or det_area[d0 + i] > area_hi[a]
                        dt_ignore[a, t, d0 + i] = outside
                        continue
                    dt_matched[a, t, d0 + i] = True
                    dt_ignore[a, t, d0 + i] = ig[m]
                    taken[m] = True
