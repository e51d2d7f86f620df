"""Data-parallel training (`mpirun -np N darknumba detector train ...`): N processes train one
network, each on its share of every iteration's images, and all apply the same update.

The cfg means what it means in one process: an iteration is `subdivisions` mini-batches of
B = batch/subdivisions images (Darknet's datums); `seen`, the learning rate, iteration numbers
and checkpoints are the single process's. The ranks share the mini-batches in one of two ways:
- whole mini-batches: rank r trains mini-batches [r S/N, (r+1) S/N), so N must divide
  subdivisions S, and every mini-batch's batch-norm statistics are the ones one process computes;
- `sync_bn`: every mini-batch is split into N parts of B/N images, one per rank, and batch norm
  adds its statistics and backward sums up over the ranks (SyncBatchNorm), which gives what one
  process computes on the whole mini-batch. For subdivisions < N; N must divide B.

Before every update the ranks add up this iteration's gradients with one allreduce of one fused
buffer: every layer's *_updates array is made a view into it. Darknet's *_updates also carry
the momentum of earlier iterations (sgd_update_cpu leaves momentum * update in them); that part
is held aside before the iteration and added back after the sum, so it counts once. The same
buffer carries every mini-batch's batch mean and variance (each rank fills the slots of its own
mini-batches, the others stay 0), the loss, a count of non-finite losses and the Ctrl-C
requests: every rank replays the rolling statistics' updates in single-process order, and all
agree to stop at the same iteration. Every `check_every` iterations a checksum of the weights and
rolling statistics is compared across ranks; a difference stops the job. With `overlap` the
gradients' allreduce starts in buckets during the last mini-batch's backward (overlap.py).

Layers that draw their own random numbers in forward ([dropout], [crop], [detection]) draw them
per process, so with them a run matches one process in distribution only.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
import zlib

import numba
import numpy as np

from ..errors import DarknumbaError
from ..kernels.fused import (batchnorm_backward_delta, batchnorm_backward_sums,
                             channel_moments_cpu)
from ..layers.batchnorm import update_rolling_stats
from ..parser import parse_network_cfg
from .distributed import (DEFAULT_TIMEOUT, STARTUP_TIMEOUT, Communicator, SingleProcess, agreed,
                          communicator, stop_all_on_error)
from .overlap import OverlappedAllreduce
from .step import TrainingStopped, find_nonfinite_layer, train_iteration
from .sync_bn import SyncBatchNorm

# (parameter, its *_updates array) as Darknet names them on a layer
GRADIENTS = (("weights", "weight_updates"), ("biases", "bias_updates"),
             ("scales", "scale_updates"))
LOSS, NONFINITE, STOP = range(3)            # the fused buffer's last slots


class OneProcess:
    """The default: the whole iteration in this process, as train_detector always ran."""
    comm: Communicator = SingleProcess()
    is_root = True
    last_checkpoint = None

    def network_batch(self, cfgfile, opts=None):
        return None

    def setup(self, net, log=print):
        return None

    def positions(self):
        return None

    def train_iteration(self, net, X, T, last_checkpoint=None, stop=None) -> float:
        return train_iteration(net, X, T, last_checkpoint)

    def rank_options(self, opts):
        return opts

    def rank_log(self, log):
        return log


def parallel_for(sync_bn=False, check_every=100, timeout=DEFAULT_TIMEOUT, overlap=False):
    """DataParallel over MPI when mpirun started this process as one of several ranks, else
    OneProcess."""
    comm = communicator(timeout)
    return (OneProcess() if comm.size == 1 else
            DataParallel(comm, sync_bn, check_every, overlap))


class DataParallel:
    """One network trained by comm.size ranks (see the module's docstring)."""

    def __init__(self, comm: Communicator, sync_bn: bool = False, check_every: int = 100,
                 overlap: bool | int = False):
        self.comm, self.sync_bn, self.check_every = comm, sync_bn, check_every
        self.overlap = overlap          # becomes the OverlappedAllreduce in _fuse
        self.is_root = comm.is_root
        self.last_checkpoint = None
        self.shared_stop = False
        self.timing = []                # (compute, allreduce, the last backward) seconds of each
                                        # iteration

    # -- before training -----------------------------------------------------------------------
    def network_batch(self, cfgfile, opts=None) -> int | None:
        """Check that the cfg's iteration can be shared by the ranks; the batch this rank's
        network is built with (None: the cfg's batch/subdivisions)."""
        shape = parse_network_cfg(cfgfile, compat=getattr(opts, "compat", None),
                                  dialect=getattr(opts, "dialect", None), seed=None,
                                  allocate=False)
        B, S, N, r = shape.batch, shape.subdivisions, self.comm.size, self.comm.rank
        self.datum, self.subdivisions = B, S
        if self.sync_bn:
            if B % N:
                raise agreed(DarknumbaError(
                    f"{cfgfile}: --sync-bn splits each mini-batch of batch/subdivisions = {B} "
                    f"images into {N} equal parts, one per rank: {N} ranks do not divide {B}"))
            self.part, self.datums = B // N, list(range(S))
            return self.part
        if S % N:
            fits = [str(d) for d in range(2, S + 1) if S % d == 0]
            raise agreed(DarknumbaError(
                f"{cfgfile}: subdivisions={S} cannot be shared by {N} ranks: each rank trains "
                f"whole mini-batches of batch/subdivisions = {B} images, so the number of ranks "
                f"must divide subdivisions. "
                + (f"Run {' or '.join(fits)} ranks, or m" if fits else "M")
                + f"ake subdivisions a multiple of {N} (and batch a multiple of that), or pass "
                f"--sync-bn to split each mini-batch of {B} images over the {N} ranks"
                + ("" if B % N == 0 else f" ({N} would have to divide {B})")))
        k = S // N
        self.part, self.datums = B, list(range(r * k, (r + 1) * k))
        return None

    def setup(self, net, log=print):
        """After the network is built and its weights loaded: refuse what cannot be shared,
        warm the numba cache, fuse the gradients, check that every rank starts the same."""
        for i, l in enumerate(net.layers):
            if l.recurrent:
                raise agreed(DarknumbaError(
                    f"layer {i} [{l.type}] carries its state from one mini-batch to the next; "
                    f"data-parallel training does not support recurrent layers"))
        N = self.comm.size
        self.bn_layers = [l for l in net.layers if getattr(l, "batch_normalize", False)
                          and getattr(l, "rolling_mean", None) is not None]
        self._warm_numba_cache(net)
        if self.sync_bn:
            net.subdivisions = self.subdivisions * N     # the iteration is still batch images
            sync = SyncBatchNorm(self.comm)
            for l in self.bn_layers:
                l.bn_sync = sync
        self._fuse(net)
        self.check_same(net, "at the start")
        randoms = [f"{i} [{l.type}]" for i, l in enumerate(net.layers) if l.draws_random]
        if randoms:
            log(f"warning: layer(s) {', '.join(randoms)} draw random numbers in each process: "
                f"this run matches a one-process run in distribution only", file=sys.stderr)
        share = (f"{self.part} of the {self.datum} images of every mini-batch (synchronised "
                 f"batch norm)" if self.sync_bn else
                 f"mini-batches {self.datums[0]}..{self.datums[-1]} of {self.subdivisions}")
        log(f"data-parallel: {N} ranks ({self.comm.local_size} on this machine, "
            f"{numba.get_num_threads()} thread(s) each); each rank trains {share}; one "
            f"allreduce of {self.nparams * 4 / 1e6:.1f} MB of gradients per iteration"
            + (f", in {len(self.overlap.plan)} buckets overlapping the last mini-batch's "
               f"backward" if self.overlap else ""))

    def _warm_numba_cache(self, net):
        """Rank 0 of each machine runs one mini-batch forward and backward (zeros) while the
        others wait: N processes compiling the same kernels into one cache at once would race;
        the others then load them from the cache. Rolling statistics and gradients are put
        back."""
        if self.comm.local_rank == 0:
            kept = [(a, a.copy()) for l in self.bn_layers
                    for a in (l.rolling_mean, l.rolling_variance)]
            net.forward(np.zeros(net.batch * net.inputs, np.float32), train=True,
                        truth=np.zeros(net.batch * net.truths, np.float32))
            net.backward()
            if self.sync_bn:            # the split batch-norm kernels, on one value
                one, ones = np.zeros(1, np.float32), np.ones(1, np.float32)
                sums = np.zeros((3, 1))
                channel_moments_cpu(one, 1, 1, 1, np.zeros((1, 2)))
                batchnorm_backward_sums(one, one, one, 1, 1, 1, one.copy(), one.copy(), one,
                                        ones, sums)
                batchnorm_backward_delta(one, one, one, ones, ones, 1, 1, 1, sums, 1,
                                         one.copy(), one.copy(), False)
            for a, saved in kept:
                a[:] = saved
            for l in net.layers:
                for _, u in GRADIENTS:
                    if getattr(l, u, None) is not None:
                        getattr(l, u)[:] = 0.0
        self.comm.barrier("waiting for rank 0 of this machine to compile the kernels",
                          timeout=STARTUP_TIMEOUT)

    def _fuse(self, net):
        """One float32 buffer: every *_updates array (now a view into it; a layer that shares
        another's, AlexeyAB's share_index, shares the view), then (whole mini-batches only)
        S x every batch-norm layer's mean and variance, then 3 slots."""
        arrays = [(l, u) for l in net.layers for w, u in GRADIENTS
                  if getattr(l, w, None) is not None and getattr(l, u, None) is not None
                  and getattr(l, u).size]
        distinct = {id(getattr(l, u)): getattr(l, u) for l, u in arrays}
        index = {id(l): i for i, l in enumerate(net.layers)}
        owner: dict = {}            # array -> the first layer that has it
        for l, u in arrays:
            owner.setdefault(id(getattr(l, u)), index[id(l)])
        starts = [None] * len(net.layers)    # where each layer's own arrays begin
        self.nparams = sum(a.size for a in distinct.values())
        self.stats_size = 0 if self.sync_bn else 2 * sum(l.rolling_mean.size
                                                        for l in self.bn_layers)
        self.buf = np.zeros(self.nparams + self.subdivisions * self.stats_size + 3, np.float32)
        views, off = {}, 0
        for key, a in distinct.items():
            if starts[owner[key]] is None:
                starts[owner[key]] = off
            views[key] = self.buf[off:off + a.size]
            views[key][:] = a
            off += a.size
        for l, u in arrays:
            setattr(l, u, views[id(getattr(l, u))])
        self.held = np.empty(self.nparams, np.float32)
        if self.overlap:            # True: overlap.BUCKET_BYTES, else the bytes per bucket
            self.overlap = OverlappedAllreduce(self.comm, self.buf, starts, self.nparams,
                                               None if self.overlap is True else self.overlap)
        self.rolling0 = [] if self.sync_bn else [
            (l.rolling_mean.copy(), l.rolling_variance.copy()) for l in self.bn_layers]

    # -- one iteration -------------------------------------------------------------------------
    def positions(self) -> list[int]:
        """This rank's images among the iteration's S x B (what its loader loads)."""
        B, b, r = self.datum, self.part, self.comm.rank
        if self.sync_bn:
            return [d * B + r * b + i for d in self.datums for i in range(b)]
        return list(range(self.datums[0] * B, (self.datums[-1] + 1) * B))

    def train_iteration(self, net, X, T, last_checkpoint=None, stop=None) -> float:
        """This rank's mini-batches (or parts), then the gradient sum and the update every rank
        applies. Returns the iteration's summed loss, as train_iteration does."""
        t0 = time.perf_counter()
        self.last_checkpoint = last_checkpoint
        if stop is not None and not self.shared_stop:
            stop.shared = self.shared_stop = True  # stop.set comes from every rank's requests
        P, buf, b = self.nparams, self.buf, self.part
        grads, extra = buf[:P], buf[-3:]
        self.held[:] = grads            # the momentum part of the *_updates
        buf[:] = 0.0
        if not self.sync_bn:
            for (m0, v0), l in zip(self.rolling0, self.bn_layers):
                m0[:] = l.rolling_mean
                v0[:] = l.rolling_variance
        seen0, iteration = net.seen, net.current_batch() + 1
        loss, bad = 0.0, None
        over = self.overlap
        for j, d in enumerate(self.datums):
            net.seen = seen0 + (d + 1) * self.datum    # train_datum's count at this mini-batch
            net.forward(X[j * b:(j + 1) * b], train=True, truth=T[j * b:(j + 1) * b])
            last = over and j == len(self.datums) - 1
            if last:
                over.begin()
            tb = time.perf_counter()
            net.backward(after_layer=over.after_layer if last else None)
            backward = time.perf_counter() - tb
            if math.isfinite(net.cost):
                loss += net.cost
            elif bad is None:
                bad = (net.cost, find_nonfinite_layer(net))
            self._record_stats(d)
        extra[LOSS], extra[NONFINITE] = loss, bad is not None
        extra[STOP] = bool(stop is not None and stop.requested)
        t1 = time.perf_counter()
        what = f"the gradient allreduce of iteration {iteration}"
        if over:
            over.finish(what)
        else:
            self.comm.allreduce(buf, what=what)
        t2 = time.perf_counter()
        net.seen = seen0 + self.subdivisions * self.datum
        if extra[NONFINITE]:
            where = ("another rank's mini-batch" if bad is None else
                     f"layer {bad[1][0]} ({bad[1][1]}) {bad[1][2]}" if bad[1] else
                     "no single layer (the sum overflowed)")
            raise agreed(TrainingStopped(
                f"iteration {iteration}: a loss is not finite (first non-finite values in "
                f"{where}); stopping without saving. Last good checkpoint: "
                f"{last_checkpoint or 'none written yet'}. Try a lower learning_rate or a "
                f"longer burn_in"))
        grads += self.held
        self._replay_rolling_stats()
        if stop is not None:
            stop.set = bool(extra[STOP])
        net.update()
        self.timing.append((time.perf_counter() - t2 + t1 - t0, t2 - t1, backward))
        if self.check_every and iteration % self.check_every == 0:
            self.check_same(net, f"after iteration {iteration}")
        return float(extra[LOSS])

    def _record_stats(self, d):
        """Mini-batch d's batch mean and variance of every batch-norm layer into its slots."""
        if self.sync_bn:
            return
        off = self.nparams + d * self.stats_size
        for l in self.bn_layers:
            n = l.rolling_mean.size
            self.buf[off:off + n] = l.mean
            self.buf[off + n:off + 2 * n] = l.variance
            off += 2 * n

    def _replay_rolling_stats(self):
        """Every mini-batch's rolling-statistics step, in single-process order, from the values
        they had before the iteration. (Synchronised batch norm: every rank already took them.)"""
        if self.sync_bn:
            return
        for (m0, v0), l in zip(self.rolling0, self.bn_layers):
            l.rolling_mean[:] = m0
            l.rolling_variance[:] = v0
        for d in range(self.subdivisions):
            off = self.nparams + d * self.stats_size
            for l in self.bn_layers:
                n = l.rolling_mean.size
                update_rolling_stats(l, self.buf[off:off + n], self.buf[off + n:off + 2 * n])
                off += 2 * n

    def check_same(self, net, when):
        """Every rank's CRC-32 of its weights and rolling statistics, and its `seen`, compared;
        a difference stops every rank (the same error on all)."""
        crc = 0
        for l in net.layers:
            for _, a in l.weight_records():
                crc = zlib.crc32(np.ascontiguousarray(a), crc)
        table = np.zeros((self.comm.size, 2))
        table[self.comm.rank] = (crc, net.seen)
        self.comm.allreduce(table, what=f"the weights checksum {when}")
        differ = [r for r in range(self.comm.size) if (table[r] != table[0]).any()]
        if differ:
            raise agreed(DarknumbaError(
                f"the weights of rank(s) {', '.join(map(str, differ))} differ from rank 0's "
                f"{when} (CRC-32, seen: " + ", ".join(
                    f"rank {r} {int(c):08x}, {int(s)}" for r, (c, s) in enumerate(table))
                + f"): the ranks would train different networks; stopping. Last checkpoint: "
                  f"{self.last_checkpoint or 'none written yet'}"))

    def summary(self) -> str:
        """Mean compute and allreduce time per iteration on this rank, the first (compiling,
        loading) left out. The allreduce time includes waiting for the slowest rank; with
        overlap it is the wait after backward. The last mini-batch's backward is the window
        an overlapped allreduce has."""
        t = np.array(self.timing[1:] or self.timing or [(0.0, 0.0, 0.0)])
        c, a, b = t.mean(axis=0)
        return (f"data-parallel, rank {self.comm.rank} of {self.comm.size}: per iteration "
                f"{c:.3f} s compute, {a:.3f} s "
                + ("waiting for the overlapped allreduce after backward" if self.overlap else
                   "allreduce") + f" ({self.buf.nbytes / 1e6:.1f} MB, "
                f"waiting for the slowest rank included; the last mini-batch's backward "
                f"{b:.3f} s), over {len(t)} iterations")

    # -- what only rank 0 does -----------------------------------------------------------------
    def rank_options(self, opts):
        """Rank 0 alone shows progress, draws the chart and measures mAP."""
        if self.is_root:
            return opts
        off = {k: v for k, v in (("progress", False), ("chart", False), ("map_every", 0))
               if hasattr(opts, k)}
        return dataclasses.replace(opts, **off)

    def rank_log(self, log):
        """Rank 0 prints everything; the others only their warnings (stderr), with their rank."""
        if self.is_root:
            return log
        rank = self.comm.rank

        def warn(msg, file=None):
            if file is sys.stderr:
                log(f"rank {rank}: {msg}", file=file)
        return warn


def run_training(train, datacfg, cfgfile, opts, log=print, sync_bn=False, check_every=100,
                 timeout=None, overlap=False):
    """`train(datacfg, cfgfile, opts, log)` (train_detector or train_classifier) on every rank
    mpirun started, or in this process alone. An error on one rank stops all of them; an
    error every rank agrees on is raised by rank 0 alone (the others exit with status 1)."""
    par = parallel_for(sync_bn, check_every, timeout or DEFAULT_TIMEOUT, overlap)
    opts = dataclasses.replace(par.rank_options(opts), parallel=par)
    with stop_all_on_error(par.comm, lambda: par.last_checkpoint):
        try:
            result = train(datacfg, cfgfile, opts, log=par.rank_log(log))
            if par.is_root and isinstance(par, DataParallel) and par.timing:
                log(par.summary())
            return result
        except DarknumbaError as e:
            if getattr(e, "agreed", False) and not par.is_root:
                raise agreed(SystemExit(1)) from None
            raise
