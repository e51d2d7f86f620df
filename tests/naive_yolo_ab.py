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
