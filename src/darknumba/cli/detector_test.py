"""`darknumba detector test DATA CFG WEIGHTS [IMAGE]`: Darknet's own grammar for detection,
so Darknet users' commands work unchanged (names from the .data file, -thresh/-hier/-out)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import DataError
from ..textfile import read_text
from .detect import expand_images, get_labels, load_detector, run_detection
from .options import not_nan


def names_from_data(datacfg: Path) -> list[str]:
    """The class names of a Darknet .data file: its `names` (else `labels`) entry, default
    data/names.list as in test_detector; a relative path is tried from the working directory
    (Darknet's rule), then from the folder above the .data file's, then from its own folder."""
    lines = read_text(datacfg, ".data file", DataError).splitlines()
    opts = {}
    for line in lines:
        s = line.strip()
        if s and s[0] not in "#;" and "=" in s:
            k, v = s.split("=", 1)
            opts[k.strip()] = v.strip()
    rel = opts.get("names") or opts.get("labels") or "data/names.list"
    here = Path(datacfg).resolve().parent
    for p in (Path(rel), here.parent / rel, here / rel):
        if p.is_file():
            return get_labels(p)
    raise DataError(f"names file {rel} (from {datacfg}) not found")


def _darknet_flags(extra: list[str]) -> dict:
    """Darknet's single-dash options after the positional arguments: -thresh, -hier, -out."""
    flags, i = {}, 0
    while i < len(extra):
        key = extra[i].lstrip("-")
        if key in ("thresh", "hier", "out", "nms") and i + 1 < len(extra):
            flags[key] = extra[i + 1]
            i += 2
        else:
            raise typer.BadParameter(f"unknown option {extra[i]!r} (Darknet's: -thresh X -hier X "
                                     f"-out NAME)")
    return flags


def _number(flags: dict, key: str, default: float) -> float:
    try:
        value = float(flags.get(key, default))
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
    thresh: Annotated[float, typer.Option(callback=not_nan, help="class probability threshold (or -thresh)")] = 0.5,
    hier: Annotated[float, typer.Option(callback=not_nan, help="hierarchical threshold (or -hier)")] = 0.5,
    nms: Annotated[float, typer.Option(callback=not_nan, help="NMS IoU threshold")] = 0.45,
    out: Annotated[str, typer.Option(help="drawing, PNG; `.png` is added when the name has no "
                                          "suffix (or -out)")] = "predictions",
):
    """Darknet's `detector test DATA CFG WEIGHTS [IMAGE] [-thresh X] [-hier X] [-out NAME]`."""
    flags = _darknet_flags(ctx.args)
    thresh, hier, nms = (_number(flags, k, v) for k, v in
                         (("thresh", thresh), ("hier", hier), ("nms", nms)))
    target = Path(flags.get("out", out))
    if not target.suffix:
        target = target.with_name(target.name + ".png")
    net, names = load_detector(cfg, weights, 1, names=names_from_data(datacfg))
    if image is not None:
        run_detection(net, names, expand_images([image])[:1], thresh, hier, nms, out=target)
        return
    while True:
        typer.echo("Enter Image Path: ", nl=False)
        line = sys.stdin.readline()
        if not line:
            return
        if line.strip():
            run_detection(net, names, [Path(line.strip())], thresh, hier, nms, out=target)


def register(app: typer.Typer):
    from .detector import detector_app
    detector_app.command("test", context_settings={"allow_extra_args": True,
                                                   "ignore_unknown_options": True})(detector_test)
