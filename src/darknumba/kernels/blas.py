"""Ports of Darknet's `blas.c` primitives. Flat float32 buffers, explicit index formulas.

Layout legend: activations are ``batch x c x h x w`` stored flat; ``spatial = h*w``;
per-channel vectors (mean, variance, biases, scales) have ``filters`` entries.
Reductions accumulate in float64 (Darknet's -Ofast build reassociates float sums; a float64
sum is within its rounding of any such order).
"""
import math

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def fill_cpu(n, alpha, x):
    for i in prange(n):
        x[i] = alpha


@njit(parallel=True, cache=True)
def copy_cpu(n, x, y):
    """y[:n] = x[:n]"""
    for i in prange(n):
        y[i] = x[i]


@njit(parallel=True, cache=True)
def axpy_cpu(n, alpha, x, y):
    """y += alpha * x"""
    a = np.float32(alpha)
    for i in prange(n):
        y[i] += a * x[i]


@njit(parallel=True, cache=True)
def scal_cpu(n, alpha, x):
    a = np.float32(alpha)
    for i in prange(n):
        x[i] *= a


@njit(parallel=True, cache=True)
def add_bias(output, biases, batch, n, size):
    """output[b, i, :] += biases[i]"""
    for bi in prange(batch * n):
        i = bi % n
        base = bi * size
        bias = biases[i]
        for j in range(size):
            output[base + j] += bias


@njit(parallel=True, cache=True)
def scale_bias(output, scales, batch, n, size):
    """output[b, i, :] *= scales[i]"""
    for bi in prange(batch * n):
        i = bi % n
        base = bi * size
        s = scales[i]
        for j in range(size):
            output[base + j] *= s


@njit(parallel=True, cache=True)
def mean_cpu(x, batch, filters, spatial, mean):
    scale = 1.0 / (batch * spatial)
    for i in prange(filters):
        acc = 0.0
        for j in range(batch):
            base = j * filters * spatial + i * spatial
            for k in range(spatial):
                acc += x[base + k]
        mean[i] = np.float32(acc * scale)


@njit(parallel=True, cache=True)
def variance_cpu(x, mean, batch, filters, spatial, variance):
    """Unbiased: divides by batch*spatial - 1, as Darknet does."""
    scale = 1.0 / (batch * spatial - 1)
    for i in prange(filters):
        acc = 0.0
        m = mean[i]
        for j in range(batch):
            base = j * filters * spatial + i * spatial
            for k in range(spatial):
                d = np.float64(x[base + k] - m)
                acc += d * d
        variance[i] = np.float32(acc * scale)


@njit(parallel=True, cache=True)
def normalize_cpu(x, mean, variance, batch, filters, spatial):
    """x = (x - mean) / (sqrt(var) + 1e-6): the forward epsilon sits *outside* the sqrt."""
    for bf in prange(batch * filters):
        f = bf % filters
        base = bf * spatial
        m = mean[f]
        d = np.float32(math.sqrt(variance[f])) + np.float32(0.000001)
        for k in range(spatial):
            x[base + k] = (x[base + k] - m) / d


@njit(parallel=True, cache=True)
def shortcut_cpu(batch, w1, h1, c1, add, w2, h2, c2, s1, s2, out):
    """out = s1*out + s2*add over the overlapping channels, sampling the larger map with a stride."""
    stride = w1 // w2
    sample = w2 // w1
    if stride < 1:
        stride = 1
    if sample < 1:
        sample = 1
    minw = min(w1, w2)
    minh = min(h1, h2)
    minc = min(c1, c2)
    a1 = np.float32(s1)
    a2 = np.float32(s2)
    for bk in prange(batch * minc):
        b = bk // minc
        k = bk % minc
        for j in range(minh):
            for i in range(minw):
                out_index = i * sample + w2 * (j * sample + h2 * (k + c2 * b))
                add_index = i * stride + w1 * (j * stride + h1 * (k + c1 * b))
                out[out_index] = a1 * out[out_index] + a2 * add[add_index]


@njit(parallel=True, cache=True)
def upsample_cpu(inp, w, h, c, batch, stride, forward, scale, out):
    """Nearest-neighbour upsample by `stride` (forward) or its adjoint, summing each
    stride x stride block back into `inp` (forward == 0)."""
    sc = np.float32(scale)
    ow = w * stride
    oh = h * stride
    for bk in prange(batch * c):
        in_base = bk * w * h
        out_base = bk * ow * oh
        for j in range(oh):
            for i in range(ow):
                in_index = in_base + (j // stride) * w + i // stride
                out_index = out_base + j * ow + i
                if forward:
                    out[out_index] = sc * inp[in_index]
                else:
                    inp[in_index] += sc * out[out_index]


@njit(parallel=True, cache=True)
def sum_array(a, n):
    s = 0.0
    for i in prange(n):
        s += a[i]
    return s
