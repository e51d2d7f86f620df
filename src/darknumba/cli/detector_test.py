"""`darknumba detector test DATA CFG WEIGHTS [IMAGE]`: Darknet's own grammar for detection,
so Darknet users' commands work unchanged (names from the .data file, -thresh/-hier/-out)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .detect import run_detection, warn
from .options import DialectOption, ExactOption, not_nan


SWITCHES = ("ext_output", "dont_show", "letter_box")


def _darknet_flags(extra: list[str]) -> dict:
    """Darknet's single-dash options after the positional arguments: -thresh, -hier, -out,
    -nms with a value; AlexeyAB's switches -ext_output, -dont_show, -letter_box."""
    flags, i = {}, 0
    while i < len(extra):
        key = extra[i].lstrip("-")
        if key in ("thresh", "hier", "out", "nms") and i + 1 < len(extra):
            flags[key] = extra[i + 1]
            i += 2
        elif key in SWITCHES:
            flags[key] = True
            i += 1
        else:
            raise typer.BadParameter(f"unknown option {extra[i]!r} (Darknet's: -thresh X -hier X "
                                     f"-out NAME, -ext_output, -dont_show, -letter_box)")
    return flags


def _number(flags: dict, key: str, default: float | None) -> float | None:
    """-KEY's value as a checked number; `default` (already checked) when not given."""
    if key not in flags:
        return default
    try:
        value = float(flags[key])
    except ValueError:
        raise typer.BadParameter(f"-{key} takes a number, not {flags[key]!r}") from None
    return not_nan(value)


def detector_test(
    ctx: typer.Context,
    datacfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                            help="Darknet .data file (its `names` are used)")],
    cfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg")],
    weights: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .weights")],
    image: Annotated[Optional[str], typer.Argument(
        help="the image (none: ask for paths on stdin, as Darknet does)",
        show_default=False)] = None,
    thresh: Annotated[Optional[float], typer.Option(
        callback=not_nan, help="class probability threshold (or -thresh; default 0.5, "
                               "AlexeyAB's 0.25)", show_default=False)] = None,
    hier: Annotated[float, typer.Option(callback=not_nan, help="hierarchical threshold (or -hier)")] = 0.5,
    nms: Annotated[float, typer.Option(callback=not_nan, help="NMS IoU threshold")] = 0.45,
    out: Annotated[str, typer.Option(help="drawing, PNG; `.png` is added when the name has no "
                                          "suffix (or -out)")] = "predictions",
    dialect: DialectOption = None,
    exact: ExactOption = False,
):
    """Darknet's `detector test DATA CFG WEIGHTS [IMAGE] [-thresh X] [-hier X] [-out NAME]`,
    and AlexeyAB's -ext_output, -dont_show (accepted: nothing is shown), -letter_box. An
    AlexeyAB network detects as its detector test does: stretched to the network unless
    -letter_box or [net] letter_box=1, threshold 0.25, its NMS kind and print order."""
    from ..data.datasets import names_file_of
    from ..vision.detector import Detector, expand_images
    flags = _darknet_flags(ctx.args)
    thresh, hier, nms = (_number(flags, k, v) for k, v in
                         (("thresh", thresh), ("hier", hier), ("nms", nms)))
    target = Path(flags.get("out", out))
    if not target.suffix:
        target = target.with_name(target.name + ".png")
    detector = Detector(cfg, weights, thresh=0.5 if thresh is None else thresh, hier=hier,
                        nms=nms, names=names_file_of(datacfg), dialect=dialect,
                        letterbox=True if flags.get("letter_box") else None,
                        ext_output=bool(flags.get("ext_output")), log=warn,
                        exact=exact or None)
    if thresh is None and detector.alexeyab:
        detector.thresh = 0.25                  # AlexeyAB's detector test default
    if image is not None:
        run_detection(detector, expand_images([image])[:1], out=target)
        return
    while True:
        typer.echo("Enter Image Path: ", nl=False)
        line = sys.stdin.readline()
        if not line:
            return
        if line.strip():
            run_detection(detector, [Path(line.strip())], out=target)


def register(app: typer.Typer):
    from .detector import detector_app
    detector_app.command("test", context_settings={"allow_extra_args": True,
                                                   "ignore_unknown_options": True})(detector_test)
