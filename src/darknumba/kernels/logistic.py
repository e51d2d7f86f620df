"""logistic_x_ent_cpu (Darknet's `blas.c`): binary cross-entropy of probabilities."""
import math

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def logistic_x_ent_cpu(n, pred, truth, delta, error):
    """error = -t·log p - (1-t)·log(1-p); delta = t - p."""
    for i in prange(n):
        t = np.float64(truth[i])
        p = np.float64(pred[i])
        error[i] = np.float32(-t * math.log(p) - (1.0 - t) * math.log(1.0 - p))
        delta[i] = truth[i] - pred[i]
