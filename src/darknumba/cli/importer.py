"""`darknumba import caffe`: a Caffe model (deploy .prototxt + .caffemodel) as a Darknet .cfg +
.weights (docs/caffe.md)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                         help="Import another framework's model as a Darknet .cfg + .weights.")


@import_app.command("caffe")
def caffe(prototxt: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                                   help="Caffe deploy .prototxt")],
          caffemodel: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                                     help="Caffe .caffemodel")],
          out_cfg: Annotated[Path, typer.Argument(dir_okay=False, help="the .cfg to write")],
          out_weights: Annotated[Path, typer.Argument(dir_okay=False,
                                                      help="the .weights to write")],
          keep_bn: Annotated[bool, typer.Option(
              "--keep-bn", help="BatchNorm as [caffe_batchnorm] sections, which train as "
                                "Caffe does (default: folded into the convolutions, for "
                                "inference)")] = False):
    """Write the Caffe model as OUT_CFG + OUT_WEIGHTS. The network takes Caffe's input (as the
    deploy prototxt's preprocessing makes it: often BGR, 0-255, mean subtracted); a layer type
    the import does not map is an error naming its prototxt line."""
    from ..export.caffe import import_caffe
    result = import_caffe(prototxt, caffemodel, out_cfg, out_weights, keep_bn=keep_bn)
    counts = {}
    for p in result.plan.layers:
        counts[p.section] = counts.get(p.section, 0) + 1
    typer.echo(f"wrote {out_cfg} ({len(result.plan.layers)} layers: "
               + ", ".join(f"{n} {s}" for s, n in counts.items())
               + f") and {out_weights}; input {result.plan.w}x{result.plan.h}x{result.plan.c}")


def register(app: typer.Typer):
    app.add_typer(import_app, name="import")
