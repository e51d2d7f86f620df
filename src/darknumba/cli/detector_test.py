"""`darknumba detector test DATA CFG WEIGHTS [IMAGE]`: Darknet's own grammar for detection,
so Darknet users' commands work unchanged (names from the .data file, -thresh/-hier/-out).
`-out` is pjreddie's drawing name, except a name ending in .json: AlexeyAB's `-out
result.json` (the detections of every image read, in darknumba's JSON lines)."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UsageError
from .darknet_flags import DontShow, ExtOutput, IgnoredClear, IgnoredMap
from .common import first_run_mode, warn
from .detect import run_detection
from .options import DecoderOption, DetectCompatOption, DialectOption, ExactOption, not_nan

# a path typed on stdin: Linux's PATH_MAX is 4096 bytes; the bound keeps an endless line
# (`< /dev/zero`) from being read into memory
MAX_PATH_LINE = 4096


def detector_test(
    datacfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                            help="Darknet .data file (its `names` are used)")],
    cfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg")],
    weights: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .weights")],
    image: Annotated[Optional[str], typer.Argument(
        help="the image (none: ask for paths on stdin, as Darknet does)",
        show_default=False)] = None,
    thresh: Annotated[Optional[float], typer.Option(
        "--thresh", "-thresh", callback=not_nan,
        help="class probability threshold (default: pjreddie 0.5, AlexeyAB 0.25)",
        show_default=False)] = None,
    hier: Annotated[Optional[float], typer.Option(
        "--hier", "-hier", callback=not_nan, help="hierarchical threshold (default 0.5)",
        show_default=False)] = None,
    nms: Annotated[Optional[float], typer.Option(
        "--nms", "-nms", callback=not_nan, help="NMS IoU threshold (default 0.45)",
        show_default=False)] = None,
    out: Annotated[Optional[str], typer.Option(
        "--out", "-out",
        help="drawing, PNG; `.png` is added when the name has no suffix (default "
             "predictions); NAME.json: the JSON lines instead (AlexeyAB's -out result.json)",
        show_default=False)] = None,
    json_out: Annotated[Optional[str], typer.Option(
        "--json", help="write one JSON line per image to this file ('-': stdout, instead of "
                       "the text lines and predictions.png)", show_default=False)] = None,
    ext_output: ExtOutput = False,
    letter_box: Annotated[bool, typer.Option(
        "-letter_box", help="AlexeyAB's flag: letterbox the image to the network")] = False,
    dont_show: DontShow = False,
    map_flag: IgnoredMap = False,
    clear: IgnoredClear = False,
    dialect: DialectOption = None,
    exact: ExactOption = None,
    decoder: DecoderOption = None,
    compat: DetectCompatOption = None,
):
    """Darknet's `detector test DATA CFG WEIGHTS [IMAGE] [-thresh X] [-hier X] [-out NAME]`,
    and AlexeyAB's -ext_output, -dont_show (accepted: nothing is shown), -letter_box. An
    AlexeyAB network detects as its detector test does: stretched to the network unless
    -letter_box or [net] letter_box=1, threshold 0.25, its NMS kind and print order."""
    from ..data.datasets import names_file_of
    from ..outputs import atomic_output, check_outputs_not_inputs
    from ..vision.detector import Detector, expand_images
    if out is not None and out.lower().endswith(".json"):
        json_out, out = json_out or out, None
    target = None if out is None and json_out == "-" else Path(out or "predictions")
    if target is not None and not target.suffix:
        target = target.with_name(target.name + ".png")
    outputs = {"-out" if out else "the drawing": target, "--json": json_out}
    images = expand_images([image])[:1] if image is not None else []
    check_outputs_not_inputs(outputs, {"the input image": images, "the data file": datacfg,
                                       "the cfg": cfg, "the weights": weights,
                                       "the names file": names_file_of(datacfg)})
    # None: the dialect's `detector test` defaults (dialect.Defaults)
    detector = Detector(cfg, weights, thresh=thresh, hier=hier, nms=nms,
                        names=names_file_of(datacfg), dialect=dialect,
                        letterbox=True if letter_box else None, ext_output=ext_output, log=warn,
                        exact=exact, first_run=first_run_mode(), compat=compat,
                        decoder=decoder)
    with (atomic_output(json_out, "w") if json_out not in (None, "-")
          else contextlib.nullcontext(json_out)) as jf:
        if image is not None:
            run_detection(detector, images, out=target, json_out=jf)
            return
        while True:
            if jf != "-":
                typer.echo("Enter Image Path: ", nl=False)
            # bounded: an endless line (`< /dev/zero`) is a usage error, not an exhausted memory
            line = sys.stdin.readline(MAX_PATH_LINE + 1)
            if not line:
                return
            if len(line) > MAX_PATH_LINE:
                raise UsageError(f"stdin: a line longer than {MAX_PATH_LINE} characters is not "
                                 f"an image path (one path per line)")
            if line.strip():
                check_outputs_not_inputs(outputs, {"the input image": line.strip()})
                run_detection(detector, [Path(line.strip())], out=target, json_out=jf)


def register(app: typer.Typer):
    from .detector import detector_app
    detector_app.command("test")(detector_test)
