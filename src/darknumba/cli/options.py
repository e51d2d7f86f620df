"""Options several commands share."""
from typing import Annotated, Optional

import typer

from ..dialect import DIALECTS


def _check_dialect(value):
    if value is not None and value not in DIALECTS:
        raise typer.BadParameter(f"takes {' or '.join(DIALECTS)}, not {value!r}")
    return value


DialectOption = Annotated[Optional[str], typer.Option(
    "--dialect", callback=_check_dialect,
    help="whose Darknet the network follows: pjreddie or alexeyab (default: alexeyab when the "
         "cfg uses anything only AlexeyAB's Darknet reads, or the weights header is 0.2.5)")]
