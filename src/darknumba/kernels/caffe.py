"""Kernels of the layers a Caffe import adds to Darknet's (BVLC caffe's batch_norm_layer.cpp,
eltwise_layer.cpp, prelu_layer.cpp; the arithmetic written from their documented math, in
float32 storage with float64 sums).

Shapes: x, delta, output are batch x c x spatial, flat; per-channel arrays have c values.
Darknet's sign convention holds: delta is the negative gradient, *_updates are added to.
"""
import math

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def caffe_bn_stats_cpu(x, batch, c, spatial, mean, variance):
    """BatchNorm's batch statistics: the mean and the *biased* variance (sum / m, m = batch x
    spatial) of each channel, two passes as Caffe's (mean first, then the squares of x - mean)."""
    m = batch * spatial
    for k in prange(c):
        s = 0.0
        for b in range(batch):
            base = (b * c + k) * spatial
            for i in range(spatial):
                s += x[base + i]
        mu = s / m
        v = 0.0
        for b in range(batch):
            base = (b * c + k) * spatial
            for i in range(spatial):
                d = x[base + i] - mu
                v += d * d
        mean[k] = mu
        variance[k] = v / m


@njit(cache=True)
def caffe_bn_moving_average_cpu(mean, variance, m, fraction, mean_sum, variance_sum,
                                scale_factor):
    """BatchNorm's running sums in training: factor <- fraction * factor + 1, mean_sum <-
    fraction * mean_sum + mean, variance_sum <- fraction * variance_sum + m / (m - 1) *
    variance (the unbiased variance; m = batch x spatial, the correction 1 when m is 1). At
    inference the statistics are mean_sum / factor and variance_sum / factor: a moving average
    whose start-up bias the factor divides out."""
    scale_factor[0] = np.float32(scale_factor[0] * fraction + 1.0)
    correction = m / (m - 1.0) if m > 1 else 1.0
    for k in range(mean.size):
        mean_sum[k] = np.float32(fraction * mean_sum[k] + mean[k])
        variance_sum[k] = np.float32(fraction * variance_sum[k] + correction * variance[k])


@njit(cache=True)
def caffe_bn_global_stats_cpu(mean_sum, variance_sum, scale_factor, mean, variance):
    """The inference statistics from the running sums: sum / factor (0 when the factor is 0)."""
    f = scale_factor[0]
    inv = 0.0 if f == 0 else 1.0 / f
    for k in range(mean.size):
        mean[k] = mean_sum[k] * inv
        variance[k] = variance_sum[k] * inv


@njit(parallel=True, cache=True)
def caffe_bn_forward_cpu(x, batch, c, spatial, mean, variance, eps, scales, biases, x_norm,
                         output):
    """x_norm = (x - mean) / sqrt(variance + eps) (BatchNorm), output = scales * x_norm + biases
    (the Scale layer that follows it)."""
    for bk in prange(batch * c):
        k = bk % c
        inv = 1.0 / math.sqrt(variance[k] + eps)
        base = bk * spatial
        for i in range(spatial):
            xn = np.float32((x[base + i] - mean[k]) * inv)
            x_norm[base + i] = xn
            output[base + i] = scales[k] * xn + biases[k]


@njit(parallel=True, cache=True)
def caffe_bn_backward_cpu(delta, x_norm, batch, c, spatial, variance, eps, scales, train,
                          bias_updates, scale_updates):
    """Scale's and BatchNorm's backward, delta turned in place into the input's: bias_updates
    += sum delta, scale_updates += sum delta * x_norm; with d = scales * delta, the input's
    delta is d / sqrt(var + eps) at inference and, in training (batch statistics),
    (d - mean(d) - mean(d * x_norm) * x_norm) / sqrt(var + eps)."""
    m = batch * spatial
    for k in prange(c):
        sd = 0.0
        sdx = 0.0
        for b in range(batch):
            base = (b * c + k) * spatial
            for i in range(spatial):
                sd += delta[base + i]
                sdx += delta[base + i] * x_norm[base + i]
        bias_updates[k] += sd
        scale_updates[k] += sdx
        g = scales[k]
        inv = 1.0 / math.sqrt(variance[k] + eps)
        mean_d = g * sd / m if train else 0.0
        mean_dx = g * sdx / m if train else 0.0
        for b in range(batch):
            base = (b * c + k) * spatial
            for i in range(spatial):
                delta[base + i] = np.float32((g * delta[base + i] - mean_d
                                              - mean_dx * x_norm[base + i]) * inv)


@njit(parallel=True, cache=True)
def eltwise_prod_cpu(inputs, n, output):
    """Eltwise PROD: output = the product of the rows of inputs (k x n), in row order."""
    for i in prange(n):
        p = inputs[0, i]
        for j in range(1, inputs.shape[0]):
            p = np.float32(p * inputs[j, i])
        output[i] = p


@njit(parallel=True, cache=True)
def eltwise_max_cpu(inputs, n, output, mask):
    """Eltwise MAX: output = the largest of the rows, mask = its row (the first of equal
    ones: a later row wins only when it is larger)."""
    for i in prange(n):
        best = inputs[0, i]
        arg = 0
        for j in range(1, inputs.shape[0]):
            if inputs[j, i] > best:
                best = inputs[j, i]
                arg = j
        output[i] = best
        mask[i] = arg


@njit(parallel=True, cache=True)
def eltwise_prod_backward_cpu(delta, inputs, n, j, out_delta):
    """out_delta += delta x the product of every row but j (Caffe's stable_prod_grad: no
    division by row j, so a zero in it is no trouble)."""
    for i in prange(n):
        p = delta[i]
        for r in range(inputs.shape[0]):
            if r != j:
                p = np.float32(p * inputs[r, i])
        out_delta[i] += p


@njit(parallel=True, cache=True)
def eltwise_max_backward_cpu(delta, mask, n, j, out_delta):
    """out_delta += delta where row j was the largest."""
    for i in prange(n):
        if mask[i] == j:
            out_delta[i] += delta[i]


@njit(parallel=True, cache=True)
def prelu_forward_cpu(x, batch, c, spatial, slopes, shared, output):
    """PReLU: output = x where x > 0, else slope x (the channel's slope, or slopes[0] when
    shared)."""
    for bk in prange(batch * c):
        a = slopes[0] if shared else slopes[bk % c]
        base = bk * spatial
        for i in range(spatial):
            v = x[base + i]
            output[base + i] = v if v > 0 else np.float32(a * v)


@njit(parallel=True, cache=True)
def prelu_slope_updates_cpu(x, delta, batch, c, spatial, shared, slope_updates):
    """slope_updates[k] += sum of delta x over the cells where x <= 0 (all channels into
    slope_updates[0] when shared)."""
    sums = np.zeros(c)
    for k in prange(c):
        s = 0.0
        for b in range(batch):
            base = (b * c + k) * spatial
            for i in range(spatial):
                if x[base + i] <= 0:
                    s += delta[base + i] * x[base + i]
        sums[k] = s
    if shared:
        slope_updates[0] += sums.sum()
    else:
        for k in range(c):
            slope_updates[k] += sums[k]


@njit(parallel=True, cache=True)
def prelu_backward_cpu(x, delta, batch, c, spatial, slopes, shared, prev_delta):
    """prev_delta += delta where x > 0, slope x delta elsewhere."""
    for bk in prange(batch * c):
        a = slopes[0] if shared else slopes[bk % c]
        base = bk * spatial
        for i in range(spatial):
            d = delta[base + i]
            prev_delta[base + i] += d if x[base + i] > 0 else np.float32(a * d)
