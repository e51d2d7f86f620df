"""Slow references for AlexeyAB's [yolo], written loop by loop from its C (`yolo_layer.c`,
`box.c`, `image.c`) in float64: the spec the kernels in kernels/yolo_ab.py and box_ab.py are
tested against. Boxes are (x, y, w, h) tuples."""
import math
from types import SimpleNamespace

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
    return (x, y, math.exp(tw) * float(biases[2 * a]) / netw,
            math.exp(th) * float(biases[2 * a + 1]) / neth)


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


# -- the loss (forward_yolo_layer in training) ------------------------------------------------

def dx_box_iou(pred, truth, kind):
    """box.c:dx_box_iou, line by line: (dx, dy, dw, dh)."""
    px, py, pw, ph = pred
    tx, ty, tw, th = truth
    ptop, pbot, pleft, pright = py - ph / 2, py + ph / 2, px - pw / 2, px + pw / 2
    pt, pb, pl, pr = min(ptop, pbot), max(ptop, pbot), min(pleft, pright), max(pleft, pright)
    tt, tb, tl, tr = ty - th / 2, ty + th / 2, tx - tw / 2, tx + tw / 2
    X = (pb - pt) * (pr - pl)
    Xhat = (tb - tt) * (tr - tl)
    Ih = min(pb, tb) - max(pt, tt)
    Iw = min(pr, tr) - max(pl, tl)
    I = Iw * Ih
    U = X + Xhat - I
    S = (px - tx) ** 2 + (py - ty) ** 2
    gCw = max(pr, tr) - min(pl, tl)
    gCh = max(pb, tb) - min(pt, tt)
    gC = gCw * gCh
    dX = {"t": -(pr - pl), "b": pr - pl, "l": -(pb - pt), "r": pb - pt}
    dI = {"t": -Iw if pt > tt else 0.0, "b": Iw if pb < tb else 0.0,
          "l": -Ih if pl > tl else 0.0, "r": Ih if pr < tr else 0.0}
    dU = {k: dX[k] - dI[k] for k in dX}
    dC = {"t": -gCw if pt < tt else 0.0, "b": gCw if pb > tb else 0.0,
          "l": -gCh if pl < tl else 0.0, "r": gCh if pr > tr else 0.0}
    p = {k: 0.0 for k in dX}
    if U > 0:
        p = {k: (U * dI[k] - I * dU[k]) / (U * U) for k in dX}
    if not ptop < pbot:
        p["t"] = p["b"]
    if not pleft < pright:
        p["l"] = p["r"]
    if kind == GIOU:
        g = {k: _div(gC * dU[k] - U * dC[k], gC * gC) for k in dX}
        if gC > 0:
            p = {k: p[k] + g[k] for k in dX}
        if Iw <= 0 or Ih <= 0:
            p = g
    dx, dy, dw, dh = p["l"] + p["r"], p["t"] + p["b"], p["r"] - p["l"], p["b"] - p["t"]
    if kind in (DIOU, CIOU):
        Cw = max(px + pw / 2, tx + tw / 2) - min(px - pw / 2, tx - tw / 2)
        Ch = max(py + ph / 2, ty + th / 2) - min(py - ph / 2, ty - th / 2)
        C = Cw * Cw + Ch * Ch
        dCw_dx = (1.0 if pr > tr else 0.0) - (1.0 if pl < tl else 0.0)
        dCw_dw = (0.5 if pr > tr else 0.0) + (0.5 if pl < tl else 0.0)
        dCh_dy = (1.0 if pb > tb else 0.0) - (1.0 if pt < tt else 0.0)
        dCh_dh = (0.5 if pb > tb else 0.0) + (0.5 if pt < tt else 0.0)
        gx = _div(2 * (tx - px) * C - 2 * Cw * dCw_dx * S, C * C)
        gy = _div(2 * (ty - py) * C - 2 * Ch * dCh_dy * S, C * C)
        gw = _div(2 * Cw * dCw_dw * S, C * C)
        gh = _div(2 * Ch * dCh_dh * S, C * C)
        aw = ah = 0.0
        if kind == CIOU:
            da = math.atan(tw / th) - math.atan(_div(pw, ph))
            v = 4 / math.pi ** 2 * da * da
            alpha = _div(v, 1 - _div(I, U) + v + 0.000001)
            aw, ah = alpha * 8 / math.pi ** 2 * da * ph, -alpha * 8 / math.pi ** 2 * da * pw
        if C > 0:
            dx, dy, dw, dh = dx + gx, dy + gy, dw + gw + aw, dh + gh + ah
        if Iw <= 0 or Ih <= 0:
            dx, dy, dw, dh = gx, gy, gw + aw, gh + ah
    return dx, dy, dw, dh


def _div(a, b):
    """C's float division: inf or NaN instead of an exception."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


def _f32box(box):
    """The C holds boxes in float: a huge exp(t) is inf there."""
    with np.errstate(over="ignore"):
        return tuple(float(np.float32(v)) for v in box)


class Loss:
    """forward_yolo_layer's training half for one layer, its fields named as the C's; run()
    returns (delta, output after the NaN objectness fix, stats dict)."""

    def __init__(self, l, netw, neth, iou_loss, iou_thresh_kind):
        self.l = SimpleNamespace(**vars(l))
        self.l.iou_loss, self.l.iou_thresh_kind = iou_loss, iou_thresh_kind
        self.netw, self.neth = netw, neth

    def box(self, out, a, index, i, j):
        l = self.l
        return _f32box(yolo_box(out, l.biases, a, index, i, j, l.w, l.h, self.netw, self.neth,
                                l.w * l.h, l.new_coords))

    def delta_box(self, truth, out, a, index, i, j, delta, scale, iou_norm, st):
        l, s = self.l, self.l.w * self.l.h
        if any(delta[index + k * s] for k in range(4)):
            st["rewritten"] += 1
        pred = self.box(out, a, index, i, j)
        ious = (box_iou(pred, truth), box_giou(pred, truth), box_diounms(pred, truth),
                box_ciou(pred, truth))
        px, py, pw, ph = pred
        pw, ph = pw or 1.0, ph or 1.0
        tx, ty, tw, th = truth
        if l.iou_loss == MSE:
            t = [tx * l.w - i, ty * l.h - j]
            if l.new_coords:
                t += [math.sqrt(tw * self.netw / (4 * l.biases[2 * a])),
                      math.sqrt(th * self.neth / (4 * l.biases[2 * a + 1]))]
            else:
                t += [math.log(tw * self.netw / l.biases[2 * a]),
                      math.log(th * self.neth / l.biases[2 * a + 1])]
            for k in range(4):
                delta[index + k * s] += scale * (t[k] - out[index + k * s]) * iou_norm
            return ious
        d = list(dx_box_iou((px, py, pw, ph), truth, l.iou_loss))
        if not l.new_coords:                   # stored in float: a huge product is inf
            for k in (2, 3):
                e = math.exp(out[index + k * s]) if out[index + k * s] < 700 else math.inf
                with np.errstate(over="ignore", invalid="ignore"):
                    d[k] = float(np.float32(d[k] * e))
        for k in range(4):
            v = d[k] * iou_norm
            if not math.isfinite(v):
                st["nan"] += 1
                v = 0.0
            if l.max_delta != FLT_MAX:
                v = min(max(v, -l.max_delta), l.max_delta)
            delta[index + k * s] += v
        return ious

    def delta_class(self, out, delta, index, cls, st_key, st):
        l, s = self.l, self.l.w * self.l.h
        eps = l.label_smooth_eps
        mult = l.classes_multipliers
        smooth = (lambda y: y * (1 - eps) + 0.5 * eps) if eps else (lambda y: y)
        if delta[index + s * cls]:
            r = smooth(1.0) - out[index + s * cls]
            if math.isfinite(r):
                delta[index + s * cls] = r
            if len(mult):
                delta[index + s * cls] *= mult[cls]
        elif l.focal_loss:
            pt = out[index + s * cls] + 1e-15
            grad = -(1 - pt) * (2 * pt * math.log(pt) + pt - 1)
            for c in range(l.classes):
                delta[index + s * c] = ((c == cls) - out[index + s * c]) * 0.5 * grad
        else:
            for c in range(l.classes):
                r = smooth(float(c == cls)) - out[index + s * c]
                if math.isfinite(r):
                    delta[index + s * c] = r
                if len(mult) and c == cls:
                    delta[index + s * cls] *= mult[cls] * l.cls_normalizer
        if st_key:
            st[st_key] += out[index + s * cls]

    def run(self, x_out, truth):
        l = self.l
        out = np.asarray(x_out, np.float64).copy()
        delta = np.zeros_like(out)
        wh, entries = l.w * l.h, 5 + l.classes
        keys = ["iou", "iou_loss", "giou", "giou_loss", "diou", "ciou", "recall", "recall75",
                "cat", "obj", "anyobj", "count", "class_count", "total_bbox", "rewritten",
                "nan", "bad_class"]
        st = dict.fromkeys(keys, 0.0)
        mult = l.classes_multipliers
        for b in range(l.batch):
            truths = [tuple(float(v) for v in truth[b * l.truths + t * l.truth_size:][:5])
                      for t in range(l.max_boxes)]
            n_truths = next((t for t, tr in enumerate(truths) if tr[0] == 0), l.max_boxes)
            truths = truths[:n_truths]
            valid = [-1 < tr[4] < l.classes for tr in truths]
            for j in range(l.h):
                for i in range(l.w):
                    for n in range(l.n):
                        box_index = b * l.outputs + n * wh * entries + j * l.w + i
                        obj_index, class_index = box_index + 4 * wh, box_index + 5 * wh
                        pred = self.box(out, l.mask[n], box_index, i, j)
                        best_match_iou = best_iou = 0.0
                        best_t = 0
                        for t, tr in enumerate(truths):
                            if not valid[t]:
                                continue
                            if not math.isfinite(out[obj_index]):
                                out[obj_index] = 0.0
                            match = any(out[class_index + wh * c] > 0.25
                                        for c in range(l.classes))
                            iou = box_iou(pred, tr[:4])
                            if iou > best_match_iou and match:
                                best_match_iou = iou
                            if iou > best_iou:
                                best_iou, best_t = iou, t
                        st["anyobj"] += out[obj_index]
                        delta[obj_index] = l.obj_normalizer * (0 - out[obj_index])
                        if best_match_iou > l.ignore_thresh:
                            if l.objectness_smooth:
                                d = l.obj_normalizer * (best_match_iou - out[obj_index])
                                delta[obj_index] = max(delta[obj_index], d)
                            else:
                                delta[obj_index] = 0.0
                        if best_iou > l.truth_thresh:
                            im = best_iou * best_iou
                            target = im if l.objectness_smooth else 1.0
                            delta[obj_index] = l.obj_normalizer * (target - out[obj_index])
                            cls = self.mapped(int(truths[best_t][4]))
                            self.delta_class(out, delta, class_index, cls, None, st)
                            cm = mult[cls] if len(mult) else 1.0
                            if l.objectness_smooth:
                                k = class_index + wh * cls
                                delta[k] = cm * (im - out[k])
                            tr = truths[best_t]
                            self.delta_box(tr[:4], out, l.mask[n], box_index, i, j, delta,
                                           2 - tr[2] * tr[3], l.iou_normalizer * cm, st)
                            st["total_bbox"] += 1
            for t, tr in enumerate(truths):
                if not valid[t]:
                    st["bad_class"] += 1
                    continue
                cls = self.mapped(int(tr[4]))
                i, j = int(tr[0] * l.w), int(tr[1] * l.h)
                anchor = [box_iou((0, 0, l.biases[2 * a] / self.netw,
                                   l.biases[2 * a + 1] / self.neth), (0, 0, tr[2], tr[3]))
                          for a in range(l.total)]
                best_n = max(range(l.total), key=lambda a: (anchor[a], -a))
                if anchor[best_n] == 0:
                    best_n = 0
                trained = [best_n] if best_n in list(l.mask) else []
                if l.iou_thresh < 1:
                    for a in range(l.total):
                        if a in list(l.mask) and a != best_n and box_iou_kind(
                                (0, 0, l.biases[2 * a] / self.netw,
                                 l.biases[2 * a + 1] / self.neth),
                                (0, 0, tr[2], tr[3]), l.iou_thresh_kind) > l.iou_thresh:
                            trained.append(a)
                for a in trained:
                    mask_n = list(l.mask).index(a)
                    box_index = b * l.outputs + mask_n * wh * entries + j * l.w + i
                    cm = mult[cls] if len(mult) else 1.0
                    iou, giou, diou, ciou = self.delta_box(tr[:4], out, a, box_index, i, j,
                                                           delta, 2 - tr[2] * tr[3],
                                                           l.iou_normalizer * cm, st)
                    st["total_bbox"] += 1
                    st["iou"] += iou
                    st["iou_loss"] += 1 - iou
                    st["giou"] += giou
                    st["giou_loss"] += 1 - giou
                    st["diou"] += diou
                    st["ciou"] += ciou
                    obj_index = box_index + 4 * wh
                    st["obj"] += out[obj_index]
                    d = cm * l.obj_normalizer * (1 - out[obj_index])
                    if not l.objectness_smooth or delta[obj_index] == 0:
                        delta[obj_index] = d
                    self.delta_class(out, delta, box_index + 5 * wh, cls, "cat", st)
                    st["count"] += 1
                    st["class_count"] += 1
                    st["recall"] += iou > 0.5
                    st["recall75"] += iou > 0.75
            if l.iou_thresh < 1:
                for n in range(l.n):
                    for cell in range(wh):
                        box_index = b * l.outputs + n * wh * entries + cell
                        if delta[box_index + 4 * wh] != 0:
                            k = sum(delta[box_index + (5 + c) * wh] > 0 for c in range(l.classes))
                            if k:
                                for e in range(4):
                                    delta[box_index + e * wh] /= k
        return delta, out, st

    def mapped(self, cls):
        return int(self.l.map[cls]) if len(self.l.map) else cls


FLT_MAX = float(np.finfo(np.float32).max)


def sum_squares_sse(a):
    """mag_array's float sum of squares as AlexeyAB's stock -Ofast build computes it: four
    float lanes, joined (l0 + l2) + (l1 + l3), then the tail one by one."""
    a = np.asarray(a, np.float32)
    m = a.size // 4 * 4
    lanes = np.zeros(4, np.float32)
    for i in range(0, m, 4):
        lanes = lanes + a[i:i + 4] * a[i:i + 4]
    t = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3])
    for v in a[m:]:
        t = np.float32(t + v * v)
    return t
