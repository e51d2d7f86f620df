"""Fused inference epilogues: the same float operations in the same order as Darknet's separate
passes (normalize -> scale -> add bias -> activate), so results are identical, in one sweep
over memory instead of four."""
import math

import numpy as np
from numba import njit, prange

from .activations import activate


@njit(parallel=True, cache=True)
def batchnorm_bias_activate(x, mean, variance, scales, biases, batch, filters, spatial, a):
    for bf in prange(batch * filters):
        f = bf % filters
        base = bf * spatial
        m = mean[f]
        d = np.float32(math.sqrt(variance[f])) + np.float32(0.000001)
        s = scales[f]
        bias = biases[f]
        for k in range(spatial):
            x[base + k] = activate(((x[base + k] - m) / d) * s + bias, a)


@njit(parallel=True, cache=True)
def bias_activate(x, biases, batch, filters, spatial, a):
    for bf in prange(batch * filters):
        base = bf * spatial
        bias = biases[bf % filters]
        for k in range(spatial):
            x[base + k] = activate(x[base + k] + bias, a)
