"""AlexeyAB's detection pipeline after get_network_boxes: its NMS kinds (`box.c` do_nms_sort,
diounms_sort), chosen by the last detection layer as its `detector.c:test_detector` does, and
what its `image.c:draw_detections_v3` prints (`name: NN%`, with -ext_output the box)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..kernels.box import do_nms_sort_cpu
from ..kernels.box_ab import DEFAULT_NMS, diounms_sort_cpu


def do_nms(dets, nms: float, kind: int = DEFAULT_NMS, beta: float = 0.6):
    """AlexeyAB's do_nms_sort (DEFAULT_NMS) or diounms_sort (GREEDY_NMS: DIoU > nms; DIOU_NMS:
    IoU - (d/c)^beta > nms) on box.Detections: returns them in the C's final order with
    suppressed class probs set to 0. Zero-area boxes have IoU 0 (pjreddie's divides by 0)."""
    return _sorted(dets, lambda *a: diounms_sort_cpu(*a, kind, np.float32(beta)), nms)


def _sorted(dets, kernel, nms):
    order = np.empty(len(dets), np.int64)
    prob = np.array(dets.prob, np.float32)                 # suppressed in a copy
    kernel(order, np.ascontiguousarray(dets.bbox, np.float32),
           np.ascontiguousarray(dets.objectness, np.float32), prob, np.float32(nms))
    return dataclasses.replace(dets, bbox=dets.bbox[order], objectness=dets.objectness[order],
                               prob=prob[order])


def network_nms(net, dets, nms: float):
    """The NMS test_detector applies: AlexeyAB's takes the kind (and beta_nms) of the network's
    last [yolo] or [region] layer; pjreddie's layers have none: its do_nms_sort."""
    layers = [l for l in net.layers if l.detector_head] or net.layers[-1:]
    kind = getattr(layers[-1], "nms_kind", None)
    if kind is None:
        return _sorted(dets, do_nms_sort_cpu, nms)
    return do_nms(dets, nms, kind, layers[-1].beta_nms)


def detection_results_v3(dets, im_w: int, im_h: int, thresh: float,
                         names: list[str]) -> list[dict]:
    """draw_detections_v3's text output, in its order. get_actual_detections keeps a box when
    some class whose name does not start with "dont_show" has prob > thresh, its best class
    being the first of the highest; boxes are sorted by their left edge (stably, as glibc's
    qsort); each gives its best class, then every other class with prob > thresh (dont_show
    ones included) in class order. Each entry: box (row in dets), class_id, name, prob,
    percent ("NN%"), best (bool), left_x, top_y, width, height (rounded pixels, as
    -ext_output prints them)."""
    if len(names) < dets.classes:
        raise ValueError(f"{len(names)} names for {dets.classes} classes")
    t = np.float32(thresh)
    shown = np.array([not n.startswith("dont_show") for n in names[:dets.classes]])
    p = np.where(shown, dets.prob, np.float32(0))
    best = np.argmax(p, axis=1) if len(dets) else np.zeros(0, np.int64)
    keep = np.nonzero(p[np.arange(len(dets)), best] > t)[0] if len(dets) else best
    bb = dets.bbox.astype(np.float32)
    left = bb[keep, 0] - bb[keep, 2] / np.float32(2)
    out = []
    for r in keep[np.argsort(left, kind="stable")].tolist():
        b = int(best[r])
        x, y, w, h = bb[r]
        box = {"left_x": _round(float((x - w / np.float32(2)) * np.float32(im_w))),
               "top_y": _round(float((y - h / np.float32(2)) * np.float32(im_h))),
               "width": _round(float(w * np.float32(im_w))),
               "height": _round(float(h * np.float32(im_h)))}
        for c in [b] + [c for c in np.nonzero(dets.prob[r] > t)[0].tolist() if c != b]:
            prob = float(dets.prob[r, c])
            out.append({"box": r, "class_id": c, "name": names[c], "prob": prob,
                        "percent": f"{float(np.float32(prob) * np.float32(100)):.0f}%",
                        "best": c == b, **box})
    return out


def _round(v: float) -> float:
    """C's round(): halves away from zero."""
    return math.copysign(math.floor(abs(v) + 0.5), v)


def format_lines_v3(results: list[dict], ext_output: bool = False) -> list[str]:
    """draw_detections_v3's printed lines: `name: NN%`, and with -ext_output
    `name: NN%\t(left_x: %4.0f   top_y: %4.0f   width: %4.0f   height: %4.0f)`."""
    if not ext_output:
        return [f"{d['name']}: {d['percent']}" for d in results]
    return [f"{d['name']}: {d['percent']}\t(left_x: {d['left_x']:4.0f}   top_y: "
            f"{d['top_y']:4.0f}   width: {d['width']:4.0f}   height: {d['height']:4.0f})"
            for d in results]
