"""XNOR-net convolutions in numpy, the spec of darknumba.kernels.xnor and layers/xnor.py
(Darknet's binarize_weights / binarize_cpu, AlexeyAB's bit-packed inference).

weights: n x c x size x size; x: c x h x w (one image); outputs n x out_h x out_w.
"""
import numpy as np


def binarize_weights(weights, n):
    """Per filter: mean |w| (float32, summed in order), +mean where w > 0 else -mean."""
    w = np.asarray(weights, np.float32).reshape(n, -1)
    out = np.empty_like(w)
    for f in range(n):
        mean = np.float32(0)
        for v in w[f]:
            mean = np.float32(mean + abs(v))
        mean = np.float32(mean / np.float32(w.shape[1]))
        out[f] = np.where(w[f] > 0, mean, -mean)
    return out.reshape(-1)


def signs(x):
    """+1 where x > 0, else -1 (NaN included), as integers."""
    return np.where(np.asarray(x) > 0, 1, -1).astype(np.int64)


def xnor_conv_bits(x, weights, c, h, w, n, size, stride, pad):
    """AlexeyAB's bit-packed convolution of one image: the integer sum of sign(w) * sign(x)
    over each window, a padded pixel counting as -1 (bit 0), times the filter's mean |w|, in
    float32 as (2*count - K) * mean. Returns n x out_h x out_w float32."""
    out_h = (h + 2 * pad - size) // stride + 1
    out_w = (w + 2 * pad - size) // stride + 1
    sx = np.full((c, h + 2 * pad, w + 2 * pad), -1, np.int64)
    sx[:, pad:pad + h, pad:pad + w] = signs(np.asarray(x).reshape(c, h, w))
    sw = signs(np.asarray(weights).reshape(n, c, size, size))
    mean = np.abs(binarize_weights(weights, n).reshape(n, -1)[:, 0])
    out = np.empty((n, out_h, out_w), np.float32)
    for oy in range(out_h):
        for ox in range(out_w):
            win = sx[:, oy * stride:oy * stride + size, ox * stride:ox * stride + size]
            s = (sw * win[None]).reshape(n, -1).sum(axis=1)
            out[:, oy, ox] = s.astype(np.float32) * mean
    return out
