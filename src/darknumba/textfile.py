"""The small text files users hand over (.data files, image lists, names, class trees): UTF-8,
a leading byte-order mark dropped. A file that is not text (a directory, a device, a FIFO, more
than inputs.MAX_TEXT bytes, bytes that are not UTF-8) is one error naming the file, and for bad
bytes the offset and the line."""
from __future__ import annotations

import os

from .errors import DarknumbaError, DataError
from .inputs import MAX_TEXT, read_bytes


def read_text(path, what: str, error: type[DarknumbaError] = DarknumbaError) -> str:
    """The text of `path`, described as `what` in errors, which are raised as `error`."""
    path = os.fspath(path)
    data = read_bytes(path, what, error, MAX_TEXT)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(f"{path}: {what} is not UTF-8 text: byte 0x{data[e.start]:02x} at offset "
                    f"{e.start} (line {line})") from None


def read_list(path, what: str = "list") -> list[str]:
    """get_paths / get_labels: one entry per non-empty line."""
    return [ln.strip() for ln in read_text(path, what, DataError).splitlines() if ln.strip()]
