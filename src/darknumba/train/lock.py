"""One training per backup folder. Two trainings writing `<cfg>.backup`, `<cfg>_final.weights`
and the history into one folder would overwrite each other's checkpoints (and each one's start
removes the other's temporary files), so a training holds a lock file in its backup folder,
`.darknumba-train.lock`, while it runs:

- it holds `pid`, `host`, the process's start time (`start`, from /proc, to tell a reused pid)
  and `started` (for people), as one JSON line; it is created complete or not at all (written
  to a temporary file, then hard-linked to its name: the link fails if the lock exists);
- a second training into the folder is refused with one line naming the holder;
- a lock left by a process that is no longer running on this host (killed, power lost) is
  taken over with a notice; one from another host cannot be checked, so it is refused with the
  advice to remove it if that training is over;
- it is released when the training function returns, raises or is interrupted
  (`@holds_backup_lock` around the function, `lock_backup` inside it once the folder is known).
  Under MPI only rank 0 takes it (the other ranks write nothing there).
"""
from __future__ import annotations

import contextvars
import functools
import json
import os
import secrets
import socket
import sys
import time

from ..errors import DarknumbaError
from ..inputs import read_bytes

LOCK_NAME = ".darknumba-train.lock"
_held: contextvars.ContextVar[list | None] = contextvars.ContextVar("backup_locks", default=None)


class BackupFolderInUse(DarknumbaError):
    """Another training holds the backup folder's lock."""


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks after boot (Linux), None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _running(pid: int, start: int | None) -> bool:
    """Whether process `pid` (started at `start` ticks, when known) runs on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:         # another user's process
        pass
    now = _start_ticks(pid)
    return start is None or now is None or now == start


def _describe(holder: dict) -> str:
    return (f"pid {holder.get('pid')} on {holder.get('host')}"
            + (f", started {holder['started']}" if holder.get("started") else ""))


class BackupLock:
    """The lock file of one backup folder, taken by `acquire` and given back by `release`."""

    def __init__(self, folder):
        self.folder = os.fspath(folder)
        self.path = os.path.join(self.folder, LOCK_NAME)
        self.token = secrets.token_hex(8)
        self.held = False

    def _record(self) -> bytes:
        return (json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                            "start": _start_ticks(os.getpid()),
                            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                            "command": " ".join(sys.argv[:8]), "token": self.token})
                + "\n").encode()

    def _read(self) -> tuple[dict | None, bytes]:
        """(the holder's record, the file's bytes); (None, b"") when there is no lock. A lock
        that is not a regular file (a FIFO would block the read) is refused."""
        try:
            raw = read_bytes(self.path, "training lock", BackupFolderInUse, 1 << 16)
        except BackupFolderInUse:
            if not os.path.lexists(self.path):      # released meanwhile
                return None, b""
            raise
        try:
            holder = json.loads(raw)
            return (holder if isinstance(holder, dict) else {}), raw
        except ValueError:
            return {}, raw

    def acquire(self, log=print):
        """Take the lock, or raise BackupFolderInUse naming its holder."""
        os.makedirs(self.folder, exist_ok=True)
        tmp = os.path.join(self.folder, f"{LOCK_NAME}.{self.token}")
        with open(tmp, "wb") as f:
            f.write(self._record())
            f.flush()
            os.fsync(f.fileno())
        try:
            for _ in range(10):
                try:
                    os.link(tmp, self.path)         # fails when the lock exists: atomic
                    self.held = True
                    return self
                except FileExistsError:
                    pass
                holder, raw = self._read()
                if holder is None:                  # released meanwhile: try again
                    continue
                self._refuse_or_take_over(holder, raw, log)
            raise BackupFolderInUse(f"{self.path}: could not take the lock (other trainings "
                                    f"keep taking it)")
        finally:
            os.unlink(tmp)

    def _refuse_or_take_over(self, holder: dict, raw: bytes, log):
        pid, host = holder.get("pid"), holder.get("host")
        if not isinstance(pid, int) or not isinstance(host, str):
            raise BackupFolderInUse(f"{self.folder} has a training lock darknumba cannot read "
                                    f"({self.path}); remove it if no training uses the folder")
        if host != socket.gethostname():
            raise BackupFolderInUse(
                f"{self.folder} is in use by another training ({_describe(holder)}; "
                f"{self.path}): use another backup folder, or remove the lock if that training "
                f"is over")
        start = holder.get("start") if isinstance(holder.get("start"), int) else None
        if _running(pid, start):
            raise BackupFolderInUse(
                f"{self.folder} is in use by another training ({_describe(holder)}; "
                f"{self.path}): use another backup folder, or wait for it to end")
        if self._read()[1] == raw:                  # still the stale one: remove it, retry
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            log(f"notice: {self.path}: taking over the lock of a training that is no longer "
                f"running ({_describe(holder)})", file=sys.stderr)

    def release(self):
        """Remove the lock file if it is still ours."""
        if self.held and (self._read()[0] or {}).get("token") == self.token:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        self.held = False


def holds_backup_lock(train):
    """Decorate a training function: the locks `lock_backup` takes during its call are
    released when it returns, raises or is interrupted."""
    @functools.wraps(train)
    def wrapper(*args, **kwargs):
        token = _held.set([])
        try:
            return train(*args, **kwargs)
        finally:
            for lock in _held.get():
                lock.release()
            _held.reset(token)
    return wrapper


def lock_backup(folder, log=print, root: bool = True) -> BackupLock | None:
    """Take `folder`'s training lock for the rest of the decorated training function's call
    (root: whether this process writes the checkpoints; the other MPI ranks take none)."""
    if not root:
        return None
    lock = BackupLock(folder).acquire(log)
    held = _held.get()
    if held is None:                # called outside a decorated function: held until exit
        import atexit
        atexit.register(lock.release)
    else:
        held.append(lock)
    return lock
