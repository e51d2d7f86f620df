"""A detector cfg for your own classes, made from a shipped one as AlexeyAB's README ("How to
train (to detect your custom objects)") tells users to edit it by hand:

  [net]        batch=64 (subdivisions as the template has them), max_batches = 2000 x classes,
               but at least 6000 and at least the number of training images, steps= 80% and
               90% of it; width= and height= when given (multiples of 32)
  [yolo]       classes=N, anchors= from calc_anchors (k-means of the training boxes, anchors.py)
               at the cfg's width x height, as many as the cfg's num=
  the [convolutional] before each [yolo]: filters=(N + 5) x the anchors its mask= names

Everything else (comments included) is kept line for line. A template is named (yolov4-tiny,
yolov4, yolov3-tiny, yolov3, yolov7-tiny ...): cfg/<name>-custom.cfg when the project ships
one (AlexeyAB's training templates: subdivisions for training memory, masks that use every
anchor), else cfg/<name>.cfg; or it is a path to any cfg with [yolo] heads.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cfg import parse_cfg_text
from ..errors import CfgError, DataError
from .anchors import Anchors, calc_anchors, training_boxes

BATCH = 64
MIN_MAX_BATCHES = 6000
BATCHES_PER_CLASS = 2000


@dataclass
class CustomCfg:
    text: str                   # the new cfg
    template: Path              # the cfg it was made from
    classes: int
    filters: list[int]          # of each [convolutional] before a [yolo], in order
    max_batches: int
    steps: tuple[int, int]
    width: int
    height: int
    anchors: Anchors            # calc_anchors' result (its anchors as written, at least 1 px)
    train_images: int


def find_template(base) -> Path:
    """The cfg a base name or path stands for (see the module docstring)."""
    from ..vision.detector import find_default
    p = Path(base)
    if p.suffix == ".cfg" or os.sep in str(base) or p.is_file():
        if not p.is_file():
            raise CfgError(f"{base}: no such cfg file")
        return p
    for rel in (f"cfg/{base}-custom.cfg", f"cfg/{base}.cfg"):
        found = find_default(rel)
        if found is not None:
            return found
    raise CfgError(f"no template cfg/{base}-custom.cfg or cfg/{base}.cfg (give a name such as "
                   f"yolov4-tiny, yolov4, yolov3-tiny, yolov3, yolov7-tiny, or a .cfg path)")


def max_batches_for(classes: int, train_images: int) -> int:
    """AlexeyAB's rule: 2000 per class, at least 6000 and at least the training images."""
    return max(MIN_MAX_BATCHES, BATCHES_PER_CLASS * classes, train_images)


class _Edits:
    """Line edits on a cfg's text: a key's value replaced in place, or added after the
    section's header when the section has none."""

    def __init__(self, text: str):
        self.lines = text.split("\n")
        self.replace: dict[int, str] = {}           # 0-based line -> new text
        self.insert: dict[int, list[str]] = {}      # after 0-based line -> new lines

    def set(self, section, key: str, value):
        line = section.lines.get(key)
        if line is None:
            self.insert.setdefault(section.line - 1, []).append(f"{key}={value}")
            return
        self.replace[line - 1] = f"{key}={value}"

    def text(self) -> str:
        out = []
        for k, line in enumerate(self.lines):
            out.append(self.replace.get(k, line))
            out += self.insert.get(k, [])
        return "\n".join(out)


def _leading_comments_end(lines: list[str]) -> int:
    """The index of the first line that is not a comment or blank (the template's header
    comments end there)."""
    for k, line in enumerate(lines):
        s = line.strip()
        if s and s[0] not in "#;":
            return k
    return len(lines)


def custom_cfg(base, data, classes: int | None = None, width: int | None = None,
               height: int | None = None, seed: int = 0, log=None) -> CustomCfg:
    """The cfg for training on the .data file `data` from the template `base` (see the module
    docstring). classes: checked against the .data file's (None: take it). log: receives
    the data set's problems (skipped images, bad label lines)."""
    template = find_template(base)
    text = template.read_text(encoding="utf-8")
    sections = parse_cfg_text(text, os.fspath(template))
    net = sections[0]
    if net.type not in ("net", "network"):
        raise CfgError(f"{template}: the first section is [{net.type}], not [net]")
    heads = [k for k, s in enumerate(sections) if s.type == "yolo"]
    if not heads:
        raise CfgError(f"{template}: no [yolo] layer; a custom cfg is made for YOLO detectors")
    dc, paths, boxes = training_boxes(data, log)
    if classes is not None and classes != dc.classes:
        raise DataError(f"{data} has classes={dc.classes}, not {classes}")
    n = dc.classes
    for size, name in ((width, "width"), (height, "height")):
        if size is not None and (size <= 0 or size % 32):
            raise CfgError(f"{name}={size}: the network size must be a positive multiple of 32")
    width = width or net.find_int("width")
    height = height or net.find_int("height")
    num = sections[heads[0]].find_int("num", 1)
    if any(sections[k].find_int("num", 1) != num for k in heads):
        raise CfgError(f"{template}: the [yolo] layers disagree on num= (one anchors list "
                       f"serves them all)")
    if len(boxes) < num:
        raise DataError(f"{data}: {num} anchors need at least {num} training boxes; the "
                        f"labels have {len(boxes)}")
    a = calc_anchors(boxes[:, 2:4], boxes[:, 4].astype(np.int64), n, num, width, height, seed)
    a.anchors = np.maximum(a.anchors, np.float32(1))    # a 0-pixel anchor divides by 0
    values = [v.strip() for v in a.anchors_line(width).split(",")]    # calc_anchors' text
    anchors_line = ", ".join(f"{w},{h}" for w, h in zip(values[::2], values[1::2]))
    mb = max_batches_for(n, len(paths))
    steps = (int(mb * 0.8), int(mb * 0.9))

    edits = _Edits(text)
    edits.set(net, "batch", BATCH)
    edits.set(net, "max_batches", mb)
    edits.set(net, "steps", f"{steps[0]},{steps[1]}")
    edits.set(net, "width", width)
    edits.set(net, "height", height)
    filters = []
    for k in heads:
        yolo, conv = sections[k], sections[k - 1]
        if conv.type != "convolutional":
            raise CfgError(f"{conv.where()}: the layer before a [yolo] must be the "
                           f"[convolutional] that gives it (classes + 5) x masks filters")
        masks = len(yolo.find_list("mask", int, list(range(num))))
        f = (n + 5) * masks
        filters.append(f)
        old = conv.options.get("filters")
        edits.set(conv, "filters", f)
        line = conv.lines.get("filters")
        if old is not None and line is not None and line >= 2:     # its comment's number too
            above = edits.lines[line - 2]
            if above.lstrip().startswith("#") and re.search(rf"\b{re.escape(old)}\b", above):
                edits.replace[line - 2] = re.sub(rf"\b{re.escape(old)}\b", str(f), above)
        edits.set(yolo, "classes", n)
        edits.set(yolo, "anchors", anchors_line)
    body = edits.text().split("\n")
    body = body[_leading_comments_end(body):]
    header = [
        f"# {n} classes ({dc.path}), made by `darknumba cfg custom` from {template.name}:",
        f"#   classes={n} in every [yolo]; filters={', '.join(map(str, sorted(set(filters))))} "
        f"= (classes + 5) x masks",
        f"#   in the [convolutional] before each; max_batches={mb} (2000 per class, at least "
        f"6000 and",
        f"#   the {len(paths)} training images); steps={steps[0]},{steps[1]} (80%, 90%); "
        f"batch={BATCH}",
        f"#   anchors: calc_anchors over {len(boxes)} training boxes at {width}x{height} "
        f"(avg IoU {a.avg_iou:.2f} %)",
        "",
    ]
    return CustomCfg("\n".join(header + body), template, n, filters, mb, steps, width, height,
                     a, len(paths))
