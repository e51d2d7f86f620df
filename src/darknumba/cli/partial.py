"""`darknumba partial CFG WEIGHTS OUT N`: Darknet's `partial`, weights cut after layer N-1."""
from pathlib import Path
from typing import Annotated

import typer


def partial(cfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="the cfg the weights were trained with")],
            weights: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="full .weights file")],
            out: Annotated[Path, typer.Argument(help="where to write the cut weights")],
            n: Annotated[int, typer.Argument(min=0, help="keep layers 0..N-1 (yolov3-tiny.conv.15: N=15)")]):
    """Save the first N layers' weights (seen reset to 0), for transfer learning."""
    from ..train.detector import partial as cut
    cut(str(cfg), str(weights), str(out), n, log=typer.echo)


def register(app: typer.Typer):
    app.command()(partial)
