"""Checks shared by the commands' options."""
import math

import typer


def not_nan(value: float) -> float:
    """A threshold must be a number: NaN compares false both ways, which would let a count and
    the fill that follows it disagree."""
    if value is not None and math.isnan(value):
        raise typer.BadParameter("NaN is not a threshold (give a number)")
    return value
