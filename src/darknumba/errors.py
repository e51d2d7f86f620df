"""Errors a user can act on: each names the file, line, layer and what was expected."""


class DarknumbaError(Exception):
    """Base class: the CLI prints these as one clear message, without a traceback."""


class CfgError(DarknumbaError):
    """A .cfg file that Darknet would not accept (or would silently misread)."""


class WeightsError(DarknumbaError):
    """A .weights file that does not fit the network it is loaded into."""


class DataError(DarknumbaError):
    """An image, label or .data file that cannot be used."""


class CfgWarning(UserWarning):
    """A cfg Darknet reads differently from what it says: a key nothing reads (Darknet prints
    `Unused field`), a key given twice."""


class WeightsWarning(UserWarning):
    """Weights that load but will not work: NaN or Inf values (saved by a diverged run)."""
