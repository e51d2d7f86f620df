"""Fused inference epilogues: the same float operations in the same order as Darknet's separate
passes (normalize -> scale -> add bias -> activate), so results are identical, in one sweep
over memory instead of four; with FAST (networks not asked to be exact) the batch norm as one
multiply-add and leaky in float32, within two roundings of those."""
import math

import numpy as np
from numba import njit, prange

from .activations import LEAKY, LINEAR, activate_row
from .blas import c_reciprocal
from .twins import twins

CHUNK = 4096
# or'ed into LEAKY or LINEAR for the inference epilogues below when the network is not asked
# to be exact (layers/batchnorm.py fast_epilogue): the batch norm as (x - mean) * factor + bias
# with the channel's factor = scales / divisor computed once (passed where the divisor goes;
# a multiplication instead of a division and a multiplication), leaky's 0.1 * x in float32
# instead of float64. Each value within two float32 roundings of Darknet's sequence; measured
# on 16 x 416 x 416 values (2 threads, EPYC Zen 4): 0.37 ms for Darknet's sweep, 0.23 with
# the float32 leaky, 0.13 as a multiply-add
FAST = 64


@njit(cache=True, inline="always")
def normalize_scale_bias_row(row, m, d, s, bias):
    """row = ((row - mean) / d) * scale + bias: normalize_cpu, scale_bias and add_bias on one
    row, in their order (d = the channel's bn_divisors entry)."""
    for k in range(row.size):
        row[k] = ((row[k] - m) / d) * s + bias


@njit(cache=True, inline="always")
def add_bias_row(row, bias):
    for k in range(row.size):
        row[k] += bias


@njit(cache=True, inline="always")
def normalize_activate_store_row(row, dst, m, d, s, bias, a):
    """dst = act(((row - mean) / d) * scale + bias): normalize_scale_bias_row, activate_row
    and the copy to dst in one loop for leaky and linear (per value the same operations, so
    the same results): measured 3x faster than the three sweeps over a row
    in L1 (their loads and stores, not the arithmetic, were the cost). The other activations
    take the three sweeps. With FAST, d is the factor scale / divisor: (row - mean) * d + bias
    (then scale is not read)."""
    if a == LEAKY | FAST:                           # d is the factor scales / divisor
        for k in range(row.size):
            v = (row[k] - m) * d + bias
            dst[k] = v if v > 0 else np.float32(0.1) * v
    elif a == LINEAR | FAST:
        for k in range(row.size):
            dst[k] = (row[k] - m) * d + bias
    elif a == LEAKY:
        for k in range(row.size):
            v = ((row[k] - m) / d) * s + bias
            dst[k] = v if v > 0 else np.float32(0.1 * np.float64(v))    # as activate_row
    elif a == LINEAR:
        for k in range(row.size):
            dst[k] = ((row[k] - m) / d) * s + bias
    else:
        normalize_scale_bias_row(row, m, d, s, bias)
        activate_row(row, a)
        dst[:] = row


@njit(cache=True, inline="always")
def add_bias_activate_store_row(row, dst, bias, a):
    """dst = act(row + bias) in one loop for leaky and linear (as normalize_activate_store_row);
    the other activations as add_bias_row, activate_row and a copy."""
    if a == LEAKY | FAST:
        for k in range(row.size):
            v = row[k] + bias
            dst[k] = v if v > 0 else np.float32(0.1) * v
    elif a == LEAKY:
        for k in range(row.size):
            v = row[k] + bias
            dst[k] = v if v > 0 else np.float32(0.1 * np.float64(v))    # as activate_row
    elif a == LINEAR or a == LINEAR | FAST:
        for k in range(row.size):
            dst[k] = row[k] + bias
    else:
        add_bias_row(row, bias)
        activate_row(row, a)
        dst[:] = row


@njit(parallel=True, cache=True)
def batchnorm_bias_activate(x, mean, divisor, scales, biases, batch, filters, spatial, a):
    for bf in prange(batch * filters):
        f = bf % filters
        base = bf * spatial
        m = mean[f]
        d = divisor[f]
        s = scales[f]
        bias = biases[f]
        for lo in range(0, spatial, CHUNK):   # chunks stay in cache between the two sweeps
            row = x[base + lo:base + min(spatial, lo + CHUNK)]    # slices vectorise
            if a == LEAKY or a == LINEAR or a & FAST:     # one sweep instead of two
                normalize_activate_store_row(row, row, m, d, s, bias, a)
            else:
                normalize_scale_bias_row(row, m, d, s, bias)
                activate_row(row, a)


@twins(size=0)
def bias_activate(x, biases, batch, filters, spatial, a):
    for bf in prange(batch * filters):
        base = bf * spatial
        bias = biases[bf % filters]
        for lo in range(0, spatial, CHUNK):
            row = x[base + lo:base + min(spatial, lo + CHUNK)]
            if a == LEAKY or a == LINEAR or a & FAST:     # one sweep instead of two
                add_bias_activate_store_row(row, row, bias, a)
            else:
                add_bias_row(row, bias)
                activate_row(row, a)


@njit(cache=True)
def bn_divisors(variance, eps_inside_sqrt, out):
    """The forward pass's normaliser per channel: pjreddie's sqrt(var) + 1e-6 (epsilon outside
    the root, normalize_cpu), or AlexeyAB's sqrt(var + 1e-5) (eps_inside_sqrt)."""
    for f in range(variance.size):
        if eps_inside_sqrt:
            out[f] = np.float32(math.sqrt(variance[f] + np.float32(0.00001)))
        else:
            out[f] = np.float32(math.sqrt(variance[f])) + np.float32(0.000001)


@njit(parallel=True, cache=True)
def batchnorm_train_epilogue(x, x_saved, mean, divisor, scales, biases, batch, filters, spatial,
                             a):
    """The train-mode tail of Darknet's forward_batchnorm_layer in one sweep, same float
    operations in the same order: keep x, normalise with the batch statistics, scale, add the
    bias, activate. x_norm is not kept: backward recomputes it from x with these operations."""
    for bf in prange(batch * filters):
        f = bf % filters
        base = bf * spatial
        m = mean[f]
        d = divisor[f]
        s = scales[f]
        bias = biases[f]
        for lo in range(0, spatial, CHUNK):
            hi = min(spatial, lo + CHUNK)
            row = x[base + lo:base + hi]
            keep = x_saved[base + lo:base + hi]
            keep[:] = row
            normalize_scale_bias_row(row, m, d, s, bias)
            activate_row(row, a)


@njit(parallel=True, cache=True)
def batchnorm_x_norm(x, mean, divisor, batch, filters, spatial, x_norm):
    """x_norm = (x - mean) / divisor (see bn_divisors), as the forward pass computed it."""
    for bf in prange(batch * filters):
        f = bf % filters
        m = mean[f]
        d = divisor[f]
        src = x[bf * spatial:(bf + 1) * spatial]
        dst = x_norm[bf * spatial:(bf + 1) * spatial]
        for k in range(spatial):
            dst[k] = (src[k] - m) / d


@njit(cache=True, inline="always", fastmath={"reassoc"})
def _bn_channel_sums(delta, x, m, xm, xd, batch, filters, spatial, f):
    """Channel f's float64 sums over the batch: delta, delta * x_norm (x_norm recomputed from
    x with the forward statistics xm / xd) and delta * (x - m)."""
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    for b in range(batch):
        base = (b * filters + f) * spatial
        d = delta[base:base + spatial]
        xr = x[base:base + spatial]
        for k in range(spatial):
            dk = np.float64(d[k])
            s1 += dk
            s2 += dk * np.float32((xr[k] - xm) / xd)
            s3 += dk * (xr[k] - m)
    return s1, s2, s3


@njit(cache=True, inline="always")
def _bn_channel_delta(delta, x, m, var, sf, s1, s3, inv_n, batch, filters, spatial, f,
                      delta_eps_outside_sqrt):
    """mean_delta and variance_delta of channel f from its sums s1 (delta) and s3
    (delta * (x - mean)) over inv_n = 1 / values, then its delta rewritten in place (Darknet's
    normalize_delta_cpu); returns (mean_delta, variance_delta)."""
    s = np.float64(sf)
    v = np.float64(var + np.float32(0.00001))
    inv_std = c_reciprocal(math.sqrt(v))
    md = np.float32(s * s1 * -inv_std)
    vd = np.float32(s * s3 * (-0.5 * v ** -1.5))
    if delta_eps_outside_sqrt:
        inv_std = c_reciprocal(math.sqrt(np.float64(var)) + np.float64(np.float32(0.00001)))
    vdn = 2.0 * vd * inv_n
    mdn = md * inv_n
    for b in range(batch):
        base = (b * filters + f) * spatial
        d = delta[base:base + spatial]
        xr = x[base:base + spatial]
        for k in range(spatial):
            d[k] = np.float32((d[k] * sf) * inv_std + vdn * np.float64(xr[k] - m) + mdn)
    return md, vd


@njit(parallel=True, cache=True, fastmath={"reassoc"})
def batchnorm_backward(delta, x, mean, variance, scales, batch, filters, spatial,
                       bias_updates, scale_updates, mean_delta, variance_delta, x_mean,
                       x_divisor, delta_eps_outside_sqrt):
    """Darknet's backward_batchnorm_layer (backward_bias, backward_scale_cpu, scale_bias,
    mean_delta_cpu, variance_delta_cpu, normalize_delta_cpu) in two sweeps instead of seven:
    the three per-channel sums at once (float64), then the delta rewrite. x_norm is recomputed
    from x with the forward pass's statistics x_mean / x_divisor and float operations (so it
    equals what forward computed, bit for bit); mean / variance are the statistics the
    gradient goes through (the batch's in train mode). The scale is applied to the sums
    rather than to every delta first, a reassociation far below float32 precision. Epsilon
    1e-5 inside the sqrt, as Darknet's backward; AlexeyAB's normalize_delta_cpu alone divides
    by sqrt(var) + 1e-5 (delta_eps_outside_sqrt)."""
    inv_n = 1.0 / (spatial * batch)
    for f in prange(filters):
        s1, s2, s3 = _bn_channel_sums(delta, x, mean[f], x_mean[f], x_divisor[f], batch,
                                      filters, spatial, f)
        bias_updates[f] += np.float32(s1)
        scale_updates[f] += np.float32(s2)
        mean_delta[f], variance_delta[f] = _bn_channel_delta(
            delta, x, mean[f], variance[f], scales[f], s1, s3, inv_n, batch, filters, spatial,
            f, delta_eps_outside_sqrt)


@njit(parallel=True, cache=True, fastmath={"reassoc"})
def batchnorm_backward_sums(delta, x, mean, batch, filters, spatial, bias_updates,
                            scale_updates, x_mean, x_divisor, sums):
    """The first sweep of batchnorm_backward alone, for a mini-batch split across processes
    (synchronised batch norm): this part's sums into sums (3 x filters, float64: delta,
    delta * x_norm, delta * (x - mean)) and the bias and scale gradients they give."""
    for f in prange(filters):
        s1, s2, s3 = _bn_channel_sums(delta, x, mean[f], x_mean[f], x_divisor[f], batch,
                                      filters, spatial, f)
        sums[0, f] = s1
        sums[1, f] = s2
        sums[2, f] = s3
        bias_updates[f] += np.float32(s1)
        scale_updates[f] += np.float32(s2)


@njit(parallel=True, cache=True)
def batchnorm_backward_delta(delta, x, mean, variance, scales, batch, filters, spatial, sums,
                             count, mean_delta, variance_delta, delta_eps_outside_sqrt):
    """The second sweep of batchnorm_backward alone: `sums` (batchnorm_backward_sums' rows,
    added up over every part of the mini-batch) over `count` values per channel (the whole
    mini-batch's batch * spatial), this part's delta rewritten."""
    inv_n = 1.0 / count
    for f in prange(filters):
        mean_delta[f], variance_delta[f] = _bn_channel_delta(
            delta, x, mean[f], variance[f], scales[f], sums[0, f], sums[2, f], inv_n, batch,
            filters, spatial, f, delta_eps_outside_sqrt)


@njit(parallel=True, cache=True, fastmath={"reassoc"})
def channel_moments_cpu(x, batch, filters, spatial, moments):
    """Per channel, the float64 mean and sum of squared deviations of its batch * spatial
    values, in two passes, into moments (filters x 2): a part of a mini-batch split across
    processes, whose parts combine (Chan et al.) into the statistics mean_variance_cpu
    computes on the whole, before the one rounding to float32."""
    count = batch * spatial
    for f in prange(filters):
        s = 0.0
        for b in range(batch):
            base = (b * filters + f) * spatial
            for k in range(spatial):
                s += np.float64(x[base + k])
        m = s / count
        m2 = 0.0
        for b in range(batch):
            base = (b * filters + f) * spatial
            for k in range(spatial):
                d = np.float64(x[base + k]) - m
                m2 += d * d
        moments[f, 0] = m
        moments[f, 1] = m2


@njit(parallel=True, cache=True, fastmath={"reassoc"})
def mean_variance_cpu(x, batch, filters, spatial, mean, variance):
    """Darknet's mean_cpu and (unbiased) variance_cpu in one sweep instead of two: float64 sums
    of (x - s) and (x - s)^2, shifted by the channel's first value s so that a large mean does
    not cancel the variance. Equal to the two-pass float64 result far below float32 rounding."""
    count = batch * spatial
    for f in prange(filters):
        s = np.float64(x[f * spatial])
        s1 = 0.0
        s2 = 0.0
        for b in range(batch):
            base = (b * filters + f) * spatial
            row = x[base:base + spatial]
            for k in range(spatial):
                d = np.float64(row[k]) - s
                s1 += d
                s2 += d * d
        mean[f] = np.float32(s + s1 / count)
        # one value per channel (batch 1, a 1x1 map): Darknet's 1/(n-1) is inf, times 0
        variance[f] = np.float32((s2 - s1 * s1 / count) / (count - 1)) if count > 1 else np.nan
