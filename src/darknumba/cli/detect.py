"""`darknumba detect [CFG] [WEIGHTS] [IMAGE...]`: Darknet's `./darknet detect`.

With no arguments: cfg/yolov3-tiny.cfg, weights/yolov3-tiny.weights (fetched, sha256-checked,
when missing) and a sample photo (scikit-image's coffee.png, fetched once when scikit-image is not
installed). One image: Darknet's printed lines
and a drawn predictions.png. Many (folders, globs, list files): batched, with a progress bar,
one JSON line per image with --json. A video file (cli/video.py): every frame, the drawn video
with --out, one JSON line per frame."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import DarknumbaError, DataError
from .common import (check_detect_outputs, drawing_path, first_run_mode, json_lines_to,
                     predicted_in, warn)
from .darknet_flags import DontShow, ExtOutput
from .options import DecoderOption, DetectCompatOption, DialectOption, ExactOption, not_nan
from .video import detect_video_file, video_args

DEFAULT_CFG = "cfg/yolov3-tiny.cfg"
DEFAULT_WEIGHTS = "yolov3-tiny"
SAMPLE = ("skimage", "data/coffee.png")     # CC0 photo; yolov3-tiny: cup 64%


# -- where the defaults live -------------------------------------------------------------------
def default_cfg() -> Path:
    from ..vision.detector import find_default, search_roots
    p = find_default(DEFAULT_CFG)
    if p is None:
        raise DataError(f"{DEFAULT_CFG} not found in " + ", ".join(map(str, search_roots()))
                        + ": pass CFG and WEIGHTS")
    return p


def default_weights(cfg: Path) -> Path:
    """weights/yolov3-tiny.weights beside the cfg/ folder the cfg came from; fetched (sha256
    checked) when missing."""
    from ..data.fetch import fetch_weights
    folder = cfg.resolve().parent.parent / "weights"
    path = folder / f"{DEFAULT_WEIGHTS}.weights"
    if path.is_file():
        return path
    return fetch_weights(DEFAULT_WEIGHTS, folder, log=warn)


def sample_image() -> Path:
    """The sample photo: scikit-image's coffee.png where scikit-image is installed (found
    without importing it), else a copy in the user's cache, fetched (sha256 checked) once.
    scikit-image is not a dependency: it brings SciPy, and numba imports SciPy's linear algebra
    whenever it is installed (+0.3-0.4 s on every run)."""
    import importlib.util

    from ..data.fetch import SAMPLE_PHOTO, cache_dir, fetch_file
    spec = importlib.util.find_spec(SAMPLE[0])
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / SAMPLE[1]
        if p.is_file():
            return p
    try:
        return fetch_file(SAMPLE_PHOTO, cache_dir() / Path(SAMPLE[1]).name,
                          log=lambda m: warn(m) if m.startswith("downloading") else None)
    except DarknumbaError as e:
        raise DataError(f"{e}; pass an IMAGE") from None


# -- printing ----------------------------------------------------------------------------------
def run_detection(detector, paths: list[Path], out: Optional[Path] = None,
                  json_out=None) -> int:
    """Detect on every image with a vision.detector.Detector; print Darknet's lines and draw
    to `out` (predictions.png for one image), unless the JSON goes to stdout (then only to an
    `out` given); write JSON lines to `json_out` (a path, '-' or an open text file). One
    image: an unreadable file is an error; several: it is reported at the end and skipped,
    with a progress bar. Returns the number of images done."""
    from tqdm import tqdm

    single = len(paths) == 1
    text = json_out != "-"
    skipped: list[str] = []
    used: set = set()
    done = 0
    bar = tqdm(total=len(paths), unit="img", disable=single, file=sys.stderr, dynamic_ncols=True)
    echo = typer.echo if single else bar.write
    if not single:
        detector.warm_up()              # any compile before the images/s clock starts
    # (one image: run() warms up while its photo decodes; "Predicted in" never counts it)
    start = time.perf_counter()
    with json_lines_to(json_out) as jf, bar:
        for p in detector.run(paths):
            bar.update(1)
            if p.error is not None:
                if single:
                    raise DataError(p.error)
                skipped.append(p.error)
                continue
            if text:
                echo(f"{p.source}: {predicted_in(p.seconds, detector.alexeyab)}")
                for line in p.lines():
                    echo(line)
            target = drawing_path(out, Path(p.source), single, used) \
                if text or out is not None else None
            if target is not None:
                p.draw(target)
                if single:
                    warn(f"drawn predictions: {target}")
            if jf is not None:
                jf.write(json.dumps(p.record) + "\n")
                jf.flush()
            done += 1
    elapsed = time.perf_counter() - start
    for err in skipped:
        warn(f"skipped: {err}")
    if not single:
        warn(f"{done} images in {elapsed:.1f} s ({done / max(elapsed, 1e-9):.2f} images/s)"
             + (f", {len(skipped)} unreadable skipped" if skipped else "")
             + (f"; drawn into {out}" if out is not None else ""))
    return done


def _user_file(arg: str, what: str) -> Path:
    p = Path(arg)
    if not p.exists():
        raise DataError(f"{what} not found: {p}")
    if not p.is_file():
        raise DataError(f"{what} {p} is {'a directory' if p.is_dir() else 'not a regular file'}")
    return p


def detect(
    cfg: Annotated[Optional[str], typer.Argument(
        help="Darknet .cfg (default cfg/yolov3-tiny.cfg); if it is not a .cfg, every "
             "argument is an IMAGE for the default network", show_default=False)] = None,
    weights: Annotated[Optional[Path], typer.Argument(
        help="Darknet .weights (default weights/yolov3-tiny.weights, fetched if missing)",
        show_default=False)] = None,
    images: Annotated[Optional[list[str]], typer.Argument(
        help="images, folders, globs, or .txt lists of paths (default: a sample photo); or "
             "one video file (.mp4, .avi, .mkv, .mov, .webm ...; needs darknumba[video])",
        show_default=False)] = None,
    thresh: Annotated[Optional[float], typer.Option(
        "--thresh", "-thresh", callback=not_nan,
        help="print boxes whose class probability is > this (default: the dialect's `detect` "
             "threshold: pjreddie 0.5, AlexeyAB 0.24)", show_default=False)] = None,
    nms: Annotated[Optional[float], typer.Option(
        callback=not_nan, help="IoU above which a less probable box of the same class is "
                               "suppressed (0: no NMS; default 0.45)", show_default=False)] = None,
    hier: Annotated[Optional[float], typer.Option(
        callback=not_nan, help="hierarchical threshold (only region layers with a class tree "
                               "use it; none on yolo outputs; default 0.5)",
        show_default=False)] = None,
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-out", help="one image: the PNG to draw (default predictions.png); several: "
        "a folder for one PNG each (default: none drawn); a video: the video to draw (.mp4, "
        ".avi, .mkv, .mov, .webm; default: none)", show_default=False)] = None,
    json_out: Annotated[Optional[str], typer.Option(
        "--json", help="write one JSON line per image (video: per frame) to this file ('-': "
                       "stdout, instead of the text lines and predictions.png)",
        show_default=False)] = None,
    batch: Annotated[int, typer.Option(min=1, help="images (video frames) per forward pass")] = 1,
    names: Annotated[Optional[Path], typer.Option(
        exists=True, dir_okay=False, help="class names, one per line (default: coco.names)",
        show_default=False)] = None,
    letterbox: Annotated[Optional[bool], typer.Option(
        "--letterbox/--resize", help="keep the aspect ratio (Darknet's letterbox) or stretch "
                                     "to the network size (default: the dialect's rule: "
                                     "pjreddie letterboxes, AlexeyAB stretches unless [net] "
                                     "letter_box=1)", show_default=False)] = None,
    letter_box: Annotated[bool, typer.Option(
        "-letter_box", help="AlexeyAB's flag: letterbox (as --letterbox)")] = False,
    ext_output: ExtOutput = False,
    dont_show: DontShow = False,
    dialect: DialectOption = None,
    exact: ExactOption = None,
    decoder: DecoderOption = None,
    compat: DetectCompatOption = None,
):
    """Detect objects as `./darknet detect` does: prints `name: NN%` per box and class, draws
    the boxes. With no arguments, runs yolov3-tiny on a sample photo. Defaults follow the
    network's dialect (docs/alexeyab-defaults.md): pjreddie's threshold 0.5 and letterbox;
    AlexeyAB's 0.24, stretched to the network unless [net] letter_box=1 or -letter_box."""
    from ..vision.detector import Detector, expand_images
    args = [a for a in (cfg, str(weights) if weights is not None else None) if a is not None]
    args += list(images or [])
    if args and Path(args[0]).suffix.lower() == ".cfg":
        cfg_path = _user_file(args[0], "cfg")
        if len(args) < 2:
            raise DataError(f"detect {cfg_path} needs WEIGHTS after the cfg")
        weights_path = _user_file(args[1], "weights")
        image_args = args[2:]
    else:
        cfg_path = default_cfg()
        weights_path = default_weights(cfg_path)
        image_args = args
    video = video_args(image_args)
    if video is not None:
        detect_video_file({"cfg": cfg_path, "weights": weights_path, "thresh": thresh,
                           "nms": nms, "hier": hier, "names": names,
                           "letterbox": True if letter_box else letterbox, "dialect": dialect,
                           "ext_output": ext_output}, video, out, json_out, batch,
                          thresh_default="detect_thresh")
        return
    paths = expand_images(image_args, log=warn) if image_args else [sample_image()]
    check_detect_outputs(out, json_out, paths, {"the input": image_args, "the cfg": cfg_path,
                                                "the weights": weights_path, "--names": names})
    detector = Detector(cfg_path, weights_path, batch=min(batch, len(paths)), thresh=thresh,
                        nms=nms, hier=hier, names=names,
                        letterbox=True if letter_box else letterbox, dialect=dialect,
                        ext_output=ext_output, log=warn, exact=exact,
                        first_run=first_run_mode(), compat=compat, decoder=decoder)
    if thresh is None:      # the dialect's `detect` threshold, not its `detector test` one
        detector.thresh = detector.defaults.detect_thresh
    run_detection(detector, paths, out=out, json_out=json_out)


def register(app: typer.Typer):
    app.command()(detect)
