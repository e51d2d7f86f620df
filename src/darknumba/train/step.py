"""One training iteration (Darknet's train_network): train_datum on each of the batch's
`subdivisions` slices, and the stop on a loss that is not finite. Training in one process
(data_parallel.OneProcess) runs it as it is; data_parallel.DataParallel shares it out over
MPI ranks and stops the same way."""
from __future__ import annotations

import math

import numpy as np

from ..errors import DarknumbaError


class TrainingStopped(DarknumbaError):
    """The run stopped on a NaN/Inf loss; the message names the iteration and the layer."""


def train_iteration(net, X, T, last_checkpoint=None) -> float:
    """One iteration: train_datum on each of the `subdivisions` slices of the batch; returns
    the summed loss. A NaN or Inf loss stops the run, naming the iteration and the first layer
    with non-finite values, without saving."""
    total = 0.0
    for s in range(net.subdivisions):
        sl = slice(s * net.batch, (s + 1) * net.batch)
        err = net.train_datum(X[sl], T[sl])
        if not math.isfinite(err):
            bad = find_nonfinite_layer(net)
            where = (f"layer {bad[0]} ({bad[1]}) {bad[2]}" if bad else
                     "no single layer (the sum overflowed)")
            raise TrainingStopped(
                f"iteration {net.current_batch()}: loss is {err} (first non-finite values in "
                f"{where}); stopping without saving. Last good checkpoint: "
                f"{last_checkpoint or 'none written yet'}. Try a lower learning_rate or a "
                f"longer burn_in")
        total += err
    return total


def find_nonfinite_layer(net):
    """(index, layer type, what) of the first layer whose cost, output or delta is not finite."""
    for i, l in enumerate(net.layers):
        if l.cost is not None and not math.isfinite(float(l.cost)):
            return i, l.type, "cost"
        if not np.isfinite(l.output).all():
            return i, l.type, "output"
    for i in range(net.n - 1, -1, -1):
        l = net.layers[i]
        if l.delta is not None and not np.isfinite(l.delta).all():
            return i, l.type, "delta"
    return None
