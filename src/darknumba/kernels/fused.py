"""Fused inference epilogues: the same float operations in the same order as Darknet's separate
passes (normalize -> scale -> add bias -> activate), so results are identical, in one sweep
over memory instead of four."""
import math

import numpy as np
from numba import njit, prange

from .activations import activate_row

CHUNK = 4096


@njit(parallel=True, cache=True)
def batchnorm_bias_activate(x, mean, variance, scales, biases, batch, filters, spatial, a):
    for bf in prange(batch * filters):
        f = bf % filters
        base = bf * spatial
        m = mean[f]
        d = np.float32(math.sqrt(variance[f])) + np.float32(0.000001)
        s = scales[f]
        bias = biases[f]
        for lo in range(0, spatial, CHUNK):   # chunks stay in cache between the two sweeps
            row = x[base + lo:base + min(spatial, lo + CHUNK)]    # slices vectorise
            for k in range(row.size):
                row[k] = ((row[k] - m) / d) * s + bias
            activate_row(row, a)


@njit(parallel=True, cache=True)
def bias_activate(x, biases, batch, filters, spatial, a):
    for bf in prange(batch * filters):
        base = bf * spatial
        bias = biases[bf % filters]
        for lo in range(0, spatial, CHUNK):
            row = x[base + lo:base + min(spatial, lo + CHUNK)]
            for k in range(row.size):
                row[k] += bias
            activate_row(row, a)


@njit(parallel=True, cache=True)
def batchnorm_train_epilogue(x, x_saved, x_norm, mean, variance, scales, biases, batch, filters,
                             spatial, a):
    """The train-mode tail of Darknet's forward_batchnorm_layer in one sweep, same float
    operations in the same order: keep x, normalise with the batch statistics, keep x_norm,
    scale, add the bias, activate."""
    for bf in prange(batch * filters):
        f = bf % filters
        base = bf * spatial
        m = mean[f]
        d = np.float32(math.sqrt(variance[f])) + np.float32(0.000001)
        s = scales[f]
        bias = biases[f]
        for lo in range(0, spatial, CHUNK):
            hi = min(spatial, lo + CHUNK)
            row = x[base + lo:base + hi]
            keep = x_saved[base + lo:base + hi]
            norm = x_norm[base + lo:base + hi]
            for k in range(row.size):
                v = row[k]
                keep[k] = v
                v = (v - m) / d
                norm[k] = v
                row[k] = v * s + bias
            activate_row(row, a)
