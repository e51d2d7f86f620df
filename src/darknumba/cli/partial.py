"""`darknumba partial CFG WEIGHTS OUT N`: Darknet's `partial`, weights cut after layer N-1."""
from pathlib import Path
from typing import Annotated

import typer

from .options import DialectOption


def partial(cfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="the cfg the weights were trained with")],
            weights: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="full .weights file")],
            out: Annotated[Path, typer.Argument(help="where to write the cut weights")],
            n: Annotated[int, typer.Argument(min=1, help="keep layers 0..N-1 (yolov3-tiny.conv.15: N=15, yolov4-tiny.conv.29: N=29)")],
            dialect: DialectOption = None):
    """Save the first N layers' weights (seen reset to 0), for transfer learning. Under the
    alexeyab dialect only those layers are read, as AlexeyAB's partial does."""
    from ..outputs import check_outputs_not_inputs
    from ..train.detector import partial as cut
    check_outputs_not_inputs({"OUT": out}, {"the cfg": cfg, "the weights": weights})
    cut(str(cfg), str(weights), str(out), n, log=typer.echo, dialect=dialect)


def register(app: typer.Typer):
    app.command()(partial)
