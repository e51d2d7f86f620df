"""`darknumba detect [CFG] [WEIGHTS] [IMAGE...]`: Darknet's `./darknet detect`.

With no arguments: cfg/yolov3-tiny.cfg, weights/yolov3-tiny.weights (fetched, sha256-checked,
when missing) and a sample photo that scikit-image ships. One image: Darknet's printed lines
and a drawn predictions.png. Many (folders, globs, list files): batched, with a progress bar,
one JSON line per image with --json."""
from __future__ import annotations

import glob
import json
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import DataError
from ..textfile import read_text
from .options import not_nan

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm",
              ".pgm", ".pnm", ".tga"}
LIST_EXTS = {".txt", ".list"}
DEFAULT_CFG = "cfg/yolov3-tiny.cfg"
DEFAULT_NAMES = "cfg/coco.names"
DEFAULT_WEIGHTS = "yolov3-tiny"
SAMPLE = ("skimage", "data/coffee.png")     # CC0 photo; yolov3-tiny: cup 64%


# -- where the defaults live -------------------------------------------------------------------
def search_roots() -> list[Path]:
    """Folders searched for cfg/...: the current one, then the source checkout this package
    runs from (an editable install), then the package's own data folder."""
    pkg = Path(__file__).resolve().parents[1]
    return [Path.cwd(), pkg.parents[1], pkg / "resources"]


def find_default(rel: str) -> Path | None:
    for root in search_roots():
        p = root / rel
        if p.is_file():
            return p
    return None


def default_cfg() -> Path:
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
    return fetch_weights(DEFAULT_WEIGHTS, folder, log=lambda m: typer.echo(m, err=True))


def sample_image() -> Path:
    """The sample photo shipped inside scikit-image's wheel (found without importing it)."""
    import importlib.util
    spec = importlib.util.find_spec(SAMPLE[0])
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / SAMPLE[1]
        if p.is_file():
            return p
    raise DataError(f"the sample photo {SAMPLE[0]}/{SAMPLE[1]} was not found (pip install "
                    f"scikit-image): pass an IMAGE")


def get_labels(path) -> list[str]:
    """get_labels: one name per line."""
    from ..data.datasets import read_list
    return read_list(path, what="names file")


def class_names(names: Optional[Path], cfg: Path, classes: int) -> list[str]:
    """Names from --names, else coco.names beside the cfg or in cfg/; numbers if none fits."""
    if names is not None:
        found = get_labels(names)
        if len(found) < classes:
            raise DataError(f"{names} has {len(found)} names, the cfg's detection layers "
                            f"have {classes} classes")
        return found
    for p in [cfg.parent / "coco.names", find_default(DEFAULT_NAMES)]:
        if p is not None and p.is_file():
            found = get_labels(p)
            if len(found) >= classes:
                return found
    typer.echo(f"no names file with {classes} names found (pass --names): printing class "
               f"numbers", err=True)
    return [str(i) for i in range(classes)]


# -- which images ------------------------------------------------------------------------------
def _is_image(p: Path) -> bool:
    return p.suffix.lower() in IMAGE_EXTS


def expand_images(args: list[str]) -> list[Path]:
    """Image paths from arguments: files, folders (their images, sorted), globs, and text
    lists of paths (.txt/.list, one per line, as Darknet's list files)."""
    out: list[Path] = []
    for a in args:
        p = Path(a)
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.is_file() and _is_image(q))
            if not found:
                raise DataError(f"no images found in folder {p}")
            out += found
        elif p.is_file() and p.suffix.lower() in LIST_EXTS:
            lines = [s.strip() for s in read_text(p, "image list", DataError).splitlines()]
            found = [Path(s) for s in lines if s and not s.startswith("#")]
            if not found:
                raise DataError(f"list file {p} names no images")
            out += found
        elif p.exists():
            out.append(p)
        elif glob.has_magic(a):
            found = sorted(Path(s) for s in glob.glob(a, recursive=True) if Path(s).is_file())
            if not found:
                raise DataError(f"no files match {a}")
            out += found
        else:
            raise DataError(f"image not found: {p}")
    return out


# -- running -----------------------------------------------------------------------------------
def _load(path: Path, c: int):
    from ..vision.image import load_image
    try:
        return load_image(path, c=c), None
    except DataError as e:
        return None, str(e)


def _prefetched(paths: list[Path], ahead: int, c: int):
    """(path, image or None, error) in order, decoded with c channels by a worker thread
    `ahead` images early (Pillow releases the GIL while it decodes)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        queue = deque()
        for p in paths:
            queue.append((p, pool.submit(_load, p, c)))
            if len(queue) > ahead:
                q, f = queue.popleft()
                yield (q, *f.result())
        while queue:
            q, f = queue.popleft()
            yield (q, *f.result())


def _batches(paths: list[Path], batch: int, c: int, skipped: list, single: bool):
    """Lists of (path, image) of at most `batch`; unreadable images are an error for a single
    image, else reported and skipped."""
    chunk = []
    for path, im, err in _prefetched(paths, 2 * batch, c):
        if im is None:
            if single:
                raise DataError(err)
            skipped.append(err)
            continue
        chunk.append((path, im))
        if len(chunk) == batch:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _out_path(out: Path | None, path: Path, single: bool, used: set) -> Path | None:
    if single:
        return out if out is not None else Path("predictions.png")
    if out is None:
        return None
    name = f"{path.stem}.png"
    k = 1
    while name in used:
        name, k = f"{path.stem}_{k}.png", k + 1
    used.add(name)
    return out / name


def load_detector(cfg: Path, weights: Path, batch: int, names_file: Optional[Path] = None,
                  names: list[str] | None = None):
    """(net, class names) for detection: the network at `batch`, checked to have yolo outputs."""
    from ..parser import load_network
    from ..vision.box import detection_layers
    net = load_network(cfg, weights, batch=batch)
    classes = detection_layers(net)[-1].classes
    if names is None:
        names = class_names(names_file, Path(cfg), classes)
    elif len(names) < classes:
        raise DataError(f"the names file has {len(names)} names, the cfg's detection layers have "
                        f"{classes} classes")
    return net, names


def run_detection(net, names: list[str], paths: list[Path], thresh: float = 0.5,
                  hier: float = 0.5, nms: float = 0.45, out: Optional[Path] = None,
                  json_out: Optional[str] = None, letterbox: bool = True) -> int:
    """Detect on every image, net.batch at a time; print Darknet's lines (unless the JSON goes
    to stdout), draw to `out`, write JSON lines. Returns the number of images done."""
    from tqdm import tqdm

    from ..vision.box import detect, detection_layers, detection_results, format_lines
    from ..vision.draw import draw_detections, save_png

    single = len(paths) == 1
    batch = net.batch
    classes = detection_layers(net)[-1].classes
    text = json_out != "-"
    jf = None
    if json_out == "-":
        jf = sys.stdout
    elif json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        jf = open(json_out, "w")
    skipped: list[str] = []
    used: set = set()
    done = 0
    bar = tqdm(total=len(paths), unit="img", disable=single, file=sys.stderr, dynamic_ncols=True)
    echo = typer.echo if single else bar.write
    start = time.perf_counter()
    try:
        for chunk in _batches(paths, batch, net.c, skipped, single):
            t0 = time.perf_counter()
            all_dets = detect(net, [im for _, im in chunk], thresh, hier, nms, letterbox)
            seconds = (time.perf_counter() - t0) / len(chunk)
            for (path, im), dets in zip(chunk, all_dets):
                h, w = im.shape[1:]
                results = detection_results(dets, w, h, thresh, names)
                if text:
                    echo(f"{path}: Predicted in {seconds:f} seconds.")
                    for line in format_lines(results):
                        echo(line)
                target = _out_path(out, path, single, used)
                if target is not None:
                    save_png(draw_detections(im, results, classes), target)
                    if single:
                        typer.echo(f"drawn predictions: {target}", err=True)
                if jf is not None:
                    jf.write(json.dumps(_json_record(path, w, h, results)) + "\n")
                    jf.flush()
            done += len(chunk)
            bar.update(done + len(skipped) - bar.n)
    finally:
        bar.close()
        if jf is not None and jf is not sys.stdout:
            jf.close()
    elapsed = time.perf_counter() - start
    for err in skipped:
        typer.echo(f"skipped: {err}", err=True)
    if not single:
        typer.echo(f"{done} images in {elapsed:.1f} s ({done / max(elapsed, 1e-9):.2f} images/s)"
                   + (f", {len(skipped)} unreadable skipped" if skipped else "")
                   + (f"; drawn into {out}" if out is not None else ""), err=True)
    return done


def _json_record(path: Path, w: int, h: int, results: list[dict]) -> dict:
    keys = ("box", "class_id", "name", "prob", "left", "top", "right", "bottom", "x", "y", "w", "h",
            "objectness")
    return {"image": str(path), "width": int(w), "height": int(h),
            "detections": [{k: d[k] for k in keys} for d in results]}


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
        help="images, folders, globs, or .txt lists of paths (default: a sample photo)",
        show_default=False)] = None,
    thresh: Annotated[float, typer.Option(
        callback=not_nan,
        help="print boxes whose class probability is > this")] = 0.5,
    nms: Annotated[float, typer.Option(
        callback=not_nan, help="IoU above which a less probable box of the same class is "
                               "suppressed (0: no NMS)")] = 0.45,
    hier: Annotated[float, typer.Option(
        callback=not_nan, help="hierarchical threshold (only region layers with a class tree "
                               "use it; none on yolo outputs)")] = 0.5,
    out: Annotated[Optional[Path], typer.Option(
        help="one image: the PNG to draw (default predictions.png); several: a folder for "
             "one PNG each (default: none drawn)", show_default=False)] = None,
    json_out: Annotated[Optional[str], typer.Option(
        "--json", help="write one JSON line per image to this file ('-': stdout, instead of "
                       "the text lines)", show_default=False)] = None,
    batch: Annotated[int, typer.Option(min=1, help="images per forward pass")] = 1,
    names: Annotated[Optional[Path], typer.Option(
        exists=True, dir_okay=False, help="class names, one per line (default: coco.names)",
        show_default=False)] = None,
    letterbox: Annotated[bool, typer.Option(
        "--letterbox/--resize", help="keep the aspect ratio (Darknet's letterbox) or stretch "
                                     "to the network size")] = True,
):
    """Detect objects as `./darknet detect` does: prints `name: NN%` per box and class, draws
    the boxes. With no arguments, runs yolov3-tiny on a sample photo."""
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
    paths = expand_images(image_args) if image_args else [sample_image()]
    net, class_list = load_detector(cfg_path, weights_path, min(batch, len(paths)), names)
    run_detection(net, class_list, paths, thresh=thresh, hier=hier, nms=nms, out=out,
                  json_out=json_out, letterbox=letterbox)


def register(app: typer.Typer):
    app.command()(detect)
