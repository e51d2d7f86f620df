"""The small text files users hand over (.data files, image lists, names, class trees): UTF-8,
a leading byte-order mark dropped. A file that is not text (a directory, a device, a FIFO, bytes
that are not UTF-8) is one error naming the file, and for bad bytes the offset and the line."""
from __future__ import annotations

import os
import stat

from .errors import DarknumbaError


def read_text(path, what: str, error: type[DarknumbaError] = DarknumbaError) -> str:
    """The text of `path`, described as `what` in errors, which are raised as `error`."""
    path = os.fspath(path)
    shown = repr(path) if "\0" in path else path
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise error(f"{shown}: cannot read {what}: it is {kind}")
        with open(path, "rb") as f:
            data = f.read()
    except (OSError, ValueError) as e:          # ValueError: a NUL byte in the path
        raise error(f"{shown}: cannot read {what}: {getattr(e, 'strerror', None) or e}") \
            from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(f"{path}: {what} is not UTF-8 text: byte 0x{data[e.start]:02x} at offset "
                    f"{e.start} (line {line})") from None
