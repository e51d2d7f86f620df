"""softmax_cpu and the cost primitives of Darknet's `blas.c`."""
import math

import numpy as np
from numba import njit, prange

FLT_MAX = np.float32(3.4028234663852886e38)


@njit(cache=True, inline="always")
def _nonzero_sum(s):
    """The sum of the exponentials, or NaN where it is 0 (every input -inf: nothing exceeds
    -FLT_MAX): C divides 0 by 0 and gets NaN, numba would raise."""
    return s if s != 0 else np.float32(np.nan)


@njit(parallel=True, cache=True)
def softmax_cpu(inp, n, batch, batch_offset, groups, group_offset, stride, temp, output):
    t = np.float32(temp)
    for bg in prange(batch * groups):
        b = bg // groups
        g = bg % groups
        base = b * batch_offset + g * group_offset
        largest = -FLT_MAX
        for i in range(n):
            v = inp[base + i * stride]
            if v > largest:
                largest = v
        s = np.float32(0.0)
        for i in range(n):
            e = np.float32(math.exp(np.float64(inp[base + i * stride] / t - largest / t)))
            s += e
            output[base + i * stride] = e
        s = _nonzero_sum(s)
        for i in range(n):
            output[base + i * stride] /= s


@njit(parallel=True, cache=True)
def softmax_x_ent_cpu(n, pred, truth, delta, error):
    for i in prange(n):
        t = truth[i]
        p = pred[i]
        error[i] = np.float32(-math.log(p)) if t != 0 else np.float32(0.0)
        delta[i] = t - p


@njit(parallel=True, cache=True)
def l2_cpu(n, pred, truth, delta, error):
    for i in prange(n):
        diff = truth[i] - pred[i]
        error[i] = diff * diff
        delta[i] = diff


@njit(parallel=True, cache=True)
def l1_cpu(n, pred, truth, delta, error):
    for i in prange(n):
        diff = truth[i] - pred[i]
        error[i] = abs(diff)
        delta[i] = 1.0 if diff > 0 else -1.0


@njit(parallel=True, cache=True)
def smooth_l1_cpu(n, pred, truth, delta, error):
    for i in prange(n):
        diff = truth[i] - pred[i]
        a = abs(diff)
        if a < 1:
            error[i] = diff * diff
            delta[i] = diff
        else:
            error[i] = 2 * a - 1
            # Darknet quirk: outside |diff| < 1 the sign is the opposite of the descent direction
            delta[i] = 1.0 if diff < 0 else -1.0


@njit(parallel=True, cache=True)
def softmax_tree_groups_cpu(inp, batch, inputs, group_offset, group_size, temp, output):
    """[softmax] with a class tree: a separate softmax over each group of sibling classes
    (Darknet's forward_softmax_layer tree branch), for every image."""
    ngroups = group_offset.size
    for bg in prange(batch * ngroups):
        b = bg // ngroups
        g = bg % ngroups
        s = group_size[g]
        base = b * inputs + group_offset[g]
        softmax_cpu_one(inp[base:base + s], s, temp, output[base:base + s])


@njit(cache=True, inline="always")
def softmax_cpu_one(x, n, temp, out):
    """Darknet's softmax() on n contiguous values."""
    t = np.float32(temp)
    largest = -FLT_MAX
    for i in range(n):
        if x[i] > largest:
            largest = x[i]
    s = np.float32(0.0)
    for i in range(n):
        e = np.float32(math.exp(np.float64(x[i] / t - largest / t)))
        s += e
        out[i] = e
    s = _nonzero_sum(s)
    for i in range(n):
        out[i] /= s
