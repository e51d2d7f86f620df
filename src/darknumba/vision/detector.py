"""The detection pipeline behind one object: Darknet's `test_detector` over many images.

    det = Detector("cfg/yolov3-tiny.cfg", "yolov3-tiny.weights", batch=4)
    records = det.predict(["dog.jpg", "photos/", "shots/*.png", "list.txt", array])

Images are paths (an image file, a folder of images, a glob, or a .txt/.list file of paths, one
per line as Darknet's lists), Pillow images, or arrays: (h, w, 3) uint8 RGB, or (3, h, w) float
in [0, 1] as load_image_color gives; files and images are converted to the network's channels
(a (c, h, w) float array must have them). A worker thread decodes files ahead of the network;
images run net.batch at a time, letterboxed (or resized), then get_network_boxes and do_nms_sort.
Arrays are taken as RGB unless predict / iter_predict / draw get channels="bgr" (OpenCV's
cv2.imread and VideoCapture give BGR arrays): "rgb" stays the default so that existing callers
keep their results; a BGR array passed as RGB swaps red and blue and detects worse, silently.

A record is what `darknumba detect --json` writes, one JSON line per image:
    image          the path as given (str); None for an array or Pillow image
    width, height  the image's size in pixels
    detections     one entry per box and class whose prob is > thresh, in Darknet's print order:
        box                       the box's index among the image's sorted candidates (a box
                                  over thresh in several classes appears once per class)
        class_id, name, prob      the class and its probability (objectness x class prob)
        left, top, right, bottom  the pixel corners Darknet draws (truncated, clipped)
        x, y, w, h                centre and size relative to the image (0..1, not clipped)
        objectness
An unreadable file gives {"image": path, "error": message} from iter_predict; predict raises.
prob, objectness and x, y, w, h are rounded to JSON_DIGITS (6) decimals: float32 holds about
7 significant digits, so the 6th decimal of a value below 1 is about the last one it knows.
Video files go through iter_video / predict_video (vision/video.py: one record per frame).
"""
from __future__ import annotations

import glob
import os
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from ..detections import Detections
from ..errors import DataError
from ..layers.xnor import calculate_binary_weights
from ..network import Network
from ..parser import load_network
from ..runtime import configure
from ..runtime.cold_start import ColdStart
from ..textfile import read_list, read_text
from .box import detect, detection_layers, detection_results, format_lines
from .box_ab import detection_results_v3, format_lines_v3
from .draw import draw_detections, save_png
from .image import (DECODERS, bytes_to_image, convert_channels, image_from_pil, load_image,
                    pick_decoder)

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm",
              ".pgm", ".pnm", ".tga"}
LIST_EXTS = {".txt", ".list"}
DEFAULT_NAMES = "cfg/coco.names"
EXT_KEYS = ("left_x", "top_y", "width", "height")
RECORD_KEYS = ("box", "class_id", "name", "prob", "left", "top", "right", "bottom", "x", "y",
               "w", "h", "objectness")
JSON_DIGITS = 6
ROUNDED_KEYS = ("prob", "x", "y", "w", "h", "objectness")


# -- where shipped files live ------------------------------------------------------------------
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


def get_labels(path) -> list[str]:
    """get_labels: one name per line (a UTF-8 text file)."""
    return read_list(path, what="names file")


def class_names(names, cfg: Path | None, classes: int, log: Callable[[str], None]) -> list[str]:
    """`names` as a list, or read from a names file; None: coco.names beside the cfg or in
    cfg/, else class numbers (said through `log`)."""
    if names is not None and not isinstance(names, (str, os.PathLike)):
        found = [str(n) for n in names]
        if len(found) < classes:
            raise DataError(f"{len(found)} names given, the cfg's detection layers have "
                            f"{classes} classes")
        return found
    if names is not None:
        found = get_labels(names)
        if len(found) < classes:
            raise DataError(f"{names} has {len(found)} names, the cfg's detection layers "
                            f"have {classes} classes")
        return found
    beside = [Path(cfg).parent / "coco.names"] if cfg is not None else []
    for p in beside + [find_default(DEFAULT_NAMES)]:
        if p is not None and p.is_file():
            found = get_labels(p)
            if len(found) >= classes:
                return found
    log(f"no names file with {classes} names found (pass --names): printing class numbers")
    return [str(i) for i in range(classes)]


# -- which images ------------------------------------------------------------------------------
def expand_images(args: Iterable, log: Callable[[str], None] | None = None) -> list[Path]:
    """Image paths from arguments: files, folders (their images, sorted), globs, and text
    lists of paths (.txt/.list, one per line, `#` comments, as Darknet's list files). A path
    named in a list is not checked here: reading it reports it. `log` hears how many paths
    each list gave."""
    out: list[Path] = []
    for a in args:
        p = Path(a)
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.is_file() and q.suffix.lower() in IMAGE_EXTS)
            if not found:
                raise DataError(f"no images found in folder {p}")
            out += found
        elif p.is_file() and p.suffix.lower() in LIST_EXTS:
            lines = [s.strip() for s in read_text(p, "image list", DataError).splitlines()]
            found = [Path(s) for s in lines if s and not s.startswith("#")]
            if not found:
                raise DataError(f"list file {p} names no images")
            if log is not None:
                log(f"{p}: read {len(found)} image path{'s' * (len(found) != 1)} from the list")
            out += found
        elif p.exists():
            out.append(p)
        elif glob.has_magic(str(a)):
            found = sorted(Path(s) for s in glob.glob(str(a), recursive=True) if Path(s).is_file())
            if not found:
                raise DataError(f"no files match {a}")
            out += found
        else:
            raise DataError(f"image not found: {p}")
    return out


def as_image(im, c: int = 3) -> np.ndarray:
    """(c, h, w) float32 in [0, 1] from a Pillow image, an (h, w, 3) uint8 RGB array
    (converted to c channels as files are) or a (c, h, w) float array in [0, 1]."""
    from PIL import Image
    if isinstance(im, Image.Image):
        return image_from_pil(im, c)
    a = np.asarray(im)
    if a.dtype == np.uint8 and a.ndim == 3 and a.shape[2] == 3 and a.size:
        return bytes_to_image(convert_channels(a, c))
    if a.dtype.kind == "f" and a.ndim == 3 and a.shape[0] == c and a.size:
        if not np.isfinite(a).all():
            raise DataError("an image array holds NaN or infinite values")
        return np.ascontiguousarray(a, dtype=np.float32)
    raise DataError(f"an image array must be (h, w, 3) uint8 RGB or ({c}, h, w) float in "
                    f"[0, 1], not {a.shape} {a.dtype}")


def _is_path(item) -> bool:
    return isinstance(item, (str, os.PathLike))


def _decode(item, c: int, decoder: str = "pillow"):
    """(image with c channels, None), or (None, message) for a file that cannot be read."""
    if not _is_path(item):
        return as_image(item, c), None
    try:
        return load_image(item, c=c, decoder=decoder), None
    except DataError as e:
        return None, str(e)


def prefetched(items: Iterable, ahead: int, c: int = 3, meanwhile=None,
               decoder: str = "pillow"):
    """(item, image or None, error) in order, decoded with c channels (the network's, as
    AlexeyAB's load_image(path, 0, 0, net.c)) by `decoder` (image.DECODERS) in a worker thread
    `ahead` items early (Pillow releases the GIL while it decodes). `meanwhile()`, if given,
    runs once the first items are handed to the worker and before the first is waited for (the
    detector's warm-up: a warm `detect` decodes its photo meanwhile)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        queue = deque()
        for item in items:
            queue.append((item, pool.submit(_decode, item, c, decoder)))
            if len(queue) > ahead:
                if meanwhile is not None:
                    meanwhile()
                    meanwhile = None
                q, f = queue.popleft()
                yield (q, *f.result())
        if meanwhile is not None:
            meanwhile()
        while queue:
            q, f = queue.popleft()
            yield (q, *f.result())


CHANNEL_ORDERS = ("rgb", "bgr")


def _check_channels(channels: str):
    if channels not in CHANNEL_ORDERS:
        raise ValueError(f"channels must be one of {', '.join(map(repr, CHANNEL_ORDERS))}, "
                         f"not {channels!r}")


def _rgb(item, channels: str):
    """`item` with its colours in RGB order: with channels="bgr" an (h, w, 3) uint8 array's
    last axis and a (3, h, w) float array's first are reversed; paths and Pillow images carry
    their own order and are left as they are."""
    _check_channels(channels)
    if channels == "rgb" or not isinstance(item, np.ndarray) or item.ndim != 3:
        return item
    if item.dtype == np.uint8 and item.shape[2] == 3:
        return item[..., ::-1]
    if item.shape[0] == 3:
        return item[::-1]
    return item


def _as_items(images) -> list:
    """One image or a list of them; paths expanded (folders, globs, lists)."""
    from PIL import Image
    single = (_is_path(images) or isinstance(images, Image.Image)
              or (isinstance(images, np.ndarray) and images.ndim <= 3))
    out = []
    for item in ([images] if single else images):
        out += expand_images([item]) if _is_path(item) else [item]
    return out


# -- results -----------------------------------------------------------------------------------
@dataclass
class Prediction:
    """One image's outcome in Detector.run: its decoded image and detections (after NMS,
    boxes relative to the image), or the error that kept it from being read."""
    source: str | None              # the path as given; None for an array or Pillow image
    image: np.ndarray | None        # (3, h, w) float32; None when unreadable
    error: str | None
    names: list[str]
    classes: int
    thresh: float
    detections: Detections | None = None
    seconds: float = 0.0            # network time per image of its batch
    alexeyab: bool = False          # print as AlexeyAB's draw_detections_v3 does
    ext_output: bool = False        # with each line, the box (AlexeyAB's -ext_output)

    @cached_property
    def results(self) -> list[dict]:
        """box.detection_results: the record's detections plus the drawn label fields, in
        Darknet's print order (AlexeyAB's: boxes by left edge, each box's best class first;
        then each entry also has its -ext_output fields left_x, top_y, width, height)."""
        h, w = self.image.shape[1:]
        res = detection_results(self.detections, w, h, self.thresh, self.names)
        if not self.alexeyab:
            return res
        by_key = {(d["box"], d["class_id"]): d for d in res}
        return [{**by_key[(e["box"], e["class_id"])], **{k: e[k] for k in EXT_KEYS}}
                for e in detection_results_v3(self.detections, w, h, self.thresh, self.names)
                if (e["box"], e["class_id"]) in by_key]

    @cached_property
    def record(self) -> dict:
        """The JSON record (see the module docstring)."""
        if self.error is not None:
            return {"image": self.source, "error": self.error}
        h, w = self.image.shape[1:]
        return {"image": self.source, "width": int(w), "height": int(h),
                "detections": [{k: round(d[k], JSON_DIGITS) if k in ROUNDED_KEYS else d[k]
                                for k in RECORD_KEYS} for d in self.results]}

    def lines(self) -> list[str]:
        """Darknet's printed lines, `name: NN%` (with -ext_output, AlexeyAB's box after it)."""
        if self.alexeyab or self.ext_output:
            res = self.results if self.alexeyab else [
                {**d, "left_x": d["left"], "top_y": d["top"], "width": d["right"] - d["left"],
                 "height": d["bottom"] - d["top"]} for d in self.results]
            return format_lines_v3(res, self.ext_output)
        return format_lines(self.results)

    def draw(self, path=None):
        """draw_detections onto a copy of the image: a Pillow image, also saved as a PNG at
        `path` when given."""
        img = draw_detections(self.image, self.results, self.classes)
        if path is not None:
            save_png(img, path)
        return img


def labelled(detections: list[dict]) -> list[dict]:
    """A record's detections with the fields draw_detections reads: each box's label lists
    all its classes over thresh, coloured by the first."""
    by_box: dict = {}
    for d in detections:
        by_box.setdefault(d["box"], []).append(d)
    return [{**d, "label_class": by_box[d["box"]][0]["class_id"],
             "label": ", ".join(e["name"] for e in by_box[d["box"]])} for d in detections]


def _stderr(msg: str):
    print(msg, file=sys.stderr)


# -- the detector ------------------------------------------------------------------------------
class Detector:
    """A network with yolo / region / detection outputs, ready to detect on images.

    cfg: a .cfg path (built with `weights`, random weights when None, at `batch` images per
    forward pass, for `dialect`), or an already loaded Network (used at its own batch).
    thresh: class probability a detection must exceed; nms: IoU above which a less probable
    box of the same class is suppressed (0: none); hier: the class-tree threshold of [region]
    layers with tree= (each None: the dialect's `detector test` default, dialect.Defaults:
    thresh pjreddie 0.5, AlexeyAB 0.25; nms 0.45; hier 0.5); names: the class names, a list
    or a names file (None: coco.names beside the cfg or in cfg/, else numbers); letterbox:
    keep the aspect ratio, else stretch (None: the dialect's rule: pjreddie letterboxes;
    AlexeyAB stretches unless [net] letter_box=1);
    ext_output: lines with AlexeyAB's box coordinates. An AlexeyAB network prints and orders
    its records as AlexeyAB's draw_detections_v3. `log` receives notices (default: stderr).
    exact: True runs every convolution as im2col + GEMM (as Darknet), False lets the larger 3x3
    ones take Winograd, None: load_network's default (Winograd unless DARKNUMBA_EXACT=1).
    compat="darknet-cpu" builds the network as C darknet's CPU build computes (dialect.Quirks;
    exact convolutions). decoder: how JPEG files are decoded, "stb" (the C builds' pixels,
    vision/stb_jpeg.py) or "pillow" (None: stb under compat, else Pillow)."""

    def __init__(self, cfg, weights=None, *, batch: int = 1, thresh: float | None = 0.5,
                 nms: float | None = 0.45, hier: float | None = 0.5, names=None,
                 letterbox: bool | None = None,
                 dialect: str | None = None, ext_output: bool = False,
                 log: Callable[[str], None] | None = None, exact: bool | None = None,
                 first_run: str = "compile", compat: str | None = None,
                 decoder: str | None = None):
        if decoder is not None and decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, not {decoder!r}")
        if isinstance(cfg, Network):
            if weights is not None or dialect is not None or compat is not None:
                raise ValueError("weights, dialect and compat build a network from a cfg; this "
                                 "one is already loaded")
            self.net = cfg
        else:
            self.net = load_network(cfg, weights, batch=batch, dialect=dialect, exact=exact,
                                    compat=compat)
        self.decoder = pick_decoder(decoder, self.net.quirks)
        calculate_binary_weights(self.net)  # AlexeyAB's xnor layers by bits, as its test_detector
        self.classes = detection_layers(self.net)[-1].classes
        cfg_path = self.net.cfg_path
        self.names = class_names(names, Path(cfg_path) if cfg_path else None, self.classes,
                                 log or _stderr)
        self.alexeyab = self.net.quirks.print_detections_v3
        self.defaults = d = self.net.quirks.defaults
        if letterbox is None:
            letterbox = d.letterbox or bool(getattr(self.net, "letter_box", 0))
        self.thresh = d.test_thresh if thresh is None else thresh
        self.nms = d.nms if nms is None else nms
        self.hier = d.hier_thresh if hier is None else hier
        self.letterbox = letterbox
        self.ext_output = ext_output
        self.log = log or _stderr
        configure(self.log)                 # the thread policy, numba's cache healed (runtime)
        # compile or load the kernels before the first image (runtime/cold_start.py)
        self.cold_start = ColdStart(self, first_run, self.log)

    def warm_up(self):
        """Run the pipeline once on a blank image, so that every kernel it calls is compiled
        (or loaded from numba's cache) before an image is timed; `log` gets one line when numba
        has to compile. run() does it first.

        With first_run="numpy", on a cold cache (kernels of the forward pass not compiled for
        this CPU) and a network numpy_forward covers: the forward pass runs in numpy instead,
        only the boxes' decoding and NMS are compiled here (seconds), and a background process
        compiles the rest for later runs; run() goes over to the compiled path once it has
        (runtime/cold_start.py)."""
        self.cold_start.warm_up()

    def run(self, images: Iterable) -> Iterator[Prediction]:
        """A Prediction per item of `images` (paths, arrays or Pillow images, taken as they
        are: no folder, glob or list expansion), in order. Files are decoded up to two batches
        ahead; an unreadable one gives a Prediction with `error`, and its batch slot goes to
        the next image."""
        batch = self.net.batch
        chunk, ready = [], 0
        for item, im, err in prefetched(images, 2 * batch, self.net.c, meanwhile=self.warm_up,
                                        decoder=self.decoder):
            source = os.fspath(item) if _is_path(item) else None
            chunk.append(Prediction(source, im, err, self.names, self.classes, self.thresh,
                                    alexeyab=self.alexeyab, ext_output=self.ext_output))
            ready += im is not None
            if ready == batch:
                yield from self._detect(chunk)
                chunk, ready = [], 0
        if chunk:
            yield from self._detect(chunk)

    def _detect(self, chunk: list[Prediction]) -> list[Prediction]:
        live = [p for p in chunk if p.image is not None]
        if live:
            forward = self.cold_start.forward()
            t0 = time.perf_counter()
            dets = detect(self.net, [p.image for p in live], self.thresh, self.hier, self.nms,
                          self.letterbox, forward=forward)
            seconds = (time.perf_counter() - t0) / len(live)
            for p, d in zip(live, dets, strict=True):
                p.detections, p.seconds = d, seconds
        return chunk

    def iter_predict(self, images, channels: str = "rgb") -> Iterator[dict]:
        """Records (see the module docstring) for one image or many, paths expanded (folders,
        globs, .txt/.list files), streamed as batches finish; an unreadable file gives
        {"image": path, "error": message} and the run goes on. channels: the colour order of
        array images, "rgb" or "bgr" (OpenCV's); files and Pillow images know their own."""
        _check_channels(channels)               # a wrong value fails before any work
        for p in self.run([_rgb(item, channels) for item in _as_items(images)]):
            yield p.record

    def predict(self, images, channels: str = "rgb") -> list[dict]:
        """The records of iter_predict as a list; an unreadable file raises DataError.
        channels: "rgb" (the default) or "bgr" for arrays from OpenCV."""
        out = []
        for r in self.iter_predict(images, channels):
            if "error" in r:
                raise DataError(r["error"])
            out.append(r)
        return out

    def iter_video(self, video, out=None) -> Iterator:
        """A vision.video.FramePrediction per frame of a video file (its `record`, `lines()`,
        `prediction`), net.batch frames per forward pass; with `out`, the drawn frames are
        written to that video file (same size and frame rate). Needs PyAV
        (pip install darknumba[video])."""
        from .video import detect_video, open_video
        reader, writer = open_video(video, out)
        with reader:
            try:
                yield from detect_video(self, reader, writer)
            finally:
                if writer is not None:
                    writer.close()

    def predict_video(self, video, out=None) -> list[dict]:
        """The frame records of iter_video as a list (see vision/video.py)."""
        return [f.record for f in self.iter_video(video, out)]

    def draw(self, image, record: dict, path=None, channels: str = "rgb"):
        """Draw a record's boxes as Darknet does onto (a copy of) `image` (a path, array or
        Pillow image; an array's colour order given by channels, "rgb" or "bgr"): a Pillow
        image (RGB), also saved as a PNG at `path` when given."""
        im = load_image(image, c=self.net.c, decoder=self.decoder) if _is_path(image) else \
            as_image(_rgb(image, channels), self.net.c)
        img = draw_detections(im, labelled(record["detections"]), self.classes)
        if path is not None:
            save_png(img, path)
        return img
