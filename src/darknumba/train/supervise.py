"""A training that survives a lost rank: `darknumba detector train ... --ranks N --restarts K`.

The command then does not train itself: it starts the training under mpirun (`mpirun -np N
darknumba detector train ...`, or one process when N is 1) and waits. When the job ends because
a rank was lost, it starts it again from the newest checkpoint the job wrote, up to K times,
printing what happened each time:

- a rank is *lost* when it dies on a signal (killed, out of memory: MPICH's mpiexec then ends
  the others and exits with the signal's number, 9 for SIGKILL; one process without mpirun
  ends with -signal, a shell's 128 + signal), or when the others stop waiting for it (a hung
  rank: `--mpi-timeout`, distributed.stop_all_on_error ends the job with status RANK_LOST);
- any other failure (bad data with --bad-data stop, a NaN loss, a cfg the ranks cannot share,
  usage errors) would fail again: its status is passed on, no restart. Ctrl-C (130) stops too.

The restart resumes from the checkpoint with the highest `seen` among `<cfg>.backup`,
`<cfg>_last.weights` and `<cfg>_<iteration>.weights` written in the backup folder since the
supervisor started (`_best` and `_ema` are not the training's state); with none written yet,
from the starting weights again. A checkpoint resumes with any number of ranks, so the restart
may run on the same N or (`--shrink`) on the largest smaller number that the cfg allows (whole
mini-batches: N divides subdivisions; --sync-bn: N divides batch/subdivisions).

The supervisor holds the backup folder's training lock for the whole job (lock.py) and hands it
to each rank 0 it starts (LOCK_TOKEN_VAR), so no other training can take the folder between two
attempts and each attempt takes over its own lock.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from ..errors import DarknumbaError, WeightsError
from ..weights import read_header
from .distributed import RANK_LOST
from .lock import LOCK_TOKEN_VAR, BackupLock

INTERRUPTED = 130


def _signal_of(status: int) -> int | None:
    """The signal a job's exit status reports: -N (Popen), 128 + N (a shell), N from 4 to 64
    (MPICH's mpiexec; 1, 2 and 3 are darknumba's own statuses); 130 is Ctrl-C's."""
    if status < 0:
        return -status
    if 128 < status < 160 and status != INTERRUPTED:
        return status - 128
    return status if 3 < status <= 64 else None


def lost_rank(status: int) -> bool:
    """Whether a job that ended with `status` lost a rank (see the module's docstring)."""
    return status == RANK_LOST or _signal_of(status) is not None


def describe_status(status: int) -> str:
    n = _signal_of(status)
    if n is not None:
        try:
            name = signal.Signals(n).name
        except ValueError:
            name = f"signal {n}"
        return f"a rank died ({name}, exit status {status})"
    if status == RANK_LOST:
        return f"a rank stopped answering (exit status {status})"
    return f"exit status {status}"


def checkpoint_seen(path) -> int | None:
    """The `seen` in a .weights file's header, None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return read_header(f.read(20), str(path))[1]
    except (OSError, WeightsError):
        return None


def last_checkpoint(folder, base: str, since: float) -> str | None:
    """The training checkpoint of `base` in `folder` with the highest seen (then the newest)
    among those modified at or after `since` (a time.time())."""
    pattern = re.compile(re.escape(base) + r"(\.backup|_last\.weights|_[0-9]+\.weights)")
    found = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return None
    for e in entries:
        if not pattern.fullmatch(e.name):
            continue
        try:
            mtime = e.stat().st_mtime
        except OSError:
            continue
        seen = checkpoint_seen(e.path) if mtime >= since else None
        if seen is not None:
            found.append((seen, mtime, e.path))
    return max(found)[2] if found else None


def fewer_ranks(ranks: int, subdivisions: int, mini_batch: int, sync_bn: bool) -> int:
    """The largest number of ranks below `ranks` that can share the cfg's iteration (1 always
    can)."""
    whole = mini_batch if sync_bn else subdivisions
    return max(n for n in range(1, ranks) if whole % n == 0) if ranks > 1 else 1


@dataclass
class Supervisor:
    """command(weights, ranks) -> the argument list of one attempt; folder and base name the
    checkpoints; weights: the starting weights (None: random)."""
    command: object
    folder: str
    base: str
    ranks: int
    restarts: int
    weights: str | None = None
    shrink_to: object = None        # ranks -> the ranks of the next attempt (None: the same)
    log: object = print

    def run(self) -> int:
        """Run attempts until one ends without losing a rank, or K restarts are used up; the
        last attempt's exit status."""
        started = time.time()
        lock = BackupLock(self.folder).acquire(self.log)
        weights, ranks = self.weights, self.ranks
        try:
            for attempt in range(self.restarts + 1):
                args = self.command(weights, ranks)
                env = {**os.environ, LOCK_TOKEN_VAR: lock.token}
                status = self._wait(subprocess.Popen(args, env=env))
                if not lost_rank(status):
                    if attempt:
                        self.log(f"darknumba: the job ended with exit status {status} after "
                                 f"{attempt} restart(s)", file=sys.stderr)
                    return status
                what = describe_status(status)
                if attempt == self.restarts:
                    self.log(f"darknumba: {what}; no restarts left (--restarts {self.restarts});"
                             f" the last checkpoint is "
                             f"{last_checkpoint(self.folder, self.base, started) or 'none'}",
                             file=sys.stderr)
                    return status
                found = last_checkpoint(self.folder, self.base, started)
                weights = found or self.weights
                ranks = self.shrink_to(ranks) if self.shrink_to else ranks
                self.log(f"darknumba: {what} at {time.strftime('%Y-%m-%d %H:%M:%S')}; restart "
                         f"{attempt + 1} of {self.restarts} on {ranks} rank(s) from "
                         f"{found or (self.weights or 'the start (no checkpoint written yet)')}"
                         f"{' (seen ' + str(checkpoint_seen(found)) + ')' if found else ''}",
                         file=sys.stderr)
            raise AssertionError("unreachable")
        finally:
            lock.release()

    @staticmethod
    def _wait(proc) -> int:
        """The attempt's exit status, a signal's as a shell gives it (128 + the signal). Ctrl-C
        reaches the attempt's processes too (the terminal's process group): the supervisor
        waits for them to save and stop."""
        while True:
            try:
                status = proc.wait()
                return 128 - status if status < 0 else status
            except KeyboardInterrupt:
                continue


def mpirun() -> str:
    """The mpirun of this Python's environment (MPICH's wheel puts it beside the interpreter),
    else the first on PATH."""
    import shutil
    here = shutil.which("mpirun", path=os.path.dirname(sys.executable))
    found = here or shutil.which("mpirun") or shutil.which("mpiexec")
    if not found:
        raise DarknumbaError("--ranks needs mpirun: pip install 'darknumba[mpi]' (it brings "
                             "mpi4py and MPICH's mpirun)")
    return found


def rank_command(args: list[str], ranks: int, hostfile: str | None = None,
                 launcher: str | None = None) -> list[str]:
    """The processes of one attempt: `mpirun -np ranks [-f hostfile] python -c <darknumba>
    ARGS`, or the one process itself when ranks is 1 and no hostfile is given."""
    me = [sys.executable, "-c", "from darknumba.cli import main; main()"]
    if ranks == 1 and hostfile is None:
        return me + args
    return ([launcher or mpirun(), "-np", str(ranks)] + (["-f", hostfile] if hostfile else [])
            + me + args)
