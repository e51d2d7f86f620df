"""AlexeyAB's [region] kernels (its `region_layer.c`, `blas.c:flatten`, `network.c:
custom_get_region_detections`), used by layers/region_ab.py.

Legend: AlexeyAB keeps the region output *flattened*: per image [wh cells][n anchors][size],
size = 4 + 1 + classes (coords=4), so image b, cell p (row-major), anchor a, entry e sits at
b*outputs + (p*n + a)*size + e. Entries 0..3 = x, y, w, h as the convolution gave them
(get_region_box takes the logistic of x, y and the exp of w, h when it reads them),
4 = objectness (logistic), 5.. = the classes (softmax with softmax=1, else as given). The loss
writes its deltas in that layout; the layer then puts them back in the convolution's
[n*size][wh] layout. The deltas already hold the logistic's derivative (the backward only adds
them). Truth per image: max_boxes rows of truth_size (6) floats x, y, w, h, class, track id.
Float32 where the C computes in float, double where it calls exp / log.
"""
import math
from collections import namedtuple

import numpy as np
from numba import njit

from .box_ab import box_iou
from .softmax import softmax_cpu_one

f32 = np.float32
_0 = f32(0.0)
_1 = f32(1.0)

# region_ab_deltas' arguments, named (numba takes namedtuples as arguments)
RegionAbSizes = namedtuple("RegionAbSizes", "batch n lw lh classes max_boxes truth_size truths")
# prior: seen < 12800 (pull every box towards its anchor); bias_match, rescore: bools;
# classfix: AlexeyAB's int key (-1: objectness towards the best IoU, 1 / 2: class deltas for
# predictions over thresh); focal_loss: bool
RegionAbParams = namedtuple("RegionAbParams",
                            "thresh prior coord_scale object_scale noobject_scale class_scale "
                            "bias_match rescore classfix focal_loss")

# the `stats` slots (float64) the loss adds into: IoU, recall at .5, truth-class probability,
# objectness at truths and everywhere, truth count, class-delta count, truths skipped for a
# class id >= classes (AlexeyAB prints a warning for each)
S_IOU, S_RECALL, S_CLASS, S_OBJ, S_ANYOBJ, S_COUNT, S_CLASS_COUNT, S_BAD_CLASS = range(8)
N_STATS = 8


@njit(cache=True)
def flatten_cpu(x, size, layers, batch, forward, out):
    """blas.c flatten into `out`: forward, per image [layers][size] -> [size][layers]
    (out[b, i, c] = x[b, c, i]); backward the inverse (out[b, c, i] = x[b, i, c])."""
    for b in range(batch):
        base = b * layers * size
        for c in range(layers):
            for i in range(size):
                i1 = base + c * size + i
                i2 = base + i * layers + c
                if forward:
                    out[i2] = x[i1]
                else:
                    out[i1] = x[i2]


@njit(cache=True, inline="always")
def logistic_f(v):
    """AlexeyAB's logistic_activate: 1.f / (1.f + expf(-x)) in float."""
    return _1 / (_1 + f32(math.exp(-np.float64(v))))


@njit(cache=True)
def activate_region_ab(output, batch, outputs, cells, size, classes, softmax):
    """forward_region_layer's activations on the flattened output: logistic on entry 4 of
    every cell x anchor (`cells` = wh*n), and with softmax=1 a softmax over its classes."""
    for b in range(batch):
        for k in range(cells):
            index = b * outputs + k * size
            output[index + 4] = logistic_f(output[index + 4])
            if softmax:
                cls = output[index + 5:index + 5 + classes]
                softmax_cpu_one(cls, classes, 1.0, cls)    # blas.c softmax, in place


@njit(cache=True)
def get_region_box_ab(x, biases, a, index, i, j, lw, lh):
    """get_region_box (DOABS): x, y = (cell + logistic(t)) / grid; w, h = exp(t) anchor / grid
    (anchors in cells), from four consecutive values at `index`."""
    bx = (f32(i) + logistic_f(x[index])) / f32(lw)
    by = (f32(j) + logistic_f(x[index + 1])) / f32(lh)
    bw = f32(math.exp(np.float64(x[index + 2])) * np.float64(biases[2 * a]) / lw)
    bh = f32(math.exp(np.float64(x[index + 3])) * np.float64(biases[2 * a + 1]) / lh)
    return bx, by, bw, bh


@njit(cache=True)
def delta_region_box_ab(tx_, ty_, tw_, th_, x, biases, a, index, i, j, lw, lh, delta, scale):
    """delta_region_box: the targets in the network's parametrisation; x and y deltas carry the
    logistic's derivative. Returns the IoU of the prediction with the truth."""
    px, py, pw, ph = get_region_box_ab(x, biases, a, index, i, j, lw, lh)
    iou = box_iou(px, py, pw, ph, tx_, ty_, tw_, th_)
    tx = tx_ * f32(lw) - f32(i)
    ty = ty_ * f32(lh) - f32(j)
    tw = f32(math.log(np.float64(tw_ * f32(lw) / biases[2 * a])))
    th = f32(math.log(np.float64(th_ * f32(lh) / biases[2 * a + 1])))
    sx = logistic_f(x[index])
    sy = logistic_f(x[index + 1])
    delta[index] = scale * (tx - sx) * ((_1 - sx) * sx)
    delta[index + 1] = scale * (ty - sy) * ((_1 - sy) * sy)
    delta[index + 2] = scale * (tw - x[index + 2])
    delta[index + 3] = scale * (th - x[index + 3])
    return iou


@njit(cache=True)
def delta_region_class_ab(output, delta, index, class_id, classes, scale, focal_loss):
    """delta_region_class without a tree: scale * ([c == class_id] - p_c) for every class
    (focal_loss: times alpha .5 and the focal factor of the truth class's p). Returns the truth
    class's probability (0 for a class id outside 0..classes-1, which sets no 1 target)."""
    cat = 0.0
    factor = _1
    if focal_loss and 0 <= class_id < classes:
        pt = output[index + class_id] + f32(1e-15)
        grad = -(_1 - pt) * (f32(2) * pt * f32(math.log(np.float64(pt))) + pt - _1)
        factor = f32(0.5) * grad
    for c in range(classes):
        target = _1 if c == class_id else _0
        delta[index + c] = scale * (target - output[index + c])
        if focal_loss:
            delta[index + c] *= factor
        if c == class_id:
            cat += output[index + c]
    return cat


@njit(cache=True, inline="always")
def _class_id(v, classes):
    """The C's `int class_id = truth[...]` (truncation); `classes` for a value at or past it
    (AlexeyAB skips such a truth), NaN included."""
    if not v < classes:
        return classes
    if v <= -2147483648.0:
        return -2147483647
    return int(math.trunc(v))


@njit(cache=True)
def region_ab_deltas(output, truth, biases, sizes, p, class_map, delta, stats):
    """The training half of AlexeyAB's forward_region_layer (no class tree), on the flattened
    output, into the flattened delta (zeroed by the caller).

    1. every cell x anchor: its best IoU with a truth (truths with a class id >= classes
       skipped, the list ending at the first x == 0); δobj = noobject_scale (0 - obj) σ';
       classfix -1: (best_iou - obj) σ' instead; otherwise 0 when best_iou > thresh, and with
       classfix > 0 class deltas towards that truth's class (scale class_scale, times obj with
       classfix 2); while `prior` the box is pulled towards its anchor at the cell centre
       (scale .01).
    2. every truth (class id < classes, AlexeyAB's warning counted in S_BAD_CLASS): at the cell
       of its centre, the anchor whose shape overlaps it best (bias_match: the anchor's own
       shape) gets box deltas scaled by coord_scale, δobj = object_scale (1 - obj) σ' (rescore:
       iou - obj) and class deltas (through the class map first, if any) scaled by class_scale.
    Truth cells outside the grid are skipped (the layer refuses such truths first)."""
    batch, n, lw, lh, classes, max_boxes, truth_size, truths = sizes
    (thresh, prior, coord_scale, object_scale, noobject_scale, class_scale, bias_match, rescore,
     classfix, focal_loss) = p
    size = 4 + 1 + classes
    outputs = lw * lh * n * size
    for b in range(batch):
        tb = b * truths
        for j in range(lh):
            for i in range(lw):
                for a in range(n):
                    index = size * (j * lw * n + i * n + a) + b * outputs
                    px, py, pw, ph = get_region_box_ab(output, biases, a, index, i, j, lw, lh)
                    best_iou = _0
                    best_class = -1
                    for t in range(max_boxes):
                        o = tb + t * truth_size
                        cls = _class_id(truth[o + 4], classes)
                        if cls >= classes:
                            continue
                        if truth[o] == 0:
                            break
                        iou = box_iou(px, py, pw, ph, truth[o], truth[o + 1], truth[o + 2],
                                      truth[o + 3])
                        if iou > best_iou:
                            best_class = cls
                            best_iou = iou
                    obj = output[index + 4]
                    stats[S_ANYOBJ] += obj
                    delta[index + 4] = noobject_scale * ((_0 - obj) * ((_1 - obj) * obj))
                    if classfix == -1:
                        delta[index + 4] = noobject_scale * ((best_iou - obj) * ((_1 - obj) * obj))
                    elif best_iou > thresh:
                        delta[index + 4] = _0
                        if classfix > 0:
                            s = class_scale * (obj if classfix == 2 else _1)
                            stats[S_CLASS] += delta_region_class_ab(
                                output, delta, index + 5, best_class, classes, s, focal_loss)
                            stats[S_CLASS_COUNT] += 1
                    if prior:
                        delta_region_box_ab(f32((i + 0.5) / lw), f32((j + 0.5) / lh),
                                            biases[2 * a] / f32(lw), biases[2 * a + 1] / f32(lh),
                                            output, biases, a, index, i, j, lw, lh, delta,
                                            f32(0.01))
        for t in range(max_boxes):
            o = tb + t * truth_size
            cls = _class_id(truth[o + 4], classes)
            if cls >= classes:
                stats[S_BAD_CLASS] += 1
                continue
            if truth[o] == 0:
                break
            tx, ty, tw, th = truth[o], truth[o + 1], truth[o + 2], truth[o + 3]
            ci = tx * f32(lw)
            cj = ty * f32(lh)
            if not (0 <= ci < lw and 0 <= cj < lh):
                continue
            i = int(ci)
            j = int(cj)
            best_iou = _0
            best_index = 0
            best_n = 0
            for a in range(n):
                index = size * (j * lw * n + i * n + a) + b * outputs
                px, py, pw, ph = get_region_box_ab(output, biases, a, index, i, j, lw, lh)
                if bias_match:
                    pw = biases[2 * a] / f32(lw)
                    ph = biases[2 * a + 1] / f32(lh)
                iou = box_iou(_0, _0, pw, ph, _0, _0, tw, th)
                if iou > best_iou:
                    best_index = index
                    best_iou = iou
                    best_n = a
            iou = delta_region_box_ab(tx, ty, tw, th, output, biases, best_n, best_index, i, j,
                                      lw, lh, delta, coord_scale)
            if iou > 0.5:
                stats[S_RECALL] += 1
            stats[S_IOU] += iou
            obj = output[best_index + 4]
            stats[S_OBJ] += obj
            delta[best_index + 4] = object_scale * (_1 - obj) * ((_1 - obj) * obj)
            if rescore:
                delta[best_index + 4] = object_scale * (iou - obj) * ((_1 - obj) * obj)
            if class_map.size:
                cls = class_map[cls] if 0 <= cls < class_map.size else -1
            stats[S_CLASS] += delta_region_class_ab(output, delta, best_index + 5, cls, classes,
                                                    class_scale, focal_loss)
            stats[S_COUNT] += 1
            stats[S_CLASS_COUNT] += 1


@njit(cache=True)
def get_region_boxes_ab(bbox, prob, output, offset, n, lw, lh, classes, biases, thresh,
                        classfix):
    """get_region_boxes(l, 1, 1, ...) as custom_get_region_detections calls it (no tree, no
    map): detection k = cell * n + anchor reads the flattened output at offset +
    k * (classes + 5); its box relative to the network; prob = obj * p_class kept if > thresh
    (classfix -1: obj below .5 counts as 0). The caller sets every objectness to 1."""
    for i in range(lw * lh):
        row = i // lw
        col = i % lw
        for a in range(n):
            k = i * n + a
            base = offset + k * (classes + 5)
            scale = output[base + 4]
            if classfix == -1 and scale < f32(0.5):
                scale = _0
            x, y, w, h = get_region_box_ab(output, biases, a, base, col, row, lw, lh)
            bbox[k, 0], bbox[k, 1], bbox[k, 2], bbox[k, 3] = x, y, w, h
            for c in range(classes):
                v = scale * output[base + 5 + c]
                prob[k, c] = v if v > thresh else _0
