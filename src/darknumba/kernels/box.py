"""Detection kernels (Darknet's `yolo_layer.c` get_yolo_detections, `box.c` box_iou and
do_nms_sort), in float32 wherever the C computes in float.

Dimension legend: wh = l.w*l.h cells, n anchors per cell, classes per box; a layer's output
per image is [n][4+1+classes][wh]. Detections are held as parallel arrays: bbox (count, 4)
float32 (x, y, w, h: centre and size), objectness (count,), prob (count, classes).
"""
import math

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _confident(obj, thresh):
    """The one test by which both yolo passes (counting, then filling) keep a candidate: a NaN
    objectness fails it in both, so the fill never writes more rows than were counted."""
    return obj > thresh


@njit(cache=True)
def yolo_num_detections_cpu(output, offset, n, wh, classes, thresh):
    """yolo_num_detections: cells x anchors whose objectness is > thresh (image at offset)."""
    entries = 4 + 1 + classes
    count = 0
    for i in range(wh):
        for a in range(n):
            if _confident(output[offset + (a * entries + 4) * wh + i], thresh):
                count += 1
    return count


@njit(cache=True)
def get_yolo_detections_cpu(bbox, objectness, prob, output, offset, n, lw, lh, classes,
                            biases, mask, netw, neth, thresh):
    """get_yolo_detections without the box correction: candidates in Darknet's order (cell,
    then anchor); bbox in network-relative units (get_yolo_box); prob = objectness * p_class
    kept only if > thresh. Writes rows 0..count-1, never more than bbox has (the rows that
    yolo_num_detections_cpu counted); returns count."""
    wh = lw * lh
    entries = 4 + 1 + classes
    rows = bbox.shape[0]
    count = 0
    for i in range(wh):
        row = i // lw
        col = i % lw
        for a in range(n):
            base = offset + a * entries * wh + i
            obj = output[base + 4 * wh]
            if not _confident(obj, thresh):
                continue
            if count >= rows:
                return count
            m = mask[a]
            bbox[count, 0] = (np.float32(col) + output[base]) / np.float32(lw)
            bbox[count, 1] = (np.float32(row) + output[base + wh]) / np.float32(lh)
            bbox[count, 2] = np.float32(math.exp(np.float64(output[base + 2 * wh]))
                                        * np.float64(biases[2 * m]) / netw)
            bbox[count, 3] = np.float32(math.exp(np.float64(output[base + 3 * wh]))
                                        * np.float64(biases[2 * m + 1]) / neth)
            objectness[count] = obj
            for j in range(classes):
                p = obj * output[base + (5 + j) * wh]
                prob[count, j] = p if p > thresh else np.float32(0.0)
            count += 1
    return count


@njit(cache=True)
def correct_yolo_boxes_cpu(bbox, w, h, netw, neth, new_w, new_h, relative):
    """correct_yolo_boxes: undo the letterbox (new_w x new_h image centred in netw x neth);
    relative=False scales to pixels of the w x h image. new_w=netw, new_h=neth for a plain
    resize leaves the boxes as they are."""
    ox = (netw - new_w) / 2.0 / netw                                   # double, as in the C
    oy = (neth - new_h) / 2.0 / neth
    sx = np.float64(np.float32(new_w) / np.float32(netw))
    sy = np.float64(np.float32(new_h) / np.float32(neth))
    gw = np.float32(netw) / np.float32(new_w)
    gh = np.float32(neth) / np.float32(new_h)
    for i in range(bbox.shape[0]):
        x = np.float32((np.float64(bbox[i, 0]) - ox) / sx)
        y = np.float32((np.float64(bbox[i, 1]) - oy) / sy)
        bw = bbox[i, 2] * gw
        bh = bbox[i, 3] * gh
        if not relative:
            x *= np.float32(w)
            bw *= np.float32(w)
            y *= np.float32(h)
            bh *= np.float32(h)
        bbox[i, 0] = x
        bbox[i, 1] = y
        bbox[i, 2] = bw
        bbox[i, 3] = bh


@njit(cache=True)
def overlap(x1, w1, x2, w2):
    """overlap: length of the intersection of two centred segments (negative if apart)."""
    l1 = x1 - w1 / np.float32(2)
    l2 = x2 - w2 / np.float32(2)
    left = l1 if l1 > l2 else l2
    r1 = x1 + w1 / np.float32(2)
    r2 = x2 + w2 / np.float32(2)
    right = r1 if r1 < r2 else r2
    return right - left


@njit(cache=True)
def box_iou(a, b):
    """box_iou of two (x, y, w, h) float32 rows: intersection / union, 0 if apart. A union
    that is not positive (zero-area boxes of an untrained network, NaN sizes) gives 0 where
    Darknet divides by zero: its NaN or -0 fails every `> thresh` as 0 does."""
    w = overlap(a[0], a[2], b[0], b[2])
    h = overlap(a[1], a[3], b[1], b[3])
    inter = np.float32(0.0) if (w < 0 or h < 0) else w * h
    union = a[2] * a[3] + b[2] * b[3] - inter
    if not union > 0:
        return np.float32(0.0)
    return inter / union


@njit(cache=True)
def objectness_first(order, objectness):
    """do_nms_sort's first pass on the permutation `order` (filled here): boxes with
    objectness 0 are swapped to the end (Darknet's unstable swap loop); returns how many
    are left in front."""
    total = order.shape[0]
    for i in range(total):
        order[i] = i
    k = total - 1
    i = 0
    while i <= k:
        if objectness[order[i]] == 0:
            t = order[i]
            order[i] = order[k]
            order[k] = t
            k -= 1
        else:
            i += 1
    return k + 1


@njit(cache=True, inline="always")
def _key_less(a, b):
    """a < b, NaN after every number (numpy's sort order)."""
    return a < b or (b != b and a == a)


@njit(cache=True)
def stable_argsort(keys, n, perm, tmp):
    """perm[:n] = the indices that sort keys[:n] ascending, equal keys in index order, NaN
    last: np.argsort(keys[:n], kind="stable"), as a bottom-up merge sort (numba's own
    mergesort takes seconds to compile; `while` loops here compile in a tenth of the time
    `for` loops take). tmp: n or more ints of scratch."""
    for i in range(n):
        perm[i] = i
    src, dst = perm, tmp
    width = 1
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i = lo
            j = mid
            k = lo
            while k < hi:
                if j < hi and (i >= mid or _key_less(keys[src[j]], keys[src[i]])):
                    dst[k] = src[j]
                    j += 1
                else:
                    dst[k] = src[i]
                    i += 1
                k += 1
            lo += 2 * width
        src, dst = dst, src
        width *= 2
    for k in range(n):          # the sorted run is in tmp after an odd number of passes
        perm[k] = src[k]


@njit(cache=True)
def sort_by_class(order, prob, c, total, keys):
    """order[:total] sorted by class c's prob, descending, stably (glibc's qsort is a merge
    sort, so ties keep their order); False, the order left as it is, when every prob is 0."""
    nonzero = False
    for i in range(total):
        keys[i] = -prob[order[i], c]
        if keys[i] != 0:
            nonzero = True
    if not nonzero:
        return False
    perm = np.empty(total, np.int64)
    sorted_order = np.empty(total, np.int64)
    stable_argsort(keys, total, perm, sorted_order)
    for i in range(total):
        sorted_order[i] = order[perm[i]]
    for i in range(total):      # (a slice assignment compiles numba's string formatting
        order[i] = sorted_order[i]  # for its shape error: seconds)
    return True


@njit(cache=True)
def do_nms_sort_cpu(order, bbox, objectness, prob, thresh):
    """do_nms_sort on the permutation `order` (filled here): boxes with objectness 0 are
    swapped to the end (Darknet's unstable swap loop); then for each class the rest are sorted
    by that class's prob, descending, with a stable merge sort (glibc's qsort is a merge sort,
    so ties keep their current order), and every later box whose IoU with a kept box is
    > thresh loses that class (prob set to 0 in place). A class whose probs are all 0 leaves
    the order as it is, as a stable sort would."""
    total = objectness_first(order, objectness)
    keys = np.empty(total, dtype=np.float32)
    for c in range(prob.shape[1]):
        if not sort_by_class(order, prob, c, total, keys):
            continue
        for i in range(total):
            a = order[i]
            if prob[a, c] == 0:
                continue
            for j in range(i + 1, total):
                b = order[j]
                if box_iou(bbox[a], bbox[b]) > thresh:
                    prob[b, c] = 0
