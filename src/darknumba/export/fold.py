"""Batch norm folded into the convolution (or connected) weights, with the dialect's own
normaliser, so the network computes what it computed before.

A layer with batch norm computes, in test mode, per output channel f:
    out = scales[f] * (W x - rolling_mean[f]) / d(rolling_variance[f]) + biases[f]
with d(v) = sqrt(v) + 1e-6 in pjreddie's forward pass (normalize_cpu) and sqrt(v + 1e-5) in
AlexeyAB's. Folded: W' = W * scales / d(v), biases' = biases - rolling_mean * scales / d(v).

Darknet's own folding (``denormalize_convolutional_layer``, behind `./darknet denormalize` and
`reset`) divides by sqrt(v + 1e-5) in both forks. For AlexeyAB's forward pass that is exact;
for pjreddie's it is not: where a channel's variance is small the two normalisers differ (at
v = 1e-4, sqrt(v) + 1e-6 = 0.010001 and sqrt(v + 1e-5) = 0.010488, 5 %), so the folded network
no longer computes the original's outputs. Here each dialect folds with its own d(v).
"""
from __future__ import annotations

import numpy as np

from ..cfg import read_cfg
from ..errors import CfgError
from ..inputs import MAX_CFG, read_bytes


def bn_normaliser(variance, quirks) -> np.ndarray:
    """The forward pass's d(v) per channel, in float64 from the float32 values (see the module
    docstring; kernels.fused.bn_divisors computes the same in float32)."""
    v = np.asarray(variance, np.float64)
    if quirks.bn_epsilon_inside_sqrt:
        return np.sqrt(v + np.float64(np.float32(1e-5)))
    return np.sqrt(v) + np.float64(np.float32(1e-6))


def folded(l, quirks, keep_identity: bool = False):
    """(weights, biases) of layer l with its batch norm folded in, float32, l left unchanged.
    keep_identity: for a layer that keeps its batch-norm records set to the identity
    (scales 1, mean 0, variance 1), whose forward pass still divides by d(1)."""
    ratio = np.asarray(l.scales, np.float64) / bn_normaliser(l.rolling_variance, quirks)
    per_out = l.weights.reshape(l.out_c, -1)
    gain = ratio * (bn_normaliser([1.0], quirks)[0] if keep_identity else 1.0)
    weights = (per_out.astype(np.float64) * gain[:, None]).astype(np.float32).reshape(-1)
    biases = (np.asarray(l.biases, np.float64)
              - np.asarray(l.rolling_mean, np.float64) * ratio).astype(np.float32)
    return weights, biases


def batchnorm_layers(net):
    """(index, layer) of every convolutional/connected layer with batch norm, the sub-layers
    of [rnn], [gru], [lstm], [crnn] included (under their layer's index)."""
    for i, l in enumerate(net.layers):
        for part in (l.sublayers() or [l]):
            if part.bn_foldable and getattr(part, "batch_normalize", False):
                yield i, part


def fold_batchnorm(net, keep_records: bool = False) -> list[int]:
    """Fold every convolutional/connected layer's batch norm into its weights, in place;
    returns the indices of the folded layers.

    keep_records=False: the layers lose their batch norm (batch_normalize = 0), so their
    .weights records shrink to biases and weights: save with the cfg of write_folded_cfg.
    keep_records=True: the records stay, set to the identity (scales 1, rolling mean 0,
    rolling variance 1), as Darknet's `reset` leaves them; the same cfg still reads the file."""
    done = []
    for i, l in list(batchnorm_layers(net)):
        if i not in done:
            done.append(i)
        w, b = folded(l, net.quirks, keep_identity=keep_records)
        l.weights[:] = w
        l.biases[:] = b
        if keep_records:
            l.scales[:] = 1.0
            l.rolling_mean[:] = 0.0
            l.rolling_variance[:] = 1.0
        else:
            l.batch_normalize = False
    net.weights_changed()
    return done


def folded_cfg_text(cfg_path, layers: list[int]) -> str:
    """The cfg's text with `batch_normalize=0` in the sections of `layers` (layer i is the
    section after [net] numbered i); comments and everything else kept line for line."""
    sections = read_cfg(cfg_path)
    lines = read_bytes(cfg_path, "cfg file", CfgError, MAX_CFG).decode("utf-8").splitlines()
    for i in layers:
        s = sections[i + 1]
        line = s.lines.get("batch_normalize")
        if line is None:
            continue
        end = sections[i + 2].line if i + 2 < len(sections) else len(lines) + 1
        for k in range(s.line, end - 1):       # every batch_normalize line of the section
            key = "".join(lines[k].split()).split("=", 1)[0]
            if key == "batch_normalize":
                lines[k] = "batch_normalize=0"
    return "\n".join(lines) + "\n"
