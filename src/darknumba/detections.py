"""What detection layers hand out (engine side): Darknet's `detection` array as parallel
arrays, and the letterbox geometry that box correction shares with the image pipeline."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Detections:
    """Darknet's `detection` array, one row per candidate box.

    bbox (count, 4) float32: x, y (centre), w, h; relative to the image (0..1) or in pixels.
    objectness (count,) float32.
    prob (count, classes) float32: objectness * class probability, 0 where <= thresh.
    """
    bbox: np.ndarray
    objectness: np.ndarray
    prob: np.ndarray

    def __len__(self):
        return self.bbox.shape[0]

    @property
    def classes(self) -> int:
        return self.prob.shape[1]


def letterbox_size(im_w: int, im_h: int, w: int, h: int) -> tuple[int, int]:
    """(new_w, new_h) that letterbox_image and correct_yolo_boxes use (integer division), at
    least 1 each: an extreme aspect ratio (2000 x 1) would give Darknet a 0-pixel side that
    correct_yolo_boxes divides by."""
    if float(np.float32(w) / np.float32(im_w)) < float(np.float32(h) / np.float32(im_h)):
        return w, max(1, (im_h * w) // im_w)
    return max(1, (im_w * h) // im_h), h
