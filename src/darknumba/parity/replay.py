"""Each layer judged on what it computes itself: darknumba's layers run one at a time on C
darknet's own tensors, so the float32 rounding that C's long sums carry from layer to layer
is not blamed on the layer that receives it.

- forward: layer i reads C's output of the layers before it (teacher forcing: once judged,
  our layer's output is overwritten with C's). A batch-norm layer in train mode computes its
  own batch statistics (judged against C's) and, separately, its output on C's statistics
  (a test-mode pass with the rolling statistics set to C's batch mean and variance: both
  dialects normalise with the same formula in both modes), so the output is judged on the
  layer's convolution and normalisation, the statistics on their sums.
- backward (``trainstep``): layer i gets C's forward state (``output``, ``x``, ``mean``,
  ``variance``, and what AlexeyAB's swish / mish / hard_mish kept, ``activation_input``: their
  gradient at our own pre-activation would carry the rounding of the layer's long sums), C's
  delta as its own backward started, and C's deltas of the layers it adds
  into as they were just before; its gradients start from zero (as C's did).
- update: each layer's step from C's parameters and C's gradients, with C's learning rate.

The results come back keyed as C's tensors are (``L###_output``, ``L###_weight_updates``,
``after_L###_weights``, ``L###_bwd_out_###``...), for tensordiff to hold against C's.
"""
from __future__ import annotations

import numpy as np

from ..layers.antialias import Antialiased
from ..layers.base import UpdateArgs, skips_update
from ..network import zero_delta

# what a layer's backward reads (activation_input: what swish / mish / hard_mish kept)
STATE_FIELDS = ("output", "x", "mean", "variance", "activation_input")
GRADS = ("weight_updates", "bias_updates", "scale_updates")
STEP = ("weights", "biases", "scales")
# layers whose own computation cannot be replayed: random masks, or state kept inside
NOT_REPLAYED = frozenset({"dropout", "rnn", "gru", "lstm", "crnn", "conv_lstm", "history"})


def _key(i: int, f: str, prefix: str = "") -> str:
    return f"{prefix}L{i:03d}_{f}"


def _array(l, f: str):
    a = getattr(l, f, None)
    return a if isinstance(a, np.ndarray) and a.size else None


def _put(l, f: str, value) -> bool:
    """l.f[:] = value when both exist with the same size."""
    a = _array(l, f)
    if a is None or value is None or np.size(value) != a.size:
        return False
    a[...] = np.asarray(value, np.float32).reshape(a.shape)
    return True


def final_delta(l) -> np.ndarray:
    """The delta darknet's backward leaves in a layer: an antialiased layer's is its host's
    (the stride-1 size, as AlexeyAB keeps it), which the convolution's backward rewrites in
    place; the blurred-size delta the next layers add into is `l.delta`."""
    return l.host.delta if isinstance(l, Antialiased) else l.delta


def has_batch_stats(l) -> bool:
    return (l.type == "batchnorm" or bool(getattr(l, "batch_normalize", 0))) \
        and _array(l, "rolling_mean") is not None and _array(l, "mean") is not None


def replay(net, ref: dict, meta: dict, mode: str, truth=None) -> dict:
    """Run `net` (a network of its own: its state is spent) layer by layer on C's tensors
    `ref` (golden layout; meta: the run's "run" and "layers"). Returns our tensors."""
    run = meta.get("run", {})
    own: dict = {}
    train = mode != "forward_test"
    x = np.ascontiguousarray(ref["input"], np.float32).reshape(-1)
    net.truth = None if truth is None else np.ascontiguousarray(truth, np.float32).reshape(-1)
    if mode == "trainstep" and run.get("seen_after") is not None:
        net.seen = int(run["seen_after"])      # C's forward ran after seen += batch
    elif run.get("seen_before") is not None:
        net.seen = int(run["seen_before"])
    _forward(net, ref, x, train, mode == "trainstep", own)
    if mode == "trainstep":
        # a loss layer's delta, made by its forward, is C's final one unless a layer above
        # adds into it in backward (a [cost] after a [softmax]); unknown in older recordings
        layers = meta.get("layers", [])
        known = bool(layers) and all("bwd_dests" in d or d.get("stopbackward")
                                     for d in layers[-1:])
        written = {j for d in layers for j in (d.get("bwd_dests") or [])}
        for i, l in enumerate(net.layers):
            if l.cost is not None and (not known or i in written):
                own.pop(_key(i, "delta"), None)
        for i in range(net.n):          # the rolling statistics are updated by forward
            for f in ("rolling_mean", "rolling_variance"):
                if _key(i, f) in own:
                    own[_key(i, f, "after_")] = own.pop(_key(i, f))
        _backward(net, ref, meta.get("layers", []), x, own)
        if run.get("did_update"):
            _update(net, ref, run, own)
    return own


def _forward(net, ref, x, train, step, own):
    """Teacher-forced forward. In a train step only loss layers keep their forward delta
    (the others' is what backward makes of it)."""
    net._input0 = x
    for i, l in enumerate(net.layers):
        net.index, net.train = i, train
        net.input = x if i == 0 else net.layers[i - 1].output
        if l.type in NOT_REPLAYED:
            _put(l, "output", ref.get(_key(i, "output")))
            continue
        if train:
            zero_delta(l.delta)
        l.forward(net)
        for f in ("output", "mean", "variance", "delta", "rolling_mean", "rolling_variance"):
            a = _array(l, f)
            if a is not None and (train or f == "output") and \
                    not (f == "delta" and step and l.cost is None):
                own[_key(i, f)] = a.copy()
        if train and l.cost is not None:
            own[_key(i, "cost")] = np.array([l.cost], np.float32)
        if train and has_batch_stats(l) and _key(i, "mean") in ref:
            own[_key(i, "output")] = _output_on_ref_stats(net, l, ref, i)
        _put(l, "output", ref.get(_key(i, "output")))
        if train and net.truth is not None and getattr(l, "truth", 0):
            net.truth = l.output
    net.train = train


def _output_on_ref_stats(net, l, ref, i) -> np.ndarray:
    """The layer's output with C's batch mean and variance in place of its own: its test-mode
    forward with the rolling statistics set to them (then restored)."""
    keep = l.rolling_mean.copy(), l.rolling_variance.copy()
    _put(l, "rolling_mean", ref[_key(i, "mean")])
    _put(l, "rolling_variance", ref.get(_key(i, "variance")))
    net.train = False
    l.forward(net)
    net.train = True
    out = l.output.copy()
    l.rolling_mean[...], l.rolling_variance[...] = keep
    return out


def _backward(net, ref, ref_layers, x, own):
    dests = {d.get("index", k): d.get("bwd_dests") for k, d in enumerate(ref_layers)}
    for i in range(net.n - 1, -1, -1):
        l = net.layers[i]
        if getattr(l, "stopbackward", 0):
            break
        if l.type in NOT_REPLAYED or _key(i, "delta_in") not in ref or dests.get(i) is None:
            continue
        for f in STATE_FIELDS:
            _put(l, f, ref.get(_key(i, f)))
        _put(l, "delta", ref[_key(i, "delta_in")])
        for j in dests[i]:
            _put(net.layers[j], "delta",
                 ref.get(f"L{i:03d}_bwd_in_{j:03d}", np.zeros(net.layers[j].delta.size)))
        for g in GRADS:
            a = _array(l, g)
            if a is not None:
                a.fill(0.0)
        net.index, net.train = i, True
        net.input = x if i == 0 else net.layers[i - 1].output
        net.delta = None if i == 0 else net.layers[i - 1].delta
        if not (getattr(l, "onlyforward", 0) and l.quirks.onlyforward_skips_backward):
            l.backward(net)
        if l.cost is None or _key(i, "delta") not in own:   # a loss layer's delta is forward's
            own[_key(i, "delta")] = final_delta(l).copy()
        for g in GRADS:
            a = _array(l, g)
            if a is not None:
                own[_key(i, g)] = a.copy()
        for j in dests[i]:
            own[f"L{i:03d}_bwd_out_{j:03d}"] = net.layers[j].delta.copy()


def _update(net, ref, run, own):
    """update_network on C's parameters and gradients, with C's rate."""
    a = UpdateArgs(batch=net.batch * net.subdivisions, learning_rate=float(run["rate"]),
                   momentum=net.momentum, decay=net.decay, adam=net.adam, B1=net.B1,
                   B2=net.B2, eps=net.eps, t=net.t + 1)
    for i, l in enumerate(net.layers):
        if not any(_key(i, f, "before_") in ref for f in STEP):
            continue
        for f in STEP:
            _put(l, f, ref.get(_key(i, f, "before_")))
        for g in GRADS:
            _put(l, g, ref.get(_key(i, g)))
        if not skips_update(l, net.quirks):
            l.update(a)
        for f in STEP:
            arr = _array(l, f)
            if arr is not None:
                own[_key(i, f, "after_")] = arr.copy()
