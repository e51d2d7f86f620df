"""Darknet's activations (`activations.h`): forward on the input, gradient on the *output*.

pjreddie's 14: each scalar is computed in float64 and rounded once to float32, as C does when a
float meets a double literal (``.1*x``, ``1./(1.+exp(-x))``). tanh is Darknet's
``(e^2x-1)/(e^2x+1)``, which is NaN past x ~ 355 exactly as in C.

AlexeyAB's fork adds 9 (its ``ACTIVATION`` enum), computed with its float32 literals
(``activations.h`` / ``activations.c``): relu6, revleaky and gelu are elementwise on the output
like the others (gelu's gradient is AlexeyAB's formula evaluated on the *output*, as its
``gradient_array`` passes it); swish, mish and hard_mish differentiate from what the forward pass
kept (the sigmoid for swish, the pre-activation for the mishes); the normalize_channels family
works across the channels of each pixel (see ``activations_ab.py``).
"""
import math

import numpy as np
from numba import njit, prange

from .twins import twins

LOGISTIC, RELU, RELIE, LINEAR, RAMP, TANH, PLSE, LEAKY, ELU, LOGGY, STAIR, HARDTAN, LHTAN, SELU = range(14)
(RELU6, REVLEAKY, GELU, SWISH, MISH, HARD_MISH,
 NORM_CHAN, NORM_CHAN_SOFTMAX, NORM_CHAN_SOFTMAX_MAXVAL) = range(14, 23)

ACTIVATIONS = {
    "logistic": LOGISTIC, "relu": RELU, "relie": RELIE, "linear": LINEAR, "ramp": RAMP,
    "tanh": TANH, "plse": PLSE, "leaky": LEAKY, "elu": ELU, "loggy": LOGGY, "stair": STAIR,
    "hardtan": HARDTAN, "lhtan": LHTAN, "selu": SELU,
    "relu6": RELU6, "revleaky": REVLEAKY, "gelu": GELU, "swish": SWISH, "mish": MISH,
    "hard_mish": HARD_MISH, "normalize_channels": NORM_CHAN,
    "normalize_channels_softmax": NORM_CHAN_SOFTMAX,
    "normalize_channels_softmax_maxval": NORM_CHAN_SOFTMAX_MAXVAL,
}
# what a layer needs beyond its output for the gradient: the pre-activation (sigmoid for swish)
KEEPS_INPUT = (SWISH, MISH, HARD_MISH)
# across the channels of each pixel: never elementwise
PER_PIXEL = (NORM_CHAN, NORM_CHAN_SOFTMAX, NORM_CHAN_SOFTMAX_MAXVAL)
F32 = np.float32
MISH_THRESHOLD = np.float32(20.0)
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
    if a >= RELU6:
        return activate_ab(xf, a)
    return xf


@njit(cache=True, inline="always")
def logistic_f(x):
    """AlexeyAB's logistic_activate: 1.f/(1.f + expf(-x)), all float32."""
    return F32(1.0) / (F32(1.0) + math.exp(-x))


@njit(cache=True, inline="always")
def tanh_f(x):
    """AlexeyAB's tanh_activate: 2/(1 + expf(-2x)) - 1, all float32."""
    return F32(2.0) / (F32(1.0) + math.exp(F32(-2.0) * x)) - F32(1.0)


@njit(cache=True, inline="always")
def softplus_f(x, threshold):
    if x > threshold:
        return x
    if x < -threshold:
        return math.exp(x)
    return math.log(math.exp(x) + F32(1.0))


@njit(cache=True, inline="always")
def mish_f(x):
    return x * tanh_f(softplus_f(x, MISH_THRESHOLD))


@njit(cache=True, inline="always")
def hard_mish_f(x):
    if x > 0:
        return x
    if x > -2:
        return x * x / F32(2.0) + x
    return F32(0.0)


@njit(cache=True, inline="always")
def gelu_arg(x, x3):
    """0.797885*x + 0.035677*x^3 in double, handed to tanhf as a float (AlexeyAB's gelu)."""
    return F32(0.797885 * np.float64(x) + 0.035677 * np.float64(x3))


@njit(cache=True, inline="always")
def activate_ab(xf, a):
    """AlexeyAB's additions, in float32 as it writes them. relu6 is AlexeyAB's relu6_activate
    (its GPU path; its CPU activate() has no case for it and returns 0)."""
    if a == RELU6:
        v = xf if xf > 0 else F32(0.0)
        return v if v < 6 else F32(6.0)
    if a == REVLEAKY:
        return xf if xf > 0 else F32(0.1) * xf
    if a == GELU:
        t = math.tanh(gelu_arg(xf, math.pow(xf, F32(3.0))))
        return F32(0.5 * np.float64(xf) * np.float64(F32(1.0) + t))
    if a == SWISH:
        return xf * logistic_f(xf)
    if a == MISH:
        return mish_f(xf)
    if a == HARD_MISH:
        return hard_mish_f(xf)
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
    if a == RELU6:
        return F32(1.0) if (yf > 0 and yf < 6) else F32(0.0)
    if a == REVLEAKY:
        return F32(1.0) if yf > 0 else F32(0.1)
    if a == GELU:
        return gelu_gradient(yf)
    return np.float32(1.0)


@njit(cache=True, inline="always")
def gelu_gradient(xf):
    """AlexeyAB's gelu_gradient (which its gradient_array evaluates on the output)."""
    x3 = math.pow(xf, F32(3.0))
    u = F32(0.0356774 * np.float64(x3) + 0.797885 * np.float64(xf))
    sech = F32(2.0) / (math.exp(u) + math.exp(-u))
    return F32(0.5 * np.float64(math.tanh(u))
               + (0.0535161 * np.float64(x3) + 0.398942 * np.float64(xf))
               * np.float64(math.pow(sech, F32(2.0))) + 0.5)


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
        activate_row_generic(row, a)


@njit(cache=True)
def activate_row_generic(row, a):
    """row[:] = act(row[:]) through the scalar dispatch: every activation but the common four,
    compiled once and called, not inlined into each kernel (which would multiply its compile
    time)."""
    for k in range(row.size):
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
        gradient_row_generic(y, delta, a)


@njit(cache=True)
def gradient_row_generic(y, delta, a):
    """delta[:] *= act'(y[:]) through the scalar dispatch (called, not inlined: see
    activate_row_generic)."""
    for k in range(y.size):
        delta[k] *= gradient(y[k], a)


CHUNK = 16384


@njit(parallel=True, cache=True)
def activate_array(x, n, a):
    """activate_array: x[i] = act(x[i]) for i < n, in place."""
    if a == LINEAR:
        return
    for c in prange((n + CHUNK - 1) // CHUNK):
        activate_row(x[c * CHUNK:min(n, (c + 1) * CHUNK)], a)


@twins(size=1)
def gradient_array(x, n, a, delta):
    """gradient_array: delta[i] *= act'(x[i]), where x is the layer's *output*."""
    if a == LINEAR:
        return
    for c in prange((n + CHUNK - 1) // CHUNK):
        lo = c * CHUNK
        hi = min(n, lo + CHUNK)
        gradient_row(x[lo:hi], delta[lo:hi], a)
