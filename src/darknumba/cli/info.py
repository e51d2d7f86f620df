"""`darknumba summary CFG`: Darknet's layer table for a cfg."""
from pathlib import Path
from typing import Annotated, Optional

import typer


def summary(cfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg file")],
            batch: Annotated[Optional[int], typer.Option(help="override batch/subdivisions")] = None):
    """Print the layer table (index, type, filters, size, input -> output, BFLOPs) as Darknet does."""
    from ..parser import parse_network_cfg
    net = parse_network_cfg(cfg, batch=batch)
    typer.echo(net.summary())


def register(app: typer.Typer):
    app.command()(summary)
