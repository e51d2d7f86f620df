"""Darknet's classifier workflow (`examples/classifier.c`): train, predict, valid.

A classification .data file names `classes`, `train` and `valid` image lists, `labels` (one
label a line) and optionally `names` (printed names; defaults to the labels), `backup` and
`top`. An image's class is the label that occurs in its *path* (Darknet's `fill_truth`:
substring match; exactly one label must match).

Images are float32 CHW in [0, 1]. Training crops (Darknet's `random_augment_image`): scale the
shorter side to a random size in [min_crop, max_crop] (default w .. 2w), an aspect jitter,
rotation by up to `angle` degrees, a random shift, then a coin-flip mirror and the hue /
saturation / exposure distortion. `valid` resizes the shorter side to the network width and
takes the centre crop; `predict` letterboxes, as Darknet does.
"""
from __future__ import annotations

import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..cfg import read_cfg
from ..data.datasets import data_int, get_paths, read_data_cfg
from ..errors import DarknumbaError, DataError
from ..textfile import read_list
from ..vision.augment import rand_scale, rand_uniform, random_distort_image
from ..vision.image import letterbox_image, load_image, pick_decoder, resize_image
from .checkpoint import check_backups_not_inputs, remove_stale_temps, save_checkpoint
from .detector import StopFlag, training_network
from .history import Progress, TrainingHistory
from .lock import holds_backup_lock, lock_backup


# -- the .data file and labels -----------------------------------------------------------------
@dataclass
class ClassifierData:
    path: str
    classes: int
    labels: list[str]
    names: list[str]
    train: str | None
    valid: str | None
    backup: str
    top: int

    @classmethod
    def read(cls, path) -> "ClassifierData":
        dc = read_data_cfg(path)
        labels_file = dc.options.get("labels")
        if not labels_file:
            raise DataError(f"{path}: a classifier .data file needs `labels` (one label a line)")
        labels = read_list(dc.resolve(labels_file), what="labels file")
        if len(labels) < dc.classes:
            raise DataError(f"{labels_file}: {len(labels)} labels for classes={dc.classes} "
                            f"(in {path})")
        labels = labels[:dc.classes]
        names = read_list(dc.resolve(dc.names), what="names file")[:dc.classes] if dc.names \
            else labels
        top = data_int(path, "top", dc.options.get("top", "1"))
        if top < 1:
            raise DataError(f"{path}: top = {top}: expected a positive integer")
        return cls(os.fspath(path), dc.classes, labels, names, dc.resolve(dc.train),
                   dc.resolve(dc.valid), dc.resolve(dc.backup), top)


def label_index(path: str, labels: list[str]) -> int:
    """fill_truth: the one label that occurs in the path; -1 when none or several do."""
    hits = [i for i, lab in enumerate(labels) if lab in path]
    return hits[0] if len(hits) == 1 else -1


def labelled_paths(list_path: str, labels: list[str], log=None) -> tuple[list[str], np.ndarray]:
    """The images of a list and their class indexes. Darknet prints `Too many or too few
    labels` and trains on an all-zero truth; we skip those images and say how many."""
    paths = get_paths(list_path)
    if not paths:
        raise DataError(f"{list_path}: no usable images (the list names none)")
    idx = np.array([label_index(p, labels) for p in paths], dtype=np.int64)
    bad = int((idx < 0).sum())
    if bad and log:
        first = paths[int(np.argmax(idx < 0))]
        log(f"{list_path}: {bad} of {len(paths)} images match no label or several (first: "
            f"{first}); skipped", file=sys.stderr)
    keep = idx >= 0
    if not keep.any():
        raise DataError(f"{list_path}: no image path contains exactly one of the labels "
                        f"{labels[:5]}{'...' if len(labels) > 5 else ''}")
    return [p for p, k in zip(paths, keep) if k], idx[keep]


# -- image preparation ---------------------------------------------------------------------------
def rotate_crop_image(im, rad, s, w, h, dx, dy, aspect):
    """rotate_crop_image: a w x h window of `im` scaled by s (x by s/aspect), rotated by rad
    about the centre, shifted by (dx, dy); bilinear, zero outside the image."""
    c, ih, iw = im.shape
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    u = (xs - w / 2.0) / s * aspect + dx / s * aspect
    v = (ys - h / 2.0) / s + dy / s
    rx = math.cos(rad) * u - math.sin(rad) * v + iw / 2.0
    ry = math.sin(rad) * u + math.cos(rad) * v + ih / 2.0
    ix, iy = np.floor(rx).astype(np.int64), np.floor(ry).astype(np.int64)
    fx, fy = (rx - ix).astype(np.float32), (ry - iy).astype(np.float32)
    out = np.zeros((c, h, w), np.float32)
    for oy, ox, wgt in ((0, 0, (1 - fy) * (1 - fx)), (1, 0, fy * (1 - fx)),
                        (0, 1, (1 - fy) * fx), (1, 1, fy * fx)):
        yy, xx = iy + oy, ix + ox
        ok = (xx >= 0) & (xx < iw) & (yy >= 0) & (yy < ih)
        vals = np.zeros((c, h, w), np.float32)
        vals[:, ok] = im[:, yy[ok], xx[ok]]
        out += wgt * vals
    return out


@dataclass
class ClassifierAugment:
    min_size: int
    max_size: int
    angle: float = 0.0
    aspect: float = 1.0
    hue: float = 0.0
    saturation: float = 1.0
    exposure: float = 1.0
    center: bool = False

    @classmethod
    def from_network(cls, net, cfgfile) -> "ClassifierAugment":
        opts = read_cfg(cfgfile)[0].options
        w = net.w
        lo = int(float(opts.get("min_ratio", net.min_crop / w)) * w)
        hi = int(float(opts.get("max_ratio", net.max_crop / w)) * w)
        return cls(lo, max(lo, hi), net.angle, net.aspect, net.hue, net.saturation, net.exposure,
                   bool(int(opts.get("center", 0))))


def augment_image(rng, im, size, a: ClassifierAugment):
    """load_image_augment_paths for one image: crop (random or centre), flip, distort."""
    if a.center:
        crop = center_crop_image(im, size, size)
    else:
        aspect = rand_scale(rng, a.aspect)
        r = int(rng.integers(a.min_size, a.max_size + 1))
        _, ih, iw = im.shape
        m = ih if ih < iw * aspect else iw * aspect
        scale = r / m
        rad = rand_uniform(rng, -a.angle, a.angle) * 2 * math.pi / 360.0
        dx = (iw * scale / aspect - size) / 2.0
        dy = (ih * scale - size) / 2.0
        dx, dy = rand_uniform(rng, -dx, dx), rand_uniform(rng, -dy, dy)
        crop = rotate_crop_image(im, rad, scale, size, size, dx, dy, aspect)
    if rng.integers(2):
        crop = np.ascontiguousarray(crop[:, :, ::-1])
    return random_distort_image(rng, crop, a.hue, a.saturation, a.exposure)


def resize_min(im, m):
    _, h, w = im.shape
    if w < h:
        h, w = (h * m) // w, m
    else:
        w, h = (w * m) // h, m
    return im if (w, h) == im.shape[:0:-1] else resize_image(im, w, h)


def center_crop_image(im, w, h):
    """center_crop_image: the centred square, resized to w x h."""
    _, ih, iw = im.shape
    m = min(iw, ih)
    x0, y0 = (iw - m) // 2, (ih - m) // 2
    return resize_image(im[:, y0:y0 + m, x0:x0 + m], w, h)


def valid_input(im, w, h):
    """validate_classifier_single: shorter side to w, then the centre w x h crop."""
    r = resize_min(im, w)
    _, rh, rw = r.shape
    x0, y0 = (rw - w) // 2, (rh - h) // 2
    return np.ascontiguousarray(r[:, y0:y0 + h, x0:x0 + w])


# -- training -----------------------------------------------------------------------------------
@dataclass
class ClassifierTrainOptions:
    weights: str | None = None
    clear: bool = False
    partial: bool = False          # accept a checkpoint (seen > 0) that covers fewer layers
    compat: str | None = None      # "darknet-cpu": reproduce C darknet's CPU quirks
    exact: bool | None = None      # as TrainOptions.exact (None: DARKNUMBA_EXACT decides)
    decoder: str | None = None     # JPEGs: "stb" | "pillow"; None: stb under compat, else Pillow
    dialect: str | None = None     # pjreddie | alexeyab (None: chosen from the cfg and weights)
    seed: int = 0
    workers: int = 2
    backup: str | None = None
    max_batches: int | None = None
    backup_every: int = 1000        # CFG.backup every N iterations (Darknet: 1000)
    log_every: int = 1
    progress: bool = True           # tqdm bar with ETA
    chart: bool = True              # chart.png (needs matplotlib)
    chart_every: int = 10
    parallel: object = None         # data_parallel.DataParallel to train on MPI ranks (None: one
                                    # process)


class _BatchLoader:
    """Augmented batches on a thread pool, one batch ahead: the whole batch is drawn (images
    and their augmentation seeds), the images at `positions` in it are loaded (all: None),
    JPEGs by `decoder` (vision.image.DECODERS)."""

    def __init__(self, paths, idx, classes, size, aug, batch, seed, workers, positions=None,
                 channels=3, decoder="pillow"):
        self.paths, self.idx, self.classes, self.channels = paths, idx, classes, channels
        self.decoder = decoder
        self.size, self.aug, self.batch = size, aug, batch
        self.positions = list(range(batch) if positions is None else positions)
        self.rng = np.random.default_rng(seed)
        self.pool = ThreadPoolExecutor(max(1, workers))
        self.next = self.pool.submit(self._load, self._draw())

    def _draw(self):
        pick = self.rng.integers(len(self.paths), size=self.batch)
        items = [(self.paths[i], int(self.idx[i]), int(self.rng.integers(2 ** 31))) for i in pick]
        return [items[i] for i in self.positions]

    def _load(self, items):
        X = np.empty((len(items), self.channels, self.size, self.size), np.float32)
        T = np.zeros((len(items), self.classes), np.float32)
        for k, (p, c, s) in enumerate(items):
            X[k] = augment_image(np.random.default_rng(s),
                                 load_image(p, c=self.channels, decoder=self.decoder),
                                 self.size, self.aug)
            T[k, c] = 1
        return X, T

    def __next__(self):
        X, T = self.next.result()
        self.next = self.pool.submit(self._load, self._draw())
        return X, T

    def close(self):
        self.pool.shutdown(wait=False, cancel_futures=True)


@holds_backup_lock
def train_classifier(datacfg, cfgfile, opts: ClassifierTrainOptions | None = None, log=print):
    """train_classifier for one process on the CPU. Returns what happened (iterations, last
    loss and average, files written, interrupted)."""
    opts = opts or ClassifierTrainOptions()
    dc = ClassifierData.read(datacfg)
    if not dc.train:
        raise DataError(f"{datacfg}: no `train` list")
    paths, idx = labelled_paths(dc.train, dc.labels, log)
    from .data_parallel import OneProcess
    par = opts.parallel or OneProcess()
    net = training_network(cfgfile, opts, log, batch=par.network_batch(cfgfile, opts))
    par.setup(net, log)
    if net.outputs != dc.classes:
        raise DarknumbaError(f"{cfgfile} outputs {net.outputs} values, {datacfg} has "
                             f"classes={dc.classes}")
    if net.w != net.h:
        raise DarknumbaError(f"{cfgfile}: classifier training crops squares; width={net.w} "
                             f"and height={net.h} differ")
    base = os.path.splitext(os.path.basename(cfgfile))[0]
    backup = opts.backup or dc.backup or "backup/"
    lock_backup(backup, log, par.is_root)      # one training per folder (lock.py)
    os.makedirs(backup, exist_ok=True)
    remove_stale_temps(backup, log=lambda m: log(m, file=sys.stderr))
    check_backups_not_inputs(backup, base, {"the cfg": cfgfile, "the data file": datacfg,
                                            "the training list": dc.train,
                                            "the valid list": dc.valid})
    imgs = net.batch * net.subdivisions
    aug = ClassifierAugment.from_network(net, cfgfile)
    N = len(paths)
    log(f"{base}: {N} training images, {dc.classes} classes, batch {imgs} (subdivisions "
        f"{net.subdivisions}), learning rate {net.learning_rate}, momentum {net.momentum}, "
        f"decay {net.decay}; crops {aug.min_size}..{aug.max_size} -> {net.w}")
    written = []
    start = net.current_batch()
    history = TrainingHistory(backup, base, start, net.max_batches, opts.chart, par.is_root,
                              log)

    def save(path):
        if par.is_root:
            history.flush()
            save_checkpoint(net, path, written[-1] if written else None)
        written.append(path)
        log(f"Saving weights to {path}")

    loader = _BatchLoader(paths, idx, dc.classes, net.w, aug, imgs,
                          [opts.seed, start], opts.workers, par.positions(), net.c,
                          pick_decoder(opts.decoder, net.quirks))
    bar = Progress(net.max_batches, start, opts.progress, log)
    epoch = net.seen // N
    avg_loss, loss, interrupted = -1.0, math.nan, False
    try:
        with StopFlag() as stop:
            while net.current_batch() < net.max_batches:
                t0 = time.time()
                X, T = next(loader)
                loss = par.train_iteration(net, X, T, written[-1] if written else None,
                                           stop) / imgs
                avg_loss = loss if avg_loss < 0 else avg_loss * 0.9 + loss * 0.1
                i = net.current_batch()
                line = (f"{i}, {net.seen / N:.3f}: {loss:f}, {avg_loss:f} avg, "
                        f"{net.current_rate():f} rate, {time.time() - t0:f} seconds, "
                        f"{net.seen} images")
                bar.step([line] if i % opts.log_every == 0 else [], loss, avg_loss)
                history.add(i, loss, avg_loss, net.current_rate(), net.seen)
                if i % opts.chart_every == 0:
                    history.draw()
                if net.seen // N > epoch:
                    epoch = net.seen // N
                    save(os.path.join(backup, f"{base}_{epoch}.weights"))
                if i % opts.backup_every == 0:
                    save(os.path.join(backup, f"{base}.backup"))
                if stop.set:
                    interrupted = True
                    break
    finally:
        loader.close()
        bar.close()
        history.flush()         # rows past the last checkpoint too: a resume drops them
    save(os.path.join(backup, f"{base}.weights"))
    history.draw()
    return {"iterations": net.current_batch(), "loss": loss, "avg_loss": avg_loss,
            "written": written, "interrupted": interrupted, "net": net}


# -- predict and valid ------------------------------------------------------------------------
def top_k(pred: np.ndarray, k: int) -> list[int]:
    """top_k: indexes of the k largest values, ties to the lower index."""
    return [int(i) for i in np.argsort(-pred, kind="stable")[:k]]


def predict_image(net, im: np.ndarray, top: int) -> list[tuple[int, float]]:
    """predict_classifier for one image: letterbox to the network size, forward, top-k."""
    x = letterbox_image(im, net.w, net.h)[None]
    pred = np.asarray(net.predict(x)).reshape(-1)[:net.outputs]
    return [(i, float(pred[i])) for i in top_k(pred, top)]


def validate(net, paths, idx, topk: int, batch: int = 1, log=None, decoder: str | None = None):
    """validate_classifier_single: centre crops, forward, top-1 and top-k accuracy. JPEGs are
    decoded by `decoder` (None: the network's rule, vision.image.pick_decoder)."""
    decoder = pick_decoder(decoder, net.quirks)
    hit1 = hitk = 0
    for start in range(0, len(paths), batch):
        chunk = paths[start:start + batch]
        X = np.zeros((net.batch, net.c, net.h, net.w), np.float32)
        for k, p in enumerate(chunk):
            X[k] = valid_input(load_image(p, c=net.c, decoder=decoder), net.w, net.h)
        out = np.asarray(net.predict(X)).reshape(net.batch, -1)
        for k in range(len(chunk)):
            best = top_k(out[k, :net.outputs], topk)
            c = int(idx[start + k])
            hit1 += best[0] == c
            hitk += c in best
        n = start + len(chunk)
        if log:
            log(f"{n}: top 1: {hit1 / n:f}, top {topk}: {hitk / n:f}")
    n = len(paths)
    return hit1 / n, hitk / n
