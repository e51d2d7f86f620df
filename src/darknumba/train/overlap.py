"""The gradient allreduce overlapped with backward (data-parallel training, `--overlap`).

DataParallel's fused buffer holds every layer's *_updates in layer order (data_parallel._fuse).
Backward visits the layers last to first, and once layer i's backward is done, every gradient
from layer i's place in the buffer to its end is final for this rank's iteration (a layer that
shares another's arrays, AlexeyAB's share_index, comes after it and its view sits at the first
user's place). So on the rank's last mini-batch the buffer is cut into buckets of at least
BUCKET_BYTES at layer boundaries, from the end: a bucket's non-blocking allreduce starts as soon
as backward has passed its lowest layer, and every layer after that drives the started ones on
(MPI progresses a non-blocking collective when the process calls into MPI). After backward the
buckets below a `stopbackward` layer, and the batch-norm statistics and loss slots, follow; then
the rank waits for all of them.

Every rank starts the same buckets in the same order, as MPI requires. Each element of the
buffer is still the sum of the ranks' values: on 2 ranks that is one float32 addition, a + b =
b + a, so the result is bit for bit the fused allreduce's; on more ranks MPICH may pick another
algorithm (another order of the additions) for a bucket than for the whole buffer, so the sums
may differ in the last bit.
"""
from __future__ import annotations

BUCKET_BYTES = 2 << 20          # PyTorch DDP's first bucket is 1 MB, the others 25 MB


def plan_buckets(layer_starts: list, nparams: int, bucket_bytes: int | None = None) -> list:
    """[(lowest layer, lo, hi)] of the float32 buffer's gradient part [0, nparams), from its
    end down: layer_starts[i] is where layer i's own arrays begin (None: it has none)."""
    bucket_bytes = bucket_bytes or BUCKET_BYTES
    plan, hi, lowest = [], nparams, None
    for i in range(len(layer_starts) - 1, -1, -1):
        s = layer_starts[i]
        if s is None:
            continue
        lowest = i
        if (hi - s) * 4 >= bucket_bytes:
            plan.append((i, s, hi))
            hi = s
    if hi > 0 and lowest is not None:
        plan.append((lowest, 0, hi))
    return plan


class OverlappedAllreduce:
    """One iteration's bucketed allreduce of `buf` (gradients first, nparams of them, then the
    statistics and loss slots) on `comm`."""

    def __init__(self, comm, buf, layer_starts: list, nparams: int,
                 bucket_bytes: int | None = None):
        self.comm, self.buf, self.nparams = comm, buf, nparams
        self.plan = plan_buckets(layer_starts, nparams, bucket_bytes)
        self.requests, self.started = [], 0

    def begin(self):
        """Before the last mini-batch's backward."""
        self.requests, self.started = [], 0

    def after_layer(self, i: int):
        """Network.backward's hook: start the buckets layer i completes, drive the others."""
        plan = self.plan
        while self.started < len(plan) and plan[self.started][0] >= i:
            _, lo, hi = plan[self.started]
            self.requests.append(self.comm.start_allreduce(self.buf[lo:hi]))
            self.started += 1
        if self.requests:
            self.comm.progress(self.requests)

    def finish(self, what: str):
        """After backward: the buckets not started yet and the slots after the gradients, then
        wait for every one."""
        self.after_layer(-1)
        if self.buf.size > self.nparams:
            self.requests.append(self.comm.start_allreduce(self.buf[self.nparams:]))
        self.comm.wait_all(self.requests, what)
        self.requests = []
