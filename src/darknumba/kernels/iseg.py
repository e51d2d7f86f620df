"""The [iseg] instance-segmentation loss (Darknet's `iseg_layer.c`).

Legend per image: output is [classes + ids][h][w] (wh = w*h): per-class masks (logistic) then
an `ids`-dimensional embedding per pixel (raw). Truth per image: 90 instances of (1 + wh)
values, the class id then that instance's pixel mask; a negative (or NaN) class id ends the
list.
"""
import numpy as np
from numba import njit

from .yolo import truth_class

MAX_INSTANCES = 90


@njit(cache=True)
def iseg_deltas(output, truth, batch, classes, ids, wh, truths, delta):
    """forward_iseg_layer's training half: every class pixel pulled to 0 and every embedding
    to 0 (x .1); mask pixels of an instance pulled to its mask value; embeddings pulled towards
    their instance's mean embedding and pushed from the others' (±.1 per dimension, by sign);
    the embedding deltas finally scaled by .01. Returns nothing; delta is filled."""
    outputs = (classes + ids) * wh
    sums = np.zeros((MAX_INSTANCES, ids), dtype=np.float64)
    counts = np.zeros(MAX_INSTANCES, dtype=np.int64)
    for b in range(batch):
        base = b * outputs
        for i in range(classes * wh):
            delta[base + i] = -output[base + i]
        for i in range(classes * wh, outputs):
            delta[base + i] = np.float32(0.1 * -output[base + i])
        sums[:] = 0.0
        counts[:] = 0
        n = 0
        while n < MAX_INSTANCES and truth[b * truths + n * (wh + 1)] >= 0:
            t0 = b * truths + n * (wh + 1)
            c = truth_class(truth[t0])
            for k in range(wh):
                v = truth[t0 + 1 + k]
                if v != 0:
                    if 0 <= c < classes:     # the layer refuses other ids first
                        delta[base + c * wh + k] = v - output[base + c * wh + k]
                    for z in range(ids):
                        sums[n, z] += output[base + (classes + z) * wh + k]
                    counts[n] += 1
            n += 1
        for i in range(n):
            if counts[i]:
                for z in range(ids):
                    sums[i, z] = np.float32(sums[i, z] / counts[i])
        for i in range(n):
            if not counts[i]:
                continue
            t0 = b * truths + i * (wh + 1)
            for k in range(wh):
                if truth[t0 + 1 + k] == 0:
                    continue
                for j in range(n):
                    if not counts[j]:
                        continue
                    for z in range(ids):
                        idx = base + (classes + z) * wh + k
                        step = np.float32(-0.1) if sums[j, z] - output[idx] < 0 else np.float32(0.1)
                        delta[idx] += step if j == i else -step
        for i in range(classes * wh, outputs):
            delta[base + i] *= np.float32(0.01)
