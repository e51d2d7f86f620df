"""Darknet's small tools: `darknumba reset | average | rescale | ops | speed` (darknet.c's
reset_normalize_net, average, rescale_net, operations, speed)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .options import DialectOption

CfgArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg file")]
WeightsArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help=".weights file")]
OutArg = Annotated[Path, typer.Argument(dir_okay=False, help="the .weights file to write")]


def reset(cfg: CfgArg, weights: WeightsArg, out: OutArg,
          clear: Annotated[bool, typer.Option("--clear", "-clear", help="also set `seen` to 0")] = False,
          dialect: DialectOption = None):
    """Darknet's reset: fold every batch norm into its weights and set the batch-norm
    statistics to the identity (the outputs stay the same, the same cfg reads the file), so
    that training gathers them afresh. --clear also restarts `seen` (the iteration count)."""
    from ..parser import load_network
    from ..export.tools import reset_batchnorm
    from ..outputs import check_outputs_not_inputs
    from ..weights import save_weights
    check_outputs_not_inputs({"OUT": out}, {"the cfg": cfg, "the weights": weights})
    net = load_network(str(cfg), str(weights), batch=1, dialect=dialect)
    layers = reset_batchnorm(net)
    if clear:
        net.seen = 0
    save_weights(net, out)
    typer.echo(f"reset batch norm of {len(layers)} layers; seen {net.seen}; wrote {out}")


def average(cfg: CfgArg, out: OutArg,
            weights: Annotated[list[Path], typer.Argument(exists=True, dir_okay=False,
                                                          help=".weights files of this cfg")],
            dialect: DialectOption = None):
    """Darknet's average: the mean of several .weights files of one cfg (`seen` of the first)."""
    from ..export.tools import average_weights
    from ..outputs import check_outputs_not_inputs
    from ..weights import save_weights
    check_outputs_not_inputs({"OUT": out}, {"the cfg": cfg, "the weights": weights})
    net = average_weights(str(cfg), [str(w) for w in weights], dialect=dialect)
    save_weights(net, out)
    typer.echo(f"averaged {len(weights)} files; wrote {out}")


def rescale(cfg: CfgArg, weights: WeightsArg, out: OutArg, dialect: DialectOption = None):
    """Darknet's rescale: the first convolution's 3-channel filters doubled and shifted so
    that the network reads [0, 1] images where it was trained on [-1, 1] ones."""
    from ..parser import load_network
    from ..export.tools import rescale_weights
    from ..outputs import check_outputs_not_inputs
    from ..weights import save_weights
    check_outputs_not_inputs({"OUT": out}, {"the cfg": cfg, "the weights": weights})
    net = load_network(str(cfg), str(weights), batch=1, dialect=dialect)
    i = rescale_weights(net)
    save_weights(net, out)
    what = "no convolutional layer" if i is None else f"layer {i}"
    typer.echo(f"rescaled {what}; wrote {out}")


def ops(cfg: CfgArg, dialect: DialectOption = None):
    """Darknet's ops: floating point operations of one forward pass (2 x the multiply-adds of
    the convolutional, connected and recurrent layers)."""
    from ..parser import parse_network_cfg
    from ..export.tools import numops
    n = numops(parse_network_cfg(cfg, batch=1, dialect=dialect, allocate=False))
    typer.echo(f"Floating Point Operations: {n}\nFloating Point Operations: {n / 1e9:.2f} Bn")


def speed(cfg: CfgArg,
          tics: Annotated[int, typer.Option("--tics", min=1, help="forward passes to time")] = 1000,
          dialect: DialectOption = None):
    """Darknet's speed: time TICS forward passes at batch 1 (random weights; the first pass,
    which compiles, is not timed)."""
    from ..export.tools import speed as run
    typer.echo(run(cfg, tics, dialect).report())


def register(app: typer.Typer):
    for command in (reset, average, rescale, ops, speed):
        app.command()(command)
