"""The test-mode forward pass in plain numpy, for a first run on a cold numba cache.

Compiling a detector's kernels takes tens of seconds on a first run; numpy needs no compile.
On a cold cache `darknumba detect` runs its images through this forward pass (the convolutions
as im2col + the same BLAS GEMM as the compiled exact path, the per-channel sweeps as numpy
array operations, in Darknet's float32 order) while a background process compiles the kernels
for the next runs (runtime/cold_start.py). Only the decoding of the boxes and NMS use compiled
kernels (a few seconds to compile).

Covered: [convolutional] (groups, any size and stride, batch norm), [maxpool], [route],
[upsample], [shortcut] of one same-shaped input, pjreddie's and AlexeyAB's [yolo], with the
activations linear, leaky, relu, logistic, mish and swish. `unsupported(net)` names the first
layer outside that set (the compiled path then runs as before).

Same results as the compiled paths up to float32 rounding: a convolution is the exact path's
GEMM on the same column matrix; the exponentials (logistic, mish, swish) are numpy's rather
than the C library's, a last-bit difference at most.
"""
from __future__ import annotations

import numpy as np

from ..kernels.activations import LEAKY, LINEAR, LOGISTIC, MISH, RELU, SWISH

F32 = np.float32
FLT_MAX = np.finfo(np.float32).max
ELEMENTWISE = (LINEAR, LEAKY, RELU, LOGISTIC, MISH, SWISH)


# -- what is covered ---------------------------------------------------------------------------
def unsupported(net) -> str | None:
    """None when every layer of `net` has a forward here, else what is missing (a short
    phrase naming the layer)."""
    from ..layers.convolutional import ConvolutionalLayer
    from ..layers.maxpool import MaxpoolLayer
    from ..layers.route import RouteLayer
    from ..layers.shortcut import ShortcutLayer
    from ..layers.upsample import UpsampleLayer
    from ..layers.yolo import YoloLayer
    from ..layers.yolo_ab import AbYoloLayer
    if net.quirks.compat is not None:
        return f"compat={net.quirks.compat}"
    for i, l in enumerate(net.layers):
        t = type(l)
        ok = False
        if t is ConvolutionalLayer:
            ok = (not l.ext and l.share_layer is None and not l.xnor
                  and l.activation_id in ELEMENTWISE
                  and not (l.size == 1 and l.stride > 1 and l._direct_1x1()))
        elif t is MaxpoolLayer:
            ok = not l.maxpool_depth
        elif t is RouteLayer:
            ok = True
        elif t is UpsampleLayer:
            ok = not l.reverse
        elif t is ShortcutLayer:
            ok = (not l.multilayer and l._same_shape() and l.activation_id in ELEMENTWISE
                  and not getattr(l, "nweights", 0))
        elif t in (YoloLayer, AbYoloLayer):
            ok = True
        if not ok:
            return f"layer {i} ({l.type})"
    return None


# -- the pass ----------------------------------------------------------------------------------
def forward(net, x) -> np.ndarray:
    """Network.forward(x, train=False) in numpy: fills every layer's output; returns the
    output layer's. The network must pass `unsupported`."""
    net.require_buffers("run forward")
    net.input = net._as_input(x)
    net.truth, net.train = None, False
    net._input0 = net.input
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):   # as the kernels: quiet
        for i, l in enumerate(net.layers):
            net.index = i
            _FORWARD[l.type](l, net)
            net.input = l.output
    net.cost = float("nan")
    return net.output_layer().output


def _expf(v):
    """expf: exp of each float32 rounded to float32 (as the C library's, up to its last bit)."""
    with np.errstate(over="ignore"):
        return np.exp(v.astype(np.float64)).astype(F32)


def activate(v: np.ndarray, a: int):
    """v = act(v) in place, with the compiled activations' float arithmetic (pjreddie's leaky
    and logistic in float64 rounded once; AlexeyAB's mish and swish in float32)."""
    if a == LINEAR:
        return
    if a == LEAKY:
        np.copyto(v, (0.1 * v.astype(np.float64)).astype(F32), where=~(v > 0))
    elif a == RELU:
        np.copyto(v, F32(0), where=~(v > 0))
    elif a == LOGISTIC:
        with np.errstate(over="ignore"):
            v[...] = 1.0 / (1.0 + np.exp(-v.astype(np.float64)))
    elif a == SWISH:
        v *= _logistic_f(v)
    elif a == MISH:           # x * tanh(softplus(x)), softplus with threshold 20
        e = _expf(v)
        sp = np.where(v > 20, v, np.where(v < -20, e,
                                          np.log((e + F32(1)).astype(np.float64)).astype(F32)))
        v *= F32(2) / (F32(1) + _expf(F32(-2) * sp)) - F32(1)
    else:
        raise ValueError(f"activation {a} has no numpy forward")


def _logistic_f(v):
    """AlexeyAB's logistic_activate, all float32."""
    return F32(1) / (F32(1) + _expf(-v))


# -- the layers --------------------------------------------------------------------------------
def im2col(img: np.ndarray, size: int, stride: int, pad: int, out_h: int, out_w: int):
    """Darknet's column matrix of one (c, h, w) image: (c*size*size) x (out_h*out_w), row
    (channel, ky, kx), zeros outside the image."""
    c, h, w = img.shape
    xp = np.zeros((c, h + 2 * pad, w + 2 * pad), F32)
    xp[:, pad:pad + h, pad:pad + w] = img
    col = np.empty((c, size, size, out_h, out_w), F32)
    for ky in range(size):
        for kx in range(size):
            col[:, ky, kx] = xp[:, ky:ky + stride * (out_h - 1) + 1:stride,
                                kx:kx + stride * (out_w - 1) + 1:stride]
    return col.reshape(c * size * size, out_h * out_w)


def _convolutional(l, net):
    m, cg = l.n // l.groups, l.c // l.groups
    k, n = cg * l.size * l.size, l.out_h * l.out_w
    x = net.input[:l.batch * l.inputs].reshape(l.batch, l.c, l.h, l.w)
    out = l.output[:l.batch * l.outputs].reshape(l.batch, l.groups, m, n)
    weights = l.weights[:l.groups * m * k].reshape(l.groups, m, k)
    for b in range(l.batch):
        if l._direct_1x1():
            col = x[b].reshape(l.c, l.h * l.w)
        else:
            col = im2col(x[b], l.size, l.stride, l.pad, l.out_h, l.out_w)
        for g in range(l.groups):
            np.matmul(weights[g], col[g * k:(g + 1) * k], out=out[b, g])
    o = l.output[:l.batch * l.outputs].reshape(l.batch, l.n, n)
    if l.batch_normalize:
        var = l.rolling_variance
        d = (np.sqrt(var + F32(0.00001)) if l.quirks.bn_epsilon_inside_sqrt
             else np.sqrt(var) + F32(0.000001)).astype(F32)
        o -= l.rolling_mean[:, None]
        o /= d[:, None]
        o *= l.scales[:, None]
    o += l.biases[:, None]
    activate(o, l.activation_id)


def _maxpool(l, net):
    """forward_maxpool_layer: windows start pad/2 before the image; cells outside it and NaNs
    never win (Darknet's `val > max` test from -FLT_MAX)."""
    x = net.input[:l.batch * l.inputs].reshape(l.batch, l.c, l.h, l.w)
    out = l.output[:l.batch * l.outputs].reshape(l.batch, l.c, l.out_h, l.out_w)
    off = l.pad // 2
    hp = max(l.h + off, (l.out_h - 1) * l.stride + l.size)
    wp = max(l.w + off, (l.out_w - 1) * l.stride + l.size)
    for b in range(l.batch):
        xp = np.full((l.c, hp, wp), -FLT_MAX, F32)
        xp[:, off:off + l.h, off:off + l.w] = x[b]
        best = np.full((l.c, l.out_h, l.out_w), -FLT_MAX, F32)
        for ky in range(l.size):
            for kx in range(l.size):
                np.fmax(best, xp[:, ky:ky + l.stride * (l.out_h - 1) + 1:l.stride,
                                 kx:kx + l.stride * (l.out_w - 1) + 1:l.stride], out=best)
        out[b] = best


def _route(l, net):
    l.forward(net)              # numpy copies already


def _upsample(l, net):
    x = net.input[:l.batch * l.inputs].reshape(l.batch, l.c, l.h, 1, l.w, 1)
    out = l.output[:l.batch * l.outputs].reshape(l.batch, l.c, l.h, l.stride, l.w, l.stride)
    out[...] = F32(l.scale) * x


def _shortcut(l, net):
    n = l.batch * l.outputs
    add = net.layers[l.index].output[:n]
    out = l.output[:n]
    np.add(F32(l.alpha) * net.input[:n], F32(l.beta) * add, out=out)
    activate(out, l.activation_id)


def _yolo(l, net):
    """forward_yolo_layer at inference: logistic on x, y, objectness and classes (pjreddie's
    in float64, AlexeyAB's in float32 and none with new_coords), w and h copied; AlexeyAB's
    x, y then scaled by scale_x_y about 0.5."""
    wh = l.w * l.h
    entries = 4 + 1 + l.classes
    x = net.input[:l.batch * l.outputs].reshape(l.batch, l.n, entries, wh)
    out = l.output[:l.batch * l.outputs].reshape(l.batch, l.n, entries, wh)
    out[...] = x
    from ..layers.yolo_ab import AbYoloLayer
    ab = isinstance(l, AbYoloLayer)
    for part in (out[:, :, 0:2], out[:, :, 4:]):
        if not ab:
            with np.errstate(over="ignore"):
                part[...] = 1.0 / (1.0 + np.exp(-part.astype(np.float64)))
        elif not l.new_coords:
            part[...] = _logistic_f(part)
    if ab:
        s = F32(l.scale_x_y)
        xy = out[:, :, 0:2]
        xy *= s
        xy += F32(-0.5 * (float(s) - 1))


_FORWARD = {"convolutional": _convolutional, "maxpool": _maxpool, "route": _route,
            "upsample": _upsample, "shortcut": _shortcut, "yolo": _yolo}
