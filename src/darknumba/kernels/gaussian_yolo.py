"""AlexeyAB's [Gaussian_yolo] kernels (its `gaussian_yolo_layer.c`, Gaussian YOLOv3): the
forward activations, the box, the detections with their uncertainty and the sums of squares its
cost and printed losses are made of (the loss is in gaussian_yolo_loss.py).

Legend: per image the output is [n anchors][8 + 1 + classes][h][w] (wh = w*h cells): entries
0 = x, 1 = x's uncertainty, 2 = y, 3 = y's uncertainty, 4 = w, 5 = w's uncertainty, 6 = h,
7 = h's uncertainty, 8 = objectness, 9.. = the classes. Truth per image: max_boxes rows of
truth_size (6) floats x, y, w, h, class, track id, relative to the network input. Float32 where
the C computes in float, float64 where it calls a double function (exp, log, pow, sqrt).
"""
import math

import numpy as np
from numba import njit, prange

from .logistic_rows import logistic_f_row
from .yolo_ab import correct_boxes_ab

f32 = np.float32
_0 = f32(0.0)
_1 = f32(1.0)
_2 = f32(2.0)

# AlexeyAB's YOLO_POINT: which point of the box the x, y entries place in the cell
YOLO_CENTER, YOLO_LEFT_TOP, YOLO_RIGHT_BOTTOM = 1, 2, 4
ENTRIES = 8 + 1                 # box entries with their uncertainties, then the objectness


@njit(parallel=True, cache=True)
def activate_gaussian_yolo_output(inp, output, batch, n, classes, wh, scale, shift):
    """output = inp after forward_gaussian_yolo_layer's CPU activations: AlexeyAB's logistic
    on x, y and their uncertainties, on the w and h uncertainties, on the objectness and the
    classes; w, h (entries 4, 6) stay raw; then x and y (not their uncertainties) <- x * scale
    + shift (scale_x_y; shift = -(scale - 1) / 2). One (image, anchor, entry) row per
    iteration."""
    entries = ENTRIES + classes
    for bne in prange(batch * n * entries):
        e = bne % entries
        src = inp[bne * wh:(bne + 1) * wh]
        dst = output[bne * wh:(bne + 1) * wh]
        if e == 4 or e == 6:
            dst[:] = src
        else:
            logistic_f_row(src, dst)
        if e == 0 or e == 2:
            for k in range(wh):
                dst[k] = dst[k] * scale + shift


@njit(cache=True, error_model="numpy")
def get_gaussian_yolo_box(x, biases, a, index, i, j, lw, lh, netw, neth, stride, point):
    """get_gaussian_yolo_box for anchor `a` (an index into all anchors) at cell (i, j): x, y,
    w, h relative to the network input, w = exp(t_w) anchor_w / netw (in double); with
    yolo_point left_top / right_bottom the predicted point is that corner, so the centre is
    half a box away."""
    w = f32(math.exp(np.float64(x[index + 4 * stride])) * np.float64(biases[2 * a]) / netw)
    h = f32(math.exp(np.float64(x[index + 6 * stride])) * np.float64(biases[2 * a + 1]) / neth)
    bx = (f32(i) + x[index]) / f32(lw)
    by = (f32(j) + x[index + 2 * stride]) / f32(lh)
    if point == YOLO_LEFT_TOP:
        bx = bx + w / _2
        by = by + h / _2
    elif point == YOLO_RIGHT_BOTTOM:
        bx = bx - w / _2
        by = by - h / _2
    return bx, by, w, h


@njit(cache=True)
def gaussian_yolo_num_detections_cpu(output, offset, n, wh, classes, thresh):
    """gaussian_yolo_num_detections for the image at `offset`: predictions whose objectness
    (entry 8) is > thresh."""
    entries = ENTRIES + classes
    count = 0
    for a in range(n):
        base = offset + (a * entries + 8) * wh
        for i in range(wh):
            if output[base + i] > thresh:
                count += 1
    return count


@njit(cache=True, error_model="numpy")
def get_gaussian_yolo_detections_cpu(bbox, objectness, prob, uc, output, offset, n, lw, lh,
                                     classes, biases, mask, netw, neth, thresh, point):
    """get_gaussian_yolo_detections before the box correction: candidates in the C's order
    (cell, then anchor) whose objectness is > thresh (NaN never is); uc = the four
    uncertainties (entries 1, 3, 5, 7); prob = objectness * p_class * (1 - mean uncertainty),
    kept only if > thresh. Writes rows 0..count-1 (count from the counting kernel)."""
    wh = lw * lh
    entries = ENTRIES + classes
    rows = bbox.shape[0]
    count = 0
    for i in range(wh):
        row = i // lw
        col = i % lw
        for a in range(n):
            base = offset + a * entries * wh + i
            obj = output[base + 8 * wh]
            if not obj > thresh:
                continue
            if count >= rows:                # never past the rows counted
                return count
            x, y, w, h = get_gaussian_yolo_box(output, biases, mask[a], base, col, row, lw, lh,
                                               netw, neth, wh, point)
            bbox[count, 0] = x
            bbox[count, 1] = y
            bbox[count, 2] = w
            bbox[count, 3] = h
            objectness[count] = obj
            for k in range(4):
                uc[count, k] = output[base + (2 * k + 1) * wh]
            aver = f32(np.float64(uc[count, 0] + uc[count, 1] + uc[count, 2] + uc[count, 3])
                       / 4.0)
            for c in range(classes):
                p = f32(np.float64(obj * output[base + (9 + c) * wh]) * (1.0 - np.float64(aver)))
                prob[count, c] = p if p > thresh else _0
            count += 1
    return count


@njit(cache=True, error_model="numpy")
def correct_gaussian_yolo_boxes_cpu(bbox, w, h, netw, neth, relative, letter):
    """correct_gaussian_yolo_boxes: as AlexeyAB's correct_yolo_boxes (letter: undo the
    letterbox of a w x h image, new size by integer division; else the boxes stay relative),
    except that w and h are multiplied by (float)netw / new_w rather than by 1 / (new_w /
    netw). relative=False scales them to pixels."""
    correct_boxes_ab(bbox, w, h, netw, neth, relative, letter, True)


@njit(cache=True)
def gaussian_delta_squares(delta, n_rows, entries, wh):
    """The three sums of squares forward_gaussian_yolo_layer takes with mag_array: all of
    delta; without entries 0..7 (the class loss: objectness and classes); without entries
    4..7 (its "except uncertainty" sum, which in fact drops w, h and their uncertainties).
    Summed in float as AlexeyAB's stock -Ofast SSE build does: four float lanes (element i in
    lane i % 4), then (l0 + l2) + (l1 + l3), then the last n % 4 elements one by one."""
    lanes = np.zeros((3, 4), np.float32)
    block = entries * wh
    n = n_rows * block
    m = n - n % 4
    for i in range(m):
        v = delta[i] * delta[i]
        e = (i % block) // wh
        lanes[0, i % 4] += v
        if e >= 8:
            lanes[1, i % 4] += v
        if e < 4 or e >= 8:
            lanes[2, i % 4] += v
    out = np.zeros(3, np.float32)
    for k in range(3):
        out[k] = (lanes[k, 0] + lanes[k, 2]) + (lanes[k, 1] + lanes[k, 3])
    for i in range(m, n):
        v = delta[i] * delta[i]
        e = (i % block) // wh
        out[0] += v
        if e >= 8:
            out[1] += v
        if e < 4 or e >= 8:
            out[2] += v
    return out[0], out[1], out[2]
