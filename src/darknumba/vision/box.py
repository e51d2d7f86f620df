"""From a network's yolo outputs to Darknet's detections (`network.c` get_network_boxes,
`yolo_layer.c` get_yolo_detections / correct_yolo_boxes, `box.c` do_nms_sort, `image.c`
draw_detections' printed lines and corners).

Detections are parallel arrays (see Detections); the loops over boxes live in kernels/box.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..detections import Detections
from ..errors import CfgError
from ..kernels.box import do_nms_sort_cpu
from ..layers.yolo import get_yolo_detections  # noqa: F401 (the layer's decoding, re-exported)
from .box_ab import network_nms

INT_MAX = 2 ** 31 - 1


def detection_layers(net) -> list:
    """The layers get_network_boxes reads ([yolo], [region], [detection]), or a CfgError
    saying detection needs one."""
    layers = [l for l in net.layers if l.makes_detections]
    if not layers:
        where = f"{net.cfg_path}" if getattr(net, "cfg_path", None) else "this cfg"
        last = net.layers[-1].type if net.layers else "nothing"
        raise CfgError(f"{where} has no [yolo], [region] or [detection] layer (its last layer "
                       f"is [{last}]): detection needs one")
    return layers


def get_network_boxes(net, w: int, h: int, thresh: float = 0.5, hier: float = 0.5,
                      relative: bool = True, b: int = 0, letterbox: bool = True) -> Detections:
    """get_network_boxes: the detections of every yolo / region / detection layer, in layer
    order, for image b of the batch.

    `hier` is Darknet's hierarchical threshold: [region] layers with a class tree (tree=)
    descend it while the path probability stays above hier; other layers ignore it."""
    if math.isnan(thresh) or math.isnan(hier):
        raise ValueError("get_network_boxes: thresh and hier must be numbers, not NaN")
    layers = detection_layers(net)
    classes = layers[-1].classes
    if any(l.classes != classes for l in layers):
        raise CfgError("the detection layers of this cfg disagree on the number of classes")
    # fill_network_boxes: each layer's detections for image b (Layer.detections)
    parts = [l.detections(net, w, h, thresh, hier, relative, b, letterbox) for l in layers]
    return Detections(np.concatenate([p.bbox for p in parts]),
                      np.concatenate([p.objectness for p in parts]),
                      np.concatenate([p.prob for p in parts]))


def do_nms_sort(dets: Detections, nms: float = 0.45) -> Detections:
    """do_nms_sort: per class, suppress boxes overlapping a more probable one by IoU > nms.
    Returns the detections in Darknet's final order, with suppressed class probs set to 0."""
    order = np.empty(len(dets), np.int64)
    prob = np.ascontiguousarray(dets.prob)
    do_nms_sort_cpu(order, np.ascontiguousarray(dets.bbox), np.ascontiguousarray(dets.objectness),
                    prob, np.float32(nms))
    return Detections(dets.bbox[order], dets.objectness[order], prob[order])


def box_corners(bbox: np.ndarray, im_w: int, im_h: int) -> np.ndarray:
    """draw_detections' pixel corners of relative (x, y, w, h) boxes: (int)((x -/+ w/2) * im_w)
    in double, truncated toward zero, clipped to the image. Returns (count, 4) int: left, top,
    right, bot. A NaN coordinate (weights with NaN) becomes 0 and an infinite one is clipped
    to the range of a C int before the conversion, which NaN or Inf would make undefined."""
    b = np.asarray(bbox, np.float64).reshape(-1, 4)
    x, y, w, h = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    with np.errstate(invalid="ignore", over="ignore"):
        f = np.stack([(x - w / 2) * im_w, (y - h / 2) * im_h,
                      (x + w / 2) * im_w, (y + h / 2) * im_h], axis=1)
    f = np.clip(np.nan_to_num(f, nan=0.0), -INT_MAX, INT_MAX)
    c = np.trunc(f).astype(np.int64)
    c[:, 0] = np.maximum(c[:, 0], 0)
    c[:, 1] = np.maximum(c[:, 1], 0)
    c[:, 2] = np.minimum(c[:, 2], im_w - 1)
    c[:, 3] = np.minimum(c[:, 3], im_h - 1)
    return c


def detection_results(dets: Detections, im_w: int, im_h: int, thresh: float,
                      names: list[str]) -> list[dict]:
    """What draw_detections prints, in its order: one entry per box and class whose prob is
    > thresh, with the box's corners (pixels) and relative centre form. `label` is the drawn
    label (all the box's classes over thresh, the first one giving the colour)."""
    t = np.float32(thresh)
    rows, cols = np.nonzero(dets.prob > t)
    if rows.size == 0:
        return []
    corners = box_corners(dets.bbox[rows], im_w, im_h)
    labels = {}
    for r, c in zip(rows.tolist(), cols.tolist()):
        labels.setdefault(r, []).append(c)
    out = []
    for k, (r, c) in enumerate(zip(rows.tolist(), cols.tolist())):
        p = float(dets.prob[r, c])
        x, y, w, h = (float(v) for v in dets.bbox[r])
        left, top, right, bot = (int(v) for v in corners[k])
        out.append({
            "box": r, "class_id": c, "name": names[c], "prob": p, "percent": _percent(p),
            "left": left, "top": top, "right": right, "bottom": bot,
            "x": x, "y": y, "w": w, "h": h,
            "objectness": float(dets.objectness[r]),
            "label_class": labels[r][0],
            "label": ", ".join(names[j] for j in labels[r]),
        })
    return out


def _percent(p: float) -> str:
    """printf("%.0f%%", prob*100) with the product in float32, as the C computes it."""
    return f"{float(np.float32(p) * np.float32(100)):.0f}%"


def format_lines(results: list[dict]) -> list[str]:
    """Darknet's printed lines: `name: NN%`."""
    return [f"{d['name']}: {d['percent']}" for d in results]


def network_input(net, images: list[np.ndarray], letterbox: bool = True) -> np.ndarray:
    """(net.batch, c, net.h, net.w) float32: each (c, h, w) image letterboxed (or resized) to
    the network, zero rows for unused batch slots."""
    from ..errors import DataError
    from .image import letterbox_image, resize_image
    if len(images) > net.batch:
        raise ValueError(f"{len(images)} images for a network of batch {net.batch}")
    x = np.zeros((net.batch, net.c, net.h, net.w), np.float32)
    for i, im in enumerate(images):
        if im.shape[0] != net.c:
            raise DataError(f"an image of {im.shape[0]} channels for a network of channels="
                            f"{net.c}: load it with load_image(path, c=net.c)")
        x[i] = letterbox_image(im, net.w, net.h) if letterbox else resize_image(im, net.w, net.h)
    return x


def detect(net, images: list[np.ndarray], thresh: float = 0.5, hier: float = 0.5,
           nms: float = 0.45, letterbox: bool = True, forward=None) -> list[Detections]:
    """test_detector for up to net.batch images ((net.c, h, w) float32 each): letterbox, forward,
    get_network_boxes (relative to each image), then when nms > 0 do_nms_sort or the NMS kind
    of an AlexeyAB network's last [yolo] layer. `forward(net, x)`: another test-mode forward
    pass (numpy_forward.forward) instead of net.forward."""
    detection_layers(net)
    x = network_input(net, images, letterbox)
    if forward is None:
        net.forward(x, train=False)
    else:
        forward(net, x)
    out = []
    for b, im in enumerate(images):
        dets = get_network_boxes(net, im.shape[2], im.shape[1], thresh, hier, True, b, letterbox)
        out.append(network_nms(net, dets, nms) if nms else dets)
    return out
