"""Communicators: the few collectives data-parallel training needs, behind one small interface
so that a second backend could be added beside MPI.

    rank, size              this process's index and the number of processes in the job
    local_rank, local_size  the same among the processes on this machine
    allreduce(buf)          buf <- the element-wise sum of every rank's buf (in place)
    broadcast(buf, root)    buf <- root's buf
    barrier()               wait until every rank is here
    abort(code)             end every rank of the job now

`SingleProcess` (size 1, every collective a no-op) is the default. `MPICommunicator` (mpi4py)
is chosen when the process was started by mpirun / mpiexec with more than one rank
(`communicator()`). Its collectives are non-blocking calls polled against a deadline: a rank
that waits longer than `timeout` seconds for the others raises `CollectiveTimeout` instead of
hanging forever; `stop_all_on_error` then ends the whole job (exit status RANK_LOST, which
`--restarts` restarts: train/supervise.py). (A rank that dies is noticed by
the launcher itself: MPICH's mpiexec ends the other ranks within a fraction of a second.)
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from contextlib import contextmanager

import numpy as np

from ..errors import DarknumbaError
from ..runtime.launcher import launched_ranks

DEFAULT_TIMEOUT = 1800.0    # s; covers rank 0's checkpoint writes and -map runs between collectives
ABORT_GRACE = 0.5           # s between printing why the job stops and MPI_Abort (see abort)
STARTUP_TIMEOUT = 3600.0    # s; the first numba compilation of a large network on rank 0
RANK_LOST = 75              # exit status of a job ended because a rank stopped answering


class CollectiveTimeout(DarknumbaError):
    """A rank waited longer than the timeout for the others in a collective."""


class Communicator:
    rank = 0
    size = 1
    local_rank = 0
    local_size = 1

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def allreduce(self, buf: np.ndarray, what: str = "allreduce", timeout: float | None = None):
        raise NotImplementedError

    def broadcast(self, buf: np.ndarray, root: int = 0, what: str = "broadcast",
                  timeout: float | None = None):
        raise NotImplementedError

    def barrier(self, what: str = "barrier", timeout: float | None = None):
        raise NotImplementedError

    def abort(self, code: int = 1):
        raise NotImplementedError

    # non-blocking: start_allreduce returns a request; progress drives the started ones on (and
    # says whether all are done); wait_all waits for them as the blocking collectives wait
    def start_allreduce(self, buf: np.ndarray):
        raise NotImplementedError

    def progress(self, requests: list) -> bool:
        raise NotImplementedError

    def wait_all(self, requests: list, what: str = "allreduce", timeout: float | None = None):
        raise NotImplementedError


class SingleProcess(Communicator):
    """One process: the sum over ranks is the buffer itself."""

    def allreduce(self, buf, what="allreduce", timeout=None):
        return buf

    def broadcast(self, buf, root=0, what="broadcast", timeout=None):
        return buf

    def barrier(self, what="barrier", timeout=None):
        return None

    def abort(self, code=1):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class MPICommunicator(Communicator):
    """MPI_COMM_WORLD through mpi4py; every collective waits at most `timeout` seconds."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT):
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        local = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank, self.local_size = local.Get_rank(), local.Get_size()
        local.Free()
        self.timeout = timeout

    def _wait(self, request, what, timeout, done=None):
        """Poll `request` (or `done()`) until it completes: busy for the first millisecond (a
        small collective is done by then), then every millisecond, until the deadline."""
        limit = self.timeout if timeout is None else timeout
        start = time.monotonic()
        spins = 0
        done = done or request.Test
        while not done():
            spins += 1
            if spins < 1000:
                continue
            time.sleep(0.001)
            if time.monotonic() - start > limit:
                raise CollectiveTimeout(
                    f"rank {self.rank} of {self.size}: no answer from the other ranks for "
                    f"{limit:.0f} s in {what}; one of them has stopped or hangs")

    def allreduce(self, buf, what="allreduce", timeout=None):
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM), what, timeout)
        return buf

    def broadcast(self, buf, root=0, what="broadcast", timeout=None):
        self._wait(self.comm.Ibcast(buf, root=root), what, timeout)
        return buf

    def barrier(self, what="barrier", timeout=None):
        self._wait(self.comm.Ibarrier(), what, timeout)

    def start_allreduce(self, buf):
        return self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def progress(self, requests):
        return self.MPI.Request.Testall(requests)

    def wait_all(self, requests, what="allreduce", timeout=None):
        self._wait(None, what, timeout, done=lambda: self.MPI.Request.Testall(requests))

    def abort(self, code=1):
        """Ends every rank. What this rank printed last (the reason) is flushed and given a
        moment to pass through the launcher's output forwarding, which MPI_Abort tears down:
        seen once under load, the job ended with the reason lost."""
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(ABORT_GRACE)
        self.comm.Abort(code)


def communicator(timeout: float = DEFAULT_TIMEOUT) -> Communicator:
    """MPI when the launcher started more than one rank, else SingleProcess."""
    ranks = launched_ranks()
    if ranks <= 1:
        return SingleProcess()
    try:
        import mpi4py
    except ImportError:
        raise DarknumbaError(
            f"this process is one of {ranks} ranks started by an MPI launcher, but mpi4py is "
            f"not installed: pip install 'darknumba[mpi]' (it brings mpi4py and MPICH)") from None
    mpi4py.rc.threads = True        # loader threads run beside the main thread's MPI calls
    return MPICommunicator(timeout)


def agreed(exc: BaseException) -> BaseException:
    """Mark an exception every rank raises at the same point from the same collective result
    (a NaN loss, a checksum mismatch): the ranks stop on their own, nobody needs to abort."""
    exc.agreed = True
    return exc


@contextmanager
def stop_all_on_error(comm: Communicator, last_checkpoint=lambda: None):
    """An exception on one rank alone (bad data, a crash, a collective timeout) would leave the
    other ranks waiting in their next collective: print it with the rank and the last
    checkpoint, then end the whole job (MPI_Abort). Agreed exceptions propagate as usual."""
    try:
        yield
    except BaseException as e:     # KeyboardInterrupt and SystemExit too: one-sided as well
        if comm.size == 1 or getattr(e, "agreed", False):
            raise
        if not isinstance(e, (DarknumbaError, KeyboardInterrupt, SystemExit)):
            traceback.print_exc()
        print(f"darknumba: error on rank {comm.rank} of {comm.size}: {type(e).__name__}: {e}\n"
              f"darknumba: stopping all ranks; the last checkpoint is "
              f"{last_checkpoint() or 'none (none written yet)'}", file=sys.stderr, flush=True)
        comm.abort(RANK_LOST if isinstance(e, CollectiveTimeout) else 1)
