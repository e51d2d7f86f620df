"""Errors a user can act on: each names the file, line, layer and what was expected."""
import errno
import os


class DarknumbaError(Exception):
    """Base class: the CLI prints these as one clear message, without a traceback."""


class CfgError(DarknumbaError):
    """A .cfg file that Darknet would not accept (or would silently misread)."""


class WeightsError(DarknumbaError):
    """A .weights file that does not fit the network it is loaded into."""


class DataError(DarknumbaError):
    """An image, label or .data file that cannot be used."""


class UsageError(DarknumbaError):
    """A command line asking for something harmful (an output that is one of the inputs, a
    user's file replaced without --force): exit status 2, as typer's usage errors."""


class WriteError(DarknumbaError, OSError):
    """A file could not be written (full disk, file-size limit, permissions): one line naming
    it and the operating system's reason; the previous file is intact (outputs.py). Its
    errno is the OSError's."""

    def __init__(self, path, e: OSError):
        super().__init__(e.errno, e.strerror or str(e), path)
        hint = {errno.ENOSPC: " (the disk is full)", errno.EDQUOT: " (the disk quota is reached)",
                errno.EFBIG: " (the file-size limit, `ulimit -f`, is reached)"}.get(e.errno, "")
        self.message = (f"could not write {os.fsdecode(path)}: "
                        f"{e.strerror or str(e) or type(e).__name__}{hint}")

    def __str__(self):
        return self.message


class CfgWarning(UserWarning):
    """A cfg Darknet reads differently from what it says: a key nothing reads (Darknet prints
    `Unused field`), a key given twice."""


class WeightsWarning(UserWarning):
    """Weights that load but will not work: NaN or Inf values (saved by a diverged run)."""
