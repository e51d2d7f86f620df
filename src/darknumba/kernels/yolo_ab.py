"""AlexeyAB's [yolo] kernels (its `yolo_layer.c`): the forward activations and the detections
(the training loss is in yolo_ab_loss.py).

Legend: per image the output is [n anchors][4 + 1 + classes][h][w] (wh = w*h cells): entries
0, 1 = x, y; 2, 3 = w, h; 4 = objectness; 5.. = the classes. Truth per image: max_boxes rows
of truth_size (6) floats x, y, w, h, class, track id, relative to the network input, the list
ending at the first x == 0. Float32 where the C computes in float.
"""
import math

import numpy as np
from numba import njit, prange

from .logistic_rows import logistic_f_row

f32 = np.float32
_0 = f32(0.0)
_1 = f32(1.0)

@njit(parallel=True, cache=True)
def activate_yolo_output_ab(inp, output, batch, n, classes, wh, new_coords, scale, shift):
    """output = inp after forward_yolo_layer's CPU activations: AlexeyAB's logistic on x, y
    and on the objectness and classes (none with new_coords: the convolution before is
    logistic), then x, y <- x * scale + shift (scale_x_y; shift = -(scale - 1) / 2, applied
    even when 1); w, h copied raw. One (image, anchor, entry) row per iteration."""
    entries = 4 + 1 + classes
    for bne in prange(batch * n * entries):
        e = bne % entries
        src = inp[bne * wh:(bne + 1) * wh]
        dst = output[bne * wh:(bne + 1) * wh]
        if new_coords or e == 2 or e == 3:
            dst[:] = src
        else:
            logistic_f_row(src, dst)
        if e < 2:
            for k in range(wh):
                dst[k] = dst[k] * scale + shift


@njit(cache=True)
def get_yolo_box(output, biases, a, index, i, j, lw, lh, netw, neth, stride, new_coords):
    """get_yolo_box for anchor `a` (an index into all anchors) at cell (i, j): x, y, w, h
    relative to the network input; w = exp(t_w) anchor_w / netw, or with new_coords
    4 t_w^2 anchor_w / netw."""
    x = (f32(i) + output[index]) / f32(lw)
    y = (f32(j) + output[index + stride]) / f32(lh)
    tw = output[index + 2 * stride]
    th = output[index + 3 * stride]
    if new_coords:
        w = tw * tw * f32(4) * biases[2 * a] / f32(netw)
        h = th * th * f32(4) * biases[2 * a + 1] / f32(neth)
    else:
        w = f32(math.exp(np.float64(tw)) * np.float64(biases[2 * a]) / netw)
        h = f32(math.exp(np.float64(th)) * np.float64(biases[2 * a + 1]) / neth)
    return x, y, w, h


@njit(cache=True)
def get_yolo_detections_ab_cpu(bbox, objectness, prob, output, offset, n, lw, lh, classes,
                               biases, mask, netw, neth, thresh, new_coords):
    """get_yolo_detections before correct_yolo_boxes: candidates in the C's order (cell, then
    anchor) whose objectness is > thresh (NaN never is); prob = objectness * p_class kept only
    if > thresh. Writes rows 0..count-1 (count from yolo_num_detections); returns count."""
    wh = lw * lh
    entries = 4 + 1 + classes
    rows = bbox.shape[0]
    count = 0
    for i in range(wh):
        row = i // lw
        col = i % lw
        for a in range(n):
            base = offset + a * entries * wh + i
            obj = output[base + 4 * wh]
            if not obj > thresh:
                continue
            if count >= rows:                # never past the rows counted
                return count
            x, y, w, h = get_yolo_box(output, biases, mask[a], base, col, row, lw, lh, netw,
                                      neth, wh, new_coords)
            bbox[count, 0] = x
            bbox[count, 1] = y
            bbox[count, 2] = w
            bbox[count, 3] = h
            objectness[count] = obj
            for c in range(classes):
                p = obj * output[base + (5 + c) * wh]
                prob[count, c] = p if p > thresh else _0
            count += 1
    return count


@njit(cache=True, error_model="numpy")
def correct_yolo_boxes_ab_cpu(bbox, w, h, netw, neth, relative, letter):
    """AlexeyAB's correct_yolo_boxes: with `letter`, undo the letterbox of a w x h image in a
    netw x neth network (new size by integer division, as letterbox_image); without it
    (a plain resize) the boxes stay relative. relative=False scales them to pixels. Unlike
    pjreddie's, w and h are multiplied by 1 / (new_w / netw). An image so narrow that its
    letterboxed width is 0 gives inf/NaN boxes, as in C."""
    correct_boxes_ab(bbox, w, h, netw, neth, relative, letter, False)


@njit(cache=True, error_model="numpy")
def correct_boxes_ab(bbox, w, h, netw, neth, relative, letter, netw_over_new):
    """correct_yolo_boxes_ab_cpu; with `netw_over_new` (its correct_gaussian_yolo_boxes) w and
    h are multiplied by (float)netw / new_w instead of 1 / (new_w / netw): the two roundings
    differ in the last bit."""
    if letter:
        if f32(netw) / f32(w) < f32(neth) / f32(h):
            new_w = netw
            new_h = (h * netw) // w
        else:
            new_h = neth
            new_w = (w * neth) // h
    else:
        new_w = netw
        new_h = neth
    dw = np.float64(netw - new_w)
    dh = np.float64(neth - new_h)
    ratiow = f32(new_w) / f32(netw)
    ratioh = f32(new_h) / f32(neth)
    for i in range(bbox.shape[0]):
        x = f32((np.float64(bbox[i, 0]) - dw / 2.0 / netw) / np.float64(ratiow))
        y = f32((np.float64(bbox[i, 1]) - dh / 2.0 / neth) / np.float64(ratioh))
        if netw_over_new:
            bw = bbox[i, 2] * (f32(netw) / f32(new_w))
            bh = bbox[i, 3] * (f32(neth) / f32(new_h))
        else:
            bw = bbox[i, 2] * (_1 / ratiow)
            bh = bbox[i, 3] * (_1 / ratioh)
        if not relative:
            x *= f32(w)
            bw *= f32(w)
            y *= f32(h)
            bh *= f32(h)
        bbox[i, 0] = x
        bbox[i, 1] = y
        bbox[i, 2] = bw
        bbox[i, 3] = bh
