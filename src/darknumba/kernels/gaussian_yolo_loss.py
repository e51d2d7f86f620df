"""AlexeyAB's [Gaussian_yolo] loss (the training half of its `gaussian_yolo_layer.c`:
forward_gaussian_yolo_layer's loops, delta_gaussian_yolo_box, delta_gaussian_yolo_class,
averages_gaussian_yolo_deltas). Legend as in gaussian_yolo.py.

The box loss is the negative log-likelihood of a Gaussian per coordinate (mean = the x, y, w,
h entries, sigma = their uncertainty entries, +0.3 in the density's normaliser) for
iou_loss=mse; for the IoU kinds x, y, w, h take the IoU gradient instead and only the
uncertainties keep the Gaussian's.
"""
import math
from collections import namedtuple

import numpy as np
from numba import njit, prange

from .box_ab import MSE, box_giou, box_iou, box_iou_kind, dx_box_iou
from .gaussian_yolo import ENTRIES, YOLO_LEFT_TOP, YOLO_RIGHT_BOTTOM, get_gaussian_yolo_box
from .yolo_ab_loss import fix_clip, index_in, smooth

# sizes: anchors of this layer (n) and in all (total), the grid, the network input, the truth
GaussianSizes = namedtuple("GaussianSizes", "n total lw lh classes netw neth truths truth_size "
                                            "max_boxes")
# the loss settings: float32 as the C's floats; iou_loss and iou_thresh_kind are box_ab kinds;
# clip (max_delta given) and objectness_smooth are bools; eps is label_smooth_eps; point is a
# YOLO_POINT
GaussianLossParams = namedtuple("GaussianLossParams",
                                "ignore_thresh truth_thresh iou_thresh iou_thresh_kind "
                                "iou_normalizer uc_normalizer obj_normalizer cls_normalizer "
                                "iou_loss max_delta clip objectness_smooth eps point")

f32 = np.float32
_0 = f32(0.0)
_1 = f32(1.0)
_2 = f32(2.0)
SIGMA_CONST = f32(0.3)
EPSI = f32(1e-9)
SQRT_2PI = math.sqrt(math.pi * 2.0)

# columns of the per-image statistics
(G_IOU, G_CAT, G_OBJ, G_ANYOBJ, G_RECALL, G_RECALL75, G_COUNT, G_CLASS_COUNT) = range(8)
N_GSTATS = 8


@njit(cache=True, error_model="numpy")
def _gaussian_terms(d, sigma, scale):
    """For one coordinate with error d = target - mean and uncertainty sigma: (the mean's
    delta, the uncertainty's delta) before the normalisers, in the C's mixed precision. The
    density's factor n / (n + 1e-9) is 1 unless the density underflows."""
    z = d / sigma
    z2 = f32(np.float64(z) * np.float64(z))
    nd = f32(math.exp(np.float64(z2) * -0.5) / (SQRT_2PI * np.float64(sigma + SIGMA_CONST)))
    temp = f32(0.5 / np.float64(nd + EPSI) * np.float64(nd) * np.float64(scale))
    d_mean = f32(np.float64(temp * z) * (1.0 / np.float64(sigma)))
    d_sigma = f32(np.float64(temp) * (np.float64(z2 / sigma)
                                      - 1.0 / np.float64(sigma + SIGMA_CONST)))
    return d_mean, d_sigma


@njit(cache=True, error_model="numpy")
def delta_gaussian_yolo_box(tx, ty, tw, th, x, biases, a, index, i, j, lw, lh, netw, neth,
                            delta, scale, stride, iou_normalizer, iou_loss, uc_normalizer,
                            point, max_delta, clip):
    """delta_gaussian_yolo_box, accumulating into delta (the C's accumulate=1). Each coordinate
    c of x, y, w, h with target t_c (the cell offset, log of the size ratio; the box corner
    for yolo_point left_top / right_bottom), error d = t_c - x_c and uncertainty s_c:
    mean delta 0.5 scale d / s_c^2 (times iou_normalizer), uncertainty delta 0.5 scale
    (d^2 / s_c^3 - 1 / (s_c + 0.3)) (times uc_normalizer); for the IoU kinds the means take
    dx_box_iou's gradient instead (w, h times exp(t)). NaN/Inf zeroed, clipped to max_delta
    when given. Returns the IoU of the prediction with the truth (the GIoU for the IoU
    kinds, as the C's return value)."""
    s = stride
    px, py, pw, ph = get_gaussian_yolo_box(x, biases, a, index, i, j, lw, lh, netw, neth, s,
                                           point)
    iou = box_iou(px, py, pw, ph, tx, ty, tw, th)
    giou = box_giou(px, py, pw, ph, tx, ty, tw, th)
    if pw == 0:
        pw = _1
    if ph == 0:
        ph = _1
    gx = tx * f32(lw) - f32(i)
    gy = ty * f32(lh) - f32(j)
    if point == YOLO_LEFT_TOP:
        gx = (tx - tw / _2) * f32(lw) - f32(i)
        gy = (ty - th / _2) * f32(lh) - f32(j)
    elif point == YOLO_RIGHT_BOTTOM:
        gx = (tx + tw / _2) * f32(lw) - f32(i)
        gy = (ty + th / _2) * f32(lh) - f32(j)
    gw = f32(math.log(np.float64(tw * f32(netw) / biases[2 * a])))
    gh = f32(math.log(np.float64(th * f32(neth) / biases[2 * a + 1])))
    dx, ux = _gaussian_terms(gx - x[index], x[index + s], scale)
    dy, uy = _gaussian_terms(gy - x[index + 2 * s], x[index + 3 * s], scale)
    dw, uw = _gaussian_terms(gw - x[index + 4 * s], x[index + 5 * s], scale)
    dh, uh = _gaussian_terms(gh - x[index + 6 * s], x[index + 7 * s], scale)
    if iou_loss != MSE:
        iou = giou
        dx, dy, dw, dh = dx_box_iou(px, py, pw, ph, tx, ty, tw, th, iou_loss)
        if point == YOLO_LEFT_TOP:
            dx = dx - dw / _2
            dy = dy - dh / _2
        elif point == YOLO_RIGHT_BOTTOM:
            dx = dx + dw / _2
            dy = dy + dh / _2
        dw = f32(np.float64(dw) * math.exp(np.float64(x[index + 4 * s])))
        dh = f32(np.float64(dh) * math.exp(np.float64(x[index + 6 * s])))
    delta[index] += fix_clip(dx * iou_normalizer, max_delta, clip)
    delta[index + 2 * s] += fix_clip(dy * iou_normalizer, max_delta, clip)
    delta[index + 4 * s] += fix_clip(dw * iou_normalizer, max_delta, clip)
    delta[index + 6 * s] += fix_clip(dh * iou_normalizer, max_delta, clip)
    delta[index + s] += fix_clip(ux * uc_normalizer, max_delta, clip)
    delta[index + 3 * s] += fix_clip(uy * uc_normalizer, max_delta, clip)
    delta[index + 5 * s] += fix_clip(uw * uc_normalizer, max_delta, clip)
    delta[index + 7 * s] += fix_clip(uh * uc_normalizer, max_delta, clip)
    return iou


@njit(cache=True, error_model="numpy")
def delta_gaussian_yolo_class(output, delta, index, cls, classes, stride, eps, multipliers,
                              cls_normalizer):
    """delta_gaussian_yolo_class. Unlike [yolo]'s, the test for a second truth at this cell
    and anchor reads the delta of class 0 (not the truth's class): when it is set, only the
    truth class is rewritten (smoothed 1 - p, times its multiplier). Otherwise every class
    gets smoothed [c == cls] - p, and the truth class, with counters_per_class, times
    multiplier * cls_normalizer. Returns p_cls (what avg_cat adds)."""
    ti = index + stride * cls
    has_mult = multipliers.shape[0] > 0
    if delta[index] != 0:
        delta[ti] = smooth(_1, eps) - output[ti]
        if has_mult:
            delta[ti] *= multipliers[cls]
        return output[ti]
    for c in range(classes):
        k = index + stride * c
        delta[k] = smooth(_1 if c == cls else _0, eps) - output[k]
        if has_mult and c == cls:
            delta[ti] *= multipliers[cls] * cls_normalizer
    return output[ti]


@njit(cache=True, error_model="numpy")
def _train_anchor(output, delta, truth, tb, cls, biases, a, mask_n, i, j, b, sizes, p,
                  multipliers, stats):
    """A truth trains anchor `a` (this layer's mask_n) at cell (i, j): box deltas scaled by
    (2 - w h), objectness toward 1 (times the class multiplier), class deltas; statistics."""
    n, total, lw, lh, classes, netw, neth, truths, truth_size, max_boxes = sizes
    wh = lw * lh
    entries = ENTRIES + classes
    box_index = b * wh * n * entries + mask_n * wh * entries + j * lw + i
    tx, ty, tw, th = truth[tb], truth[tb + 1], truth[tb + 2], truth[tb + 3]
    cm = multipliers[cls] if multipliers.shape[0] > 0 else _1
    iou = delta_gaussian_yolo_box(tx, ty, tw, th, output, biases, a, box_index, i, j, lw, lh,
                                  netw, neth, delta, _2 - tw * th, wh, p.iou_normalizer * cm,
                                  p.iou_loss, p.uc_normalizer, p.point, p.max_delta, p.clip)
    obj_index = box_index + 8 * wh
    stats[b, G_OBJ] += output[obj_index]
    delta[obj_index] = cm * p.obj_normalizer * (_1 - output[obj_index])
    stats[b, G_CAT] += delta_gaussian_yolo_class(output, delta, obj_index + wh, cls, classes,
                                                 wh, p.eps, multipliers, p.cls_normalizer)
    stats[b, G_COUNT] += 1
    stats[b, G_CLASS_COUNT] += 1
    if iou > 0.5:
        stats[b, G_RECALL] += 1
    if iou > 0.75:
        stats[b, G_RECALL75] += 1
    stats[b, G_IOU] += iou


@njit(cache=True, error_model="numpy")
def _truth_cell(tx, ty, tw, th, lw, lh, point):
    """The cell a truth trains: the one holding its centre (clamped to the grid: a float
    product may round up to lw), or its left-top / right-bottom corner clamped to the grid."""
    fx, fy = tx * f32(lw), ty * f32(lh)
    if point == YOLO_LEFT_TOP:
        fx, fy = (tx - tw / _2) * f32(lw), (ty - th / _2) * f32(lh)
    elif point == YOLO_RIGHT_BOTTOM:
        fx, fy = (tx + tw / _2) * f32(lw), (ty + th / _2) * f32(lh)
    i = int(min(max(fx, _0), f32(lw - 1)))
    j = int(min(max(fy, _0), f32(lh - 1)))
    return i, j


@njit(cache=True, error_model="numpy")
def process_gaussian_batch(b, output, delta, truth, biases, mask, sizes, p, multipliers,
                           class_map, stats):
    """forward_gaussian_yolo_layer's loss for image b.

    1. Every prediction: objectness delta -obj * obj_normalizer, unless its best IoU with a
       truth is over ignore_thresh (only when some class prob > 0.25 there); then 0, or with
       objectness_smooth trained toward IoU^2 with class deltas. Above truth_thresh it is
       trained toward that truth.
    2. Every truth trains the anchor that fits its size best among all anchors if it is this
       layer's, and (iou_thresh < 1) every other of this layer's anchors whose iou_thresh_kind
       IoU with it is > iou_thresh, at the cell of its point.
    3. Every cell's eight box deltas are divided by its count of positive class deltas
       (always, unlike [yolo], which does it only with iou_thresh < 1)."""
    n, total, lw, lh, classes, netw, neth, truths, truth_size, max_boxes = sizes
    wh = lw * lh
    entries = ENTRIES + classes
    outputs = wh * n * entries
    tbase = b * truths
    has_map = class_map.shape[0] > 0
    for j in range(lh):
        for i in range(lw):
            for an in range(n):
                box_index = b * outputs + an * wh * entries + j * lw + i
                obj_index = box_index + 8 * wh
                class_index = box_index + 9 * wh
                px, py, pw, ph = get_gaussian_yolo_box(output, biases, mask[an], box_index, i,
                                                       j, lw, lh, netw, neth, wh, p.point)
                best_match_iou = _0
                best_match_t = 0
                best_iou = _0
                best_t = 0
                for t in range(max_boxes):
                    tb = tbase + t * truth_size
                    if truth[tb + 4] >= f32(classes):   # the C's (int)class >= classes
                        continue
                    if truth[tb] == 0:
                        break
                    class_match = False
                    for c in range(classes):
                        if output[class_index + wh * c] > f32(0.25):
                            class_match = True
                            break
                    iou = box_iou(px, py, pw, ph, truth[tb], truth[tb + 1], truth[tb + 2],
                                  truth[tb + 3])
                    if iou > best_match_iou and class_match:
                        best_match_iou = iou
                        best_match_t = t
                    if iou > best_iou:
                        best_iou = iou
                        best_t = t
                stats[b, G_ANYOBJ] += output[obj_index]
                delta[obj_index] = p.obj_normalizer * (_0 - output[obj_index])
                if best_match_iou > p.ignore_thresh:
                    if p.objectness_smooth:
                        m2 = best_match_iou * best_match_iou
                        delta[obj_index] = p.obj_normalizer * (m2 - output[obj_index])
                        cls = int(truth[tbase + best_match_t * truth_size + 4])
                        if has_map:
                            cls = class_map[cls]
                        delta_gaussian_yolo_class(output, delta, class_index, cls, classes, wh,
                                                  p.eps, multipliers, p.cls_normalizer)
                    else:
                        delta[obj_index] = _0
                if best_iou > p.truth_thresh:
                    m2 = best_iou * best_iou
                    target = m2 if p.objectness_smooth else _1
                    delta[obj_index] = p.obj_normalizer * (target - output[obj_index])
                    tb = tbase + best_t * truth_size
                    cls = int(truth[tb + 4])
                    if has_map:
                        cls = class_map[cls]
                    delta_gaussian_yolo_class(output, delta, class_index, cls, classes, wh,
                                              p.eps, multipliers, p.cls_normalizer)
                    cm = multipliers[cls] if multipliers.shape[0] > 0 else _1
                    if p.objectness_smooth:
                        k = class_index + wh * cls
                        delta[k] = cm * (m2 - output[k])
                    tw, th = truth[tb + 2], truth[tb + 3]
                    delta_gaussian_yolo_box(truth[tb], truth[tb + 1], tw, th, output, biases,
                                            mask[an], box_index, i, j, lw, lh, netw, neth,
                                            delta, _2 - tw * th, wh, p.iou_normalizer * cm,
                                            p.iou_loss, p.uc_normalizer, p.point, p.max_delta,
                                            p.clip)

    for t in range(max_boxes):
        tb = tbase + t * truth_size
        if truth[tb] == 0:
            break
        tw, th = truth[tb + 2], truth[tb + 3]
        i, j = _truth_cell(truth[tb], truth[tb + 1], tw, th, lw, lh, p.point)
        best_iou = _0
        best_n = 0
        for a in range(total):
            iou = box_iou(_0, _0, biases[2 * a] / f32(netw), biases[2 * a + 1] / f32(neth),
                          _0, _0, tw, th)
            if iou > best_iou:
                best_iou = iou
                best_n = a
        cls = int(truth[tb + 4])
        if has_map:
            cls = class_map[cls]
        mask_n = index_in(mask, n, best_n)
        if mask_n >= 0:
            _train_anchor(output, delta, truth, tb, cls, biases, best_n, mask_n, i, j, b,
                          sizes, p, multipliers, stats)
        if p.iou_thresh < 1:
            for a in range(total):
                mask_n = index_in(mask, n, a)
                if mask_n < 0 or a == best_n:
                    continue
                iou = box_iou_kind(_0, _0, biases[2 * a] / f32(netw),
                                   biases[2 * a + 1] / f32(neth), _0, _0, tw, th,
                                   p.iou_thresh_kind)
                if iou > p.iou_thresh:
                    _train_anchor(output, delta, truth, tb, cls, biases, a, mask_n, i, j, b,
                                  sizes, p, multipliers, stats)

    for an in range(n):
        for cell in range(wh):
            box_index = b * outputs + an * wh * entries + cell
            positive = 0
            for c in range(classes):
                if delta[box_index + (9 + c) * wh] > 0:
                    positive += 1
            if positive > 0:
                for k in range(8):
                    delta[box_index + k * wh] /= f32(positive)


@njit(parallel=True, cache=True, error_model="numpy")
def forward_gaussian_yolo_loss(output, delta, truth, biases, mask, batch, sizes, p,
                               multipliers, class_map, stats):
    """The training half of forward_gaussian_yolo_layer: every image in parallel (each writes
    only its own slice of delta and its row of stats)."""
    for b in prange(batch):
        process_gaussian_batch(b, output, delta, truth, biases, mask, sizes, p, multipliers,
                               class_map, stats)
