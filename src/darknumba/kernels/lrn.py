"""Normalisation kernels: local response normalisation across channels
(`normalization_layer.c`) and Darknet's `l2normalize_cpu`.

Legend: x is ``batch x c x h x w`` flat; spatial = h*w.
"""
import math

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def lrn_forward_cpu(x, batch, c, spatial, size, alpha, beta, kappa, norms, output):
    """norms[k] = kappa + alpha * sum of x² over channels k-(size-1)//2 .. k+size//2 (clipped;
    alpha is *not* divided by size, unlike Krizhevsky's formula); output = x * norms^-beta."""
    lo_off = (size - 1) // 2
    hi_off = size // 2
    a = np.float64(alpha)
    for bp in prange(batch * spatial):
        b = bp // spatial
        p = bp % spatial
        base = b * c * spatial + p
        for k in range(c):
            s = 0.0
            lo = max(0, k - lo_off)
            hi = min(c - 1, k + hi_off)
            for q in range(lo, hi + 1):
                v = np.float64(x[base + q * spatial])
                s += v * v
            n = np.float32(kappa + a * s)
            norms[base + k * spatial] = n
            output[base + k * spatial] = np.float32(x[base + k * spatial] *
                                                    math.pow(np.float64(n), -beta))


@njit(parallel=True, cache=True)
def lrn_backward_cpu(delta, norms, n, beta, out, accumulate):
    """Darknet's approximate LRN backward: out = delta * norms^-beta (the terms through the
    neighbours' norms are dropped)."""
    for i in prange(n):
        v = np.float32(delta[i] * math.pow(np.float64(norms[i]), -beta))
        if accumulate:
            out[i] += v
        else:
            out[i] = v


@njit(parallel=True, cache=True)
def l2normalize_cpu(x, dx, batch, filters, spatial):
    """x /= ||x|| over the channels of each pixel; dx = (1 - x) / ||x|| (kept, unused by
    Darknet's backward)."""
    for bp in prange(batch * spatial):
        b = bp // spatial
        i = bp % spatial
        s = 0.0
        for f in range(filters):
            v = np.float64(x[b * filters * spatial + f * spatial + i])
            s += v * v
        norm = np.float32(math.sqrt(s))
        for f in range(filters):
            idx = b * filters * spatial + f * spatial + i
            x[idx] = x[idx] / norm
            dx[idx] = (np.float32(1.0) - x[idx]) / norm
