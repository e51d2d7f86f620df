"""Detection data as Darknet users keep it: `.data` files (`read_data_cfg`), image lists
(`get_paths`), and YOLO label files found by Darknet's rule (`fill_truth_detection`'s
find_replace chain). Every problem is reported once, with file and line, through a `DataIssues`
policy: "skip" drops the image with a warning, "stop" raises `DataError` at the first one.
"""
from __future__ import annotations

import math
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..textfile import read_list, read_text

POLICIES = ("skip", "stop")
MAX_CLASSES = 1 << 20          # far above any real dataset (YOLO9000's tree has 9418)


# -- .data files ---------------------------------------------------------------------------------
@dataclass
class DataConfig:
    """A parsed `.data` file (Darknet's `read_data_cfg`); relative paths as written in it."""
    path: str
    classes: int = 0
    train: str | None = None
    valid: str | None = None
    names: str | None = None
    backup: str = "backup/"
    eval: str | None = None
    options: dict = field(default_factory=dict)

    def resolve(self, p: str | None) -> str | None:
        """A path from the .data file: as written if it exists (Darknet resolves from the working
        directory), else relative to the .data file's folder."""
        if p is None or os.path.isabs(p) or os.path.exists(p):
            return p
        alt = os.path.join(os.path.dirname(os.path.abspath(self.path)), p)
        return alt if os.path.exists(alt) else p

    def class_names(self) -> list[str]:
        """The first `classes` names of the names file (Darknet reads no further), or the class
        numbers when there is none."""
        if not self.names:
            return [str(i) for i in range(self.classes)]
        names = read_list(self.resolve(self.names), what="names file")
        if self.classes and len(names) < self.classes:
            raise DataError(f"{self.names}: {len(names)} names for classes={self.classes} "
                            f"(in {self.path})")
        return names[:self.classes]


def read_data_cfg(path) -> DataConfig:
    """read_data_cfg: `key = value` lines, `#` comments. classes must be a positive integer."""
    path = os.fspath(path)
    text = read_text(path, ".data file", DataError)
    opts = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.split("#", 1)[0].strip()
        if not s:
            continue
        if "=" not in s:
            raise DataError(f"{path}:{lineno}: expected `key = value`, found {line.strip()!r}")
        k, v = (t.strip() for t in s.split("=", 1))
        opts[k] = v
    dc = DataConfig(path=path, options=opts)
    if "classes" in opts:
        dc.classes = data_int(path, "classes", opts["classes"])
    if not 0 < dc.classes <= MAX_CLASSES:
        raise DataError(f"{path}: `classes` must be an integer in 1..{MAX_CLASSES} (found "
                        f"{opts.get('classes', 'nothing')})")
    for k in ("train", "valid", "names", "eval"):
        setattr(dc, k, opts.get(k))
    dc.backup = opts.get("backup", "backup/")
    return dc


def data_int(path, key: str, value: str) -> int:
    """An integer value of a .data file: ASCII digits only (as Darknet's atoi reads them)."""
    if not re.fullmatch(r"[+-]?[0-9]+", value):
        raise DataError(f"{path}: {key} = {value!r} is not an integer")
    return int(value)


def names_file_of(datacfg) -> Path:
    """The class names file of a .data file as `detector test` finds it: its `names` (else
    `labels`) entry, default data/names.list; a relative path is tried from the working
    directory (Darknet's rule), then from the folder above the .data file's, then from its own
    folder. Unlike read_data_cfg, `classes` is not needed."""
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
            return p
    raise DataError(f"names file {rel} (from {datacfg}) not found")


class ImageList(list):
    """The image paths of a list file, which it names (`source`): errors about its images (no
    usable one) name the file too."""
    source: str | None = None


def get_paths(list_path, base: str | None = None) -> ImageList:
    """The images of a list file; a relative entry that does not exist from the working
    directory is tried relative to the list's folder."""
    paths = read_list(list_path, what="image list")
    if base is None:
        base = os.path.dirname(os.path.abspath(list_path))
    out = ImageList(p if os.path.isabs(p) or os.path.exists(p) else os.path.join(base, p)
                    for p in paths)
    out.source = os.fspath(list_path)
    return out


# -- labels --------------------------------------------------------------------------------------
_LABEL_RULES = (("images", "labels"), ("JPEGImages", "labels"), ("raw", "labels"))
_IMAGE_EXTS = (".jpg", ".png", ".JPG", ".JPEG", ".jpeg", ".bmp", ".BMP", ".PNG")


def label_path(image_path: str) -> str:
    """Darknet's rule: images -> labels, JPEGImages -> labels, raw -> labels, extension -> .txt.
    (Darknet replaces the first occurrence anywhere in the path; so do we.)"""
    p = image_path
    for a, b in _LABEL_RULES:
        p = p.replace(a, b, 1) if a in p else p
    root, ext = os.path.splitext(p)
    return root + ".txt" if ext in _IMAGE_EXTS or ext.lower() in _IMAGE_EXTS else p + ".txt"


@dataclass
class Issue:
    kind: str          # missing-image, missing-label, unreadable-image, bad-class, ...
    file: str
    line: int | None
    message: str

    def __str__(self):
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message}"


class DataIssues:
    """Collects data problems; each (file, line, kind) is reported once. policy "skip": warn on
    stderr and drop the image; "stop": raise DataError at once."""

    def __init__(self, policy: str = "skip", log=None):
        if policy not in POLICIES:
            raise DataError(f"unknown bad-data policy {policy!r}: expected one of {POLICIES}")
        self.policy = policy
        self.log = log or (lambda m: print(m, file=sys.stderr))
        self.issues: list[Issue] = []
        self._seen: set = set()
        self.skipped_images: set[str] = set()
        self._lock = threading.Lock()

    def report(self, kind, file, line, message, image=None):
        key = (kind, file, line)
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
            issue = Issue(kind, file, line, message)
            self.issues.append(issue)
        if self.policy == "stop":
            raise DataError(f"{issue} (bad-data policy is `stop`; use `skip` to train on)")
        if image is not None:
            self.skipped_images.add(image)
        self.log(f"warning: {issue}" + (f"; skipping {image}" if image else ""))

    def note(self, kind, file, message):
        """Something to know that does not stop training or drop the image (either policy):
        reported once per (kind, file), as a warning."""
        with self._lock:
            if (kind, file, None) in self._seen:
                return
            self._seen.add((kind, file, None))
            self.issues.append(Issue(kind, file, None, message))
        self.log(f"warning: {file}: {message}")

    def summary(self) -> str:
        if not self.issues:
            return "data: no problems found"
        kinds: dict[str, int] = {}
        for i in self.issues:
            kinds[i.kind] = kinds.get(i.kind, 0) + 1
        parts = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        return (f"data: {len(self.issues)} problem(s) ({parts}); "
                f"{len(self.skipped_images)} image(s) skipped")


def parse_label_file(path: str, classes: int, issues: DataIssues, image: str | None = None):
    """read_boxes with checks: each line `class x y w h` (relative). Returns an (n, 5) float32
    array [x, y, w, h, class], or None if the file has a problem (reported to `issues`)."""
    if not os.path.exists(path):
        issues.report("missing-label", path, None, "label file not found "
                      f"(looked for it by Darknet's rule from {image})", image)
        return None
    try:                                # a FIFO or a device is refused, not opened
        lines = read_text(path, "label file", DataError).splitlines()
    except DataError as e:
        issues.report("unreadable-label", path, None, str(e).removeprefix(f"{path}: "), image)
        return None
    boxes = []
    for lineno, line in enumerate(lines, 1):
        tok = line.split()
        if not tok:
            continue
        problem = _check_label_line(tok, classes)
        if problem is not None:
            kind, msg = problem
            issues.report(kind, path, lineno, f"{msg}: {line.strip()!r}", image)
            return None
        cls, x, y, w, h = int(tok[0]), *map(float, tok[1:])
        boxes.append((x, y, w, h, cls))
    return np.asarray(boxes, dtype=np.float32).reshape(-1, 5)


def _check_label_line(tok, classes):
    if len(tok) != 5:
        return "malformed-line", f"expected 5 fields `class x y w h`, found {len(tok)}"
    try:
        cls = int(tok[0])
    except ValueError:
        return "malformed-line", f"class id {tok[0]!r} is not an integer"
    try:
        x, y, w, h = map(float, tok[1:])
    except ValueError:
        return "malformed-line", "coordinates are not numbers"
    if any(math.isnan(v) or math.isinf(v) for v in (x, y, w, h)):
        return "nan", "NaN or Inf coordinate"
    if cls < 0 or cls >= classes:
        return "bad-class", f"class id {cls} outside 0..{classes - 1} (classes={classes})"
    if not (0 <= x <= 1 and 0 <= y <= 1 and 0 <= w <= 1 and 0 <= h <= 1):
        return "out-of-range", "coordinates outside [0,1]"
    return None


# -- the dataset ---------------------------------------------------------------------------------
class DetectionDataset:
    """Image paths and their (already validated) boxes, loaded once from the label files;
    check_images: decode each image first (JPEGs by `decoder`) and skip those that fail."""

    def __init__(self, paths, classes: int, issues: DataIssues | None = None,
                 check_images: bool = False, decoder: str = "pillow"):
        self.classes = classes
        self.issues = issues or DataIssues()
        self.paths: list[str] = []
        self.boxes: list[np.ndarray] = []
        for p in paths:
            if not os.path.exists(p):
                self.issues.report("missing-image", p, None, "image file not found", p)
                continue
            if check_images and not image_readable(p, self.issues, decoder):
                continue
            b = parse_label_file(label_path(p), classes, self.issues, image=p)
            if b is None:
                continue
            self.paths.append(p)
            self.boxes.append(b)
        if not self.paths:
            source = getattr(paths, "source", None)
            why = "the list names none" if not paths else self.issues.summary()
            raise DataError(f"{source + ': ' if source else ''}no usable images ({why})")

    def __len__(self):
        return len(self.paths)


def valid_dataset(datacfg, policy: str = "skip", log=None):
    """(DataConfig, DetectionDataset) of a .data file's `valid` list, problems reported
    through a DataIssues(policy, log)."""
    dc = read_data_cfg(datacfg)
    lst = dc.resolve(dc.valid)
    if not lst:
        raise DataError(f"{datacfg}: no `valid` list")
    return dc, DetectionDataset(get_paths(lst), dc.classes, DataIssues(policy, log=log))


def image_readable(path: str, issues: DataIssues, decoder: str = "pillow") -> bool:
    from ..vision.image import load_image_color
    try:
        load_image_color(path, decoder=decoder)
        return True
    except DataError as e:
        issues.report("unreadable-image", path, None, str(e), path)
        return False


def check_data(data_path, which=("train", "valid"), policy: str = "skip", log=None,
               decoder: str = "pillow"):
    """`darknumba data check`: every list in the .data file, every image decoded (JPEGs by
    `decoder`, vision.image.DECODERS) and every label line checked. A `.data` file without `train` is an error (as for `detector train`);
    an empty list and a names file whose count differs from `classes` are problems.
    Returns (DataConfig, {list name: usable images}, DataIssues)."""
    dc = read_data_cfg(data_path)
    if not dc.train:
        raise DataError(f"{data_path}: no `train` list (`train = path/to/train.txt`)")
    issues = DataIssues(policy, log=log)
    counts = {}
    if dc.names:
        names = read_list(dc.resolve(dc.names), what="names file")
        if len(names) != dc.classes:
            issues.report("names-count", dc.names, None, f"{len(names)} names for "
                          f"classes={dc.classes} (in {dc.path})")
    for k in which:
        lst = getattr(dc, k)
        if not lst:
            continue
        paths = get_paths(dc.resolve(lst))
        if not paths:
            issues.report("empty-list", lst, None, f"the {k} list names no images")
            counts[k] = 0
            continue
        try:
            counts[k] = len(DetectionDataset(paths, dc.classes, issues, check_images=True,
                                             decoder=decoder))
        except DataError:
            if policy == "stop":
                raise
            counts[k] = 0
    return dc, counts, issues
