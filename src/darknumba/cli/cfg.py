"""`darknumba cfg custom TEMPLATE --data DATA`: a detector cfg for your own classes
(train/custom_cfg.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

cfg_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                      help="Make cfg files: a detector for your own classes.")


@cfg_app.command("custom")
def custom(template: Annotated[str, typer.Argument(help="yolov4-tiny, yolov4, yolov3-tiny, yolov3, yolov7-tiny (the project's cfg/<name>-custom.cfg, else cfg/<name>.cfg) or a .cfg path")],
           data: Annotated[Path, typer.Option("--data", exists=True, dir_okay=False, help="Darknet .data file: its classes, training list and labels")],
           classes: Annotated[Optional[int], typer.Option(min=1, help="number of classes (checked against the .data file's classes=; default: that)")] = None,
           out: Annotated[Optional[Path], typer.Option(dir_okay=False, help="the cfg to write (default: <data>-<template>.cfg here)")] = None,
           width: Annotated[Optional[int], typer.Option(min=32, help="network input width, a multiple of 32 (default: the template's)")] = None,
           height: Annotated[Optional[int], typer.Option(min=32, help="network input height, a multiple of 32 (default: the template's)")] = None,
           seed: Annotated[int, typer.Option(min=0, help="seed of calc_anchors' initial centres")] = 0,
           force: Annotated[bool, typer.Option(help="replace OUT when it exists")] = False):
    """Write the template with AlexeyAB's custom-training edits: classes=N in every [yolo],
    filters=(N+5)*masks before each, max_batches=max(6000, 2000*N, training images),
    steps=80%,90%, batch=64, and anchors from calc_anchors over the training labels."""
    from ..train.custom_cfg import custom_cfg, find_template
    from ..errors import UsageError
    from ..outputs import atomic_write, check_outputs_not_inputs
    base = find_template(template)
    if out is None:
        out = Path(f"{data.stem}-{Path(template).stem}.cfg")
    try:                    # the same file, a hard link or a symlink included
        check_outputs_not_inputs({"--out": out}, {"the template": base, "the .data file": data})
    except UsageError as e:
        raise typer.BadParameter(str(e), param_hint="'--out'") from None
    if out.exists() and not force:
        raise typer.BadParameter(f"{out} exists (pass --force to replace it)",
                                 param_hint="'--out'")
    c = custom_cfg(base, data, classes, width, height, seed,
                   log=lambda m: typer.echo(m, err=True))
    atomic_write(out, c.text.encode())
    typer.echo(f"wrote {out} from {c.template}: classes={c.classes}, filters="
               f"{','.join(map(str, c.filters))}, max_batches={c.max_batches}, steps="
               f"{c.steps[0]},{c.steps[1]}, {c.width}x{c.height}, anchors over "
               f"{c.anchors.boxes} boxes (avg IoU {c.anchors.avg_iou:.2f} %)")
    typer.echo(f"train it: darknumba detector train {data} {out}")


def register(app: typer.Typer):
    app.add_typer(cfg_app, name="cfg")
