"""Slow references for AlexeyAB's [yolo], written loop by loop from its C (`yolo_layer.c`,
`box.c`, `image.c`) in float64: the spec the kernels in kernels/yolo_ab.py and box_ab.py are
tested against. Boxes are (x, y, w, h) tuples."""
import math

import numpy as np

MSE, IOU, GIOU, DIOU, CIOU = "mse", "iou", "giou", "diou", "ciou"


def logistic(v):
    return 1.0 / (1.0 + math.exp(-v))


def forward(x, batch, n, classes, wh, new_coords, scale):
    """forward_yolo_layer's activations."""
    out = np.asarray(x, np.float64).reshape(batch, n, 4 + 1 + classes, wh).copy()
    for b in range(batch):
        for a in range(n):
            for e in range(4 + 1 + classes):
                for k in range(wh):
                    v = out[b, a, e, k]
                    if not new_coords and e != 2 and e != 3:
                        v = logistic(v)
                    if e < 2:
                        v = v * scale - 0.5 * (scale - 1)
                    out[b, a, e, k] = v
    return out.reshape(-1)


def yolo_box(out, biases, a, index, i, j, lw, lh, netw, neth, stride, new_coords):
    x = (i + out[index]) / lw
    y = (j + out[index + stride]) / lh
    tw, th = out[index + 2 * stride], out[index + 3 * stride]
    if new_coords:
        return x, y, tw * tw * 4 * biases[2 * a] / netw, th * th * 4 * biases[2 * a + 1] / neth
    return x, y, math.exp(tw) * biases[2 * a] / netw, math.exp(th) * biases[2 * a + 1] / neth


def detections(out, b, n, lw, lh, classes, biases, mask, netw, neth, thresh, new_coords,
               w, h, relative, letter):
    """get_yolo_detections_batch + correct_yolo_boxes: a list of (box, objectness, probs)."""
    wh = lw * lh
    entries = 4 + 1 + classes
    dets = []
    for i in range(wh):
        row, col = divmod(i, lw)
        for a in range(n):
            base = b * n * entries * wh + a * entries * wh + i
            obj = out[base + 4 * wh]
            if not obj > thresh:
                continue
            box = yolo_box(out, biases, mask[a], base, col, row, lw, lh, netw, neth, wh,
                           new_coords)
            probs = [obj * out[base + (5 + c) * wh] for c in range(classes)]
            dets.append((box, obj, [p if p > thresh else 0.0 for p in probs]))
    if letter:
        if netw / w < neth / h:
            new_w, new_h = netw, (h * netw) // w
        else:
            new_w, new_h = (w * neth) // h, neth
    else:
        new_w, new_h = netw, neth
    rw, rh = new_w / netw, new_h / neth
    fixed = []
    for (x, y, bw, bh), obj, probs in dets:
        x = (x - (netw - new_w) / 2 / netw) / rw
        y = (y - (neth - new_h) / 2 / neth) / rh
        bw, bh = bw / rw, bh / rh
        if not relative:
            x, bw, y, bh = x * w, bw * w, y * h, bh * h
        fixed.append(((x, y, bw, bh), obj, probs))
    return fixed


# -- box.c ---------------------------------------------------------------------------------

def _overlap(x1, w1, x2, w2):
    return min(x1 + w1 / 2, x2 + w2 / 2) - max(x1 - w1 / 2, x2 - w2 / 2)


def box_iou(a, b):
    w, h = _overlap(a[0], a[2], b[0], b[2]), _overlap(a[1], a[3], b[1], b[3])
    i = 0.0 if w < 0 or h < 0 else w * h
    u = a[2] * a[3] + b[2] * b[3] - i
    return 0.0 if i == 0 or u == 0 else i / u


def _enclosing(a, b):
    w = max(a[0] + a[2] / 2, b[0] + b[2] / 2) - min(a[0] - a[2] / 2, b[0] - b[2] / 2)
    h = max(a[1] + a[3] / 2, b[1] + b[3] / 2) - min(a[1] - a[3] / 2, b[1] - b[3] / 2)
    return w, h


def box_giou(a, b):
    w, h = _enclosing(a, b)
    c = w * h
    if c == 0:
        return box_iou(a, b)
    w_, h_ = _overlap(a[0], a[2], b[0], b[2]), _overlap(a[1], a[3], b[1], b[3])
    u = a[2] * a[3] + b[2] * b[3] - (0.0 if w_ < 0 or h_ < 0 else w_ * h_)
    return box_iou(a, b) - (c - u) / c


def box_diounms(a, b, beta=0.6):
    w, h = _enclosing(a, b)
    c = w * w + h * h
    if c == 0:
        return box_iou(a, b)
    d = (a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2
    return box_iou(a, b) - (d / c) ** beta


def box_ciou(a, b):
    w, h = _enclosing(a, b)
    c = w * w + h * h
    iou = box_iou(a, b)
    if c == 0:
        return iou
    d = ((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) / c
    v = 4 / math.pi ** 2 * (math.atan(b[2] / b[3]) - math.atan(a[2] / a[3])) ** 2
    return iou - (d + v / (1 - iou + v + 1e-6) * v)


def box_iou_kind(a, b, kind):
    return {GIOU: box_giou, DIOU: box_diounms, CIOU: box_ciou}.get(kind, box_iou)(a, b)


def nms_sort(bbox, objectness, prob, thresh, kind="default", beta=0.6):
    """do_nms_sort / diounms_sort: returns (order, prob) with prob suppressed in place of a
    copy; Python's sort is stable like glibc's qsort (a merge sort)."""
    prob = [list(map(float, p)) for p in prob]
    order = list(range(len(bbox)))
    k = len(order) - 1
    i = 0
    while i <= k:
        if objectness[order[i]] == 0:
            order[i], order[k] = order[k], order[i]
            k -= 1
        else:
            i += 1
    total = k + 1
    test = {"default": box_iou, "greedynms": box_diounms,
            "diounms": lambda a, b: box_diounms(a, b, beta)}[kind]
    for c in range(len(prob[0]) if prob else 0):
        order[:total] = sorted(order[:total], key=lambda r: -prob[r][c])
        for i in range(total):
            if prob[order[i]][c] == 0:
                continue
            for j in range(i + 1, total):
                if test(bbox[order[i]], bbox[order[j]]) > thresh:
                    prob[order[j]][c] = 0.0
    return order, np.array(prob)
