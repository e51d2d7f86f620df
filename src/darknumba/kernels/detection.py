"""YOLOv1 [detection] kernels (Darknet's `detection_layer.c`).

Legend per image (side x side = L cells, n boxes per cell): the input/output is
[L][classes] class probabilities, then [L][n] confidences, then [L][n][coords] boxes.
Truth per image and cell: [is_obj, classes one-hot, x, y, w, h] (x, y offsets in the cell).
"""
import math

import numpy as np
from numba import njit

from .yolo import box_iou


@njit(cache=True)
def _rmse(ax, ay, aw, ah, bx, by, bw, bh):
    return math.sqrt((ax - bx) ** 2 + (ay - by) ** 2 + (aw - bw) ** 2 + (ah - bh) ** 2)


@njit(cache=True)
def detection_deltas(output, truth, batch, inputs, side, n, classes, coords, sqrt_wh, rescore,
                     forced, random_pick, coord_scale, object_scale, noobject_scale, class_scale,
                     delta, stats):
    """The training half of forward_detection_layer. random_pick[b*L + i] >= 0 forces that box
    index (Darknet's random=1 while seen < 64000); forced=1 picks box 1 for small truths only
    when there is a box 1 (with num=1 Darknet indexes the next cell's box). stats (6,) +=
    avg_iou, avg_cat, avg_allcat, avg_obj, avg_anyobj, count."""
    L = side * side
    for b in range(batch):
        index = b * inputs
        for i in range(L):
            ti = (b * L + i) * (1 + coords + classes)
            for j in range(n):
                p = index + L * classes + i * n + j
                delta[p] = np.float32(noobject_scale * (0.0 - output[p]))
                stats[4] += output[p]
            if truth[ti] == 0:
                continue
            ci = index + i * classes
            for j in range(classes):
                t = truth[ti + 1 + j]
                delta[ci + j] = np.float32(class_scale * (t - output[ci + j]))
                if t != 0:
                    stats[1] += output[ci + j]
                stats[2] += output[ci + j]
            tb = ti + 1 + classes
            tx, ty, tw, th = truth[tb] / side, truth[tb + 1] / side, truth[tb + 2], truth[tb + 3]
            best_index = -1
            best_iou = 0.0
            best_rmse = 20.0
            for j in range(n):
                bi = index + L * (classes + n) + (i * n + j) * coords
                ox, oy = output[bi] / side, output[bi + 1] / side
                ow, oh = output[bi + 2], output[bi + 3]
                if sqrt_wh:
                    ow, oh = ow * ow, oh * oh
                iou = box_iou(ox, oy, ow, oh, tx, ty, tw, th)
                rmse = _rmse(ox, oy, ow, oh, tx, ty, tw, th)
                if best_iou > 0 or iou > 0:
                    if iou > best_iou:
                        best_iou = iou
                        best_index = j
                elif rmse < best_rmse:
                    best_rmse = rmse
                    best_index = j
            if forced:
                best_index = 1 if tw * th < 0.1 and n > 1 else 0
            if random_pick[b * L + i] >= 0:
                best_index = random_pick[b * L + i]
            if best_index < 0:
                # no box overlaps the truth or lies within rmse 20 of it (NaN or huge outputs):
                # Darknet goes on with index -1, the previous cell's last box (before the
                # buffer for cell 0); the cell's first box takes the deltas instead
                best_index = 0
            bi = index + L * (classes + n) + (i * n + best_index) * coords
            ox, oy = output[bi] / side, output[bi + 1] / side
            ow, oh = output[bi + 2], output[bi + 3]
            if sqrt_wh:
                ow, oh = ow * ow, oh * oh
            iou = box_iou(ox, oy, ow, oh, tx, ty, tw, th)
            p = index + L * classes + i * n + best_index
            stats[3] += output[p]
            delta[p] = np.float32(object_scale * (1.0 - output[p]))
            if rescore:
                delta[p] = np.float32(object_scale * (iou - output[p]))
            for k in range(4):
                delta[bi + k] = np.float32(coord_scale * (truth[tb + k] - output[bi + k]))
            if sqrt_wh:
                delta[bi + 2] = np.float32(coord_scale * (math.sqrt(truth[tb + 2]) - output[bi + 2]))
                delta[bi + 3] = np.float32(coord_scale * (math.sqrt(truth[tb + 3]) - output[bi + 3]))
            stats[0] += iou
            stats[5] += 1


@njit(cache=True)
def get_detection_detections_cpu(bbox, objectness, prob, output, side, n, classes, sqrt_wh,
                                 thresh):
    """get_detection_detections (relative boxes): every cell x box in Darknet's order."""
    L = side * side
    for i in range(L):
        row = i // side
        col = i % side
        for a in range(n):
            k = i * n + a
            scale = output[L * classes + i * n + a]
            bi = L * (classes + n) + (i * n + a) * 4
            bbox[k, 0] = (output[bi] + col) / side
            bbox[k, 1] = (output[bi + 1] + row) / side
            bbox[k, 2] = output[bi + 2] * output[bi + 2] if sqrt_wh else output[bi + 2]
            bbox[k, 3] = output[bi + 3] * output[bi + 3] if sqrt_wh else output[bi + 3]
            objectness[k] = scale
            for j in range(classes):
                p = scale * output[i * classes + j]
                prob[k, j] = p if p > thresh else np.float32(0.0)
