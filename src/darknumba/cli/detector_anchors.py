"""`darknumba detector calc_anchors DATA -num_of_clusters N -width W -height H`: AlexeyAB's
anchors for a dataset, printed and written to anchors.txt (and counters_per_class.txt)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from .darknet_flags import (DontShow, IgnoredClear, IgnoredExtOutput, IgnoredMap, IgnoredOut,
                            IgnoredThresh)
from .detector import detector_app


def calc_anchors(data: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .data file")],
                 num_of_clusters: Annotated[int, typer.Option("-num_of_clusters", "--num-of-clusters", min=1, help="anchors to compute (6 for yolov4-tiny, 9 for yolov4)")] = 9,
                 width: Annotated[int, typer.Option("-width", "--width", min=1, help="network input width")] = 416,
                 height: Annotated[int, typer.Option("-height", "--height", min=1, help="network input height")] = 416,
                 seed: Annotated[int, typer.Option(help="seed for the initial centres")] = 0,
                 out: Annotated[Path, typer.Option(help="folder for anchors.txt and counters_per_class.txt")] = Path("."),
                 show: Annotated[bool, typer.Option("-show", hidden=True, help="accepted; no window is shown")] = False,
                 dont_show: DontShow = False, ext_output: IgnoredExtOutput = False,
                 map_flag: IgnoredMap = False, clear: IgnoredClear = False,
                 thresh: IgnoredThresh = None, out_flag: IgnoredOut = None):
    """k-means of the training boxes (distance 1 - IoU), as AlexeyAB's calc_anchors."""
    from ..data.datasets import read_data_cfg
    from ..outputs import atomic_write, check_outputs_not_inputs
    from ..train.anchors import calc_anchors as compute, training_boxes
    dc = read_data_cfg(data)
    anchors, counters_file = out / "anchors.txt", out / "counters_per_class.txt"
    check_outputs_not_inputs({"the output": [anchors, counters_file]},
                             {"the data file": data, "the training list": dc.train})
    _, paths, boxes = training_boxes(data, log=lambda m: typer.echo(m, err=True))
    typer.echo(f" num_of_clusters = {num_of_clusters}, width = {width}, height = {height}")
    typer.echo(f" read labels from {len(paths)} images: {len(boxes)} boxes")
    if len(boxes) < num_of_clusters:
        raise typer.BadParameter(f"{num_of_clusters} clusters need at least as many boxes; "
                                 f"the training labels have {len(boxes)}")
    a = compute(boxes[:, 2:4], boxes[:, 4].astype(np.int64), dc.classes, num_of_clusters, width,
                height, seed)
    counters = ", ".join(str(c) for c in a.counters_per_class)
    line = a.anchors_line(width)
    atomic_write(counters_file, f"counters_per_class = {counters}".encode())
    atomic_write(anchors, line.encode())
    typer.echo(f" iterations = {a.iterations}")
    typer.echo(f"counters_per_class = {counters}")
    typer.echo(f" avg IoU = {a.avg_iou:2.2f} %")
    typer.echo(f"Saving anchors to the file: {out / 'anchors.txt'}")
    typer.echo(f"anchors = {line}")


def register(app: typer.Typer):
    detector_app.command("calc_anchors")(calc_anchors)
