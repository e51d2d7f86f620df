"""`darknumba detector demo DATA CFG WEIGHTS VIDEO`: Darknet's demo on a video file, in its
grammar (-out_filename, -thresh, -hier, -ext_output, -dont_show, -letter_box), so Darknet users'
commands work unchanged. No window is shown; cameras are not read."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import DataError
from .options import DialectOption, not_nan
from .video import detect_video_file

VALUES = ("thresh", "hier", "nms", "out_filename")
# -map and -clear: run_detector parses them for every sub-command; the demo ignores them
SWITCHES = ("ext_output", "dont_show", "letter_box", "map", "clear")


def _darknet_flags(extra: list[str], values=VALUES, switches=SWITCHES) -> dict:
    """Darknet's single-dash options after the positional arguments: VALUES take a value,
    SWITCHES stand alone."""
    flags, i = {}, 0
    while i < len(extra):
        key = extra[i].lstrip("-")
        if key in values and i + 1 < len(extra):
            flags[key] = extra[i + 1]
            i += 2
        elif key in switches:
            flags[key] = True
            i += 1
        else:
            raise typer.BadParameter(
                f"unknown option {extra[i]!r} (Darknet's: "
                + " ".join(f"-{k} X" for k in values) + ", "
                + ", ".join(f"-{k}" for k in switches) + ")")
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


def detector_demo(
    ctx: typer.Context,
    datacfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                            help="Darknet .data file (its `names` are used)")],
    cfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg")],
    weights: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .weights")],
    video: Annotated[Optional[str], typer.Argument(
        help="the video file (.mp4, .avi, .mkv, .mov, .webm ...; needs darknumba[video])",
        show_default=False)] = None,
    thresh: Annotated[Optional[float], typer.Option(
        callback=not_nan, help="class probability threshold (or -thresh; default 0.5, "
                               "AlexeyAB's 0.25)", show_default=False)] = None,
    hier: Annotated[Optional[float], typer.Option(
        callback=not_nan, help="hierarchical threshold (or -hier; default 0.5)",
        show_default=False)] = None,
    nms: Annotated[Optional[float], typer.Option(
        callback=not_nan, help="NMS IoU threshold (or -nms; default 0.45)",
        show_default=False)] = None,
    out_filename: Annotated[Optional[Path], typer.Option(
        "--out-filename", help="write the drawn video here (or -out_filename; .mp4, .avi, "
                               ".mkv, .mov, .webm; default: none)", show_default=False)] = None,
    json_out: Annotated[Optional[str], typer.Option(
        "--json", help="write one JSON line per frame to this file ('-': stdout, instead of "
                       "the text lines)", show_default=False)] = None,
    batch: Annotated[int, typer.Option(min=1, help="frames per forward pass")] = 1,
    dialect: DialectOption = None,
):
    """Darknet's `detector demo DATA CFG WEIGHTS VIDEO [-out_filename OUT] [-thresh X]
    [-hier X]` and AlexeyAB's -ext_output, -dont_show (accepted: nothing is shown),
    -letter_box: prints `FPS:`, `Objects:` and the `name: NN%` lines of every frame, and with
    -out_filename writes the drawn video (same size and frame rate)."""
    from ..data.datasets import names_file_of
    flags = _darknet_flags(ctx.args, VALUES, SWITCHES)
    thresh, hier, nms = (_number(flags, k, v) for k, v in
                         (("thresh", thresh), ("hier", hier), ("nms", nms)))
    if video is None:
        raise DataError("detector demo reads a video file: give VIDEO after WEIGHTS (cameras "
                        "are not supported)")
    out = Path(flags["out_filename"]) if "out_filename" in flags else out_filename
    args = {"cfg": cfg, "weights": weights, "thresh": thresh,
            "hier": hier, "nms": nms, "names": names_file_of(datacfg), "dialect": dialect,
            "letterbox": True if flags.get("letter_box") else None,
            "ext_output": bool(flags.get("ext_output"))}
    if json_out != "-":
        typer.echo(f"video file: {video}")
    detect_video_file(args, video, out, json_out, batch, demo=True)


def register(app: typer.Typer):
    from .detector import detector_app
    detector_app.command("demo", context_settings={"allow_extra_args": True,
                                                   "ignore_unknown_options": True})(detector_demo)
