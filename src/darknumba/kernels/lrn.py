"""Normalisation kernels: local response normalisation across channels
(`normalization_layer.c`) and Darknet's `l2normalize_cpu`.

Legend: x is ``batch x c x h x w`` flat; spatial = h*w.
"""
import math

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def lrn_forward_cpu(x, batch, c, spatial, size, alpha, beta, kappa, norms, output):
    """norms by Darknet's sliding window over channels, then output = x * norms^-beta.

    norms[0] = kappa + alpha * Σ x[q]² for q < size/2; then norms[k] = norms[k-1]
    - alpha·x[k-(size-1)/2-1]² (if >= 0) + alpha·x[k+size/2]² (if < c). alpha is not divided by
    size. Quirk kept: the first window stops one channel short (q < size/2, not <=), so channel
    size/2 is never added, yet it is subtracted once the window passes it: for k >= size
    the norm is kappa + alpha·(Σ of the textbook window) - alpha·x[size/2]²."""
    a = np.float32(alpha)
    half = size // 2
    back = (size - 1) // 2 + 1
    for bp in prange(batch * spatial):
        b = bp // spatial
        p = bp % spatial
        base = b * c * spatial + p
        n = np.float32(kappa)
        for q in range(min(half, c)):
            v = x[base + q * spatial]
            n += a * (v * v)
        for k in range(c):
            if k > 0:
                prev = k - back
                nxt = k + half
                if prev >= 0:
                    v = x[base + prev * spatial]
                    n -= a * (v * v)
                if nxt < c:
                    v = x[base + nxt * spatial]
                    n += a * (v * v)
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
        # an all-zero pixel: C's 0/0 gives NaN, where numba would raise
        norm = np.float32(math.sqrt(s)) if s > 0 else np.float32(np.nan)
        for f in range(filters):
            idx = b * filters * spatial + f * spatial + i
            x[idx] = x[idx] / norm
            dx[idx] = (np.float32(1.0) - x[idx]) / norm
