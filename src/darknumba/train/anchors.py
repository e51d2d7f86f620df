"""AlexeyAB's `detector calc_anchors`: k-means of the training boxes' sizes with the distance
1 - IoU (boxes and centres anchored at the same corner), as its detector.c / matrix.c compute.

Its rules: every label line of every training image counts (scaled to width x height); the
centres start as k boxes drawn without replacement; expectation (closest centre, the first on
ties) and maximisation (mean of the members; a coordinate that comes out 0 keeps its old value)
alternate until no box changes cluster, at most 1000 times (k == 1: one maximisation first);
the anchors are sorted by area, smallest first. AlexeyAB draws with rand() seeded by the clock;
we draw with a seeded numpy generator, so the clusters follow its rules, not its bits.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Anchors:
    anchors: np.ndarray          # (k, 2) float32 width, height in pixels, smallest area first
    avg_iou: float               # mean over boxes of the IoU with their closest anchor, in %
    iterations: int              # k-means rounds until no box changed cluster
    counters_per_class: list     # boxes per class id
    boxes: int

    def anchors_line(self, width: int) -> str:
        """What calc_anchors writes to anchors.txt: whole pixels when width > 32."""
        fmt = "{:3.0f},{:3.0f}" if width > 32 else "{:2.4f},{:2.4f}"
        return ", ".join(fmt.format(w, h) for w, h in self.anchors)


def iou_wh(boxes: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """(n, k) IoU of corner-aligned boxes (w, h) with centres (w, h), in float32 as Darknet."""
    mw = np.minimum(boxes[:, None, 0], centres[None, :, 0])
    mh = np.minimum(boxes[:, None, 1], centres[None, :, 1])
    inter = mw * mh
    union = (boxes[:, 0] * boxes[:, 1])[:, None] + (centres[:, 0] * centres[:, 1])[None] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0).astype(np.float32)


def kmeans_iou(boxes: np.ndarray, k: int, rng: np.random.Generator, max_rounds: int = 1000):
    """do_kmeans with the 1 - IoU distance: (centres (k, 2), assignments (n,), rounds)."""
    boxes = np.asarray(boxes, np.float32)
    n = boxes.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"{k} clusters need at least {k} boxes, found {n}")
    centres = boxes[rng.permutation(n)[:k]].copy()
    assign = np.zeros(n, np.int64)

    def maximise():
        sums = np.zeros((k, 2), np.float64)
        np.add.at(sums, assign, boxes)
        counts = np.bincount(assign, minlength=k)[:, None]
        new = np.where(counts > 0, sums / np.maximum(counts, 1), 0).astype(np.float32)
        centres[:] = np.where(new == 0, centres, new)

    if k == 1:
        maximise()
    rounds = 0
    while rounds < max_rounds:
        closest = np.argmin(1 - iou_wh(boxes, centres), axis=1)
        if np.array_equal(closest, assign):
            break
        assign = closest
        maximise()
        rounds += 1
    return centres, assign, rounds


def calc_anchors(boxes_wh: np.ndarray, classes: np.ndarray, num_classes: int,
                 num_of_clusters: int, width: int, height: int, seed: int = 0) -> Anchors:
    """boxes_wh: (n, 2) relative widths and heights of every training box; classes: (n,)."""
    if width <= 0 or height <= 0:
        raise ValueError("set -width and -height (the network's input size)")
    px = np.asarray(boxes_wh, np.float32) * np.array([width, height], np.float32)
    centres, _, rounds = kmeans_iou(px, num_of_clusters, np.random.default_rng(seed))
    order = np.argsort(centres[:, 0] * centres[:, 1], kind="stable")
    centres = centres[order]
    best = iou_wh(px, centres).max(axis=1)
    ok = (best >= 0) & (best <= 1)
    counts = np.bincount(np.asarray(classes, np.int64), minlength=num_classes)
    return Anchors(centres, float(100 * best[ok].sum() / len(px)), rounds,
                   [int(c) for c in counts], len(px))


def training_boxes(data, log=None):
    """(DataConfig, image paths, boxes (n, 5): x, y, w, h relative, class) of every label line
    of the .data file's training images; images without a usable label file are skipped, each
    problem reported through `log` (default: stderr)."""
    from ..data.datasets import DataIssues, DetectionDataset, get_paths, read_data_cfg
    dc = read_data_cfg(data)
    ds = DetectionDataset(get_paths(dc.resolve(dc.train)), dc.classes,
                          DataIssues("skip", log=log))
    boxes = np.concatenate([b for b in ds.boxes if len(b)] or [np.zeros((0, 5), np.float32)])
    return dc, ds.paths, boxes
