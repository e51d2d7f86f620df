"""Darknet's small tools (`examples/darknet.c`): reset, average, rescale, ops, speed.

Each is a library function here and a thin command in cli/tools.py. Where Darknet's own code
is wrong, the difference is said in the function's docstring.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from ..errors import WeightsError
from .fold import fold_batchnorm
from ..parser import load_network, parse_network_cfg


def reset_batchnorm(net) -> list[int]:
    """Darknet's `reset` (reset_normalize_net): every batch norm folded into its layer's
    weights, the batch-norm records left as the identity (scales 1, rolling mean 0, rolling
    variance 1), so training can start its statistics afresh; the cfg is unchanged. Returns
    the folded layers' indices.

    Darknet folds with sqrt(v + 1e-5) in both forks (denormalize_convolutional_layer), which
    changes a pjreddie network's outputs where variances are small, and AlexeyAB's copy indexes
    past the weights of every filter after the first. Here the dialect's own normaliser is
    used, and the identity records' own d(1) is folded in too: the outputs do not change."""
    return fold_batchnorm(net, keep_records=True)


def average_weights(cfg, paths, dialect: str | None = None):
    """Darknet's `average`: the element-wise mean of several .weights files of one cfg, summed
    in float32 in file order and multiplied by (float)(1/n), as its axpy_cpu / scal_cpu do;
    `seen` is the first file's.

    Darknet averages only [convolutional] (biases, weights, batch norm) and [connected]
    (biases, weights: not its batch norm) and keeps the first file's values for every other
    layer; here every record of every layer is averaged, which is the same for networks of
    convolutions alone (every YOLO)."""
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise WeightsError("average needs at least one .weights file")
    total = load_network(cfg, paths[0], batch=1, dialect=dialect)
    acc = [arr for l in total.layers for _, arr in l.weight_records()]
    for p in paths[1:]:
        other = load_network(cfg, p, batch=1, dialect=total.dialect)
        for a, (_, b) in zip(acc, (r for l in other.layers for r in l.weight_records())):
            a += b
    scale = np.float32(1.0 / len(paths))
    for a in acc:
        a *= scale
    total.weights_changed()
    return total


def rescale_weights(net, scale: float = 2.0, trans: float = -0.5) -> int | None:
    """Darknet's `rescale` (rescale_net): the first convolutional layer's filters that see 3
    input channels are multiplied by `scale`, and trans * (sum of the scaled filter) is added
    to the filter's output, so that the network takes inputs x' where it took
    x = scale * (x' + trans): with the defaults, [0, 1] images for a network trained on
    [-1, 1] ones (exact away from the zero padding). Returns the layer's index (None when the
    network has no convolution).

    Darknet adds the shift to the biases in every case; with batch norm the biases come after
    the normalisation, so there the shift belongs in the rolling mean (mean -= shift), which is
    where it goes here."""
    for i, l in enumerate(net.layers):
        if l.type != "convolutional":
            continue
        if l.c // l.groups != 3:
            return i
        w = l.weights.reshape(l.n, -1)
        w *= np.float32(scale)
        # float32 sums in order, as sum_array (cumsum accumulates sequentially)
        shift = np.cumsum(w, axis=1, dtype=np.float32)[:, -1] * np.float32(trans)
        if l.batch_normalize:
            l.rolling_mean -= shift
        else:
            l.biases += shift
        return i
    return None


def numops(net) -> int:
    """Darknet's numops (the `ops` and `speed` commands): multiply-adds times 2 of the
    [convolutional] (2 n size^2 c/groups out_h out_w) and [connected] (2 inputs outputs)
    layers, and of the connected sub-layers of [rnn], [gru], [lstm]; other layers count 0.
    (AlexeyAB's `ops` leaves out the /groups and over-counts grouped convolutions.)"""
    ops = 0
    for l in net.layers:
        if l.type == "convolutional":
            ops += 2 * l.n * l.size * l.size * (l.c // l.groups) * l.out_h * l.out_w
        elif l.type == "connected":
            ops += 2 * l.inputs * l.outputs
        elif l.type in ("rnn", "gru", "lstm"):
            ops += sum(2 * s.inputs * s.outputs for s in l.sublayers())
    return ops


@dataclass
class Speed:
    """What Darknet's `speed` prints."""
    evals: int
    seconds: float
    ops: int

    def report(self) -> str:
        t, n = self.seconds, self.evals
        return (f"\n{n} evals, {t:f} Seconds\n"
                f"Floating Point Operations: {self.ops / 1e9:.2f} Bn\n"
                f"FLOPS: {self.ops / 1e9 * n / t:.2f} Bn\n"
                f"Speed: {t / n:f} sec/eval\n"
                f"Speed: {n / t:f} Hz")


def speed(cfg, tics: int = 1000, dialect: str | None = None) -> Speed:
    """Darknet's `speed`: `tics` forward passes (network_predict) of a zero image at batch 1,
    timed together. The weights are Darknet's random initialisation; the rolling variances,
    which Darknet leaves at 0 (every value then overflows to inf or NaN), are set to 1 so the
    passes compute finite numbers."""
    if tics < 1:
        raise ValueError(f"tics must be at least 1, not {tics}")
    net = parse_network_cfg(cfg, batch=1, dialect=dialect)
    for l in net.layers:
        if getattr(l, "rolling_variance", None) is not None:
            l.rolling_variance[:] = 1.0
    x = np.zeros(net.inputs, np.float32)
    net.predict(x)            # numba compiles (or loads its cache) here, outside the timing
    start = time.perf_counter()
    for _ in range(tics):
        net.predict(x)
    return Speed(tics, time.perf_counter() - start, numops(net))

