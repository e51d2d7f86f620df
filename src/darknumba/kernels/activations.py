"""Darknet's 14 activations (`activations.h`): forward on the input, gradient on the *output*.

Each scalar is computed in float64 and rounded once to float32, as C does when a float meets a
double literal (``.1*x``, ``1./(1.+exp(-x))``). tanh is Darknet's ``(e^2x-1)/(e^2x+1)``, which
is NaN past x ~ 355 exactly as in C.
"""
import math

import numpy as np
from numba import njit, prange

LOGISTIC, RELU, RELIE, LINEAR, RAMP, TANH, PLSE, LEAKY, ELU, LOGGY, STAIR, HARDTAN, LHTAN, SELU = range(14)

ACTIVATIONS = {
    "logistic": LOGISTIC, "relu": RELU, "relie": RELIE, "linear": LINEAR, "ramp": RAMP,
    "tanh": TANH, "plse": PLSE, "leaky": LEAKY, "elu": ELU, "loggy": LOGGY, "stair": STAIR,
    "hardtan": HARDTAN, "lhtan": LHTAN, "selu": SELU,
}
ACTIVATION_NAMES = {v: k for k, v in ACTIVATIONS.items()}


@njit(cache=True, inline="always")
def activate(xf, a):
    x = np.float64(xf)
    if a == LINEAR:
        return xf
    if a == LEAKY:
        return np.float32(x if x > 0 else 0.1 * x)
    if a == LOGISTIC:
        return np.float32(1.0 / (1.0 + math.exp(-x)))
    if a == RELU:
        return np.float32(x if x > 0 else 0.0)
    if a == RELIE:
        return np.float32(x if x > 0 else 0.01 * x)
    if a == RAMP:
        return np.float32((x if x > 0 else 0.0) + 0.1 * x)
    if a == TANH:
        e = math.exp(2.0 * x)
        return np.float32((e - 1.0) / (e + 1.0))
    if a == PLSE:
        if x < -4.0:
            return np.float32(0.01 * (x + 4.0))
        if x > 4.0:
            return np.float32(0.01 * (x - 4.0) + 1.0)
        return np.float32(0.125 * x + 0.5)
    if a == ELU:
        return np.float32(x if x >= 0 else math.exp(x) - 1.0)
    if a == LOGGY:
        return np.float32(2.0 / (1.0 + math.exp(-x)) - 1.0)
    if a == STAIR:
        n = math.floor(x)
        if int(n) % 2 == 0:
            return np.float32(math.floor(x / 2.0))
        return np.float32((x - n) + math.floor(x / 2.0))
    if a == HARDTAN:
        if x < -1.0:
            return np.float32(-1.0)
        if x > 1.0:
            return np.float32(1.0)
        return xf
    if a == LHTAN:
        if x < 0:
            return np.float32(0.001 * x)
        if x > 1.0:
            return np.float32(0.001 * (x - 1.0) + 1.0)
        return xf
    if a == SELU:
        return np.float32(1.0507 * x if x >= 0 else 1.0507 * 1.6732 * (math.exp(x) - 1.0))
    return xf


@njit(cache=True, inline="always")
def gradient(yf, a):
    """d activation / d input, written (as in Darknet) in terms of the output y."""
    y = np.float64(yf)
    if a == LINEAR:
        return np.float32(1.0)
    if a == LEAKY:
        return np.float32(1.0 if y > 0 else 0.1)
    if a == LOGISTIC:
        return np.float32((1.0 - y) * y)
    if a == RELU:
        return np.float32(1.0 if y > 0 else 0.0)
    if a == RELIE:
        return np.float32(1.0 if y > 0 else 0.01)
    if a == RAMP:
        return np.float32((1.0 if y > 0 else 0.0) + 0.1)
    if a == TANH:
        return np.float32(1.0) - yf * yf
    if a == PLSE:
        return np.float32(0.01 if (y < 0 or y > 1.0) else 0.125)
    if a == ELU:
        return np.float32((1.0 if y >= 0 else 0.0) + (y + 1.0 if y < 0 else 0.0))
    if a == LOGGY:
        t = (y + 1.0) / 2.0
        return np.float32(2.0 * (1.0 - t) * t)
    if a == STAIR:
        return np.float32(0.0 if math.floor(y) == y else 1.0)
    if a == HARDTAN:
        return np.float32(1.0 if (y > -1.0 and y < 1.0) else 0.0)
    if a == LHTAN:
        return np.float32(1.0 if (y > 0 and y < 1.0) else 0.001)
    if a == SELU:
        return np.float32(1.0507 if y >= 0 else y + 1.0507 * 1.6732)
    return np.float32(1.0)


@njit(cache=True, inline="always")
def activate_row(row, a):
    """row[:] = act(row[:]). The common activations get a loop of their own (the scalar
    dispatch inside a loop would stop it vectorising); the rest use the generic scalar."""
    n = row.size
    if a == LINEAR:
        return
    if a == LEAKY:
        for k in range(n):
            v = row[k]
            row[k] = v if v > 0 else np.float32(0.1 * np.float64(v))
    elif a == RELU:
        for k in range(n):
            v = row[k]
            row[k] = v if v > 0 else np.float32(0.0)
    elif a == LOGISTIC:
        for k in range(n):
            row[k] = np.float32(1.0 / (1.0 + math.exp(-np.float64(row[k]))))
    else:
        for k in range(n):
            row[k] = activate(row[k], a)


@njit(cache=True, inline="always")
def gradient_row(y, delta, a):
    """delta[:] *= act'(y[:]) with y the output; loops specialised as in activate_row."""
    n = y.size
    if a == LINEAR:
        return
    if a == LEAKY:
        for k in range(n):
            delta[k] *= np.float32(1.0) if y[k] > 0 else np.float32(0.1)
    elif a == RELU:
        for k in range(n):
            delta[k] *= np.float32(1.0) if y[k] > 0 else np.float32(0.0)
    elif a == LOGISTIC:
        for k in range(n):
            yk = np.float64(y[k])
            delta[k] *= np.float32((1.0 - yk) * yk)
    else:
        for k in range(n):
            delta[k] *= gradient(y[k], a)


CHUNK = 16384


@njit(parallel=True, cache=True)
def activate_array(x, n, a):
    """activate_array: x[i] = act(x[i]) for i < n, in place."""
    if a == LINEAR:
        return
    for c in prange((n + CHUNK - 1) // CHUNK):
        activate_row(x[c * CHUNK:min(n, (c + 1) * CHUNK)], a)


@njit(parallel=True, cache=True)
def gradient_array(x, n, a, delta):
    """gradient_array: delta[i] *= act'(x[i]), where x is the layer's *output*."""
    if a == LINEAR:
        return
    for c in prange((n + CHUNK - 1) // CHUNK):
        lo = c * CHUNK
        hi = min(n, lo + CHUNK)
        gradient_row(x[lo:hi], delta[lo:hi], a)
