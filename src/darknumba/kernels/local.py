"""Locally connected layer kernels (Darknet's `local_layer.c`): a separate n x k filter bank
at every output location.

Legend: k = size*size*c; L = out_h*out_w locations; col is im2col's k x L matrix of one image;
weights are [L][n][k]; out / delta of one image are [n][L].
"""
import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def local_forward_cpu(col, weights, n, k, L, out):
    """out[f, j] += Σ_q weights[j, f, q] · col[q, j]  (out already holds the biases)"""
    for j in prange(L):
        wbase = j * n * k
        for f in range(n):
            s = np.float32(0.0)
            for q in range(k):
                s += weights[wbase + f * k + q] * col[q * L + j]
            out[f * L + j] += s


@njit(parallel=True, cache=True)
def local_weight_grad_cpu(delta, col, n, k, L, weight_updates):
    """weight_updates[j, f, q] += delta[f, j] · col[q, j]"""
    for j in prange(L):
        wbase = j * n * k
        for f in range(n):
            d = delta[f * L + j]
            for q in range(k):
                weight_updates[wbase + f * k + q] += d * col[q * L + j]


@njit(parallel=True, cache=True)
def local_input_grad_cpu(weights, delta, n, k, L, col):
    """col[q, j] = Σ_f weights[j, f, q] · delta[f, j]  (then col2im adds it into the input)"""
    for j in prange(L):
        wbase = j * n * k
        for q in range(k):
            s = np.float32(0.0)
            for f in range(n):
                s += weights[wbase + f * k + q] * delta[f * L + j]
            col[q * L + j] = s
