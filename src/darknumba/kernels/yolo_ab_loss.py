"""AlexeyAB's [yolo] loss kernels (the training half of its `yolo_layer.c:forward_yolo_layer`:
process_batch, delta_yolo_box, delta_yolo_class, averages_yolo_deltas) and the sums of squares
its cost is made of.

Legend as in yolo_ab.py: per image the output is [n anchors][4 + 1 + classes][h][w]; truth per
image: max_boxes rows of truth_size (6) floats x, y, w, h, class, track id, ending at the first
x == 0. Float32 where the C computes in float (its statistics too).
"""
import math
from collections import namedtuple

import numpy as np
from numba import njit, prange

from .box_ab import MSE, box_ciou, box_diou, box_giou, box_iou, box_iou_kind, dx_box_iou
from .yolo_ab import get_yolo_box

# process_batch's arguments, named (numba takes namedtuples of scalars as arguments)
# sizes: anchors of this layer (n) and in all (total), the grid, the network input, and the
# truth (values per image, per box, boxes per image)
YoloSizes = namedtuple("YoloSizes", "n total lw lh classes netw neth truths truth_size "
                                    "max_boxes")
# the loss settings of AlexeyAB's [yolo]: float32 as the C's floats; iou_thresh_kind and
# iou_loss are box_ab kinds; clip (max_delta given), new_coords, objectness_smooth and
# focal_loss are bools; eps is label_smooth_eps
YoloLossParams = namedtuple("YoloLossParams",
                            "ignore_thresh truth_thresh iou_thresh iou_thresh_kind "
                            "iou_normalizer obj_normalizer cls_normalizer iou_loss max_delta "
                            "clip new_coords objectness_smooth focal_loss eps")

f32 = np.float32
_0 = f32(0.0)
_1 = f32(1.0)

# columns of the per-image statistics the loss kernel returns
(S_IOU, S_IOU_LOSS, S_GIOU, S_GIOU_LOSS, S_DIOU, S_DIOU_LOSS, S_CIOU, S_CIOU_LOSS, S_RECALL,
 S_RECALL75, S_CAT, S_OBJ, S_ANYOBJ, S_COUNT, S_CLASS_COUNT, S_TOTAL_BBOX, S_REWRITTEN,
 S_NAN_FIXED, S_BAD_CLASS) = range(19)
N_STATS = 19


@njit(cache=True, error_model="numpy")
def _fix_clip(v, max_delta, clip, stats, b):
    """fix_clip, the NaN/Inf it zeroes counted in stats."""
    if not math.isfinite(v):
        stats[b, S_NAN_FIXED] += 1
    return fix_clip(v, max_delta, clip)


@njit(cache=True, error_model="numpy")
def fix_clip(v, max_delta, clip):
    """fix_nan_inf, then clip_value to +-max_delta when max_delta is set ([yolo]'s and
    [Gaussian_yolo]'s box deltas)."""
    if not math.isfinite(v):
        v = _0
    if clip:
        if v > max_delta:
            v = max_delta
        elif v < -max_delta:
            v = -max_delta
    return v


@njit(cache=True, error_model="numpy")
def delta_yolo_box(tx, ty, tw, th, output, biases, a, index, i, j, lw, lh, netw, neth, delta,
                   scale, stride, iou_normalizer, iou_loss, max_delta, clip, new_coords, stats,
                   b):
    """AlexeyAB's delta_yolo_box, accumulating into delta (the C's accumulate=1): MSE adds
    scale * (target - t) * iou_normalizer per coordinate (targets in t's space: the cell
    offset, log or, with new_coords, sqrt of the size ratio); the IoU kinds add dx_box_iou's
    gradient (w, h times exp(t) unless new_coords) * iou_normalizer, NaN/Inf zeroed, clipped.
    A box whose deltas were already set counts as rewritten. Returns iou, giou, diou, ciou of
    the prediction with the truth."""
    s = stride
    if delta[index] != 0 or delta[index + s] != 0 or delta[index + 2 * s] != 0 \
            or delta[index + 3 * s] != 0:
        stats[b, S_REWRITTEN] += 1
    px, py, pw, ph = get_yolo_box(output, biases, a, index, i, j, lw, lh, netw, neth, s,
                                  new_coords)
    iou = box_iou(px, py, pw, ph, tx, ty, tw, th)
    giou = box_giou(px, py, pw, ph, tx, ty, tw, th)
    diou = box_diou(px, py, pw, ph, tx, ty, tw, th)
    ciou = box_ciou(px, py, pw, ph, tx, ty, tw, th)
    if pw == 0:
        pw = _1
    if ph == 0:
        ph = _1
    if iou_loss == MSE:
        gx = tx * f32(lw) - f32(i)
        gy = ty * f32(lh) - f32(j)
        if new_coords:
            gw = f32(math.sqrt(np.float64(tw * f32(netw) / (f32(4) * biases[2 * a]))))
            gh = f32(math.sqrt(np.float64(th * f32(neth) / (f32(4) * biases[2 * a + 1]))))
        else:
            gw = f32(math.log(np.float64(tw * f32(netw) / biases[2 * a])))
            gh = f32(math.log(np.float64(th * f32(neth) / biases[2 * a + 1])))
        delta[index] += scale * (gx - output[index]) * iou_normalizer
        delta[index + s] += scale * (gy - output[index + s]) * iou_normalizer
        delta[index + 2 * s] += scale * (gw - output[index + 2 * s]) * iou_normalizer
        delta[index + 3 * s] += scale * (gh - output[index + 3 * s]) * iou_normalizer
        return iou, giou, diou, ciou
    dx, dy, dw, dh = dx_box_iou(px, py, pw, ph, tx, ty, tw, th, iou_loss)
    if not new_coords:
        dw = f32(np.float64(dw) * math.exp(np.float64(output[index + 2 * s])))
        dh = f32(np.float64(dh) * math.exp(np.float64(output[index + 3 * s])))
    delta[index] += _fix_clip(dx * iou_normalizer, max_delta, clip, stats, b)
    delta[index + s] += _fix_clip(dy * iou_normalizer, max_delta, clip, stats, b)
    delta[index + 2 * s] += _fix_clip(dw * iou_normalizer, max_delta, clip, stats, b)
    delta[index + 3 * s] += _fix_clip(dh * iou_normalizer, max_delta, clip, stats, b)
    return iou, giou, diou, ciou


@njit(cache=True, error_model="numpy")
def smooth(y, eps):
    """label_smooth_eps: y (1 - eps) + eps / 2 (the C's double expression, stored in float)."""
    if eps != 0:
        return f32(np.float64(y * (_1 - eps)) + 0.5 * np.float64(eps))
    return y


@njit(cache=True, error_model="numpy")
def delta_yolo_class(output, delta, index, cls, classes, stride, focal_loss, eps, multipliers,
                     cls_normalizer):
    """AlexeyAB's delta_yolo_class. When the truth class's delta is already set (a second truth
    at this cell and anchor), only it is rewritten: smoothed 1 - p, times the class's
    multiplier. Focal loss: every class gets ([c == cls] - p) * 0.5 * grad(p_cls). Otherwise
    every class gets smoothed [c == cls] - p (kept as it was where that is NaN/Inf), and the
    truth class, only when counters_per_class gave multipliers, times multiplier *
    cls_normalizer (cls_normalizer does nothing without them, as in the C). Returns p_cls."""
    ti = index + stride * cls
    has_mult = multipliers.shape[0] > 0
    if delta[ti] != 0:
        r = smooth(_1, eps) - output[ti]
        if math.isfinite(r):
            delta[ti] = r
        if has_mult:
            delta[ti] *= multipliers[cls]
        return output[ti]
    if focal_loss:
        pt = output[ti] + f32(0.000000000000001)
        grad = -(_1 - pt) * (f32(2) * pt * f32(math.log(np.float64(pt))) + pt - _1)
        for c in range(classes):
            k = index + stride * c
            delta[k] = ((_1 if c == cls else _0) - output[k]) * (f32(0.5) * grad)
        return output[ti]
    for c in range(classes):
        k = index + stride * c
        r = smooth(_1 if c == cls else _0, eps) - output[k]
        if math.isfinite(r):
            delta[k] = r
        if has_mult and c == cls:
            delta[ti] *= multipliers[cls] * cls_normalizer
    return output[ti]


@njit(cache=True, error_model="numpy")
def _class_of(truth, tb, classes):
    """The truth's class id as the C's (int) cast, or -1 when outside 0..classes-1 (the C
    skips those truths). The caller has checked it is finite."""
    c = truth[tb + 4]
    if c > -1 and c < classes:
        return int(c)
    return -1


@njit(cache=True, error_model="numpy")
def _train_anchor(output, delta, truth, tb, cls, biases, a, mask_n, i, j, b, lw, lh, classes,
                  netw, neth, outputs, iou_normalizer, obj_normalizer, cls_normalizer,
                  iou_loss, max_delta, clip, new_coords, objectness_smooth, focal_loss, eps,
                  multipliers, stats):
    """One truth trains anchor `a` (this layer's mask_n) at cell (i, j): box deltas scaled by
    (2 - w h) (MSE), objectness toward 1 (with objectness_smooth only if still 0), class
    deltas; the statistics of the C's loop."""
    wh = lw * lh
    box_index = b * outputs + mask_n * wh * (4 + 1 + classes) + j * lw + i
    tx, ty, tw, th = truth[tb], truth[tb + 1], truth[tb + 2], truth[tb + 3]
    cm = multipliers[cls] if multipliers.shape[0] > 0 else _1
    iou, giou, diou, ciou = delta_yolo_box(tx, ty, tw, th, output, biases, a, box_index, i, j,
                                           lw, lh, netw, neth, delta, f32(2) - tw * th, wh,
                                           iou_normalizer * cm, iou_loss, max_delta, clip,
                                           new_coords, stats, b)
    stats[b, S_TOTAL_BBOX] += 1
    stats[b, S_IOU] += iou
    stats[b, S_IOU_LOSS] += _1 - iou
    stats[b, S_GIOU] += giou
    stats[b, S_GIOU_LOSS] += _1 - giou
    stats[b, S_DIOU] += diou
    stats[b, S_DIOU_LOSS] += _1 - diou
    stats[b, S_CIOU] += ciou
    stats[b, S_CIOU_LOSS] += _1 - ciou
    obj_index = box_index + 4 * wh
    stats[b, S_OBJ] += output[obj_index]
    d_obj = cm * obj_normalizer * (_1 - output[obj_index])
    if not objectness_smooth or delta[obj_index] == 0:
        delta[obj_index] = d_obj
    stats[b, S_CAT] += delta_yolo_class(output, delta, obj_index + wh, cls, classes, wh,
                                        focal_loss, eps, multipliers, cls_normalizer)
    stats[b, S_COUNT] += 1
    stats[b, S_CLASS_COUNT] += 1
    if iou > 0.5:
        stats[b, S_RECALL] += 1
    if iou > 0.75:
        stats[b, S_RECALL75] += 1


@njit(cache=True, error_model="numpy")
def index_in(mask, n, a):
    """int_index: the position of anchor a in this layer's mask, or -1."""
    for m in range(n):
        if mask[m] == a:
            return m
    return -1


@njit(cache=True, error_model="numpy")
def process_batch(b, output, delta, truth, biases, mask, sizes, p, multipliers, class_map,
                  stats):
    """AlexeyAB's process_batch for image b.

    1. Every prediction: objectness delta -obj * obj_normalizer, unless its best IoU with a
       truth over ignore_thresh counts (only when some class prob > 0.25 there: any class,
       objectness not multiplied in); then 0, or with objectness_smooth raised toward that
       IoU. Above truth_thresh it is trained toward that truth. A NaN/Inf objectness is
       zeroed in the output first (when the image has a truth).
    2. Every truth trains the anchor that fits its size best among all anchors if it is this
       layer's, and (iou_thresh < 1) every other of this layer's anchors whose iou_thresh_kind
       IoU with it is > iou_thresh, at the cell holding its centre.
    3. With iou_thresh < 1, each cell's box deltas are divided by its count of positive class
       deltas.

    sizes: YoloSizes; p: YoloLossParams."""
    n, total, lw, lh, classes, netw, neth, truths, truth_size, max_boxes = sizes
    (ignore_thresh, truth_thresh, iou_thresh, iou_thresh_kind, iou_normalizer, obj_normalizer,
     cls_normalizer, iou_loss, max_delta, clip, new_coords, objectness_smooth, focal_loss,
     eps) = p
    wh = lw * lh
    entries = 4 + 1 + classes
    outputs = wh * n * entries
    tbase = b * truths
    has_map = class_map.shape[0] > 0
    for j in range(lh):
        for i in range(lw):
            for an in range(n):
                box_index = b * outputs + an * wh * entries + j * lw + i
                obj_index = box_index + 4 * wh
                class_index = box_index + 5 * wh
                px, py, pw, ph = get_yolo_box(output, biases, mask[an], box_index, i, j, lw, lh,
                                              netw, neth, wh, new_coords)
                best_match_iou = _0
                best_iou = _0
                best_t = 0
                for t in range(max_boxes):
                    tb = tbase + t * truth_size
                    if truth[tb] == 0:
                        break
                    if _class_of(truth, tb, classes) < 0:
                        continue
                    if not math.isfinite(output[obj_index]):
                        output[obj_index] = _0
                    class_match = False
                    for c in range(classes):
                        if output[class_index + wh * c] > f32(0.25):
                            class_match = True
                            break
                    iou = box_iou(px, py, pw, ph, truth[tb], truth[tb + 1], truth[tb + 2],
                                  truth[tb + 3])
                    if iou > best_match_iou and class_match:
                        best_match_iou = iou
                    if iou > best_iou:
                        best_iou = iou
                        best_t = t
                stats[b, S_ANYOBJ] += output[obj_index]
                delta[obj_index] = obj_normalizer * (_0 - output[obj_index])
                if best_match_iou > ignore_thresh:
                    if objectness_smooth:
                        d_obj = obj_normalizer * (best_match_iou - output[obj_index])
                        if d_obj > delta[obj_index]:
                            delta[obj_index] = d_obj
                    else:
                        delta[obj_index] = _0
                if best_iou > truth_thresh:
                    iou_multiplier = best_iou * best_iou
                    target = iou_multiplier if objectness_smooth else _1
                    delta[obj_index] = obj_normalizer * (target - output[obj_index])
                    tb = tbase + best_t * truth_size
                    cls = _class_of(truth, tb, classes)
                    if has_map:
                        cls = class_map[cls]
                    delta_yolo_class(output, delta, class_index, cls, classes, wh, focal_loss,
                                     eps, multipliers, cls_normalizer)
                    cm = multipliers[cls] if multipliers.shape[0] > 0 else _1
                    if objectness_smooth:
                        k = class_index + wh * cls
                        delta[k] = cm * (iou_multiplier - output[k])
                    tw, th = truth[tb + 2], truth[tb + 3]
                    delta_yolo_box(truth[tb], truth[tb + 1], tw, th, output, biases, mask[an],
                                   box_index, i, j, lw, lh, netw, neth, delta, f32(2) - tw * th,
                                   wh, iou_normalizer * cm, iou_loss, max_delta, clip,
                                   new_coords, stats, b)
                    stats[b, S_TOTAL_BBOX] += 1

    for t in range(max_boxes):
        tb = tbase + t * truth_size
        if truth[tb] == 0:
            break
        cls = _class_of(truth, tb, classes)
        if cls < 0:
            stats[b, S_BAD_CLASS] += 1
            continue
        if has_map:
            cls = class_map[cls]
        tw, th = truth[tb + 2], truth[tb + 3]
        # the cell holding the centre (x < 1 is checked by the caller; the clamp keeps a
        # float product rounding up to lw inside the row)
        i = min(int(truth[tb] * f32(lw)), lw - 1)
        j = min(int(truth[tb + 1] * f32(lh)), lh - 1)
        best_iou = _0
        best_n = 0
        for a in range(total):
            iou = box_iou(_0, _0, biases[2 * a] / f32(netw), biases[2 * a + 1] / f32(neth),
                          _0, _0, tw, th)
            if iou > best_iou:
                best_iou = iou
                best_n = a
        mask_n = index_in(mask, n, best_n)
        if mask_n >= 0:
            _train_anchor(output, delta, truth, tb, cls, biases, best_n, mask_n, i, j, b, lw,
                          lh, classes, netw, neth, outputs, iou_normalizer, obj_normalizer,
                          cls_normalizer, iou_loss, max_delta, clip, new_coords,
                          objectness_smooth, focal_loss, eps, multipliers, stats)
        if iou_thresh < 1:
            for a in range(total):
                mask_n = index_in(mask, n, a)
                if mask_n < 0 or a == best_n:
                    continue
                iou = box_iou_kind(_0, _0, biases[2 * a] / f32(netw),
                                   biases[2 * a + 1] / f32(neth), _0, _0, tw, th,
                                   iou_thresh_kind)
                if iou > iou_thresh:
                    _train_anchor(output, delta, truth, tb, cls, biases, a, mask_n, i, j, b,
                                  lw, lh, classes, netw, neth, outputs, iou_normalizer,
                                  obj_normalizer, cls_normalizer, iou_loss, max_delta, clip,
                                  new_coords, objectness_smooth, focal_loss, eps, multipliers,
                                  stats)

    if iou_thresh < 1:
        for an in range(n):
            for cell in range(wh):
                box_index = b * outputs + an * wh * entries + cell
                if delta[box_index + 4 * wh] == 0:
                    continue
                positive = 0
                for c in range(classes):
                    if delta[box_index + (5 + c) * wh] > 0:
                        positive += 1
                if positive > 0:
                    for k in range(4):
                        delta[box_index + k * wh] /= f32(positive)


@njit(parallel=True, cache=True, error_model="numpy")
def forward_yolo_ab_loss(output, delta, truth, biases, mask, batch, sizes, p, multipliers,
                         class_map, stats):
    """The training half of AlexeyAB's forward_yolo_layer: process_batch for every image in
    parallel (each writes only its own slice of output, delta and stats[b])."""
    for b in prange(batch):
        process_batch(b, output, delta, truth, biases, mask, sizes, p, multipliers, class_map,
                      stats)


@njit(cache=True)
def yolo_delta_squares(delta, n_rows, entries, wh):
    """(sum of delta^2, the same without the box entries 0..3 of each of the n_rows (image,
    anchor) blocks), summed in float as AlexeyAB's mag_array is by its stock -Ofast SSE build:
    four float lanes (element i in lane i % 4), then (l0 + l2) + (l1 + l3), then the last
    n % 4 elements one by one. Its printed losses come out the same to the last digit."""
    total = np.zeros(4, np.float32)
    part = np.zeros(4, np.float32)
    block = entries * wh
    n = n_rows * block
    m = n - n % 4
    for i in range(m):
        v = delta[i] * delta[i]
        total[i % 4] += v
        if i % block >= 4 * wh:
            part[i % 4] += v
    t = (total[0] + total[2]) + (total[1] + total[3])
    p = (part[0] + part[2]) + (part[1] + part[3])
    for i in range(m, n):
        v = delta[i] * delta[i]
        t += v
        if i % block >= 4 * wh:
            p += v
    return t, p
