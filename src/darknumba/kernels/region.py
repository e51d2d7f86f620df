"""YOLOv2 [region] kernels (Darknet's `region_layer.c`).

Legend: per image the output is [n anchors][coords + 1 + classes][h][w] (wh = w*h cells);
entry 0,1 = x, y offsets (logistic), 2,3 = w, h (raw, exp'd against the anchor, in *cells*),
`coords` = objectness, then the classes. Truth per image: 30 boxes of (x, y, w, h, class),
relative to the network input, the list ending at the first x == 0.
"""
import math
from collections import namedtuple

import numpy as np
from numba import njit

from .yolo import box_iou, truth_cell, truth_class

# region_deltas' arguments, named (numba takes namedtuples as arguments)
RegionSizes = namedtuple("RegionSizes", "batch n lw lh coords classes truths")
# the [region] loss settings; prior: seen < 12800 (pull boxes toward their anchors);
# bias_match, rescore, background and tag (no softmax) are bools
RegionLossParams = namedtuple("RegionLossParams",
                              "thresh prior coord_scale object_scale noobject_scale "
                              "class_scale mask_scale bias_match rescore background tag")
# the class tree (tree=): has_tree, then its int64 arrays (empty without one)
RegionTree = namedtuple("RegionTree", "has_tree parent group group_offset group_size")

MAX_TRUTHS = 30



# the slots of the `stats` array the loss kernels add into (float64, 7 values): sums of the
# best IoUs, of recalls at .5, of the truth class's probability, of the objectness at truths
# and everywhere, the truth count and the class-delta count
S_IOU, S_RECALL, S_CLASS, S_OBJ, S_ANYOBJ, S_COUNT, S_CLASS_COUNT = range(7)
N_STATS = 7

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
def _mapped_class(v, class_map, classes):
    """A truth's class id, through the class map if there is one; -1 if it is not a class
    of the layer (the layer refuses such truths first: this keeps the kernels in bounds)."""
    cls = truth_class(v)
    if class_map.size:
        cls = class_map[cls] if 0 <= cls < class_map.size else -1
    return cls if 0 <= cls < classes else -1


@njit(cache=True)
def region_deltas(output, truth, biases, sizes, p, class_map, tree, skip, delta, stats):
    """The training half of forward_region_layer (without a class tree).

    1. every prediction: δobj = noobject_scale·(0 - obj) (background: 1 - obj), zeroed when its
       best IoU with a truth is > thresh; while `prior` (seen < 12800) also pull every box
       towards its anchor at the cell centre with scale .01;
    2. every truth: the cell holding its centre and the anchor whose shape (both centred at
       0) overlaps it best (bias_match: the anchor itself, not the prediction) get box deltas
       scaled by coord_scale·(2 - w·h), δobj = object_scale·(1 - obj) (rescore: iou - obj;
       background: 0 - obj) and class deltas scaled by class_scale; with tag (no softmax),
       a second truth in the same slot only sets its own class (delta_region_class quirk).
    With a class map the truth's class is mapped first; with a tree the class deltas follow
    the class's path (delta_region_class_tree). Images with skip[b] set (classification-only,
    handled by region_tree_class_only) are left alone.
    stats (7,) float64 += avg_iou, recall, avg_cat, avg_obj, avg_anyobj, count, class_count.
    sizes: RegionSizes; p: RegionLossParams; tree: RegionTree."""
    batch, n, lw, lh, coords, classes, truths = sizes
    (thresh, prior, coord_scale, object_scale, noobject_scale, class_scale, mask_scale,
     bias_match, rescore, background, tag) = p
    has_tree, parent, group, group_offset, group_size = tree
    wh = lw * lh
    entries = coords + classes + 1
    stride = wh
    for b in range(batch):
        if skip[b]:
            continue
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
                    stats[S_ANYOBJ] += output[obj_index]
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
            i = truth_cell(tx, lw)
            j = truth_cell(ty, lh)
            if i < 0 or j < 0:
                continue
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
                stats[S_RECALL] += 1
            stats[S_IOU] += iou
            obj_index = box_index + coords * wh
            stats[S_OBJ] += output[obj_index]
            delta[obj_index] = np.float32(object_scale * (1.0 - output[obj_index]))
            if rescore:
                delta[obj_index] = np.float32(object_scale * (iou - output[obj_index]))
            if background:
                delta[obj_index] = np.float32(object_scale * (0.0 - output[obj_index]))
            cls = _mapped_class(truth[o + coords], class_map, classes)
            class_index = box_index + (coords + 1) * wh
            stats[S_CLASS_COUNT] += 1
            if cls >= 0 and has_tree:       # (cls < 0: no class of the layer, no class delta)
                stats[S_CLASS] += delta_region_class_tree(output, delta, class_index, cls, parent, group,
                                                    group_offset, group_size, class_scale, stride)
            elif cls >= 0 and tag and delta[class_index] != 0:
                delta[class_index + stride * cls] = np.float32(
                    class_scale * (1.0 - output[class_index + stride * cls]))
            elif cls >= 0:
                for c in range(classes):
                    target = 1.0 if c == cls else 0.0
                    delta[class_index + stride * c] = np.float32(
                        class_scale * (target - output[class_index + stride * c]))
                    if c == cls:
                        stats[S_CLASS] += output[class_index + stride * c]
            stats[S_COUNT] += 1


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


# -- class trees (YOLO9000) ---------------------------------------------------------------------

@njit(cache=True)
def softmax_tree_cpu(inp, output, batch, n, entries, wh, class_start, group_offset, group_size):
    """A softmax within each group of the tree, for every image, anchor and cell (the layout
    of Darknet's GPU softmax_tree; its CPU branch indexes the buffer inconsistently)."""
    for b in range(batch):
        for a in range(n):
            base = (b * n + a) * entries * wh + class_start * wh
            for i in range(wh):
                for g in range(group_offset.size):
                    o, s = group_offset[g], group_size[g]
                    if s == 0:
                        continue
                    largest = inp[base + o * wh + i]
                    for k in range(1, s):
                        v = inp[base + (o + k) * wh + i]
                        if v > largest:
                            largest = v
                    tot = 0.0
                    for k in range(s):
                        e = math.exp(np.float64(inp[base + (o + k) * wh + i]) - largest)
                        tot += e
                        output[base + (o + k) * wh + i] = np.float32(e)
                    for k in range(s):
                        output[base + (o + k) * wh + i] = np.float32(
                            output[base + (o + k) * wh + i] / tot)


@njit(cache=True)
def hierarchy_probability(output, index, cls, parent, stride):
    p = 1.0
    while cls >= 0:
        p *= output[index + cls * stride]
        cls = parent[cls]
    return p


@njit(cache=True)
def delta_region_class_tree(output, delta, index, cls, parent, group, group_offset, group_size,
                            scale, stride):
    """delta_region_class with a hierarchy: along the path to the root, every class of each
    group is pulled to 0 and the path's class to 1. Returns the path probability."""
    pred = 1.0
    while cls >= 0:
        pred *= output[index + stride * cls]
        g = group[cls]
        o = group_offset[g]
        for k in range(group_size[g]):
            delta[index + stride * (o + k)] = np.float32(scale * (0.0 - output[index + stride * (o + k)]))
        delta[index + stride * cls] = np.float32(scale * (1.0 - output[index + stride * cls]))
        cls = parent[cls]
    return pred


@njit(cache=True)
def region_tree_class_only(output, truth, batch, n, lw, lh, coords, classes, truths, class_map,
                           noobject_scale, class_scale, parent, group, group_offset, group_size,
                           delta, stats, done):
    """forward_region_layer's tree branch for classification-only truths (a box with x and y
    > 100000): every objectness pulled to 0, the class path trained at the prediction with the
    highest obj·P(class), whose objectness delta is then 0. done[b] = 1 marks such images."""
    wh = lw * lh
    entries = coords + classes + 1
    for b in range(batch):
        t = 0
        while t < MAX_TRUTHS:
            o = b * truths + t * (coords + 1)
            if truth[o] == 0:
                break
            cls = _mapped_class(truth[o + coords], class_map, classes)
            if cls >= 0 and truth[o] > 100000 and truth[o + 1] > 100000:
                maxp = 0.0
                maxi = 0
                for k in range(n * wh):
                    a, loc = k // wh, k % wh
                    base = (b * n + a) * entries * wh + loc
                    obj_index = base + coords * wh
                    delta[obj_index] = np.float32(noobject_scale * (0.0 - output[obj_index]))
                    p = output[obj_index] * hierarchy_probability(
                        output, base + (coords + 1) * wh, cls, parent, wh)
                    if p > maxp:
                        maxp = p
                        maxi = k
                a, loc = maxi // wh, maxi % wh
                base = (b * n + a) * entries * wh + loc
                stats[S_CLASS] += delta_region_class_tree(output, delta, base + (coords + 1) * wh, cls,
                                                    parent, group, group_offset, group_size,
                                                    class_scale, wh)
                delta[base + coords * wh] = 0.0
                stats[S_CLASS_COUNT] += 1
                done[b] = 1
                break
            t += 1


@njit(cache=True)
def hierarchy_top_prediction(p, child, parent, group_offset, group_size, thresh):
    """hierarchy_top_prediction on one cell's (already path-multiplied) class probabilities:
    descend from the roots taking each group's best class while the path probability stays
    above thresh."""
    prob = 1.0
    g = 0
    while True:
        best, best_i = 0.0, 0
        for k in range(group_size[g]):
            idx = group_offset[g] + k
            if p[idx] > best:
                best, best_i = p[idx], idx
        if prob * best > thresh:
            prob = prob * best
            g = child[best_i]
            if g < 0:
                return best_i
        elif g == 0:
            return best_i
        else:
            return parent[group_offset[g]]


@njit(cache=True)
def get_region_detections_tree_cpu(bbox, objectness, prob, output, offset, n, lw, lh, coords,
                                   classes, biases, thresh, tree_thresh, parent, child,
                                   group_offset, group_size):
    """get_region_detections with a tree and no map: the boxes as without a tree; each
    candidate's prob is its objectness (if > thresh) at the top class of the hierarchy
    (hierarchy_predictions then hierarchy_top_prediction, on a copy: Darknet rewrites the
    layer output in place)."""
    wh = lw * lh
    entries = coords + classes + 1
    p = np.empty(classes, dtype=np.float64)
    for i in range(wh):
        row = i // lw
        col = i % lw
        for a in range(n):
            k = i * n + a
            base = offset + a * entries * wh + i
            scale = output[base + coords * wh]
            x, y, w, h = _region_box(output, biases, a, base, col, row, lw, lh, wh)
            bbox[k, 0], bbox[k, 1], bbox[k, 2], bbox[k, 3] = x, y, w, h
            objectness[k] = scale if scale > thresh else np.float32(0.0)
            for j in range(classes):
                prob[k, j] = 0.0
                p[j] = output[base + (coords + 1 + j) * wh]
            for j in range(classes):
                if parent[j] >= 0:
                    p[j] *= p[parent[j]]
            j = hierarchy_top_prediction(p, child, parent, group_offset, group_size, tree_thresh)
            prob[k, j] = scale if scale > thresh else np.float32(0.0)
