"""Darknet's `train_detector` (examples/detector.c) and `partial` (darknet.c).

The loop reads top to bottom: load the data, build the network, then per iteration take a batch
from the background loader, run `train_datum` on each of its `subdivisions` slices, print
Darknet's line, checkpoint on schedule. Every file is written atomically (temporary + rename).
A network of the alexeyab dialect trains as AlexeyAB's Darknet does: its augmentation
(vision/augment_ab.py, mosaic_ab.py), random resize, checkpoints, EMA and -map rules
(train/alexeyab.py).
"""
from __future__ import annotations

import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field

from ..data.datasets import DataIssues, DetectionDataset, get_paths, read_data_cfg
from ..data.loader import AbMultiScale, DetectionLoader, MultiScale
from ..dialect import PJREDDIE, defaults_for
from ..errors import DarknumbaError, DataError, WeightsError
from ..parser import parse_network_cfg
from ..vision.augment import AugmentConfig
from ..vision.augment_ab import AbAugmentConfig
from ..vision.image import pick_decoder
from ..weights import load_weights, peek_version, plan_weights, save_weights
from .alexeyab import (AB, AbSchedule, Ema, HoursLeft, MapSchedule, TrainingMap,
                       iteration_line, refuse_dynamic_minibatch)
from .checkpoint import check_backups_not_inputs, remove_stale_temps, save_checkpoint
from .data_parallel import OneProcess
from .history import Progress, TrainingHistory
from .lock import holds_backup_lock, lock_backup


PJ = defaults_for(PJREDDIE)


@dataclass
class Schedule:
    """When to write checkpoints (pjreddie's Darknet: `_<iter>.weights` every 100 below 1000,
    then every 10000; `.backup` every 100: dialect.Defaults)."""
    every: int = PJ.weights_every
    until: int = PJ.weights_until
    every_after: int = PJ.weights_every_after
    backup_every: int = PJ.backup_every

    def weights_due(self, i: int) -> bool:
        return i % self.every_after == 0 or (i < self.until and i % self.every == 0)

    def backup_due(self, i: int) -> bool:
        return i % self.backup_every == 0

    stop_name = ".backup"           # what a Ctrl-C writes

    def due(self, i: int) -> list[str]:
        """The names (after <cfg>) to write at iteration i."""
        return [".backup"] * self.backup_due(i) + [f"_{i}.weights"] * self.weights_due(i)


@dataclass
class TrainOptions:
    weights: str | None = None     # starting weights (a full or partial .weights file)
    partial: bool = False          # accept a checkpoint (seen > 0) that covers fewer layers
    clear: bool = False            # reset seen to 0 (fine-tuning)
    compat: str | None = None      # "darknet-cpu": reproduce C darknet's CPU quirks
    exact: bool | None = None      # True: every convolution as im2col + GEMM; False: Winograd
                                   # for the large 3x3 ones; None: DARKNUMBA_EXACT decides
    decoder: str | None = None     # JPEGs (training and -map's valid list): "stb" | "pillow";
                                   # None: stb under compat, else Pillow (image.pick_decoder)
    dialect: str | None = None     # pjreddie | alexeyab (None: chosen from the cfg and weights)
    seed: int = 0
    workers: int = 2               # loader threads
    bad_data: str = "skip"         # skip | stop
    stats_every: int = 0           # print per-yolo-layer stats every N iterations (0: never)
    chart: bool = True             # chart.png (needs matplotlib)
    chart_every: int = 10
    backup: str | None = None      # overrides the .data file's backup folder
    max_batches: int | None = None # overrides [net] max_batches
    schedule: Schedule = field(default_factory=Schedule)   # pjreddie's; alexeyab: the .data
                                   # file's saveweights/savelast (train/alexeyab.py)
    progress: bool = True          # tqdm bar with ETA
    letterbox: bool = False        # place images letterboxed instead of Darknet's jitter crop
    map_every: int = 0             # mAP@0.5 on the valid list every N iterations (0: never,
                                   # -1: AlexeyAB's -map rule, see alexeyab.MapSchedule)
    map_epochs: int = AB.map_epochs    # -map: every map_epochs passes over the training images
    map_thresh: float = AB.map_thresh  # -map: the confidence of its precision/recall lines
                                       # (-thresh)
    parallel: object = None        # data_parallel.DataParallel to train on MPI ranks (None: one
                                   # process)


def load_partial_weights(net, path, allow_partial: bool = True) -> int:
    """Load a .weights file that may cover only the first k layers (as `partial` writes, and as
    Darknet's load_weights accepts by reading until the file ends). Returns k. A file that ends
    inside a layer is an error naming that layer. A file that covers fewer layers than the cfg
    yet has seen images (a checkpoint, which `partial` would have reset to 0) is a truncated
    checkpoint: refused with the counts unless allow_partial (Darknet would go on with the
    rest of the network random)."""
    plan = plan_weights(net, path, partial=True)
    if plan.layers < net.n and plan.seen and not allow_partial:
        need = plan.ends[-1]
        raise WeightsError(
            f"{path}: holds {plan.layers} of {net.n} layers ({plan.size} bytes of {need}) and "
            f"has seen {plan.seen} images, as a checkpoint has, not a file cut by `partial` "
            f"(those have seen 0): a checkpoint cut short? To start from its {plan.layers} "
            f"layers anyway, ask for a partial load (detector train --partial)")
    load_weights(net, path, partial=True)
    return plan.layers


def training_network(cfgfile, opts, log, batch=None):
    """The network a training run starts from: Darknet's random initialisation (opts.seed),
    then whatever layers opts.weights covers; --clear and --max-batches applied. batch: the
    images per forward pass, if not the cfg's batch/subdivisions."""
    net = parse_network_cfg(cfgfile, batch=batch, seed=opts.seed, compat=opts.compat,
                            dialect=opts.dialect,
                            weights_version=peek_version(opts.weights) if opts.weights else None)
    if opts.weights:
        loaded = load_partial_weights(net, opts.weights, opts.partial)
        log(f"loaded {loaded} of {net.n} layers from {opts.weights} (seen {net.seen})")
    if opts.clear:
        net.seen = 0
    if opts.exact is not None:
        net.exact = opts.exact
    if opts.max_batches is not None:
        net.max_batches = opts.max_batches
    return net


def partial(cfg, weights, out, n: int, log=print, dialect: str | None = None):
    """partial: save layers [0, n) only, seen reset to 0. pjreddie's loads the whole weights
    file first (it must fit the cfg); AlexeyAB's reads only the layers it keeps, so the cfg
    may have another head (e.g. yolov4-tiny.weights cut with yolov4-tiny-custom.cfg)."""
    net = parse_network_cfg(cfg, batch=1, seed=None, dialect=dialect,
                            weights_version=peek_version(weights))
    if not 0 <= n <= net.n:
        raise DarknumbaError(f"partial: N = {n} outside 0..{net.n} ({cfg} has {net.n} layers)")
    load_weights(net, weights, cutoff=n if net.quirks.partial_reads_kept_layers else None)
    net.seen = 0
    save_weights(net, out, cutoff=n)
    log(f"saved layers 0..{n - 1} of {cfg} to {out}")


def backup_folder(dc, backup: str | None) -> str:
    """Where a training writes its checkpoints: --backup, else the .data file's `backup`."""
    return backup or dc.resolve(dc.backup) or "backup/"


def yolo_stats_lines(net) -> list[str]:
    """Each yolo (or region) layer's `Region NN Avg IOU ...` line from its last training forward
    (and a [contrastive] layer's lines), in layer order."""
    return [l.stats_line() for l in net.layers
            if (l.detector_head or l.reports_stats) and l.stats_line()]


class StopFlag:
    """Ctrl-C sets `requested`; the loop stops between iterations when `set`, the same flag in
    one process (data-parallel ranks, `shared`, set it together from every rank's request);
    a second Ctrl-C aborts."""

    def __init__(self):
        self.set = self.requested = self.shared = False
        self._old = None

    def __enter__(self):
        def handler(signum, frame):
            if self.requested:
                raise KeyboardInterrupt
            self.requested = True
            self.set = self.set or not self.shared
            print("\ninterrupted: finishing this iteration, then saving (Ctrl-C again to "
                  "abort without saving)", file=sys.stderr)
        try:
            self._old = signal.signal(signal.SIGINT, handler)
        except ValueError:      # not the main thread
            self._old = None
        return self

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def dialect_rules(net, dc, opts: TrainOptions, start: int, log):
    """(augmentation, input sizes, checkpoint schedule, EMA or None): pjreddie's, or under the
    alexeyab dialect AlexeyAB's (from its last [yolo] layer, [net] and the .data file)."""
    if not net.quirks.train_detector_alexeyab:
        return (AugmentConfig.from_network(net, letterbox=opts.letterbox),
                MultiScale(net.w, net.h, bool(getattr(net.layers[-1], "random", 0)), opts.seed,
                           net.max_batches), opts.schedule, None)
    last = [l for l in net.layers if l.detector_head][-1]
    aug = AbAugmentConfig.from_network(net, log=lambda m: log(m, file=sys.stderr))
    aug.letter_box = aug.letter_box or opts.letterbox
    scales = AbMultiScale(net.w, net.h, getattr(last, "random", 0), net.resize_step, opts.seed,
                          net.max_batches, start)
    return (aug, scales, AbSchedule.from_data(dc, net.max_batches, start),
            Ema(net) if net.ema_alpha else None)


@holds_backup_lock
def train_detector(datacfg, cfgfile, opts: TrainOptions | None = None, log=print):
    """train_detector for one process on the CPU. Returns a dict of what happened: iterations
    run, the last loss/avg loss, the files written, and whether it was interrupted."""
    opts = opts or TrainOptions()
    dc = read_data_cfg(datacfg)
    issues = DataIssues(opts.bad_data, log=lambda m: log(m, file=sys.stderr))
    train_list = dc.resolve(dc.train)
    if not train_list:
        raise DarknumbaError(f"{datacfg}: no `train` list")
    base = os.path.splitext(os.path.basename(cfgfile))[0]
    backup_dir = backup_folder(dc, opts.backup)
    lock_backup(backup_dir, log, getattr(opts.parallel, "is_root", True))    # lock.py
    os.makedirs(backup_dir, exist_ok=True)
    remove_stale_temps(backup_dir, log=lambda m: log(m, file=sys.stderr))
    check_backups_not_inputs(backup_dir, base, {
        "the cfg": cfgfile, "the data file": datacfg, "the training list": train_list,
        "the valid list": dc.resolve(dc.valid), "the names file": dc.resolve(dc.names)})

    par = opts.parallel or OneProcess()
    net = training_network(cfgfile, opts, log, batch=par.network_batch(cfgfile, opts))
    par.setup(net, log)
    heads = [l for l in net.layers if l.detector_head]
    # AlexeyAB's train_detector takes its last [yolo] / [Gaussian_yolo] / [region] wherever it
    # is (a [contrastive] loss may follow it); pjreddie's takes the last layer
    last = heads[-1] if heads and net.quirks.train_detector_alexeyab else net.layers[-1]
    if not last.detector_head:
        # YOLOv1's [detection] wants Darknet's per-cell truth grid (load_data_region): not yet
        raise DarknumbaError(f"{cfgfile}: the last layer is [{last.type}]; detector training "
                             f"needs a [yolo] (YOLOv3) or [region] (YOLOv2) head")
    refuse_dynamic_minibatch(net, cfgfile)
    imgs = net.batch * net.subdivisions
    start = net.current_batch()
    if start >= net.max_batches:
        raise DarknumbaError(
            f"nothing to train: the weights have seen {net.seen} images = iteration {start}, "
            f"and max_batches is {net.max_batches}. Pass --clear to start the count at 0 "
            f"(fine-tuning), or raise max_batches in {cfgfile}")

    ds = DetectionDataset(get_paths(train_list), dc.classes, issues)
    if last.classes != dc.classes:
        raise DarknumbaError(f"{cfgfile} has classes={last.classes} in its {last.type} layers, "
                             f"{datacfg} has classes={dc.classes}")
    log(f"{base}: {len(ds)} training images, batch {imgs} (subdivisions {net.subdivisions}), "
        f"learning rate {net.learning_rate}, momentum {net.momentum}, decay {net.decay}; "
        f"starting at iteration {start} of {net.max_batches}")
    aug, scales, schedule, ema = dialect_rules(net, dc, opts, start, log)
    sequential = getattr(aug, "sequential", None)       # track=1 (vision/sequence_ab.py)
    if sequential is not None:
        log(f"Tracking! batch = {net.batch}, subdiv = {net.subdivisions}, time_steps = "
            f"{net.time_steps}, mini_batch = {aug.mini_batch}")
    seq_shown = None
    history = TrainingHistory(backup_dir, base, start, net.max_batches, opts.chart,
                              par.is_root, log)
    decoder = pick_decoder(opts.decoder, net.quirks)
    tmap = None
    if opts.map_every:
        tmap = TrainingMap(dc, cfgfile, issues, net.dialect, MapSchedule(
            opts.map_every, len(ds), imgs, net.burn_in, net.max_batches, start, opts.map_epochs),
            thresh=opts.map_thresh, decoder=decoder)
    hours_left = HoursLeft()
    written: list[str] = []

    def save(path):
        if par.is_root:
            history.flush()
            save_checkpoint(net, path, written[-1] if written else None)
        written.append(path)
        log(f"Saving weights to {path}")

    def checkpoint(suffix):
        save(os.path.join(backup_dir, base + suffix))
        if suffix == "_last.weights" and ema is not None and ema.initialized:
            path = os.path.join(backup_dir, f"{base}_ema.weights")
            if par.is_root:
                ema.save(net, path, written[-1])
            written.append(path)
            log(f" EMA weights are saved to the file: {path}")

    bar = Progress(net.max_batches, start, opts.progress, log)
    avg_loss = -1.0
    loss = math.nan
    i = start
    interrupted = False
    loader = DetectionLoader(ds, imgs, aug, scales, seed=opts.seed, start=start,
                             workers=opts.workers, positions=par.positions(), channels=net.c,
                             decoder=decoder)
    try:
        with StopFlag() as stop:
            while net.current_batch() < net.max_batches:
                t0 = time.time()
                X, T = next(loader)
                if sequential is not None and sequential.current(i) != seq_shown:
                    seq_shown = sequential.current(i)
                    log(f" sequential_subdivisions = {seq_shown}, sequence = "
                        f"{sequential.sequence(i)}")
                h, w = X.shape[2], X.shape[3]
                if (w, h) != (net.w, net.h):
                    log(f"Resizing to {w} x {h}")
                    net.resize(w, h)
                t_load = time.time() - t0
                t0 = time.time()
                loss = par.train_iteration(net, X, T, written[-1] if written else None,
                                           stop) / imgs
                avg_loss = loss if avg_loss < 0 else avg_loss * 0.9 + loss * 0.1
                i = net.current_batch()
                if ema is not None:
                    ema.step(i, log)
                seconds = time.time() - t0
                if net.quirks.train_detector_alexeyab:
                    line = iteration_line(i, loss, avg_loss, net.current_rate(), seconds,
                                          i * imgs, hours_left(net.max_batches - i,
                                                               seconds + t_load))
                else:
                    line = (f"{i}: {loss:f}, {avg_loss:f} avg, {net.current_rate():f} rate, "
                            f"{seconds:f} seconds, {i * imgs} images "
                            f"(loaded in {t_load:.3f} s)")
                bar.step((tmap.status() if tmap is not None else []) + [line], loss, avg_loss)
                if opts.stats_every and i % opts.stats_every == 0:
                    for s in yolo_stats_lines(net):
                        log(s)
                history.add(i, loss, avg_loss, net.current_rate(), i * imgs)
                if tmap is not None and tmap.schedule.due(i):
                    best = tmap.measure(net, i, log)
                    history.set_map(i, tmap.last)
                    if best:
                        save(os.path.join(backup_dir, f"{base}_best.weights"))
                if i % opts.chart_every == 0:
                    history.draw()
                for suffix in schedule.due(i):
                    checkpoint(suffix)
                if stop.set:
                    interrupted = True
                    break
    except KeyboardInterrupt:
        interrupted = True
        log("aborted without saving", file=sys.stderr)
        return {"iterations": i - start, "loss": loss, "avg_loss": avg_loss, "written": written,
                "interrupted": True, "issues": issues}
    finally:
        loader.close()
        bar.close()
        history.flush()         # rows past the last checkpoint too: a resume drops them
    history.draw()
    if interrupted:
        checkpoint(schedule.stop_name)
        log(f"stopped at iteration {i}; resume with the same command and {written[-1]}")
    else:
        save(os.path.join(backup_dir, f"{base}_final.weights"))
    if issues.issues:
        log(issues.summary(), file=sys.stderr)
        if opts.bad_data == "stop":     # found by a loader thread in a batch never trained on
            raise DataError(f"{issues.issues[0]} (bad-data policy is `stop`; found while "
                            f"preparing a batch ahead; {written[-1]} is saved)")
    return {"iterations": i - start, "loss": loss, "avg_loss": avg_loss, "written": written,
            "interrupted": interrupted, "issues": issues, "final_iteration": i}
