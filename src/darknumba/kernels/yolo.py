"""Yolo layer kernels (Darknet's `yolo_layer.c`)."""
import math

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def activate_yolo_output(output, batch, n, classes, wh):
    """Logistic on entries 0, 1 (x, y) and 4.. (objectness, classes) of every anchor."""
    entries = 4 + classes + 1
    for bn in prange(batch * n):
        base = bn * entries * wh
        for e in range(entries):
            if e == 2 or e == 3:
                continue
            off = base + e * wh
            for i in range(wh):
                output[off + i] = np.float32(1.0 / (1.0 + math.exp(-np.float64(output[off + i]))))
