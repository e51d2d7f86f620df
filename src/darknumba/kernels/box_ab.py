"""AlexeyAB's `box.c`: the IoU kinds (box_iou, box_giou, box_diou, box_ciou, box_diounms), the
gradient of an IoU kind with respect to a predicted box (dx_box_iou) and the NMS kinds of
diounms_sort, in float32 where the C computes in float (double where it calls a double
function: exp, log, pow, atan).

A box is four float32 scalars x, y (centre), w, h. Kind codes follow AlexeyAB's enums:
IOU_LOSS (IOU, GIOU, MSE, DIOU, CIOU) and NMS_KIND (DEFAULT_NMS, GREEDY_NMS, DIOU_NMS).
Kernels use numpy's error model: a division by zero gives inf/NaN as in C, never an exception
(the callers zero NaN/Inf as AlexeyAB does, or compare with them, which is false).
"""
import math

import numpy as np
from numba import njit

from .box import objectness_first, overlap, sort_by_class

IOU, GIOU, MSE, DIOU, CIOU = 0, 1, 2, 3, 4
DEFAULT_NMS, GREEDY_NMS, DIOU_NMS = 0, 1, 2

f32 = np.float32
_0 = f32(0.0)
_1 = f32(1.0)
_2 = f32(2.0)
_PI2 = math.pi * math.pi


@njit(cache=True, error_model="numpy")
def fmin(a, b):
    """C's fmin: the other argument when one is NaN."""
    if a != a:
        return b
    if b != b:
        return a
    return a if a < b else b


@njit(cache=True, error_model="numpy")
def fmax(a, b):
    if a != a:
        return b
    if b != b:
        return a
    return a if a > b else b


@njit(cache=True, error_model="numpy")
def box_intersection(ax, ay, aw, ah, bx, by, bw, bh):
    w = overlap(ax, aw, bx, bw)
    h = overlap(ay, ah, by, bh)
    if w < 0 or h < 0:
        return _0
    return w * h


@njit(cache=True, error_model="numpy")
def box_iou(ax, ay, aw, ah, bx, by, bw, bh):
    """AlexeyAB's box_iou: 0 when the intersection or the union is 0 (zero-area boxes
    divide by nothing), else intersection / union."""
    i = box_intersection(ax, ay, aw, ah, bx, by, bw, bh)
    u = aw * ah + bw * bh - i
    if i == 0 or u == 0:
        return _0
    return i / u


@njit(cache=True, error_model="numpy")
def box_c(ax, ay, aw, ah, bx, by, bw, bh):
    """box_c: (top, bot, left, right) of the smallest box enclosing both."""
    top = fmin(ay - ah / _2, by - bh / _2)
    bot = fmax(ay + ah / _2, by + bh / _2)
    left = fmin(ax - aw / _2, bx - bw / _2)
    right = fmax(ax + aw / _2, bx + bw / _2)
    return top, bot, left, right


@njit(cache=True, error_model="numpy")
def box_giou(ax, ay, aw, ah, bx, by, bw, bh):
    """IoU - (C - U) / C, C the enclosing box's area (the IoU when C is 0)."""
    top, bot, left, right = box_c(ax, ay, aw, ah, bx, by, bw, bh)
    c = (right - left) * (bot - top)
    iou = box_iou(ax, ay, aw, ah, bx, by, bw, bh)
    if c == 0:
        return iou
    u = aw * ah + bw * bh - box_intersection(ax, ay, aw, ah, bx, by, bw, bh)
    return iou - (c - u) / c


@njit(cache=True, error_model="numpy")
def box_diounms(ax, ay, aw, ah, bx, by, bw, bh, beta):
    """IoU - (d / c)^beta: d the squared centre distance, c the enclosing box's squared
    diagonal (the IoU when c is 0). box_diou is this with beta = 0.6."""
    top, bot, left, right = box_c(ax, ay, aw, ah, bx, by, bw, bh)
    w = right - left
    h = bot - top
    c = w * w + h * h
    iou = box_iou(ax, ay, aw, ah, bx, by, bw, bh)
    if c == 0:
        return iou
    d = (ax - bx) * (ax - bx) + (ay - by) * (ay - by)
    return iou - f32(math.pow(np.float64(d / c), np.float64(beta)))


@njit(cache=True, error_model="numpy")
def box_diou(ax, ay, aw, ah, bx, by, bw, bh):
    return box_diounms(ax, ay, aw, ah, bx, by, bw, bh, 0.6)


@njit(cache=True, error_model="numpy")
def _aspect_term(aw, ah, bw, bh):
    """4/pi^2 (atan(bw/bh) - atan(aw/ah))^2 (b the truth), and the atan difference."""
    da = math.atan(np.float64(bw / bh)) - math.atan(np.float64(aw / ah))
    return f32(4.0 / _PI2 * da * da), da


@njit(cache=True, error_model="numpy")
def box_ciou(ax, ay, aw, ah, bx, by, bw, bh):
    """IoU - d/c - alpha * v, v the aspect term, alpha = v / (1 - IoU + v + 1e-6)."""
    top, bot, left, right = box_c(ax, ay, aw, ah, bx, by, bw, bh)
    w = right - left
    h = bot - top
    c = w * w + h * h
    iou = box_iou(ax, ay, aw, ah, bx, by, bw, bh)
    if c == 0:
        return iou
    d = ((ax - bx) * (ax - bx) + (ay - by) * (ay - by)) / c
    v, _ = _aspect_term(aw, ah, bw, bh)
    alpha = f32(v / (np.float64(_1 - iou + v) + 0.000001))
    return iou - (d + alpha * v)


@njit(cache=True, error_model="numpy")
def box_iou_kind(ax, ay, aw, ah, bx, by, bw, bh, kind):
    if kind == GIOU:
        return box_giou(ax, ay, aw, ah, bx, by, bw, bh)
    if kind == DIOU:
        return box_diou(ax, ay, aw, ah, bx, by, bw, bh)
    if kind == CIOU:
        return box_ciou(ax, ay, aw, ah, bx, by, bw, bh)
    return box_iou(ax, ay, aw, ah, bx, by, bw, bh)


@njit(cache=True, error_model="numpy")
def _distance_terms(px, py, tx, ty, cw, ch, c, s, dcw_dx, dcw_dw, dch_dy, dch_dh):
    """The centre-distance part of dx_box_iou for DIoU/CIoU, as AlexeyAB writes it: x, y
    carry (2 (t - p) C - dC/dp S) / C^2 (the exact gradient of -S/C has + there), w, h carry
    dC/dp S / C^2."""
    cc = c * c
    gx = (_2 * (tx - px) * c - (_2 * cw * dcw_dx + _2 * ch * _0) * s) / cc
    gy = (_2 * (ty - py) * c - (_2 * cw * _0 + _2 * ch * dch_dy) * s) / cc
    gw = (_2 * cw * dcw_dw + _2 * ch * _0) * s / cc
    gh = (_2 * cw * _0 + _2 * ch * dch_dh) * s / cc
    return gx, gy, gw, gh


@njit(cache=True, error_model="numpy")
def dx_box_iou(px, py, pw, ph, tx, ty, tw, th, kind):
    """dx_box_iou: AlexeyAB's gradient of the IoU kind (IOU, GIOU, DIOU, CIOU) of the predicted
    box p against the truth t, returned as (d/dx, d/dy, d/dw, d/dh). The IoU (and GIoU) part is
    the exact gradient with respect to the box's sides, summed for x, y and differenced for w,
    h without the 1/2 (so w, h get twice d/dw); the DIoU/CIoU distance terms and the CIoU
    aspect term follow the C formulas (alpha held constant). Non-overlapping boxes keep only
    the GIoU / distance terms. Divisions by zero give inf/NaN, as in C."""
    # the prediction's sides, ordered even for negative sizes; the truth's as they are
    p_top, p_bot = py - ph / _2, py + ph / _2
    p_left, p_right = px - pw / _2, px + pw / _2
    pt, pb = fmin(p_top, p_bot), fmax(p_top, p_bot)
    pl, pr = fmin(p_left, p_right), fmax(p_left, p_right)
    tt, tb = ty - th / _2, ty + th / _2
    tl, tr = tx - tw / _2, tx + tw / _2

    x_area = (pb - pt) * (pr - pl)
    t_area = (tb - tt) * (tr - tl)
    ih = fmin(pb, tb) - fmax(pt, tt)
    iw = fmin(pr, tr) - fmax(pl, tl)
    inter = iw * ih
    u = x_area + t_area - inter
    s = (px - tx) * (px - tx) + (py - ty) * (py - ty)
    g_cw = fmax(pr, tr) - fmin(pl, tl)
    g_ch = fmax(pb, tb) - fmin(pt, tt)
    g_c = g_cw * g_ch

    dx_t, dx_b, dx_l, dx_r = -(pr - pl), pr - pl, -(pb - pt), pb - pt
    di_t = -iw if pt > tt else _0
    di_b = iw if pb < tb else _0
    di_l = -ih if pl > tl else _0
    di_r = ih if pr < tr else _0
    du_t, du_b, du_l, du_r = dx_t - di_t, dx_b - di_b, dx_l - di_l, dx_r - di_r
    dc_t = -g_cw if pt < tt else _0
    dc_b = g_cw if pb > tb else _0
    dc_l = -g_ch if pl < tl else _0
    dc_r = g_ch if pr > tr else _0

    p_dt = p_db = p_dl = p_dr = _0
    if u > 0:
        uu = u * u
        p_dt = (u * di_t - inter * du_t) / uu
        p_db = (u * di_b - inter * du_b) / uu
        p_dl = (u * di_l - inter * du_l) / uu
        p_dr = (u * di_r - inter * du_r) / uu
    # a box with negative size: both sides take one side's gradient (C's sequential picks)
    if not p_top < p_bot:
        p_dt = p_db
    if not p_left < p_right:
        p_dl = p_dr

    if kind == GIOU:
        cc = g_c * g_c
        if g_c > 0:
            p_dt += (g_c * du_t - u * dc_t) / cc
            p_db += (g_c * du_b - u * dc_b) / cc
            p_dl += (g_c * du_l - u * dc_l) / cc
            p_dr += (g_c * du_r - u * dc_r) / cc
        if iw <= 0 or ih <= 0:
            p_dt = (g_c * du_t - u * dc_t) / cc
            p_db = (g_c * du_b - u * dc_b) / cc
            p_dl = (g_c * du_l - u * dc_l) / cc
            p_dr = (g_c * du_r - u * dc_r) / cc

    p_dx = p_dl + p_dr
    p_dy = p_dt + p_db
    p_dw = p_dr - p_dl
    p_dh = p_db - p_dt

    if kind == DIOU or kind == CIOU:
        c_t = fmin(py - ph / _2, ty - th / _2)
        c_b = fmax(py + ph / _2, ty + th / _2)
        c_l = fmin(px - pw / _2, tx - tw / _2)
        c_r = fmax(px + pw / _2, tx + tw / _2)
        cw = c_r - c_l
        ch = c_b - c_t
        c = cw * cw + ch * ch
        # d(enclosing side)/d(x, y, w, h): a prediction side beyond the truth's moves it
        dcw_dx = (_1 if pr > tr else _0) - (_1 if pl < tl else _0)
        dcw_dw = f32(0.5 if pr > tr else 0.0) - f32(-0.5 if pl < tl else 0.0)
        dch_dy = (_1 if pb > tb else _0) - (_1 if pt < tt else _0)
        dch_dh = f32(0.5 if pb > tb else 0.0) - f32(-0.5 if pt < tt else 0.0)
        gx, gy, gw, gh = _distance_terms(px, py, tx, ty, cw, ch, c, s, dcw_dx, dcw_dw,
                                         dch_dy, dch_dh)
        aw_ = ah_ = _0
        if kind == CIOU:
            v, da = _aspect_term(pw, ph, tw, th)
            alpha = f32(v / (np.float64(_1 - inter / u + v) + 0.000001))
            aw_ = alpha * f32(8.0 / _PI2 * da * np.float64(ph))
            ah_ = alpha * f32(-8.0 / _PI2 * da * np.float64(pw))
        if c > 0:
            p_dx += gx
            p_dy += gy
            p_dw += gw + aw_
            p_dh += gh + ah_
        if iw <= 0 or ih <= 0:
            p_dx, p_dy, p_dw, p_dh = gx, gy, gw + aw_, gh + ah_
    return p_dx, p_dy, p_dw, p_dh


@njit(cache=True, error_model="numpy")
def diounms_sort_cpu(order, bbox, objectness, prob, thresh, kind, beta):
    """diounms_sort, and do_nms_sort for DEFAULT_NMS (the two C functions differ only in their
    test), on the permutation `order` (filled here): boxes with objectness 0 go to the end
    (the C's swap loop); then for each class the others are sorted by that class's prob,
    descending, stably (glibc's qsort is a merge sort), and every later box loses that class
    (prob set to 0 in place) when the kept box's IoU (DEFAULT_NMS; 0 with zero-area boxes),
    DIoU (GREEDY_NMS, beta 0.6) or IoU - (d/c)^beta (DIOU_NMS) with it is > thresh. A class
    whose probs are all 0 leaves the order as it is."""
    total = objectness_first(order, objectness)
    keys = np.empty(total, dtype=np.float32)
    for c in range(prob.shape[1]):
        if not sort_by_class(order, prob, c, total, keys):
            continue
        for i in range(total):
            a = bbox[order[i]]
            if prob[order[i], c] == 0:
                continue
            for j in range(i + 1, total):
                b = bbox[order[j]]
                if kind == GREEDY_NMS:
                    v = box_diou(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3])
                elif kind == DIOU_NMS:
                    v = box_diounms(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3], beta)
                else:
                    v = box_iou(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3])
                if v > thresh:
                    prob[order[j], c] = 0
