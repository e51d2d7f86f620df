"""Every file darknumba writes, and the rule that no output is an input.

One write path: a temporary file in the target's folder (`.tmp-XXXXXXXX-NAME`, the real name
last so that a library choosing the format from the extension sees it), written, fsynced and
renamed over the target. A failure (full disk, file-size limit, permissions, Ctrl-C) leaves
the previous file as it was and no temporary behind, and is one WriteError: "could not write
NAME: REASON". WriteError is an OSError too (its errno kept), so a caller can tell a full
disk from a missing folder.

- atomic_write(path, data): bytes already in memory (weights, CSV, PNG encoded in memory, ONNX).
- atomic_output(path, mode): a `with` block writing a file object (mode "w"/"wb") or, with
  mode=None, a library writing to the temporary path it is given.
- PendingFile: the same for a writer that outlives one block (a video encoder): commit() or
  discard().

Inputs are never outputs: check_outputs_not_inputs compares files by identity (device and
inode), so a hard link or a symlink to an input is the input. check_not_replacing refuses to
replace files a user may own (a data set's lists) unless told to (--force).
"""
from __future__ import annotations

import errno
import os
import re
import stat
from contextlib import contextmanager

from .errors import UsageError, WriteError

TEMP_PREFIX = ".tmp-"
# The temporary files: the prefix, 8 random characters, "-" and the target's name (up to
# 2026-12-03 atomic_write named them `.tmp-XXXXXXXX.weights`: an interrupted run may have left one)
TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"[a-z0-9_]{8}(-.+|\.weights)", re.DOTALL)
_NAME_MAX = 200                 # of the target's name kept in the temporary's (limit: 255)


def _temp_name(path: str) -> str:
    return f"{TEMP_PREFIX}{os.urandom(4).hex()}-{os.path.basename(path)[-_NAME_MAX:]}"


class PendingFile:
    """A file being written under a temporary name beside `path` (created empty, with the
    permissions of the file it replaces, else 0o666 less the umask): write to `tmp`, then
    commit() to rename it over `path`, or discard() to delete it. A `path` that is a symlink
    keeps it: the file it points to is the one replaced."""

    committed = False

    def __init__(self, path):
        self.path = os.fspath(path)                     # as the user named it, for messages
        self.dest = os.path.realpath(self.path) if os.path.islink(self.path) else self.path
        folder = os.path.dirname(os.path.abspath(self.dest))
        try:
            try:
                os.makedirs(folder, exist_ok=True)
            except FileExistsError:     # a file where a folder of the path should be
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)) from None
            try:
                mode = stat.S_IMODE(os.stat(self.dest).st_mode)
            except FileNotFoundError:
                mode = None
            for _ in range(100):
                self.tmp = os.path.join(folder, _temp_name(self.dest))
                try:
                    self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(errno.EEXIST, "no free temporary name")
            if mode is not None:
                os.chmod(self.tmp, mode)
        except OSError as e:
            if getattr(self, "fd", None) is not None:
                self.discard()
            raise WriteError(self.path, e) from None

    def close_fd(self):
        """Close the descriptor open on `tmp` (for a writer that opens the path itself)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def commit(self, sync: bool = True):
        """fsync the temporary file, rename it over `path`, fsync the folder. sync=False
        leaves out the fsyncs (many small files of a new data set: 1.5 ms each here): a
        failed write still leaves the previous file, a power cut may not."""
        try:
            if sync and self.fd is None:
                self.fd = os.open(self.tmp, os.O_RDONLY)
            if sync:
                os.fsync(self.fd)
            self.close_fd()
            os.replace(self.tmp, self.dest)
        except OSError as e:
            self.discard()
            raise WriteError(self.path, e) from None
        self.committed = True
        if sync:
            _fsync_folder(os.path.dirname(self.tmp))

    def discard(self):
        """Delete the temporary file; the target is left as it was (after commit(): nothing
        to do)."""
        if self.committed:
            return
        try:
            self.close_fd()
        except OSError:
            self.fd = None
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


def _fsync_folder(folder: str):
    """Make the rename durable (best effort: some file systems cannot fsync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path, data: bytes, sync: bool = True):
    """Write `data` to `path` through a temporary file: all of it or, on failure, nothing
    (the previous file intact) and a WriteError naming `path` (sync: PendingFile.commit)."""
    pending = PendingFile(path)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(pending.fd, view):]
    except OSError as e:
        pending.discard()
        raise WriteError(pending.path, e) from None
    except BaseException:
        pending.discard()
        raise
    pending.commit(sync)


class _Guarded:
    """A file object whose write errors are WriteErrors naming the target. It has no
    fileno(): Pillow would write around it (and its JPEG encoder ignores a failed write)."""

    def __init__(self, f, path):
        self._f, self._path = f, path

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except OSError as e:
            raise WriteError(self._path, e) from None

    def write(self, data):
        return self._call(self._f.write, data)

    def writelines(self, lines):
        return self._call(self._f.writelines, lines)

    def flush(self):
        return self._call(self._f.flush)

    def __getattr__(self, name):
        if name == "fileno":
            raise AttributeError(name)
        return getattr(self._f, name)


@contextmanager
def atomic_output(path, mode: str | None = "wb", sync: bool = True):
    """Write `path` in a `with` block: mode "wb" or "w" (UTF-8) yields a file object, mode
    None the temporary path (str) for a library that opens it by name (its extension is the
    target's). The file replaces `path` when the block ends; an exception leaves `path` as it
    was, and an OSError of the writing (on the file object, or on the temporary path or none
    named) is a WriteError naming `path`."""
    pending = PendingFile(path)
    f = None
    try:
        if mode is None:
            pending.close_fd()
            yield pending.tmp
        elif mode in ("w", "wb"):
            f = os.fdopen(pending.fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
            pending.fd = None
            yield _Guarded(f, pending.path)
            try:
                f.flush()
            except OSError as e:
                raise WriteError(pending.path, e) from None
            pending.fd = os.dup(f.fileno()) if sync else None
            f.close()
            f = None
        else:
            raise ValueError(f"atomic_output: mode {mode!r}, expected 'wb', 'w' or None")
    except OSError as e:
        _close_quietly(f)
        pending.discard()
        if not isinstance(e, WriteError) and e.filename in (None, pending.tmp):
            raise WriteError(pending.path, e) from None
        raise
    except BaseException:
        _close_quietly(f)
        pending.discard()
        raise
    pending.commit(sync)


def _close_quietly(f):
    if f is not None:
        try:
            f.close()
        except OSError:
            pass


# -- outputs are never inputs ------------------------------------------------------------------
def _named(files) -> list[tuple[str, str]]:
    """(what, path) pairs from a {what: path or paths} dict or an iterable of paths; None and
    '-' (stdout/stdin) are skipped."""
    items = files.items() if isinstance(files, dict) else (("", f) for f in files)
    pairs = []
    for what, value in items:
        many = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
        pairs += [(what, os.fspath(p)) for p in many if p is not None and os.fspath(p) != "-"]
    return pairs


def _identity(path: str):
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def check_outputs_not_inputs(outputs, inputs):
    """A UsageError (exit status 2) when an output is one of the inputs: the same file by
    device and inode, so a hard link or a symlink to an input counts. `outputs` and `inputs`
    are {what: path or list of paths} (what names them in the message, e.g. "--json", "the
    input image") or plain lists of paths."""
    outs = [(what, p, ident) for what, p in _named(outputs)
            if (ident := _identity(p)) is not None]
    if not outs:
        return
    seen = {}
    for what, p in _named(inputs):
        ident = _identity(p)
        if ident is not None:
            seen.setdefault(ident, (what, p))
    for out_what, out, ident in outs:
        if ident in seen:
            in_what, inp = seen[ident]
            same = "" if os.path.abspath(out) == os.path.abspath(inp) else " (the same file)"
            raise UsageError(f"{(out_what + ' ').lstrip()}{out} is {(in_what + ' ').lstrip()}"
                             f"{inp}{same}: writing it would replace an input; give another "
                             f"name")


def check_not_replacing(paths, force: bool, what: str = "a file of yours"):
    """A UsageError unless `force` when any of `paths` exists (a file, or a folder with
    something in it): a command that writes a data set does not replace a user's own."""
    if force:
        return
    found = []
    for p in map(os.fspath, paths):
        try:
            if os.path.isdir(p) and not os.listdir(p):
                continue
        except OSError:
            pass
        if os.path.lexists(p):
            found.append(p)
    if found:
        more = f" and {len(found) - 1} more" if len(found) > 1 else ""
        raise UsageError(f"{found[0]}{more} already exist{'s' if not more else ''} (maybe "
                         f"{what}): pass --force to replace, or choose another folder")
