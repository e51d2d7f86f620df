"""AlexeyAB's array activations that are not elementwise on the output (its `activations.c`):
swish / mish / hard_mish keep what their gradient needs (the sigmoid for swish, the
pre-activation for the mishes) in ``keep``; the normalize_channels family works across the
channels of each pixel of a ``batch x channels x wh_step`` map.

Their gradients are AlexeyAB's formulas, not all of them the derivative of the forward pass:
normalize_channels multiplies each delta with a positive output by sum_k(out_k * delta_k), and
both softmax variants multiply every delta by that sum (the softmax Jacobian would give
out_i * (delta_i - sum)). ``activate_layer_cpu`` / ``gradient_layer_cpu`` are the switch that
AlexeyAB's forward/backward_convolutional_layer run on their output.
"""
import math

import numpy as np
from numba import njit, prange

from .activations import (F32, HARD_MISH, MISH, MISH_THRESHOLD, NORM_CHAN, NORM_CHAN_SOFTMAX,
                          NORM_CHAN_SOFTMAX_MAXVAL, SWISH, activate_array, gradient_array,
                          hard_mish_f, logistic_f, mish_f, softplus_f)

NORM_EPS = np.float32(0.0001)


@njit(parallel=True, cache=True)
def activate_array_swish(x, n, output_sigmoid, output):
    for i in prange(n):
        v = x[i]
        s = logistic_f(v)
        output_sigmoid[i] = s
        output[i] = v * s


@njit(parallel=True, cache=True)
def activate_array_mish(x, n, activation_input, output):
    for i in prange(n):
        v = x[i]
        activation_input[i] = v
        output[i] = mish_f(v)


@njit(parallel=True, cache=True)
def activate_array_hard_mish(x, n, activation_input, output):
    for i in prange(n):
        v = x[i]
        activation_input[i] = v
        output[i] = hard_mish_f(v)


@njit(parallel=True, cache=True)
def gradient_array_swish(x, n, sigmoid, delta):
    """delta *= swish + sigmoid * (1 - swish), x the output (swish)."""
    for i in prange(n):
        y = x[i]
        delta[i] *= y + sigmoid[i] * (F32(1.0) - y)


@njit(cache=True, inline="always")
def mish_gradient(inp):
    """AlexeyAB's gradient_array_mish: softplus in float32; exp(-sp) and tanh(sp) in double,
    each rounded to float32; the rest float32."""
    sp = softplus_f(inp, MISH_THRESHOLD)
    grad_sp = F32(1.0 - math.exp(-np.float64(sp)))
    tsp = F32(math.tanh(np.float64(sp)))
    grad_tsp = (F32(1.0) - tsp * tsp) * grad_sp
    return inp * grad_tsp + tsp


@njit(parallel=True, cache=True)
def gradient_array_mish(n, activation_input, delta):
    for i in prange(n):
        delta[i] *= mish_gradient(activation_input[i])


@njit(parallel=True, cache=True)
def gradient_array_hard_mish(n, activation_input, delta):
    for i in prange(n):
        v = activation_input[i]
        if v > 0:
            g = F32(1.0)
        elif v > -2:
            g = v + F32(1.0)
        else:
            g = F32(0.0)
        delta[i] *= g


@njit(parallel=True, cache=True)
def activate_array_normalize_channels(x, n, batch, channels, wh_step, output):
    """Per pixel: positive values divided by (1e-4 + their sum), the others 0."""
    for i in prange(n // channels):
        base = (i // wh_step) * wh_step * channels + i % wh_step
        s = NORM_EPS
        for k in range(channels):
            v = x[base + k * wh_step]
            if v > 0:
                s += v
        for k in range(channels):
            v = x[base + k * wh_step]
            output[base + k * wh_step] = v / s if v > 0 else F32(0.0)


@njit(parallel=True, cache=True)
def activate_array_normalize_channels_softmax(x, n, batch, channels, wh_step, output,
                                              use_max_val):
    """Per pixel: exp(v - m) / (1e-4 + sum exp(v - m)), m the channels' maximum when
    use_max_val, else 0."""
    for i in prange(n // channels):
        base = (i // wh_step) * wh_step * channels + i % wh_step
        m = F32(0.0)
        if use_max_val:
            m = x[base]
            for k in range(1, channels):
                v = x[base + k * wh_step]
                m = max(m, v)
        s = NORM_EPS
        for k in range(channels):
            s += math.exp(x[base + k * wh_step] - m)
        for k in range(channels):
            j = base + k * wh_step
            output[j] = math.exp(x[j] - m) / s


@njit(cache=True, inline="always")
def _pixel_dot(x, delta, base, channels, wh_step):
    g = F32(0.0)
    for k in range(channels):
        g += x[base + k * wh_step] * delta[base + k * wh_step]
    return g


@njit(parallel=True, cache=True)
def gradient_array_normalize_channels(x, n, batch, channels, wh_step, delta):
    """AlexeyAB's formula: delta_k *= sum_j(out_j * delta_j) where out_k > 0 (x the output)."""
    for i in prange(n // channels):
        base = (i // wh_step) * wh_step * channels + i % wh_step
        g = _pixel_dot(x, delta, base, channels, wh_step)
        for k in range(channels):
            if x[base + k * wh_step] > 0:
                delta[base + k * wh_step] *= g


@njit(parallel=True, cache=True)
def gradient_array_normalize_channels_softmax(x, n, batch, channels, wh_step, delta):
    """AlexeyAB's formula: every delta_k *= sum_j(out_j * delta_j) (x the output)."""
    for i in prange(n // channels):
        base = (i // wh_step) * wh_step * channels + i % wh_step
        g = _pixel_dot(x, delta, base, channels, wh_step)
        for k in range(channels):
            delta[base + k * wh_step] *= g


@njit(cache=True)
def activate_layer_cpu(x, n, a, batch, channels, wh_step, keep):
    """x = act(x) in place for a layer's output (batch x channels x wh_step), as AlexeyAB's
    forward_convolutional_layer dispatches; swish / mish / hard_mish write what their gradient
    needs into ``keep`` (n floats)."""
    if a == SWISH:
        activate_array_swish(x, n, keep, x)
    elif a == MISH:
        activate_array_mish(x, n, keep, x)
    elif a == HARD_MISH:
        activate_array_hard_mish(x, n, keep, x)
    elif a == NORM_CHAN:
        activate_array_normalize_channels(x, n, batch, channels, wh_step, x)
    elif a == NORM_CHAN_SOFTMAX:
        activate_array_normalize_channels_softmax(x, n, batch, channels, wh_step, x, False)
    elif a == NORM_CHAN_SOFTMAX_MAXVAL:
        activate_array_normalize_channels_softmax(x, n, batch, channels, wh_step, x, True)
    else:
        activate_array(x, n, a)


gradient_array_kernel = gradient_array.parallel      # a compiled caller calls a twin itself


@njit(cache=True)
def gradient_layer_cpu(y, n, a, batch, channels, wh_step, keep, delta):
    """delta *= act'(...) as AlexeyAB's backward_convolutional_layer dispatches: from the output
    y, or from ``keep`` for swish / mish / hard_mish."""
    if a == SWISH:
        gradient_array_swish(y, n, keep, delta)
    elif a == MISH:
        gradient_array_mish(n, keep, delta)
    elif a == HARD_MISH:
        gradient_array_hard_mish(n, keep, delta)
    elif a == NORM_CHAN:
        gradient_array_normalize_channels(y, n, batch, channels, wh_step, delta)
    elif a == NORM_CHAN_SOFTMAX or a == NORM_CHAN_SOFTMAX_MAXVAL:
        gradient_array_normalize_channels_softmax(y, n, batch, channels, wh_step, delta)
    else:
        gradient_array_kernel(y, n, a, delta)
