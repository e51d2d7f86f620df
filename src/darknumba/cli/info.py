"""`darknumba summary CFG`: Darknet's layer table for a cfg."""
from pathlib import Path
from typing import Annotated, Optional

import typer

from .options import DialectOption


def summary(cfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg file")],
            batch: Annotated[Optional[int], typer.Option(min=1, help="override batch/subdivisions")] = None,
            dialect: DialectOption = None):
    """Print the layer table (index, type, filters, size, input -> output, BFLOPs) as Darknet does,
    after a line naming the dialect the network follows and why. Only the shapes are computed:
    no buffer is allocated, so large networks are cheap."""
    from ..parser import parse_network_cfg
    net = parse_network_cfg(cfg, batch=batch, dialect=dialect, allocate=False)
    typer.echo(f"dialect: {net.dialect} ({net.dialect_reason})")
    typer.echo(net.summary())


def register(app: typer.Typer):
    app.command()(summary)
