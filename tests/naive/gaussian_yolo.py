"""Slow reference for AlexeyAB's [Gaussian_yolo] (`gaussian_yolo_layer.c`), written loop by loop
from its C in float64 (IoU functions from naive_yolo_ab.py): activations, loss deltas with the
statistics, detections. Entries per anchor: x, ux, y, uy, w, uw, h, uh, objectness, classes."""
import math

import numpy as np

import naive_yolo_ab as ab

CENTER, LEFT_TOP, RIGHT_BOTTOM = 1, 2, 4


def forward(x, batch, n, classes, wh, scale):
    out = np.asarray(x, np.float64).reshape(batch, n, 9 + classes, wh).copy()
    for b in range(batch):
        for a in range(n):
            for e in range(9 + classes):
                for k in range(wh):
                    v = out[b, a, e, k]
                    if e not in (4, 6):
                        v = ab.logistic(v)
                    if e in (0, 2):
                        v = v * scale - 0.5 * (scale - 1)
                    out[b, a, e, k] = v
    return out.reshape(-1)


def box(out, biases, a, index, i, j, lw, lh, netw, neth, s, point):
    w = math.exp(out[index + 4 * s]) * biases[2 * a] / netw
    h = math.exp(out[index + 6 * s]) * biases[2 * a + 1] / neth
    x = (i + out[index]) / lw
    y = (j + out[index + 2 * s]) / lh
    if point == LEFT_TOP:
        x, y = x + w / 2, y + h / 2
    elif point == RIGHT_BOTTOM:
        x, y = x - w / 2, y - h / 2
    return x, y, w, h


def _fix(v, max_delta):
    if not math.isfinite(v):
        v = 0.0
    if max_delta is not None:
        v = min(max(v, -max_delta), max_delta)
    return v


class Loss:
    """forward_gaussian_yolo_layer's training half for a built GaussianYoloLayer `l`."""

    def __init__(self, l, netw, neth, iou_loss, iou_thresh_kind):
        self.l, self.netw, self.neth = l, netw, neth
        self.iou_loss, self.iou_thresh_kind = iou_loss, iou_thresh_kind
        self.max_delta = None if l.max_delta >= 3e38 else float(l.max_delta)
        self.mult = [float(v) for v in l.classes_multipliers] or None

    def index(self, b, a, cell, entry):
        l = self.l
        wh = l.w * l.h
        return b * l.outputs + a * wh * (9 + l.classes) + entry * wh + cell

    def delta_box(self, truth, out, a, index, i, j, delta, scale, iou_norm):
        l, s = self.l, self.l.w * self.l.h
        pred = box(out, l.biases, a, index, i, j, l.w, l.h, self.netw, self.neth, s,
                   l.yolo_point)
        iou = ab.box_iou(pred, truth)
        giou = ab.box_giou(pred, truth)
        px, py, pw, ph = pred
        pw, ph = pw or 1.0, ph or 1.0
        tx, ty, tw, th = truth
        gx, gy = tx * l.w - i, ty * l.h - j
        if l.yolo_point == LEFT_TOP:
            gx, gy = (tx - tw / 2) * l.w - i, (ty - th / 2) * l.h - j
        elif l.yolo_point == RIGHT_BOTTOM:
            gx, gy = (tx + tw / 2) * l.w - i, (ty + th / 2) * l.h - j
        targets = [gx, gy, math.log(tw * self.netw / l.biases[2 * a]),
                   math.log(th * self.neth / l.biases[2 * a + 1])]
        means, sigmas = [], []
        for k in range(4):
            m, sg = out[index + 2 * k * s], out[index + (2 * k + 1) * s]
            d = targets[k] - m
            z = d / sg
            nd = math.exp(-0.5 * z * z) / (math.sqrt(2 * math.pi) * (sg + 0.3))
            temp = 0.5 / (nd + 1e-9) * nd * scale
            means.append(temp * z / sg)
            sigmas.append(temp * (z * z / sg - 1 / (sg + 0.3)))
        if self.iou_loss != ab.MSE:
            iou = giou
            dx, dy, dw, dh = ab.dx_box_iou((px, py, pw, ph), truth, self.iou_loss)
            if l.yolo_point == LEFT_TOP:
                dx, dy = dx - dw / 2, dy - dh / 2
            elif l.yolo_point == RIGHT_BOTTOM:
                dx, dy = dx + dw / 2, dy + dh / 2
            means = [dx, dy, dw * math.exp(out[index + 4 * s]), dh * math.exp(out[index + 6 * s])]
        for k in range(4):
            delta[index + 2 * k * s] += _fix(means[k] * iou_norm, self.max_delta)
            delta[index + (2 * k + 1) * s] += _fix(sigmas[k] * l.uc_normalizer, self.max_delta)
        return iou

    def _smooth(self, y):
        eps = float(self.l.label_smooth_eps)
        return y * (1 - eps) + 0.5 * eps if eps else y

    def delta_class(self, out, delta, index, cls, st=None):
        l, s = self.l, self.l.w * self.l.h
        if delta[index]:
            delta[index + s * cls] = self._smooth(1.0) - out[index + s * cls]
            if self.mult:
                delta[index + s * cls] *= self.mult[cls]
        else:
            for c in range(l.classes):
                delta[index + s * c] = self._smooth(float(c == cls)) - out[index + s * c]
                if self.mult and c == cls:
                    delta[index + s * c] *= self.mult[cls] * l.cls_normalizer
        if st is not None:
            st["cat"] += out[index + s * cls]

    def mapped(self, cls):
        return int(self.l.map[cls]) if self.l.map.size else cls

    def train(self, out, delta, truth, a, mask_n, i, j, b, cls, st):
        l = self.l
        tw, th = truth[2], truth[3]
        cm = self.mult[cls] if self.mult else 1.0
        bi = self.index(b, mask_n, j * l.w + i, 0)
        iou = self.delta_box(truth[:4], out, a, bi, i, j, delta, 2 - tw * th,
                             l.iou_normalizer * cm)
        oi = self.index(b, mask_n, j * l.w + i, 8)
        st["obj"] += out[oi]
        delta[oi] = cm * l.obj_normalizer * (1 - out[oi])
        self.delta_class(out, delta, oi + l.w * l.h, cls, st)
        st["count"] += 1
        st["recall"] += iou > 0.5
        st["recall75"] += iou > 0.75
        st["iou"] += iou

    def run(self, out, truth):
        l = self.l
        out = np.asarray(out, np.float64).copy()
        delta = np.zeros_like(out)
        st = dict.fromkeys(("iou", "cat", "obj", "anyobj", "recall", "recall75", "count"), 0.0)
        wh = l.w * l.h
        boxes = np.asarray(truth, np.float64).reshape(l.batch, l.max_boxes, l.truth_size)
        for b in range(l.batch):
            live = []
            for t in range(l.max_boxes):
                if boxes[b, t, 0] == 0:
                    break
                live.append(boxes[b, t])
            for j in range(l.h):
                for i in range(l.w):
                    for a in range(l.n):
                        bi = self.index(b, a, j * l.w + i, 0)
                        oi, ci = bi + 8 * wh, bi + 9 * wh
                        pred = box(out, l.biases, int(l.mask[a]), bi, i, j, l.w, l.h,
                                   self.netw, self.neth, wh, l.yolo_point)
                        best_match, best_match_t, best, best_t = 0.0, 0, 0.0, 0
                        for t, tr in enumerate(live):
                            iou = ab.box_iou(pred, tuple(tr[:4]))
                            match = any(out[ci + wh * c] > 0.25 for c in range(l.classes))
                            if iou > best_match and match:
                                best_match, best_match_t = iou, t
                            if iou > best:
                                best, best_t = iou, t
                        st["anyobj"] += out[oi]
                        delta[oi] = l.obj_normalizer * -out[oi]
                        if best_match > l.ignore_thresh:
                            if l.objectness_smooth:
                                delta[oi] = l.obj_normalizer * (best_match ** 2 - out[oi])
                                self.delta_class(out, delta, ci,
                                                 self.mapped(int(live[best_match_t][4])))
                            else:
                                delta[oi] = 0.0
                        if best > l.truth_thresh:
                            m2 = best * best
                            delta[oi] = l.obj_normalizer * ((m2 if l.objectness_smooth else 1)
                                                            - out[oi])
                            tr = live[best_t]
                            cls = self.mapped(int(tr[4]))
                            self.delta_class(out, delta, ci, cls)
                            cm = self.mult[cls] if self.mult else 1.0
                            if l.objectness_smooth:
                                delta[ci + wh * cls] = cm * (m2 - out[ci + wh * cls])
                            self.delta_box(tuple(tr[:4]), out, int(l.mask[a]), bi, i, j, delta,
                                           2 - tr[2] * tr[3], l.iou_normalizer * cm)
            for tr in live:
                tw, th = tr[2], tr[3]
                fx, fy = tr[0] * l.w, tr[1] * l.h
                if l.yolo_point == LEFT_TOP:
                    fx, fy = (tr[0] - tw / 2) * l.w, (tr[1] - th / 2) * l.h
                elif l.yolo_point == RIGHT_BOTTOM:
                    fx, fy = (tr[0] + tw / 2) * l.w, (tr[1] + th / 2) * l.h
                i, j = int(min(max(fx, 0), l.w - 1)), int(min(max(fy, 0), l.h - 1))
                shapes = [ab.box_iou((0, 0, l.biases[2 * a] / self.netw,
                                      l.biases[2 * a + 1] / self.neth), (0, 0, tw, th))
                          for a in range(l.total)]
                best_n = 0
                for a in range(l.total):
                    if shapes[a] > shapes[best_n]:
                        best_n = a
                cls = self.mapped(int(tr[4]))
                mask = [int(m) for m in l.mask]
                if best_n in mask:
                    self.train(out, delta, tr, best_n, mask.index(best_n), i, j, b, cls, st)
                for a in range(l.total):
                    if a in mask and a != best_n and l.iou_thresh < 1:
                        k = ab.box_iou_kind((0, 0, l.biases[2 * a] / self.netw,
                                             l.biases[2 * a + 1] / self.neth), (0, 0, tw, th),
                                            self.iou_thresh_kind)
                        if k > l.iou_thresh:
                            self.train(out, delta, tr, a, mask.index(a), i, j, b, cls, st)
            for a in range(l.n):
                for cell in range(wh):
                    bi = self.index(b, a, cell, 0)
                    pos = sum(delta[bi + (9 + c) * wh] > 0 for c in range(l.classes))
                    if pos:
                        for k in range(8):
                            delta[bi + k * wh] /= pos
        return delta, st


def detections(out, b, l, netw, neth, thresh, w, h, relative, letter):
    """get_gaussian_yolo_detections + correct_gaussian_yolo_boxes: (box, obj, probs, uc)."""
    wh = l.w * l.h
    dets = []
    for i in range(wh):
        row, col = divmod(i, l.w)
        for a in range(l.n):
            base = b * l.outputs + a * (9 + l.classes) * wh + i
            obj = out[base + 8 * wh]
            if not obj > thresh:
                continue
            bx = box(out, l.biases, int(l.mask[a]), base, col, row, l.w, l.h, netw, neth, wh,
                     l.yolo_point)
            uc = [out[base + (2 * k + 1) * wh] for k in range(4)]
            aver = sum(uc) / 4
            probs = [obj * out[base + (9 + c) * wh] * (1 - aver) for c in range(l.classes)]
            dets.append((bx, obj, [p if p > thresh else 0.0 for p in probs], uc))
    new_w, new_h = netw, neth
    if letter:
        if netw / w < neth / h:
            new_w, new_h = netw, (h * netw) // w
        else:
            new_w, new_h = (w * neth) // h, neth
    out_dets = []
    for (x, y, bw, bh), obj, probs, uc in dets:
        x = (x - (netw - new_w) / 2 / netw) / (new_w / netw)
        y = (y - (neth - new_h) / 2 / neth) / (new_h / neth)
        bw, bh = bw * netw / new_w, bh * neth / new_h
        if not relative:
            x, bw, y, bh = x * w, bw * w, y * h, bh * h
        out_dets.append(((x, y, bw, bh), obj, probs, uc))
    return out_dets
