"""Every file darknumba reads from a user is checked the same way before it is opened (outputs.py
is the writing side): it must be a regular file (a directory, a character device such as
/dev/zero, a named pipe, a socket or a block device is refused: opening a FIFO blocks, /dev/zero
never ends) no larger than a bound that says what the file is for. The errors name the file and
what was expected, raised as the caller's error class (CfgError, DataError, ...).

- regular_file(path, what, error, max_bytes): the file's size, after the checks.
- read_bytes(path, what, error, max_bytes): its bytes.

Readers that parse (cfg.read_cfg, textfile.read_text, weights, parity's .npz) call these first;
the format checks are theirs.
"""
from __future__ import annotations

import os
import stat

from .errors import DarknumbaError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
MAX_CFG = 64 * MiB          # the largest cfg we know is ~100 KiB
MAX_TEXT = 1 * GiB          # lists of a large data set (Open Images: ~150 MiB), texts to learn

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device (like /dev/zero)"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def shown(path) -> str:
    """A path as an error message shows it (repr when it holds a NUL byte)."""
    path = os.fsdecode(path)
    return repr(path) if "\0" in path else path


def kind_of(mode: int) -> str:
    """What a file that is not regular is, in words."""
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def regular_file(path, what: str, error: type[DarknumbaError] = DarknumbaError,
                 max_bytes: int | None = None) -> int:
    """The size of `path` (described as `what`), after making sure with stat, before anything
    opens it, that it is a regular file of at most `max_bytes` bytes."""
    name = shown(path)
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:          # ValueError: a NUL byte in the path
        raise error(f"{name}: cannot read {what}: {getattr(e, 'strerror', None) or e}") \
            from None
    if not stat.S_ISREG(st.st_mode):
        kind = kind_of(st.st_mode)
        raise error(f"{name}: cannot read {what}: it is "
                    + (kind if kind.startswith("not ") else f"{kind}, not a regular file"))
    if max_bytes is not None and st.st_size > max_bytes:
        raise error(f"{name}: cannot read {what}: {st.st_size:,} bytes is more than the "
                    f"{max_bytes:,} a {what} may have")
    return st.st_size


def read_bytes(path, what: str, error: type[DarknumbaError] = DarknumbaError,
               max_bytes: int | None = MAX_TEXT) -> bytes:
    """The bytes of `path` (described as `what`), a regular file of at most `max_bytes`. The
    read stops past the bound too (a file that grows while it is read)."""
    size = regular_file(path, what, error, max_bytes)
    try:
        with open(path, "rb") as f:
            # read(n) allocates n bytes before it reads: ask for what stat saw (plus one byte,
            # to notice growth), not for the bound (a 64 MiB buffer for every cfg)
            data = f.read(size + 1)
            if len(data) > size:                # it grew: the rest, up to the bound
                data += f.read() if max_bytes is None else f.read(max_bytes + 1 - len(data))
    except OSError as e:
        raise error(f"{shown(path)}: cannot read {what}: {e.strerror or e}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise error(f"{shown(path)}: cannot read {what}: it grew past {max_bytes:,} bytes "
                    f"while it was read")
    return data
