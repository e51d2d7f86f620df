"""Per-layer timing of forward (and backward) passes: where the time goes."""
import time

import numpy as np

from ..network import zero_delta


def unit_rolling_variance(net):
    """For timing with random weights: Darknet starts the rolling variance at 0, so a test-mode
    forward of an untrained network divides by sqrt(0) + 1e-6 and overflows to inf / NaN within
    a few layers (as C darknet does). Setting it to 1 keeps the timed values finite."""
    for l in net.layers:
        if getattr(l, "rolling_variance", None) is not None:
            l.rolling_variance[:] = 1.0


def _rate(gflop: float, ms: float, peak) -> str:
    """GFLOP/s of `gflop` done in `ms`, and its share of `peak` GFLOP/s when one is given."""
    rate = gflop / ms * 1000 if gflop and ms else 0.0
    return f"{rate:7.1f}" + (f" {rate / peak:6.1%}" if peak else "")


def _table(net, fwd_ms, bwd_ms=None, peak=None) -> str:
    """One row per layer: its type, for a convolution how it is computed (forward_path, as the
    network ran: in training or at inference), ms and effective GFLOPS (Darknet's BFLOPs count,
    layer.bflops, over the time), with `peak` (GFLOP/s, train/peak.py) the share of it, and the
    layer's share of the total time."""
    total = fwd_ms.sum() + (bwd_ms.sum() if bwd_ms is not None else 0)
    rate_head = f" {'GFLOPS':>7}" + (f" {'%peak':>6}" if peak else "")
    head = f"{'layer':>5} {'type':<14}{'path':<12}{'fwd ms':>8}" + rate_head
    if bwd_ms is not None:
        head += f"{'bwd ms':>8}" + rate_head
    rows = [head + f" {'share':>6}"]
    for i, l in enumerate(net.layers):
        gf = l.bflops * net.batch
        path = l.forward_path(net)
        row = f"{i:5d} {l.type:<14}{path:<12}{fwd_ms[i]:8.2f} " + _rate(gf, fwd_ms[i], peak)
        t = fwd_ms[i]
        if bwd_ms is not None:
            # backward of a conv/connected layer: a weight-gradient and an input-gradient GEMM
            row += f"{bwd_ms[i]:8.2f} " + _rate(2 * gf, bwd_ms[i], peak)
            t += bwd_ms[i]
        rows.append(row + f" {t / total:6.1%}")
    rows.append(f"{'':5} {'total':<14}{'':<12}{fwd_ms.sum():8.2f} {'':{14 if peak else 7}}"
                + (f"{bwd_ms.sum():8.2f}" if bwd_ms is not None else ""))
    return "\n".join(rows)


def profile_forward(net, x, reps: int = 5, train: bool = False, peak=None) -> str:
    """Run `reps` forward passes timing each layer; Darknet-style rows with ms and GFLOPS
    (and the share of `peak` GFLOP/s when given)."""
    x = net._as_input(x)
    times = np.zeros((reps, net.n))
    for r in range(reps):
        net.input, net.truth, net.train = x, None, train
        for i, l in enumerate(net.layers):
            net.index = i
            t = time.perf_counter()
            l.forward(net)
            times[r, i] = time.perf_counter() - t
            net.input = l.output
    return _table(net, np.median(times, axis=0) * 1000, peak=peak)


def profile_train(net, x, truth, reps: int = 3, peak=None) -> str:
    """Time each layer's forward and backward in `reps` training passes (no update); with
    `peak` (GFLOP/s) each rate's share of it."""
    x = net._as_input(x)
    truth = net._as_truth(truth)
    fwd = np.zeros((reps, net.n))
    bwd = np.zeros((reps, net.n))
    for r in range(reps):
        net.input, net.truth, net.train, net._input0 = x, truth, True, x
        for i, l in enumerate(net.layers):
            net.index = i
            t = time.perf_counter()
            zero_delta(l.delta)
            l.forward(net)
            fwd[r, i] = time.perf_counter() - t
            net.input = l.output
        for i in range(net.n - 1, -1, -1):
            l = net.layers[i]
            prev = net.layers[i - 1] if i else None
            net.input = prev.output if prev is not None else x
            net.delta = prev.delta if prev is not None else None
            net.index = i
            t = time.perf_counter()
            l.backward(net)
            bwd[r, i] = time.perf_counter() - t
    return _table(net, np.median(fwd, axis=0) * 1000, np.median(bwd, axis=0) * 1000, peak)
