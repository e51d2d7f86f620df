"""Ports of Darknet's `blas.c` primitives. Flat float32 buffers, explicit index formulas.

Layout legend: activations are ``batch x c x h x w`` stored flat; ``spatial = h*w``;
per-channel vectors (mean, variance, biases, scales) have ``filters`` entries.
Reductions accumulate in float64 (Darknet's -Ofast build reassociates float sums; a float64
sum is within its rounding of any such order).
"""
import math

import numpy as np
from numba import njit, prange

from .twins import twins

# blocks each image's run is cut into by copy_parts_cpu
COPY_BLOCKS = 16


@njit(cache=True, inline="always")
def c_reciprocal(x):
    """1 / x with C's float semantics: 1/0 = inf (numba raises ZeroDivisionError instead).
    For the per-channel divisors a hostile weights file or a 1-value batch can make 0."""
    if x == 0:
        return math.copysign(math.inf, x)
    return 1.0 / x


# Per-channel sums accumulate in float64 and may be reassociated (and so vectorised): the
# order changes nothing at float32 precision, and Darknet's -Ofast build reassociates too.
REDUCE = {"reassoc"}


@twins(size=0)
def fill_cpu(n, alpha, x):
    for i in prange(n):
        x[i] = alpha


@twins(size=0)
def copy_cpu(n, x, y):
    """y[:n] = x[:n]"""
    for i in prange(n):
        y[i] = x[i]


@twins(size=0)
def axpy_cpu(n, alpha, x, y):
    """y += alpha * x"""
    a = np.float32(alpha)
    for i in prange(n):
        y[i] += a * x[i]


@twins(size=0)
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
        row = output[base:base + size]       # slices: no negative-index checks, vectorises
        for j in range(size):
            row[j] += bias


@njit(parallel=True, cache=True)
def scale_bias(output, scales, batch, n, size):
    """output[b, i, :] *= scales[i]"""
    for bi in prange(batch * n):
        i = bi % n
        base = bi * size
        s = scales[i]
        row = output[base:base + size]
        for j in range(size):
            row[j] *= s


@njit(parallel=True, cache=True, fastmath=REDUCE)
def mean_cpu(x, batch, filters, spatial, mean):
    scale = 1.0 / (batch * spatial)
    for i in prange(filters):
        acc = 0.0
        for j in range(batch):
            base = j * filters * spatial + i * spatial
            row = x[base:base + spatial]
            for k in range(spatial):
                acc += row[k]
        mean[i] = np.float32(acc * scale)


@njit(parallel=True, cache=True, fastmath=REDUCE)
def variance_cpu(x, mean, batch, filters, spatial, variance):
    """Unbiased: divides by batch*spatial - 1, as Darknet does (a single value: 1/0 = inf,
    so the variance is 0·inf = NaN, as in C)."""
    scale = c_reciprocal(np.float64(batch * spatial - 1))
    for i in prange(filters):
        acc = 0.0
        m = mean[i]
        for j in range(batch):
            base = j * filters * spatial + i * spatial
            row = x[base:base + spatial]
            for k in range(spatial):
                d = np.float64(row[k] - m)
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
        row = x[base:base + spatial]
        for k in range(spatial):
            row[k] = (row[k] - m) / d


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
def shortcut_same_cpu(n, s1, x, s2, add, out):
    """out = s1*x + s2*add elementwise: shortcut_cpu for maps of the same shape (the usual
    residual), fused with the copy of x that precedes it (x may be out itself). The same float
    operations as the copy and shortcut_cpu, in slices that vectorise instead of per-pixel
    index arithmetic."""
    a1 = np.float32(s1)
    a2 = np.float32(s2)
    for blk in prange((n + 4095) // 4096):
        lo = blk * 4096
        hi = min(n, lo + 4096)
        xs = x[lo:hi]
        ad = add[lo:hi]
        o = out[lo:hi]
        for i in range(hi - lo):
            o[i] = a1 * xs[i] + a2 * ad[i]


@njit(parallel=True, cache=True)
def copy_parts_cpu(src, src_size, first, part, dst, dst_size, offset, batch, add):
    """dst[b, offset:offset + part] = (or, with `add`, +=) src[b, first:first + part] for each
    image b of `batch`, src and dst flat buffers of src_size and dst_size values an image:
    [route]'s copies at batch > 1, each image's run cut into blocks shared by the threads
    (numpy's one strided copy moves it on one core). The same values as numpy's copy or add."""
    if batch < 0 or part < 0 or first < 0 or offset < 0 or first + part > src_size \
            or offset + part > dst_size or src.size < batch * src_size \
            or dst.size < batch * dst_size:
        raise ValueError("copy_parts: a part outside its buffer")
    blocks = COPY_BLOCKS
    for t in prange(batch * blocks):
        b = t // blocks
        k = t % blocks
        lo = part * k // blocks
        hi = part * (k + 1) // blocks
        s = src[b * src_size + first + lo:b * src_size + first + hi]
        d = dst[b * dst_size + offset + lo:b * dst_size + offset + hi]
        if add:
            for i in range(hi - lo):
                d[i] += s[i]
        else:
            d[:] = s


@njit(parallel=True, cache=True)
def upsample_cpu(inp, w, h, c, batch, stride, forward, scale, out):
    """Nearest-neighbour upsample by `stride` (forward) or its adjoint, summing each
    stride x stride block back into `inp` (forward == 0). One input row per step: its value
    repeated `stride` times along each output row (the loads and index arithmetic paid once
    per input value); the adjoint adds into each input value in Darknet's order (output rows
    of the block in turn, left to right in each)."""
    sc = np.float32(scale)
    ow = w * stride
    oh = h * stride
    for bk in prange(batch * c):
        for r in range(h):
            src = inp[(bk * h + r) * w:(bk * h + r + 1) * w]
            for dj in range(stride):
                o = (bk * oh + r * stride + dj) * ow
                dst = out[o:o + ow]
                if forward and stride == 2:          # a literal stride: the stores vectorise
                    for i in range(w):
                        v = sc * src[i]
                        dst[2 * i] = v
                        dst[2 * i + 1] = v
                elif forward:
                    for i in range(w):
                        v = sc * src[i]
                        for di in range(stride):
                            dst[i * stride + di] = v
                else:
                    for i in range(w):
                        for di in range(stride):
                            src[i] += sc * dst[i * stride + di]


# -- backward: bias, scale and batch-norm gradients (Darknet's convolutional_layer.c and
#    batchnorm_layer.c). Per-channel reductions run in parallel over channels, so each
#    iteration owns the entry it writes. Darknet's backward epsilon is 1e-5 *inside* the sqrt.

@twins(size=1, fastmath=REDUCE)
def backward_bias(bias_updates, delta, batch, n, size):
    """bias_updates[i] += sum of delta[b, i, :] over the batch"""
    for i in prange(n):
        acc = 0.0
        for b in range(batch):
            base = (b * n + i) * size
            row = delta[base:base + size]
            for k in range(size):
                acc += row[k]
        bias_updates[i] += np.float32(acc)


@njit(parallel=True, cache=True, fastmath=REDUCE)
def backward_scale_cpu(x_norm, delta, batch, n, size, scale_updates):
    """scale_updates[f] += sum of delta * x_norm over batch and space for channel f"""
    for f in prange(n):
        acc = 0.0
        for b in range(batch):
            base = (b * n + f) * size
            d = delta[base:base + size]
            xn = x_norm[base:base + size]
            for k in range(size):
                acc += np.float64(d[k]) * xn[k]
        scale_updates[f] += np.float32(acc)


@njit(parallel=True, cache=True, fastmath=REDUCE)
def mean_delta_cpu(delta, variance, batch, filters, spatial, mean_delta):
    """mean_delta[i] = -sum(delta[., i, .]) / sqrt(var[i] + 1e-5)"""
    for i in prange(filters):
        acc = 0.0
        for j in range(batch):
            base = (j * filters + i) * spatial
            row = delta[base:base + spatial]
            for k in range(spatial):
                acc += row[k]
        v = np.float64(variance[i] + np.float32(0.00001))
        mean_delta[i] = np.float32(acc * -c_reciprocal(math.sqrt(v)))


@njit(parallel=True, cache=True, fastmath=REDUCE)
def variance_delta_cpu(x, delta, mean, variance, batch, filters, spatial, variance_delta):
    """variance_delta[i] = -0.5 * sum(delta * (x - mean)) * (var[i] + 1e-5)^(-3/2)"""
    for i in prange(filters):
        acc = 0.0
        m = mean[i]
        for j in range(batch):
            base = (j * filters + i) * spatial
            d = delta[base:base + spatial]
            xr = x[base:base + spatial]
            for k in range(spatial):
                acc += np.float64(d[k]) * (xr[k] - m)
        v = np.float64(variance[i] + np.float32(0.00001))
        variance_delta[i] = np.float32(acc * (-0.5 * v ** -1.5))


@njit(parallel=True, cache=True)
def normalize_delta_cpu(x, mean, variance, mean_delta, variance_delta, batch, filters, spatial,
                        delta):
    """delta = delta / sqrt(var + 1e-5) + variance_delta * 2 (x - mean) / N + mean_delta / N,
    N = batch * spatial: the gradient through the batch statistics."""
    inv_n = 1.0 / (spatial * batch)
    for jf in prange(batch * filters):
        f = jf % filters
        base = jf * spatial
        inv_std = c_reciprocal(math.sqrt(np.float64(variance[f] + np.float32(0.00001))))
        vd = 2.0 * variance_delta[f] * inv_n
        md = mean_delta[f] * inv_n
        m = mean[f]
        d = delta[base:base + spatial]
        xr = x[base:base + spatial]
        for k in range(spatial):
            d[k] = np.float32(d[k] * inv_std + vd * np.float64(xr[k] - m) + md)


# -- update (Darknet's update_*_layer and, for adam=1, its adam_update_gpu) ---------------------

@twins(size=0)
def sgd_update_cpu(n, rate, decay, momentum, w, updates):
    """One SGD step on n parameters, as Darknet's three BLAS calls in order:
    updates += decay * w (decay already -decay*batch); w += rate * updates; updates *= momentum."""
    r = np.float32(rate)
    d = np.float32(decay)
    mom = np.float32(momentum)
    for i in prange(n):
        u = updates[i] + d * w[i]
        w[i] += r * u
        updates[i] = mom * u


@njit(parallel=True, cache=True)
def adam_update_cpu(n, w, d, m, v, B1, B2, eps, decay, rate, batch, t):
    """Darknet's Adam: d -= decay*batch*w; m = B1 m + (1-B1) d; v = B2 v + (1-B2) d^2;
    w += rate * mhat / (sqrt(vhat) + eps) with bias-corrected mhat, vhat; then d = 0."""
    b1 = np.float32(B1)
    b2 = np.float32(B2)
    dec = np.float32(-decay * batch)
    r = np.float32(rate)
    e = np.float32(eps)
    c1 = np.float32(1.0) - np.float32(b1 ** t)
    c2 = np.float32(1.0) - np.float32(b2 ** t)
    for i in prange(n):
        g = d[i] + dec * w[i]
        mi = b1 * m[i] + (np.float32(1.0) - b1) * g
        vi = b2 * v[i] + (np.float32(1.0) - b2) * (g * g)
        m[i] = mi
        v[i] = vi
        w[i] += r * (mi / c1) / (np.float32(math.sqrt(vi / c2)) + e)
        d[i] = 0.0
