"""Slow, readable float64 references for the training kernels: plain loops over Darknet's
formulas, used by the tests as the spec the fast kernels must match.

Layouts as in darknumba: activations flat `batch x c x h x w`; conv weights
`n x c/groups x size x size`; yolo output per image `[anchor][4+1+classes][h][w]`;
yolo truth per image 90 x (x, y, w, h, class)."""
import math

import numpy as np


# -- convolution -------------------------------------------------------------------------------
def conv_backward(x, w, delta, batch, c, h, wd, n, size, stride, pad, groups):
    """(weight gradient, input gradient) of out[b, f, oy, ox] = sum w[f, ci, ky, kx] *
    x[b, g*cg + ci, oy*stride + ky - pad, ox*stride + kx - pad], given delta = d/d(out)."""
    cg, m = c // groups, n // groups
    oh = (h + 2 * pad - size) // stride + 1
    ow = (wd + 2 * pad - size) // stride + 1
    x = x.astype(np.float64).reshape(batch, c, h, wd)
    w = w.astype(np.float64).reshape(n, cg, size, size)
    d = delta.astype(np.float64).reshape(batch, n, oh, ow)
    dw = np.zeros_like(w)
    dx = np.zeros_like(x)
    for f in range(n):
        g = f // m
        for ci in range(cg):
            for ky in range(size):
                for kx in range(size):
                    for oy in range(oh):
                        iy = oy * stride + ky - pad
                        if not 0 <= iy < h:
                            continue
                        for ox in range(ow):
                            ix = ox * stride + kx - pad
                            if not 0 <= ix < wd:
                                continue
                            dw[f, ci, ky, kx] += np.dot(d[:, f, oy, ox], x[:, g * cg + ci, iy, ix])
                            dx[:, g * cg + ci, iy, ix] += w[f, ci, ky, kx] * d[:, f, oy, ox]
    return dw.ravel(), dx.ravel()


# -- batch norm (Darknet's backward formulas, backward epsilon 1e-5 inside the sqrt) -----------
def batchnorm_backward(delta, x, x_norm, mean, variance, scales, batch, c, spatial):
    """(bias_updates, scale_updates, mean_delta, variance_delta, delta w.r.t. x)."""
    d = delta.astype(np.float64).reshape(batch, c, spatial)
    x = x.astype(np.float64).reshape(batch, c, spatial)
    xn = x_norm.astype(np.float64).reshape(batch, c, spatial)
    mean = mean.astype(np.float64)
    var = variance.astype(np.float64) + 1e-5
    bias_up = d.sum(axis=(0, 2))
    scale_up = (d * xn).sum(axis=(0, 2))
    d = d * scales.astype(np.float64)[None, :, None]
    mean_delta = -d.sum(axis=(0, 2)) / np.sqrt(var)
    xc = x - mean[None, :, None]
    var_delta = -0.5 * (d * xc).sum(axis=(0, 2)) * var ** -1.5
    N = batch * spatial
    out = d / np.sqrt(var)[None, :, None] + var_delta[None, :, None] * 2 * xc / N \
        + mean_delta[None, :, None] / N
    return bias_up, scale_up, mean_delta, var_delta, out.ravel()


# -- yolo loss ---------------------------------------------------------------------------------
def _iou(a, b):
    def overlap(x1, w1, x2, w2):
        return min(x1 + w1 / 2, x2 + w2 / 2) - max(x1 - w1 / 2, x2 - w2 / 2)
    w = overlap(a[0], a[2], b[0], b[2])
    h = overlap(a[1], a[3], b[1], b[3])
    inter = 0.0 if (w < 0 or h < 0) else w * h
    union = a[2] * a[3] + b[2] * b[3] - inter
    return inter / union if union > 0 else 0.0


def yolo_loss(output, truth, biases, mask, total, batch, n, lw, lh, classes, netw, neth,
              ignore_thresh, truth_thresh, max_boxes=90, truths=450):
    """(delta, cost, stats dict) of Darknet's forward_yolo_layer in train mode, loop by loop."""
    out = output.astype(np.float64)
    delta = np.zeros_like(out)
    entries = 4 + 1 + classes
    wh = lw * lh
    outputs = wh * n * entries

    def idx(b, a, entry, j, i):
        return b * outputs + a * wh * entries + entry * wh + j * lw + i

    def pred_box(b, a, anchor, j, i):
        return ((i + out[idx(b, a, 0, j, i)]) / lw, (j + out[idx(b, a, 1, j, i)]) / lh,
                math.exp(out[idx(b, a, 2, j, i)]) * biases[2 * anchor] / netw,
                math.exp(out[idx(b, a, 3, j, i)]) * biases[2 * anchor + 1] / neth)

    def box_delta(t, b, a, anchor, j, i, scale):
        p = pred_box(b, a, anchor, j, i)
        target = (t[0] * lw - i, t[1] * lh - j, math.log(t[2] * netw / biases[2 * anchor]),
                  math.log(t[3] * neth / biases[2 * anchor + 1]))
        for e in range(4):
            delta[idx(b, a, e, j, i)] = scale * (target[e] - out[idx(b, a, e, j, i)])
        return _iou(p, t)

    def class_delta(b, a, j, i, cls):
        if delta[idx(b, a, 5, j, i)] != 0:
            delta[idx(b, a, 5 + cls, j, i)] = 1 - out[idx(b, a, 5 + cls, j, i)]
            return out[idx(b, a, 5 + cls, j, i)]
        for c in range(classes):
            delta[idx(b, a, 5 + c, j, i)] = (c == cls) - out[idx(b, a, 5 + c, j, i)]
        return out[idx(b, a, 5 + cls, j, i)]

    s = {"iou": 0.0, "cat": 0.0, "obj": 0.0, "anyobj": 0.0, "r50": 0, "r75": 0, "count": 0}
    for b in range(batch):
        boxes = []
        for t in range(max_boxes):
            tb = truth[b * truths + t * 5:b * truths + t * 5 + 5].astype(np.float64)
            if tb[0] == 0:
                break
            boxes.append(tb)
        for j in range(lh):
            for i in range(lw):
                for a in range(n):
                    p = pred_box(b, a, mask[a], j, i)
                    best_iou, best_t = 0.0, 0
                    for t, tb in enumerate(boxes):
                        iou = _iou(p, tb)
                        if iou > best_iou:
                            best_iou, best_t = iou, t
                    o = idx(b, a, 4, j, i)
                    s["anyobj"] += out[o]
                    delta[o] = -out[o]
                    if best_iou > ignore_thresh:
                        delta[o] = 0
                    if best_iou > truth_thresh:
                        delta[o] = 1 - out[o]
                        tb = boxes[best_t]
                        class_delta(b, a, j, i, int(tb[4]))
                        box_delta(tb, b, a, mask[a], j, i, 2 - tb[2] * tb[3])
        for tb in boxes:
            i, j = int(np.float32(tb[0]) * np.float32(lw)), int(np.float32(tb[1]) * np.float32(lh))
            best_iou, best_n = 0.0, 0
            for a in range(total):
                iou = _iou((0, 0, biases[2 * a] / netw, biases[2 * a + 1] / neth),
                           (0, 0, tb[2], tb[3]))
                if iou > best_iou:
                    best_iou, best_n = iou, a
            if best_n not in list(mask):
                continue
            a = list(mask).index(best_n)
            iou = box_delta(tb, b, a, best_n, j, i, 2 - tb[2] * tb[3])
            o = idx(b, a, 4, j, i)
            s["obj"] += out[o]
            delta[o] = 1 - out[o]
            s["cat"] += class_delta(b, a, j, i, int(tb[4]))
            s["count"] += 1
            s["r50"] += iou > 0.5
            s["r75"] += iou > 0.75
            s["iou"] += iou
    c = s["count"]
    stats = {"avg_iou": s["iou"] / c if c else math.nan, "class": s["cat"] / c if c else math.nan,
             "obj": s["obj"] / c if c else math.nan, "no_obj": s["anyobj"] / (wh * n * batch),
             "recall50": s["r50"] / c if c else math.nan,
             "recall75": s["r75"] / c if c else math.nan, "count": c}
    return delta, float((delta ** 2).sum()), stats
