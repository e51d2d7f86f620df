"""Options and checks several commands share."""
import math
from typing import Annotated, Optional

import typer

from ..dialect import DIALECTS


def not_nan(value: float) -> float:
    """A threshold must be a number: NaN compares false both ways, which would let a count and
    the fill that follows it disagree."""
    if value is not None and math.isnan(value):
        raise typer.BadParameter("NaN is not a threshold (give a number)")
    return value


def _check_dialect(value):
    if value is not None and value not in DIALECTS:
        raise typer.BadParameter(f"takes {' or '.join(DIALECTS)}, not {value!r}")
    return value


DialectOption = Annotated[Optional[str], typer.Option(
    "--dialect", callback=_check_dialect,
    help="whose Darknet the network follows: pjreddie or alexeyab (default: alexeyab when the "
         "cfg uses anything only AlexeyAB's Darknet reads, or the weights header is 0.2.5)")]
