"""Batch normalisation (Darknet's `batchnorm_layer.c`): forward_batchnorm / backward_batchnorm
as the convolutional, connected and deconvolutional layers apply them to their outputs, and the
[batchnorm] layer: batch normalisation on its own, no activation.

Quirks of the C code, noted: on the CPU make_batchnorm_layer never allocates x / x_norm, so a
training forward crashes there; it has no update function, so scales and biases never learn;
its .weights record is scales, rolling_mean, rolling_variance (no biases); backward *copies*
its delta over the previous layer's. We train scales and biases like a conv layer's BN (SGD
with momentum, no decay) and add the delta; compat="darknet-cpu" copies it and skips the update.
"""
import numpy as np

from ..kernels.activations import ACTIVATIONS, LEAKY, LINEAR
from ..kernels.blas import axpy_cpu, copy_cpu, mean_cpu, scal_cpu, sgd_update_cpu, variance_cpu
from ..kernels.fused import (FAST, batchnorm_backward, batchnorm_backward_delta,
                             batchnorm_backward_sums, batchnorm_bias_activate,
                             batchnorm_train_epilogue, bn_divisors, mean_variance_cpu)
from .activate import activate_output, epilogue_activation
from .base import DEFAULT_QUIRKS, Layer, alloc_batchnorm, pass_delta, require_image_input
from .memory import zeros



def one_sweep_batch_stats(l) -> bool:
    """Batch mean and variance in one float64 sweep (or in the direct convolution's rows);
    quirks.two_pass_bn_stats keeps Darknet's two passes, whose variance subtracts the float32
    mean in float32."""
    return not l.quirks.two_pass_bn_stats


def forward_batchnorm(l, net, stats_done=False):
    """forward_batchnorm_layer for conv/connected outputs already in l.output (then activation).

    Train mode: batch mean and *unbiased* variance (already in l.mean / l.variance when
    stats_done), rolling stats updated during the forward pass (pjreddie 0.99/0.01,
    AlexeyAB 0.9/0.1: quirks.bn_rolling_momentum), x kept for backward. Test mode: rolling
    statistics. The normaliser is the dialect's (see kernels.fused.bn_divisors)."""
    n, spatial = l.out_c, l.out_h * l.out_w
    act = epilogue_activation(l, net.train)
    if net.train:
        if stats_done:
            pass
        elif one_sweep_batch_stats(l):
            mean_variance_cpu(l.output, l.batch, n, spatial, l.mean, l.variance)
        else:
            mean_cpu(l.output, l.batch, n, spatial, l.mean)
            variance_cpu(l.output, l.mean, l.batch, n, spatial, l.variance)
        if l.bn_sync is not None:       # the mini-batch is split across processes
            l.bn_sync.batch_stats(l.output, l.batch, n, spatial, l.mean, l.variance)
        update_rolling_stats(l, l.mean, l.variance)
        # copy x, normalize, scale, add bias, activate: one sweep (x_norm is recomputed)
        batchnorm_train_epilogue(l.output, l.x, l.mean, bn_divisor(l, l.variance), l.scales,
                                 l.biases, l.batch, n, spatial, act)
    else:
        code = fast_epilogue(l, net, act)
        batchnorm_bias_activate(l.output, l.rolling_mean, bn_test_divisor(l, code), l.scales,
                                l.biases, l.batch, n, spatial, code)
    activate_output(l, net.train, act)


# the fast inference epilogue where allowed (tests of other paths' exactness turn it off)
FAST_EPILOGUES = True


def fast_epilogue(l, net, act) -> int:
    """The activation code of layer l's inference epilogue: with FAST (kernels/fused.py: the
    batch norm as one multiply-add, leaky in float32) for leaky and linear when the network
    is not asked to be exact (net.exact: `--exact`, DARKNUMBA_EXACT=1) nor under compat=;
    else `act`, Darknet's sequence of operations."""
    if (not FAST_EPILOGUES or net.train or getattr(net, "exact", False)
            or l.quirks.compat is not None or act not in (LEAKY, LINEAR)):
        return act
    return act | FAST


def bn_test_divisor(l, code):
    """What a test-mode epilogue of activation code `code` divides by: bn_divisor of the
    rolling variance, or with FAST the factor scales / that divisor it multiplies by (computed
    at each forward, as the statistics may have changed, into l.bn_factor, allocated once)."""
    d = bn_divisor(l, l.rolling_variance)
    if not code & FAST:
        return d
    f = getattr(l, "bn_factor", None)
    if f is None or f.shape != d.shape:
        f = l.bn_factor = np.empty_like(d)
    np.divide(l.scales[:d.size], d, out=f)
    return f


def update_rolling_stats(l, mean, variance):
    """The rolling statistics' step towards a batch's mean and variance (in forward_batchnorm;
    data-parallel training replays it for the mini-batches other processes ran)."""
    n = l.out_c
    keep = l.quirks.bn_rolling_momentum
    scal_cpu(n, keep, l.rolling_mean)
    axpy_cpu(n, 1.0 - keep, mean, l.rolling_mean)
    scal_cpu(n, keep, l.rolling_variance)
    axpy_cpu(n, 1.0 - keep, variance, l.rolling_variance)


def bn_divisor(l, variance):
    """The dialect's batch-norm normaliser per channel for `variance`, in l.divisor."""
    bn_divisors(variance, l.quirks.bn_epsilon_inside_sqrt, l.divisor)
    return l.divisor


def backward_batchnorm(l, net):
    """backward_batchnorm_layer on l.delta (already multiplied by act'): bias and scale
    gradients from the incoming delta, then delta <- d/d(pre-normalisation x), through the
    batch mean and variance (train mode) or the rolling statistics (test mode)."""
    n, spatial = l.out_c, l.out_h * l.out_w
    mean, variance = (l.mean, l.variance) if net.train else (l.rolling_mean, l.rolling_variance)
    kept = l.bias_updates.copy() if l.quirks.bn_bias_not_updated else None
    if l.bn_sync is not None and net.train:
        # the mini-batch is split across processes: its sums are added up over all of them
        sums = l.bn_sync.sums_buffer(n)
        batchnorm_backward_sums(l.delta, l.x, mean, l.batch, n, spatial, l.bias_updates,
                                l.scale_updates, l.mean, bn_divisor(l, l.variance), sums)
        l.bn_sync.add_up(sums)
        batchnorm_backward_delta(l.delta, l.x, mean, variance, l.scales, l.batch, n, spatial,
                                 sums, l.bn_sync.ranks * l.batch * spatial, l.mean_delta,
                                 l.variance_delta, l.quirks.bn_delta_eps_outside_sqrt)
    else:
        batchnorm_backward(l.delta, l.x, mean, variance, l.scales, l.batch, n, spatial,
                           l.bias_updates, l.scale_updates, l.mean_delta, l.variance_delta,
                           l.mean, bn_divisor(l, l.variance), l.quirks.bn_delta_eps_outside_sqrt)
    if kept is not None:
        l.bias_updates[:] = kept

class BatchnormLayer(Layer):
    type = "batchnorm"

    def __init__(self, batch, w, h, c, quirks=DEFAULT_QUIRKS):
        self.batch, self.c, self.quirks = batch, c, quirks
        self.n = self.out_c = c
        self.batch_normalize = True
        self.activation, self.activation_id = "linear", ACTIVATIONS["linear"]
        self.biases, self.bias_updates = zeros(c), zeros(c)
        alloc_batchnorm(self, c)
        self.learning_rate_scale = 1.0
        self.resize(w, h)

    @classmethod
    def from_cfg(cls, s, params):
        require_image_input(s, params)
        return cls(params.batch, params.w, params.h, params.c, params.net.quirks)

    def resize(self, w, h):
        self.w = self.out_w = w
        self.h = self.out_h = h
        self.inputs = self.outputs = w * h * self.c
        self._alloc_io()
        self.train_buffer("x", self.batch * self.outputs, "batch norm's input")

    def forward(self, net):
        """forward_batchnorm_layer"""
        copy_cpu(self.batch * self.outputs, net.input, self.output)
        forward_batchnorm(self, net)

    def backward(self, net):
        """backward_batchnorm_layer"""
        backward_batchnorm(self, net)
        pass_delta(net, self.delta, self.batch * self.outputs, self.quirks.overwrite_delta)

    def update(self, a):
        if self.quirks.batchnorm_layer_not_updated:
            return
        f32 = np.float32
        step = f32(f32(a.learning_rate) * f32(self.learning_rate_scale) / f32(a.batch))
        sgd_update_cpu(self.c, step, 0.0, a.momentum, self.biases, self.bias_updates)
        sgd_update_cpu(self.c, step, 0.0, a.momentum, self.scales, self.scale_updates)

    def weight_records(self):
        return [("scales", self.scales), ("rolling_mean", self.rolling_mean),
                ("rolling_variance", self.rolling_variance)]

    def describe(self):
        return f"Batch Normalization Layer: {self.w} x {self.h} x {self.c} image"
