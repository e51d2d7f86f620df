"""AlexeyAB's additions to `blas.c`: the multi-input, weighted shortcut
(shortcut_multilayer_cpu, backward_shortcut_multilayer_cpu), one input at a time.

Sizes: `src_outputs` values per image (the shortcut's output = the previous layer's). Input 0
is the previous layer's output, inputs 1..n the `from` layers, `size` values per image each;
an input with fewer values per image adds only where the flat per-image index is below its
size. Weights: one per input (per_feature: n+1 of them) or one per input and channel
(per_channel: (n+1)*c, `layer_step` = c), input i's at [i*layer_step, (i+1)*layer_step); `step`
output values share a weight (src_outputs / layer_step). Without weights every input gets
weight 1 (one weight, step = src_outputs): x * 1 is exactly x, so that is AlexeyAB's plain sum.
Taking the inputs one after another gives AlexeyAB's float operations in its order.
"""
import math

import numpy as np
from numba import njit, prange

NO_NORMALIZATION, RELU_NORMALIZATION, SOFTMAX_NORMALIZATION = 0, 1, 2
FLT_MAX = np.float32(3.4028234663852886e38)


@njit(cache=True)
def normalized_weights(weights, n, layer_step, normalization, out):
    """out[i*layer_step + k] = the weight input i gets in channel k: relu(w) / (1e-4 + sum of
    relu) or exp(w - max) / (1e-4 + sum of exp(w - max)) over the n+1 inputs, or w itself.
    The float operations AlexeyAB repeats for every output value, done once per channel."""
    for k in range(layer_step):
        max_val = -FLT_MAX
        if normalization == SOFTMAX_NORMALIZATION:
            for i in range(n + 1):
                w = weights[k + i * layer_step]
                max_val = max(max_val, w)
        s = np.float32(0.0001)
        for i in range(n + 1):
            w = weights[k + i * layer_step]
            if normalization == RELU_NORMALIZATION:
                s += w if w > 0 else np.float32(0.0)
            elif normalization == SOFTMAX_NORMALIZATION:
                s += math.exp(w - max_val)
        for i in range(n + 1):
            w = weights[k + i * layer_step]
            if normalization == RELU_NORMALIZATION:
                w = (w if w > 0 else np.float32(0.0)) / s
            elif normalization == SOFTMAX_NORMALIZATION:
                w = math.exp(w - max_val) / s
            out[k + i * layer_step] = w


@njit(parallel=True, cache=True)
def shortcut_input_cpu(batch, src_outputs, size, x, w, step, out, first):
    """out = x * w (first input) or out += x * w where the input has values."""
    for id_ in prange(batch * src_outputs):
        src_i = id_ % src_outputs
        if src_i < size:
            v = x[size * (id_ // src_outputs) + src_i] * w[src_i // step]
            out[id_] = v if first else out[id_] + v


@njit(parallel=True, cache=True)
def backward_shortcut_input_cpu(batch, src_outputs, size, delta_in, w, step, dx):
    """dx += delta_in * w where the input added: its share of the gradient."""
    for id_ in prange(batch * src_outputs):
        src_i = id_ % src_outputs
        if src_i < size:
            dx[size * (id_ // src_outputs) + src_i] += delta_in[id_] * w[src_i // step]


@njit(parallel=True, cache=True)
def shortcut_weight_updates_cpu(batch, src_outputs, size, x, delta_in, step, weight_updates):
    """weight_updates[k] += sum of delta_in * x over channel k's values (AlexeyAB's gradient
    w.r.t. the *normalised* weight: it leaves out the relu / softmax derivative). Each weight
    summed in float64."""
    for k in prange(weight_updates.size):
        acc = 0.0
        hi = min((k + 1) * step, size)
        for b in range(batch):
            for src_i in range(k * step, hi):
                acc += np.float64(delta_in[b * src_outputs + src_i]) * x[size * b + src_i]
        weight_updates[k] += np.float32(acc)
