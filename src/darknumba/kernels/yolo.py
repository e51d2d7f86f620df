"""Yolo layer kernels (Darknet's `yolo_layer.c`)."""
import math

import numpy as np
from numba import njit, prange

from .logistic_rows import logistic_row


@njit(parallel=True, cache=True)
def activate_yolo_output(inp, output, batch, n, classes, wh):
    """output = inp with Darknet's logistic on entries 0, 1 (x, y) and 4.. (objectness,
    classes) of every anchor; w, h copied raw (forward_yolo_layer's copy and activations in
    one pass)."""
    entries = 4 + classes + 1
    # one (image, anchor, entry) row per iteration: enough rows to keep both cores busy
    for bne in prange(batch * n * entries):
        e = bne % entries
        src = inp[bne * wh:(bne + 1) * wh]
        dst = output[bne * wh:(bne + 1) * wh]
        if e == 2 or e == 3:
            dst[:] = src
        else:
            logistic_row(src, dst)


# -- training targets (forward_yolo_layer with a truth) -------------------------------------
# Per image, truth[t*5 + {0..4}] = x, y, w, h, class; the list ends at the first x == 0.
# Boxes are (x, y, w, h) relative to the network input, (x, y) the centre.

@njit(cache=True)
def _overlap(x1, w1, x2, w2):
    """overlap(), with the C's comparisons (a NaN end takes the other box's, as in Darknet)."""
    l1 = x1 - w1 / 2
    l2 = x2 - w2 / 2
    r1 = x1 + w1 / 2
    r2 = x2 + w2 / 2
    return (r1 if r1 < r2 else r2) - (l1 if l1 > l2 else l2)


@njit(cache=True)
def box_iou(ax, ay, aw, ah, bx, by, bw, bh):
    """Darknet's box_iou: intersection / union of two centre-size boxes; 0 where the union
    is not positive (zero-area boxes), where Darknet divides by zero."""
    w = _overlap(ax, aw, bx, bw)
    h = _overlap(ay, ah, by, bh)
    inter = 0.0 if (w < 0 or h < 0) else w * h
    union = aw * ah + bw * bh - inter
    if not union > 0:
        return 0.0
    return inter / union


@njit(cache=True)
def _num_truths(truth, base, max_boxes, truths):
    """The boxes of the image whose truth starts at `base`: up to the first x == 0, at most
    max_boxes and never past the image's `truths` values (Darknet reads on into the next image
    when max= exceeds 90)."""
    limit = min(max_boxes, truths // 5)
    for t in range(limit):
        if truth[base + t * 5] == 0:
            return t
    return limit


@njit(cache=True, inline="always")
def truth_cell(x, size):
    """The cell (0..size-1) holding a truth coordinate x in [0, 1), or -1 for any other x
    (NaN, Inf, negative, >= 1): tested on the float, before any conversion to int."""
    if not (x >= 0 and x < 1):
        return -1
    return min(int(x * np.float32(size)), size - 1)


@njit(cache=True)
def _pred_box(output, biases, a, index, i, j, lw, lh, netw, neth, stride):
    """get_yolo_box for anchor `a` (an index into all anchors) at cell (i, j)."""
    x = np.float32((i + output[index]) / lw)
    y = np.float32((j + output[index + stride]) / lh)
    w = np.float32(math.exp(output[index + 2 * stride]) * biases[2 * a] / netw)
    h = np.float32(math.exp(output[index + 3 * stride]) * biases[2 * a + 1] / neth)
    return x, y, w, h


@njit(cache=True)
def delta_yolo_box(truth, tb, output, biases, a, index, i, j, lw, lh, netw, neth, delta, scale,
                   stride):
    """Box deltas toward truth box tb: scale * (target - prediction) for x, y (the sigmoid
    outputs) and w, h (the raw log-space outputs). Returns the prediction's IoU with the truth."""
    tx, ty, tw, th = truth[tb], truth[tb + 1], truth[tb + 2], truth[tb + 3]
    px, py, pw, ph = _pred_box(output, biases, a, index, i, j, lw, lh, netw, neth, stride)
    iou = box_iou(px, py, pw, ph, tx, ty, tw, th)
    f32 = np.float32
    gx = tx * f32(lw) - f32(i)
    gy = ty * f32(lh) - f32(j)
    gw = f32(math.log(tw * netw / biases[2 * a]))
    gh = f32(math.log(th * neth / biases[2 * a + 1]))
    s = f32(scale)
    delta[index] = s * (gx - output[index])
    delta[index + stride] = s * (gy - output[index + stride])
    delta[index + 2 * stride] = s * (gw - output[index + 2 * stride])
    delta[index + 3 * stride] = s * (gh - output[index + 3 * stride])
    return iou


@njit(cache=True, inline="always")
def truth_class(v):
    """A truth's class id as Darknet's (int) cast reads it, or -1 for NaN, Inf or a negative
    value (tested on the float: converting NaN to int is undefined)."""
    if not (v >= 0 and v < 2147483647):
        return -1
    return int(v)


@njit(cache=True)
def delta_yolo_class(output, delta, index, cls, classes, stride):
    """Class deltas [c == cls] - p_c. If this cell's class-0 delta is already set (a second
    truth in the same cell and anchor), only the new class gets 1 - p. Returns p_cls. A class
    outside 0..classes-1 (the layer refuses such truths first) writes nothing and returns 0."""
    if cls < 0 or cls >= classes:
        return np.float32(0.0)
    if delta[index] != 0:
        delta[index + stride * cls] = np.float32(1.0) - output[index + stride * cls]
        return output[index + stride * cls]
    for c in range(classes):
        target = np.float32(1.0) if c == cls else np.float32(0.0)
        delta[index + stride * c] = target - output[index + stride * c]
    return output[index + stride * cls]


@njit(parallel=True, cache=True)
def yolo_objectness_deltas(output, truth, biases, mask, batch, n, lw, lh, classes, netw, neth,
                           truths, max_boxes, ignore_thresh, truth_thresh, delta, anyobj):
    """First pass over every (image, anchor, row): delta_obj = -obj unless the predicted box
    overlaps some truth by more than ignore_thresh (then 0); above truth_thresh the cell is
    trained toward that truth. anyobj[b*n*lh + ...] gets each row's sum of objectness."""
    wh = lw * lh
    entries = 4 + 1 + classes
    outputs = wh * n * entries
    for bnj in prange(batch * n * lh):
        b = bnj // (n * lh)
        an = (bnj // lh) % n
        j = bnj % lh
        tbase = b * truths
        nt = _num_truths(truth, tbase, max_boxes, truths)
        acc = 0.0
        for i in range(lw):
            box_index = b * outputs + an * wh * entries + j * lw + i
            obj_index = box_index + 4 * wh
            px, py, pw, ph = _pred_box(output, biases, mask[an], box_index, i, j, lw, lh,
                                       netw, neth, wh)
            best_iou = 0.0
            best_t = 0
            for t in range(nt):
                tb = tbase + t * 5
                iou = box_iou(px, py, pw, ph, truth[tb], truth[tb + 1], truth[tb + 2],
                              truth[tb + 3])
                if iou > best_iou:
                    best_iou = iou
                    best_t = t
            acc += output[obj_index]
            delta[obj_index] = -output[obj_index]
            if best_iou > ignore_thresh:
                delta[obj_index] = 0.0
            if best_iou > truth_thresh:
                delta[obj_index] = np.float32(1.0) - output[obj_index]
                tb = tbase + best_t * 5
                delta_yolo_class(output, delta, obj_index + wh, truth_class(truth[tb + 4]),
                                 classes, wh)
                scale = 2.0 - truth[tb + 2] * truth[tb + 3]
                delta_yolo_box(truth, tb, output, biases, mask[an], box_index, i, j, lw, lh,
                               netw, neth, delta, scale, wh)
        anyobj[bnj] = acc


@njit(parallel=True, cache=True)
def yolo_truth_deltas(output, truth, biases, mask, total, batch, n, lw, lh, classes, netw, neth,
                      truths, max_boxes, delta, stats):
    """Second pass, per image (in parallel), truths in order: each truth trains the anchor
    that fits its size best among all `total` anchors, if that anchor belongs to this layer,
    at the cell holding its centre. stats[b] = (iou sum, class p sum, obj sum, recall .5,
    recall .75, count)."""
    wh = lw * lh
    entries = 4 + 1 + classes
    outputs = wh * n * entries
    f32 = np.float32
    for b in prange(batch):
        tbase = b * truths
        nt = _num_truths(truth, tbase, max_boxes, truths)
        s_iou = s_cat = s_obj = r50 = r75 = 0.0
        count = 0
        for t in range(nt):
            tb = tbase + t * 5
            tw, th = truth[tb + 2], truth[tb + 3]
            i = truth_cell(truth[tb], lw)
            j = truth_cell(truth[tb + 1], lh)
            if i < 0 or j < 0:
                continue
            best_iou = 0.0
            best_n = 0
            for a in range(total):
                iou = box_iou(0.0, 0.0, np.float32(biases[2 * a] / netw),
                              np.float32(biases[2 * a + 1] / neth), 0.0, 0.0, tw, th)
                if iou > best_iou:
                    best_iou = iou
                    best_n = a
            mask_n = -1
            for m in range(n):
                if mask[m] == best_n:
                    mask_n = m
                    break
            if mask_n < 0:
                continue
            box_index = b * outputs + mask_n * wh * entries + j * lw + i
            iou = delta_yolo_box(truth, tb, output, biases, best_n, box_index, i, j, lw, lh,
                                 netw, neth, delta, 2.0 - tw * th, wh)
            obj_index = box_index + 4 * wh
            s_obj += output[obj_index]
            delta[obj_index] = f32(1.0) - output[obj_index]
            s_cat += delta_yolo_class(output, delta, obj_index + wh, truth_class(truth[tb + 4]),
                                      classes, wh)
            count += 1
            if iou > 0.5:
                r50 += 1
            if iou > 0.75:
                r75 += 1
            s_iou += iou
        stats[b, 0] = s_iou
        stats[b, 1] = s_cat
        stats[b, 2] = s_obj
        stats[b, 3] = r50
        stats[b, 4] = r75
        stats[b, 5] = count


@njit(parallel=True, cache=True)
def sum_squares(x, n):
    s = 0.0
    for i in prange(n):
        s += np.float64(x[i]) * x[i]
    return s
