"""AlexeyAB's training schedule (its `detector.c:train_detector`, `network.c` EMA): which
checkpoints are written when, when `-map` measures mAP, the weights' moving average, and the
lines it prints.

Checkpoints under the alexeyab dialect (all in the backup folder, <cfg> the cfg's name; the
cadences are dialect.Defaults fields, AB below):
  <cfg>_last.weights   every `savelast` iterations (.data file, default 100)
  <cfg>_<iter>.weights every `saveweights` iterations (default 1000, or 10000 when
                       max_batches >= 10000), counted from the start of the run
  <cfg>_ema.weights    with `_last`, once the moving average has started (ema_alpha > 0)
  <cfg>_best.weights   when a -map measurement is at least the best of this run
  <cfg>_final.weights  at max_batches
"""
from __future__ import annotations

import numpy as np

from ..data.datasets import DetectionDataset, get_paths
from ..dialect import ALEXEYAB, defaults_for
from ..errors import DarknumbaError
from ..parser import load_network
from .checkpoint import save_checkpoint

AB = defaults_for(ALEXEYAB)


class AbSchedule:
    """train_detector's checkpoint rule: `_<iter>` when `saveweights` iterations have passed
    since the last one or the iteration is a multiple of it; `_last` likewise with `savelast`
    (only when savelast < saveweights, and never at iteration 1)."""

    stop_name = "_last.weights"       # what a Ctrl-C writes

    def __init__(self, save_after: int, save_last: int, start: int):
        if save_after < 1 or save_last < 1:
            raise ValueError(f"saveweights and savelast must be at least 1, found "
                             f"{save_after} and {save_last}")
        self.save_after, self.save_last = save_after, save_last
        self.iter_save = self.iter_save_last = start

    @classmethod
    def from_data(cls, dc, max_batches: int, start: int):
        """The .data file's `saveweights` and `savelast`, with AlexeyAB's defaults."""
        opts = dc.options
        save_after = int(opts.get("saveweights", AB.save_weights
                                  if max_batches < AB.save_weights_large_from
                                  else AB.save_weights_large))
        return cls(save_after, int(opts.get("savelast", AB.save_last)), start)

    def due(self, i: int) -> list[str]:
        """The names (after <cfg>) to write at iteration i, in AlexeyAB's order."""
        names = []
        if i >= self.iter_save + self.save_after or i % self.save_after == 0:
            self.iter_save = i
            names.append(f"_{i}.weights")
        if self.save_after > self.save_last and (
                i >= self.iter_save_last + self.save_last or (i % self.save_last == 0 and i > 1)):
            self.iter_save_last = i
            names.append("_last.weights")
        return names


class MapSchedule:
    """When training measures mAP. every > 0: at multiples of it. every = -1 (AlexeyAB's -map):
    `epochs` passes over the training images (4 by default, -mAP_epochs), at least 100
    iterations after the last measurement (or the start of the run), not before burn_in, and
    at max_batches."""

    def __init__(self, every: int, train_images: int, imgs: int, burn_in: int,
                 max_batches: int, start: int, epochs: int = AB.map_epochs):
        self.every, self.burn_in, self.max_batches = every, burn_in, max_batches
        self.each = max(epochs * train_images // imgs, AB.map_min_every)
        self.last = start

    @property
    def next(self) -> int:
        """The iteration of the next measurement (before max_batches)."""
        if self.every > 0:
            return (self.last // self.every + 1) * self.every
        return max(self.last + self.each, self.burn_in)

    def due(self, i: int) -> bool:
        if self.every > 0:
            return i % self.every == 0
        return i >= self.next or i == self.max_batches

    def done(self, i: int):
        self.last = i


class TrainingMap:
    """mAP on the .data file's valid list during training (AlexeyAB's -map): a test copy of
    the network (batch 8, the cfg size, the training network's dialect) gets the weights,
    validate_detector_map runs at thresh .25 (-thresh) and IoU .5, and the best of the run is
    kept. `decoder`: how the valid JPEGs are decoded (the training's decoder)."""

    def __init__(self, dc, cfgfile, issues, dialect: str, schedule: MapSchedule,
                 iou_thresh: float = AB.map_iou_thresh, thresh: float = AB.map_thresh,
                 decoder: str = "pillow"):
        lst = dc.resolve(dc.valid)
        if not lst:
            raise DarknumbaError(f"{dc.path}: mAP during training needs a `valid` list")
        self.ds = DetectionDataset(get_paths(lst), dc.classes, issues)
        self.net = load_network(cfgfile, None, batch=8, dialect=dialect)
        self.classes, self.names = dc.classes, dc.class_names()
        self.schedule, self.iou_thresh, self.thresh = schedule, iou_thresh, thresh
        self.decoder = decoder
        self.last = self.best = -1.0

    def status(self) -> list[str]:
        """What AlexeyAB prints before each iteration's line."""
        lines = [f" (next mAP calculation at {self.schedule.next} iterations) "]
        if self.last > 0:
            lines.append(f" Last accuracy mAP@{self.iou_thresh:0.2f} = {100 * self.last:2.2f} %, "
                         f"best = {100 * self.best:2.2f} % ")
        return lines

    def measure(self, net, i: int, log=print) -> bool:
        """Measure at iteration i, print as AlexeyAB does; True when it is the best so far
        (ties included: AlexeyAB saves _best on >=)."""
        from .evaluate import evaluate_map
        for src, dst in zip(net.layers, self.net.layers):
            for (_, a), (_, b) in zip(src.weight_records(), dst.weight_records()):
                b[:] = a
        self.net.weights_changed()
        r = evaluate_map(self.net, self.ds.paths, self.ds.boxes, self.classes, self.names,
                         thresh=self.thresh, iou_thresh=self.iou_thresh,
                         decoder=self.decoder)
        self.schedule.done(i)
        self.last = r.mean_ap
        log(r.report())
        log(f" mean_average_precision (mAP@{self.iou_thresh:0.2f}) = {self.last:f} ")
        if self.last >= self.best:
            self.best = self.last
            log("New best mAP!")
            return True
        return False


class Ema:
    """network.c's exponential moving average of the convolutions' weights, biases and batch
    norm scales (not the rolling statistics), run after each update as train_network does:
    from iteration max_batches/2 on, started as a copy of the weights, then
    avg = ema_alpha * avg + (1 - ema_alpha) * weights until max_batches - 1000, where the
    average replaces the weights and stops. (With max_batches < 2000 that point comes first:
    AlexeyAB's average is then the copy made at max_batches/2, never updated; so is ours.)"""

    FIELDS = ("weights", "biases", "scales")

    def __init__(self, net):
        self.alpha = np.float32(net.ema_alpha)
        self.start = net.max_batches // AB.ema_start_divisor
        self.apply_at = net.max_batches - AB.ema_apply_before_end
        recs = [(name, arr) for l in net.layers if l.type == "convolutional"
                for name, arr in l.weight_records() if name in self.FIELDS]
        self.pairs = [(arr, np.zeros_like(arr)) for _, arr in recs]    # (live, average)
        self.weight_avgs = [avg for (name, _), (_, avg) in zip(recs, self.pairs)
                            if name == "weights"]

    @property
    def initialized(self) -> bool:
        """is_ema_initialized: any averaged convolution weight (not bias or scale) is nonzero."""
        return any(avg.any() for avg in self.weight_avgs)

    def update(self, alpha):
        for w, avg in self.pairs:
            avg *= alpha
            avg += (np.float32(1) - alpha) * w

    def step(self, i: int, log=print):
        """After the update of iteration i."""
        if i < self.start:
            return
        if not self.initialized:
            self.update(np.float32(0))
            log(" EMA initialization")
        if i == self.apply_at:
            for w, avg in self.pairs:
                w[:] = avg
            log(" ema_apply()")
        elif i < self.apply_at:
            self.update(self.alpha)

    def save(self, net, path, previous: str | None = None):
        """save_weights_upto(..., save_ema=1): the network with the averages in place of the
        convolutions' weights, biases and scales (the rolling statistics as they are); a
        failed write is a CheckpointError naming `previous`, the last checkpoint."""
        kept = [w.copy() for w, _ in self.pairs]
        try:
            for w, avg in self.pairs:
                w[:] = avg
            save_checkpoint(net, path, previous)
        finally:
            for (w, _), k in zip(self.pairs, kept):
                w[:] = k


class HoursLeft:
    """train_detector's `hours left`: the remaining iterations at this iteration's time,
    smoothed with weight 0.01 from the first value on."""

    def __init__(self):
        self.avg = -1.0

    def __call__(self, remaining: int, seconds: float) -> float:
        now = remaining * seconds / 3600
        self.avg = now if self.avg < 0 else 0.01 * now + 0.99 * self.avg
        return self.avg


def iteration_line(i, loss, avg_loss, rate, seconds, images, hours_left) -> str:
    """The line AlexeyAB prints after each iteration."""
    return (f"{i}: {loss:f}, {avg_loss:f} avg loss, {rate:f} rate, {seconds:f} seconds, "
            f"{images} images, {hours_left:f} hours left")


def refuse_dynamic_minibatch(net, cfgfile):
    """AlexeyAB's `[net] dynamic_minibatch=1` gives every random resize a new batch,
    batch x (largest size / this size)^2 (x 0.8 when that stays above the cfg's), and resets
    seen for it. darknumba keeps the cfg's batch through resizes, so it refuses to train such
    a cfg rather than train with other batches than asked. Without random resizing (the last
    [yolo] random=0) AlexeyAB never changes the batch either, and training goes on."""
    last = [l for l in net.layers if l.detector_head][-1]
    if net.dynamic_minibatch and getattr(last, "random", 0):
        raise DarknumbaError(
            f"{cfgfile}: [net] dynamic_minibatch=1 (AlexeyAB: a larger batch at each smaller "
            f"random size) is not supported: darknumba trains with the cfg's batch at every "
            f"size. Set dynamic_minibatch=0 to train with batch={net.batch * net.subdivisions} "
            f"throughout, or random=0 in the last [{last.type}] to train at one size")
