"""How far two float32 evaluations of one layer's own computation may be apart: the per-layer
tolerance of `darknumba compare`.

Darknumba and C darknet evaluate the same formulas; their results differ by float32 rounding
alone, and most of it comes from the reductions (sums) a layer does, whose order differs
(C: one value at a time; darknumba: BLAS blocks, float64 accumulators). For a sum of K terms:

    |ours - C| <= C_SUM * EPS * sqrt(K) * T   (+ C_ELEM * EPS * max|C| for element-wise work)

with T = sum |terms| of that entry, computed exactly from C's own tensors (the layer run on
|input|, |weights|, |delta|: see abs_terms). sqrt(K): the rounding errors of a long sum
behave as a random walk (Higham & Mary, "A new approach to probabilistic rounding error
analysis", 2019: the error stays below lambda * sqrt(K) * u * T except with probability
~exp(-lambda^2 / 2)); C_SUM = 8 is lambda = 4 for each of the two evaluations.

C's batch statistics (mean_cpu, variance_cpu) and its cost (mag_array) add up to
batch x out_h x out_w values one at a time in float32, where a run of equal values (the grey
letterbox border, a flat sky) makes the rounding drift one way instead of a random walk. For
those the bound is the worst case of recursive summation (Higham, Accuracy and Stability of
Numerical Algorithms, (4.3)): u * sum_k |S_k| over the partial sums S_k, taken in C's order
from C's own values: what C's float32 sum may be off, plus our (float64) side's rounding.
"""
from __future__ import annotations

import copy
import math

import numpy as np

from ..kernels.activations import ACTIVATIONS
from ..kernels.fused import bn_divisors
from ..layers.antialias import Antialiased

EPS = 2.0 ** -23          # float32 machine epsilon: the spacing of floats at 1
U = EPS / 2               # unit roundoff: the largest relative error of one rounding
C_SUM = 8.0               # lambda = 4 for each side (see the module docstring)
C_ELEM = 16.0             # element-wise work (activations, normalisation, axpy): a few ulps
LINEAR_LAYERS = ("convolutional", "connected", "deconvolutional", "local")
# the largest |act'| where it exceeds 1 (AlexeyAB's formulas): what a delta can grow by
MAX_SLOPE = {"ramp": 1.1, "gelu": 1.13, "swish": 1.1, "mish": 1.1, "selu": 1.76}


def sum_tol(K, T):
    """The tolerance of a K-term sum whose terms have absolute values adding up to T."""
    return C_SUM * EPS * math.sqrt(max(int(K), 1)) * np.asarray(T, np.float64)


def elem_tol(ref) -> float:
    r = np.asarray(ref, np.float64)
    r = r[np.isfinite(r)]
    return C_ELEM * EPS * (float(np.max(np.abs(r))) if r.size else 0.0)


def recursive_sum_bound(v: np.ndarray) -> np.ndarray:
    """u * sum_k |S_k| for each row of v (values in the order they are added): the first-order
    worst case of a float32 sum taken one value at a time."""
    s = np.cumsum(np.asarray(v, np.float64), axis=-1)
    return U * np.abs(s[..., 1:]).sum(axis=-1)


def _channels(layer):
    """(channels, spatial) of a layer's output; connected layers: (outputs, 1)."""
    if layer.type == "connected":
        return layer.outputs, 1
    return layer.out_c, layer.out_h * layer.out_w


def _per_channel(a, layer) -> np.ndarray:
    """A flat batch x channels x spatial tensor as channels x (batch * spatial), in the order
    Darknet's per-channel sums add it (image by image, pixel by pixel)."""
    n, sp = _channels(layer)
    return np.asarray(a, np.float64).reshape(layer.batch, n, sp).transpose(1, 0, 2) \
        .reshape(n, layer.batch * sp)


def _bcast(per_channel, layer) -> np.ndarray:
    """A per-channel value broadcast over a flat batch x channels x spatial tensor."""
    n, sp = _channels(layer)
    return np.broadcast_to(np.asarray(per_channel, np.float64)[None, :, None],
                           (layer.batch, n, sp)).reshape(-1)


def reduction_length(layer) -> int:
    """K of a linear layer's forward sums."""
    if layer.type == "connected":
        return layer.inputs
    return (layer.c // max(getattr(layer, "groups", 1), 1)) * layer.size * layer.size


def abs_terms(layer, net, x, delta=None, power=1):
    """sum |terms|^power of every entry of a linear layer's reductions, by running the layer
    itself on |values|^power (a copy with |weights|^power, no bias, no batch norm, linear
    activation): forward on |x|^power gives them for the output; backward with |delta|^power
    for weight_updates and for the input gradient.
    Returns (T_output, T_weight_updates, T_input_gradient)."""
    def p(a):
        return np.abs(np.asarray(a, np.float32)) ** np.float32(power)
    c = copy.copy(layer)
    c.weights = p(layer.weights)
    c.biases = np.zeros_like(layer.biases)
    c.batch_normalize = 0
    c.activation, c.activation_id = "linear", ACTIVATIONS["linear"]
    c.output = np.zeros_like(layer.output)
    c.delta = np.zeros_like(layer.delta)
    c.weight_updates = np.zeros_like(layer.weight_updates)
    c.bias_updates = np.zeros_like(layer.bias_updates)
    saved = net.input, net.delta, net.train
    try:
        net.input, net.train = p(x), False
        c.forward(net)
        t_out = c.output.copy()
        if delta is None:
            return t_out, None, None
        c.delta[...] = p(delta).reshape(c.delta.shape)
        prev = np.zeros(layer.batch * layer.inputs, np.float32)
        net.delta, net.train = prev, True
        c.backward(net)
        return t_out, c.weight_updates.copy(), prev
    finally:
        net.input, net.delta, net.train = saved


def bn_divisor(layer, variance) -> np.ndarray:
    out = np.empty(np.size(variance), np.float32)
    bn_divisors(np.asarray(variance, np.float32), layer.quirks.bn_epsilon_inside_sqrt, out)
    return out.astype(np.float64)


# --------------------------------------------------------------------------------------------
# Per tensor: the tolerance of each entry, and the longest reduction behind it

class LayerBounds:
    """Tolerances for the tensors of layer i (darknumba's `layer`, in `net`), from C's tensors
    `ref` (golden layout). `get(field)` -> (tau, K): tau per entry (or a scalar), or None
    where the tensors it needs are missing."""

    def __init__(self, i, layer, net, ref, mode):
        self.i, self.l, self.net, self.ref, self.mode = i, layer, net, ref, mode
        self._terms = None
        self.blur = None
        if isinstance(layer, Antialiased):
            # judged as its host (the stride-1 layer whose delta and gradients C keeps); the
            # output, the blurred one, through the blur (see output_through_blur)
            self.l, self.blur = layer.host, layer.blur

    def r(self, f, prefix=""):
        return self.ref.get(f"{prefix}L{self.i:03d}_{f}")

    def x_in(self):
        return self.ref.get("input") if self.i == 0 else self.ref.get(f"L{self.i - 1:03d}_output")

    def terms(self):
        if self._terms is None:
            x, d = self.x_in(), self.r("delta")
            if x is None or np.size(x) != self.l.batch * self.l.inputs:
                return None, None, None
            if d is not None and np.size(d) != self.l.delta.size:
                d = None
            self._terms = abs_terms(self.l, self.net, x, d)
        return self._terms

    def get(self, field):
        l, ref = self.l, self.r(field) if not field.startswith("after_") else None
        if field.startswith("after_"):
            return self.after(field.removeprefix("after_"))
        if field.startswith("bwd_out"):
            return self.input_gradient(field)
        if ref is None:
            return None
        linear = l.type in LINEAR_LAYERS and getattr(l, "weights", None) is not None
        if field == "cost":
            return self.cost()
        if field == "output" and self.blur is not None:
            return self.output_through_blur(ref)
        if linear and field in ("output", "mean", "variance", "weight_updates", "bias_updates",
                                "scale_updates") or (linear and field == "delta"
                                                     and self.mode == "trainstep"):
            return getattr(self, "lin_" + field)(ref)
        K = {"avgpool": l.h * l.w, "softmax": max(l.inputs // max(getattr(l, "groups", 1), 1), 1),
             }.get(l.type, 1) if field == "output" else 1
        return elem_tol(ref) + sum_tol(K, 0.0 if K == 1 else np.max(np.abs(ref))), K

    # -- linear layers (convolutional, connected, ...) -------------------------------------
    def _bn(self):
        return bool(getattr(self.l, "batch_normalize", 0))

    def _stats(self):
        """The variance the output was normalised with: C's batch variance in train mode,
        the rolling one (loaded, the same on both sides) in test mode."""
        return self.r("variance") if self.mode != "forward_test" else self.l.rolling_variance

    def lin_output(self, ref):
        t_out = self.terms()[0]
        if t_out is None:
            return None
        K = reduction_length(self.l)
        gain = 1.0
        if self._bn():
            v = self._stats()
            if v is None:
                return None
            gain = _bcast(np.abs(self.l.scales) / bn_divisor(self.l, v), self.l)
        return sum_tol(K, t_out * gain) + elem_tol(ref), K

    def output_through_blur(self, ref):
        """An antialiased layer's output: its host's tolerance carried through the blur (a
        convolution with positive taps adding up to 1), plus the blur's own rounding on the
        host's output (ours: C keeps only the blurred values in front of it)."""
        host = self.lin_output(self.l.output) if self.l.type in LINEAR_LAYERS else \
            (elem_tol(self.l.output), 1)
        if host is None:
            return None
        tau = np.broadcast_to(np.asarray(host[0], np.float32), self.l.output.shape)
        K = self.blur.size * self.blur.size
        carried = abs_terms(self.blur, self.net, tau)[0]
        own = sum_tol(K, abs_terms(self.blur, self.net, self.l.output)[0])
        return carried + own + elem_tol(ref), max(host[1], K)

    def _y(self):
        """C's pre-normalisation values per channel (its l.x), or None."""
        x = self.r("x")
        return None if x is None or np.size(x) != self.l.delta.size else _per_channel(x, self.l)

    def _gemm_tol_per_channel(self):
        t_out = self.terms()[0]
        return None if t_out is None else \
            _per_channel(sum_tol(reduction_length(self.l), t_out), self.l).mean(axis=1)

    def lin_mean(self, ref):
        y, g = self._y(), self._gemm_tol_per_channel()
        if y is None or g is None:
            return None
        M = y.shape[1]
        return recursive_sum_bound(y) / M + g + elem_tol(ref), M

    def lin_variance(self, ref):
        y, g, m = self._y(), self._gemm_tol_per_channel(), self.r("mean")
        if y is None or g is None or m is None:
            return None
        M = y.shape[1]
        sq = (y - np.asarray(m, np.float64)[:, None]) ** 2
        return (recursive_sum_bound(sq) / (M - 1) + 2 * np.sqrt(np.abs(ref)) * g
                + elem_tol(ref)), M

    def _delta_act(self):
        """|C's delta as the layer's backward started| times the largest |act'| (1 for most:
        MAX_SLOPE), which bounds it after act'."""
        d = self.r("delta_in")
        if d is not None and self.blur is not None and np.size(d) == self.blur.delta.size \
                and self.l.quirks.antialias_no_blur_backward:
            # AlexeyAB's CPU backward reads the blurred-size delta as the start of the host's
            d = np.concatenate([np.asarray(d), np.zeros(self.l.delta.size - np.size(d))])
        return None if d is None or np.size(d) != self.l.delta.size else np.abs(
            np.asarray(d, np.float64)) * MAX_SLOPE.get(getattr(self.l, "activation", ""), 1.0)

    def lin_delta(self, ref):
        """The layer's own delta after its backward: act' (element-wise) and, with batch
        norm, the mean and variance deltas, sums over batch x spatial."""
        if not self._bn():
            return elem_tol(ref), 1
        d, y, m, v = self._delta_act(), self._y(), self.r("mean"), self.r("variance")
        if d is None or y is None or m is None or v is None:
            return None
        M = y.shape[1]
        sd = np.sqrt(np.asarray(v, np.float64) + 1e-5)
        ds = _per_channel(d, self.l) * np.abs(self.l.scales)[:, None]
        dev = np.abs(y - np.asarray(m, np.float64)[:, None])
        t_mean = ds.sum(axis=1) / sd / M
        t_var = (ds * dev).sum(axis=1) * 0.5 / sd ** 3 * 2 / M
        per_entry = t_mean[:, None] + t_var[:, None] * dev          # channels x (batch*spatial)
        n, sp = _channels(self.l)
        tau = sum_tol(M, per_entry).reshape(n, self.l.batch, sp).transpose(1, 0, 2).reshape(-1)
        return tau + elem_tol(ref), M

    def _grad_K(self):
        n, sp = _channels(self.l)
        return self.l.batch * sp

    def lin_weight_updates(self, ref):
        t_wu = self.terms()[1]
        if t_wu is None:
            return None
        return sum_tol(self._grad_K(), t_wu) + elem_tol(ref), self._grad_K()

    def lin_bias_updates(self, ref):
        d = self._delta_act()
        if d is None:
            return None
        return sum_tol(self._grad_K(), _per_channel(d, self.l).sum(axis=1)) + elem_tol(ref), \
            self._grad_K()

    def lin_scale_updates(self, ref):
        d, xn = self._delta_act(), self.r("x_norm")
        if xn is None and self._y() is not None and self.r("mean") is not None:
            y, v = self._y(), self.r("variance")       # C's x_norm from its x and statistics
            xn = ((y - np.asarray(self.r("mean"), np.float64)[:, None])
                  / bn_divisor(self.l, v)[:, None])
            xn = xn.reshape(_channels(self.l)[0], self.l.batch, -1).transpose(1, 0, 2).reshape(-1)
        if d is None or xn is None or np.size(xn) != d.size:
            return None
        t = _per_channel(d * np.abs(np.asarray(xn, np.float64)), self.l).sum(axis=1)
        return sum_tol(self._grad_K(), t) + elem_tol(ref), self._grad_K()

    # -- the other tensors ---------------------------------------------------------------------
    def input_gradient(self, field):
        """A delta this layer's backward added into (bwd_out_JJJ): C's value after it."""
        j = int(field[-3:])
        ref = self.ref.get(f"L{self.i:03d}_{field}")
        if ref is None and j == self.i - 1:
            ref = self.ref.get(f"L{j:03d}_delta_in")
        if ref is None:
            return None
        l = self.l
        if l.type in LINEAR_LAYERS and getattr(l, "weights", None) is not None:
            t_prev = self.terms()[2]
            if t_prev is None or t_prev.size != np.size(ref):
                return None
            K = l.n * l.size * l.size if l.type == "convolutional" else l.outputs
            return sum_tol(K, t_prev) + elem_tol(ref), K
        K = {"maxpool": math.ceil(l.size / l.stride) ** 2 if l.type == "maxpool" else 1,
             "upsample": getattr(l, "stride", 1) ** 2}.get(l.type, 1)
        return elem_tol(ref) + sum_tol(K, 0.0 if K == 1 else np.max(np.abs(ref))), K

    def cost(self):
        """A loss layer's cost: |delta|^2 summed in float32 one value at a time (mag_array)."""
        d = self.r("delta")
        c = self.r("cost")
        if d is None:
            return elem_tol(c), 1
        d = np.asarray(d, np.float64).reshape(-1)
        tau = recursive_sum_bound(d * d) + 2 * C_ELEM * EPS * np.abs(d).max() * np.abs(d).sum()
        return float(tau) + elem_tol(c), d.size

    def after(self, f):
        """A parameter after update_network, from C's parameters and gradients: element-wise;
        the rolling statistics follow the batch statistics with weight (1 - momentum)."""
        ref = self.r(f, "after_")
        if ref is None:
            return None
        if f in ("rolling_mean", "rolling_variance"):
            b = self.get(f.removeprefix("rolling_"))
            if b is None:
                return None
            keep = self.l.quirks.bn_rolling_momentum
            return (1 - keep) * np.asarray(b[0]) + elem_tol(ref), b[1]
        before = self.r(f, "before_")
        if before is None or np.size(before) != np.size(ref):
            return None
        return C_ELEM * EPS * (np.abs(np.asarray(before, np.float64))
                               + np.abs(np.asarray(ref, np.float64))), 1
