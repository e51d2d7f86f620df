"""One training per backup folder. Two trainings writing `<cfg>.backup`, `<cfg>_final.weights`
and the history into one folder would overwrite each other's checkpoints (and each one's start
removes the other's temporary files), so a training holds a lock file in its backup folder,
`.darknumba-train.lock`, while it runs:

- it holds `pid`, `host`, the process's start time (`start`, from /proc, to tell a reused pid)
  and `started` (for people), as one JSON line, written while holding the file's flock: the
  kernel's lock, which goes with its holder however the holder dies, is what says the folder
  is in use (the record only names the holder);
- a second training into the folder is refused with one line naming the holder;
- a lock file nobody holds, left by a process that is no longer running on this host (killed,
  power lost), is taken over with a notice (two trainings finding it at the same instant cannot
  both take it); one from another host cannot be checked, so it is refused with the
  advice to remove it if that training is over;
- it is released when the training function returns, raises or is interrupted
  (`@holds_backup_lock` around the function, `lock_backup` inside it once the folder is known).
  Under MPI only rank 0 takes it (the other ranks write nothing there).
- a supervisor that restarts a job (`--restarts`, train/supervise.py) holds the lock for all its
  attempts and puts its token in their environment (LOCK_TOKEN_VAR): a training that finds the
  lock held under that token goes on under it and leaves its release to the supervisor.
"""
from __future__ import annotations

import contextvars
import fcntl
import functools
import json
import os
import secrets
import socket
import stat
import sys
import time

from ..errors import DarknumbaError
from ..inputs import kind_of, read_bytes

LOCK_NAME = ".darknumba-train.lock"
LOCK_TOKEN_VAR = "DARKNUMBA_TRAIN_LOCK_TOKEN"     # set by a supervisor for the jobs it starts
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
        self.fd, self.held = -1, False

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

    def _open_locked(self) -> int | None:
        """A descriptor of the lock file holding its flock, or None while another process
        holds it. The lock is the kernel's: it goes when its holder dies, however it dies, so
        two trainings that find one stale file at the same instant cannot both take it (a
        check-then-remove of the file could remove the other's fresh lock)."""
        for _ in range(10):
            regular_file_or_absent(self.path)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            try:                                    # the holder we waited for removed the
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))   # file: retry
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)
        raise BackupFolderInUse(f"{self.path}: could not take the lock (other trainings keep "
                                f"taking it)")

    def acquire(self, log=print):
        """Take the lock, or raise BackupFolderInUse naming its holder."""
        os.makedirs(self.folder, exist_ok=True)
        fd = self._open_locked()
        if fd is None:
            holder, _ = self._read()
            if self._handed_over(holder):         # our supervisor's: go on under it
                return self
            raise BackupFolderInUse(
                f"{self.folder} is in use by another training"
                + (f" ({_describe(holder)}; {self.path})" if holder and "pid" in holder
                   else f" ({self.path})") + ": use another backup folder, or wait for it to end")
        try:
            holder, raw = self._read()
            if raw:                                 # a file left by a holder without its flock
                self._refuse_or_take_over(holder, log)
            os.ftruncate(fd, 0)
            os.pwrite(fd, self._record(), 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self.fd, self.held = fd, True
        return self

    def _handed_over(self, holder: dict | None) -> bool:
        """Whether the held lock is our supervisor's, held for this training."""
        token = os.environ.get(LOCK_TOKEN_VAR)
        return bool(token) and isinstance(holder, dict) and holder.get("token") == token

    def _refuse_or_take_over(self, holder: dict, log):
        """The file's previous holder no longer holds its flock: it died, or it is a darknumba
        from before the flock (2026-12-03) that is still running, or it runs on another host
        whose locks this file system may not show."""
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
        log(f"notice: {self.path}: taking over the lock of a training that is no longer "
            f"running ({_describe(holder)})", file=sys.stderr)

    def release(self):
        """Remove the lock file (while still holding its flock, so nobody takes a file that is
        going away: a waiting acquirer sees the file gone and retries), then let go."""
        if self.held:
            try:
                if os.path.samestat(os.fstat(self.fd), os.stat(self.path)):
                    os.unlink(self.path)
            except FileNotFoundError:
                pass
            os.close(self.fd)
        self.held = False


def regular_file_or_absent(path):
    """Refuse a lock path that exists and is not a regular file (a FIFO would block open)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise BackupFolderInUse(f"{path}: cannot use it as a training lock: it is "
                                f"{kind_of(st.st_mode)}; remove it")


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
