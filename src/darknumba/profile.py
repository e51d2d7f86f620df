"""Per-layer timing of a forward pass: where the time goes."""
import time

import numpy as np


def profile_forward(net, x, reps: int = 5, train: bool = False) -> str:
    """Run `reps` forward passes timing each layer; return Darknet-style rows with ms and GFLOPS."""
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
    med = np.median(times, axis=0) * 1000
    total = med.sum()
    rows = [f"{'layer':>5} {'type':<14}{'ms':>8} {'share':>6} {'GFLOPS':>8}"]
    for i, l in enumerate(net.layers):
        gf = l.bflops * net.batch / (med[i] / 1000) if med[i] > 0 and l.bflops else 0
        rows.append(f"{i:5d} {l.type:<14}{med[i]:8.2f} {med[i] / total:6.1%} {gf:8.1f}")
    rows.append(f"{'':5} {'total':<14}{total:8.2f}")
    return "\n".join(rows)
