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


@njit(parallel=True, cache=True)
def activate_array(x, n, a):
    """activate_array: x[i] = act(x[i]) for i < n, in place."""
    if a == LINEAR:
        return
    for i in prange(n):
        x[i] = activate(x[i], a)


@njit(parallel=True, cache=True)
def gradient_array(x, n, a, delta):
    """gradient_array: delta[i] *= act'(x[i]), where x is the layer's *output*."""
    if a == LINEAR:
        return
    for i in prange(n):
        delta[i] *= gradient(x[i], a)
