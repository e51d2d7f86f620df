"""YOLOv2 [region] kernels (Darknet's `region_layer.c`).

Legend: per image the output is [n anchors][coords + 1 + classes][h][w] (wh = w*h cells);
entry 0,1 = x, y offsets (logistic), 2,3 = w, h (raw, exp'd against the anchor, in *cells*),
`coords` = objectness, then the classes. Truth per image: 30 boxes of (x, y, w, h, class),
relative to the network input, the list ending at the first x == 0.
"""
import math

import numpy as np
from numba import njit

from .yolo import box_iou

MAX_TRUTHS = 30


@njit(cache=True)
def _logistic(v):
    return np.float32(1.0 / (1.0 + math.exp(-np.float64(v))))


@njit(cache=True)
def activate_region_output(output, batch, n, coords, classes, wh, background, logistic_classes):
    """forward_region_layer's CPU activations: logistic on x, y, on the objectness (unless
    background) and on the classes when neither softmax nor tree is set."""
    entries = coords + classes + 1
    for b in range(batch):
        for a in range(n):
            base = (b * n + a) * entries * wh
            for i in range(2 * wh):
                output[base + i] = _logistic(output[base + i])
            if not background:
                for i in range(wh):
                    output[base + coords * wh + i] = _logistic(output[base + coords * wh + i])
            if logistic_classes:
                for i in range((coords + 1) * wh, entries * wh):
                    output[base + i] = _logistic(output[base + i])


@njit(cache=True)
def _region_box(output, biases, a, index, i, j, lw, lh, stride):
    """get_region_box: centre and size relative to the grid (the anchors are in cells)."""
    x = np.float32((i + output[index]) / lw)
    y = np.float32((j + output[index + stride]) / lh)
    w = np.float32(math.exp(np.float64(output[index + 2 * stride])) * biases[2 * a] / lw)
    h = np.float32(math.exp(np.float64(output[index + 3 * stride])) * biases[2 * a + 1] / lh)
    return x, y, w, h


@njit(cache=True)
def _delta_region_box(tx_, ty_, tw_, th_, output, biases, a, index, i, j, lw, lh, delta, scale,
                      stride):
    """delta_region_box: the targets in the network's own parametrisation; returns the IoU."""
    px, py, pw, ph = _region_box(output, biases, a, index, i, j, lw, lh, stride)
    iou = box_iou(px, py, pw, ph, tx_, ty_, tw_, th_)
    tx = tx_ * lw - i
    ty = ty_ * lh - j
    tw = math.log(tw_ * lw / biases[2 * a])
    th = math.log(th_ * lh / biases[2 * a + 1])
    delta[index] = np.float32(scale * (tx - output[index]))
    delta[index + stride] = np.float32(scale * (ty - output[index + stride]))
    delta[index + 2 * stride] = np.float32(scale * (tw - output[index + 2 * stride]))
    delta[index + 3 * stride] = np.float32(scale * (th - output[index + 3 * stride]))
    return iou


@njit(cache=True)
def region_deltas(output, truth, biases, batch, n, lw, lh, coords, classes, truths, thresh,
                  prior, coord_scale, object_scale, noobject_scale, class_scale, mask_scale,
                  bias_match, rescore, background, tag, delta, stats):
    """The training half of forward_region_layer (without a class tree).

    1. every prediction: δobj = noobject_scale·(0 - obj) (background: 1 - obj), zeroed when its
       best IoU with a truth is > thresh; while `prior` (seen < 12800) also pull every box
       towards its anchor at the cell centre with scale .01;
    2. every truth: the cell holding its centre and the anchor whose shape (both centred at
       0) overlaps it best (bias_match: the anchor itself, not the prediction) get box deltas
       scaled by coord_scale·(2 - w·h), δobj = object_scale·(1 - obj) (rescore: iou - obj;
       background: 0 - obj) and class deltas scaled by class_scale; with tag (no softmax),
       a second truth in the same slot only sets its own class (delta_region_class quirk).
    stats (6,) float64 += avg_iou, recall, avg_cat, avg_obj, avg_anyobj, count."""
    wh = lw * lh
    entries = coords + classes + 1
    stride = wh
    for b in range(batch):
        tb = b * truths
        nt = 0
        while nt < MAX_TRUTHS and truth[tb + nt * (coords + 1)] != 0:
            nt += 1
        for j in range(lh):
            for i in range(lw):
                for a in range(n):
                    box_index = (b * n + a) * entries * wh + j * lw + i
                    px, py, pw, ph = _region_box(output, biases, a, box_index, i, j, lw, lh, stride)
                    best_iou = 0.0
                    for t in range(nt):
                        o = tb + t * (coords + 1)
                        iou = box_iou(px, py, pw, ph, truth[o], truth[o + 1], truth[o + 2],
                                      truth[o + 3])
                        if iou > best_iou:
                            best_iou = iou
                    obj_index = box_index + coords * wh
                    stats[4] += output[obj_index]
                    delta[obj_index] = np.float32(noobject_scale * (0.0 - output[obj_index]))
                    if background:
                        delta[obj_index] = np.float32(noobject_scale * (1.0 - output[obj_index]))
                    if best_iou > thresh:
                        delta[obj_index] = 0.0
                    if prior:
                        _delta_region_box(np.float32((i + 0.5) / lw), np.float32((j + 0.5) / lh),
                                          np.float32(biases[2 * a] / lw),
                                          np.float32(biases[2 * a + 1] / lh), output, biases, a,
                                          box_index, i, j, lw, lh, delta, 0.01, stride)
        for t in range(nt):
            o = tb + t * (coords + 1)
            tx, ty, tw, th = truth[o], truth[o + 1], truth[o + 2], truth[o + 3]
            i = int(tx * lw)
            j = int(ty * lh)
            best_iou = 0.0
            best_n = 0
            for a in range(n):
                box_index = (b * n + a) * entries * wh + j * lw + i
                px, py, pw, ph = _region_box(output, biases, a, box_index, i, j, lw, lh, stride)
                if bias_match:
                    pw = np.float32(biases[2 * a] / lw)
                    ph = np.float32(biases[2 * a + 1] / lh)
                iou = box_iou(0.0, 0.0, pw, ph, 0.0, 0.0, tw, th)
                if iou > best_iou:
                    best_iou = iou
                    best_n = a
            box_index = (b * n + best_n) * entries * wh + j * lw + i
            iou = _delta_region_box(tx, ty, tw, th, output, biases, best_n, box_index, i, j, lw,
                                    lh, delta, coord_scale * (2.0 - tw * th), stride)
            if coords > 4:
                mask_index = box_index + 4 * wh
                for k in range(coords - 4):
                    delta[mask_index + k * wh] = np.float32(
                        mask_scale * (truth[o + 5 + k] - output[mask_index + k * wh]))
            if iou > 0.5:
                stats[1] += 1
            stats[0] += iou
            obj_index = box_index + coords * wh
            stats[3] += output[obj_index]
            delta[obj_index] = np.float32(object_scale * (1.0 - output[obj_index]))
            if rescore:
                delta[obj_index] = np.float32(object_scale * (iou - output[obj_index]))
            if background:
                delta[obj_index] = np.float32(object_scale * (0.0 - output[obj_index]))
            cls = int(truth[o + coords])
            class_index = box_index + (coords + 1) * wh
            if tag and delta[class_index] != 0:
                delta[class_index + stride * cls] = np.float32(
                    class_scale * (1.0 - output[class_index + stride * cls]))
            else:
                for c in range(classes):
                    target = 1.0 if c == cls else 0.0
                    delta[class_index + stride * c] = np.float32(
                        class_scale * (target - output[class_index + stride * c]))
                    if c == cls:
                        stats[2] += output[class_index + stride * c]
            stats[5] += 1


@njit(cache=True)
def region_gradient(output, delta, batch, n, coords, classes, wh, background):
    """backward_region_layer_gpu's activation gradients: δ *= σ'(output) on x, y, the mask
    entries (coords > 4) and the objectness (unless background); w, h and classes unchanged."""
    entries = coords + classes + 1
    for b in range(batch):
        for a in range(n):
            base = (b * n + a) * entries * wh
            for i in range(2 * wh):
                y = output[base + i]
                delta[base + i] *= (np.float32(1.0) - y) * y
            for i in range(4 * wh, coords * wh):
                y = output[base + i]
                delta[base + i] *= (np.float32(1.0) - y) * y
            if not background:
                for i in range(coords * wh, (coords + 1) * wh):
                    y = output[base + i]
                    delta[base + i] *= (np.float32(1.0) - y) * y


@njit(cache=True)
def get_region_detections_cpu(bbox, objectness, prob, output, offset, n, lw, lh, coords, classes,
                              biases, thresh, background):
    """get_region_detections (no tree, no map): every cell x anchor in Darknet's order (cell,
    then anchor), objectness 0 where <= thresh, prob = obj·p_class kept if > thresh."""
    wh = lw * lh
    entries = coords + classes + 1
    for i in range(wh):
        row = i // lw
        col = i % lw
        for a in range(n):
            k = i * n + a
            base = offset + a * entries * wh + i
            scale = np.float32(1.0) if background else output[base + coords * wh]
            x, y, w, h = _region_box(output, biases, a, base, col, row, lw, lh, wh)
            bbox[k, 0], bbox[k, 1], bbox[k, 2], bbox[k, 3] = x, y, w, h
            objectness[k] = scale if scale > thresh else np.float32(0.0)
            for j in range(classes):
                prob[k, j] = 0.0
            if objectness[k] != 0:
                cbase = base + (coords + 1) * wh
                for j in range(classes):
                    p = scale * output[cbase + j * wh]
                    prob[k, j] = p if p > thresh else np.float32(0.0)
