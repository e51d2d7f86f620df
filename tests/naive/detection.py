"""Darknet's detection losses and box post-processing, loop by loop in float64 (or in the
precision of the boxes given, for the IoU): the yolo and region layers' training deltas,
do_nms_sort.

Layouts as in darknumba: yolo output per image `[anchor][4+1+classes][h][w]`; yolo truth per
image 90 x (x, y, w, h, class); region truth per image 30 x (x, y, w, h, class).
"""
import math

import numpy as np


# -- yolo loss ---------------------------------------------------------------------------------
def box_iou(a, b):
    """box_iou of two centred (x, y, w, h) boxes, in the precision of their values."""
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
        return box_iou(p, t)

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
                        iou = box_iou(p, tb)
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
                iou = box_iou((0, 0, biases[2 * a] / netw, biases[2 * a + 1] / neth),
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


# -- region (YOLOv2) loss ----------------------------------------------------------------------
def region_deltas(out, truth, anchors, n, w, h, classes, thresh, seen, scales, rescore=0):
    """An independent float64 reading of forward_region_layer's training branch (no tree,
    softmax classes, coords=4)."""
    cs, os_, ns, cls_s = scales
    out = out.astype(np.float64).reshape(-1, n, 5 + classes, h, w)
    delta = np.zeros_like(out)

    def pbox(b, a, j, i):
        o = out[b, a, :, j, i]
        return np.array([(i + o[0]) / w, (j + o[1]) / h, np.exp(o[2]) * anchors[2 * a] / w,
                         np.exp(o[3]) * anchors[2 * a + 1] / h])

    def box_delta(b, a, j, i, t, s):
        o = out[b, a, :, j, i]
        tgt = [t[0] * w - i, t[1] * h - j, np.log(t[2] * w / anchors[2 * a]),
               np.log(t[3] * h / anchors[2 * a + 1])]
        delta[b, a, :4, j, i] = s * (np.array(tgt) - o[:4])
        return box_iou(pbox(b, a, j, i), t)

    for b in range(out.shape[0]):
        boxes = [t for t in truth[b].reshape(30, 5) if t[0] != 0]
        for j in range(h):
            for i in range(w):
                for a in range(n):
                    best = max([box_iou(pbox(b, a, j, i), t[:4]) for t in boxes] + [0])
                    delta[b, a, 4, j, i] = 0 if best > thresh else ns * -out[b, a, 4, j, i]
                    if seen < 12800:
                        box_delta(b, a, j, i, [(i + .5) / w, (j + .5) / h, anchors[2 * a] / w,
                                               anchors[2 * a + 1] / h], 0.01)
        for t in boxes:
            i, j = int(t[0] * w), int(t[1] * h)
            shape_iou = [box_iou([0, 0, *pbox(b, a, j, i)[2:]], [0, 0, t[2], t[3]])
                         for a in range(n)]
            a = int(np.argmax(shape_iou))
            v = box_delta(b, a, j, i, t[:4], cs * (2 - t[2] * t[3]))
            o = out[b, a, 4, j, i]
            delta[b, a, 4, j, i] = os_ * ((v if rescore else 1) - o)
            onehot = np.eye(classes)[int(t[4])]
            delta[b, a, 5:, j, i] = cls_s * (onehot - out[b, a, 5:, j, i])
    return delta.ravel()


# -- non-maximum suppression -------------------------------------------------------------------
def nms_sort(bbox, obj, prob, thresh):
    """do_nms_sort written plainly (Python's sort is stable, like glibc's merge sort)."""
    prob = prob.copy()
    order = list(range(len(obj)))
    k, i = len(order) - 1, 0
    while i <= k:
        if obj[order[i]] == 0:
            order[i], order[k] = order[k], order[i]
            k -= 1
        else:
            i += 1
    total = k + 1
    for c in range(prob.shape[1]):
        order[:total] = sorted(order[:total], key=lambda j: -prob[j, c])
        for i in range(total):
            if prob[order[i], c] == 0:
                continue
            for j in range(i + 1, total):
                if box_iou(bbox[order[i]], bbox[order[j]]) > thresh:
                    prob[order[j], c] = 0
    return order, prob
