"""Batches for training, prepared ahead in background threads (Darknet's `load_data` thread).

Reproducible with a seed whatever the thread timing: image i of batch k is drawn and augmented
with its own generator seeded with (seed, k, i) (AlexeyAB's per-thread mosaic / mixup choice:
(seed, k)), and the multi-scale size of batch k is a function of (seed, k // 10) alone
(AlexeyAB's: of (seed, (k - first batch of the run) // 10)); under track=1 a thread share's
sequences come from (seed, k, share) and its common augmentation from (seed, k, share,
picture). So a loader can load any part of a batch (`positions`: a data-parallel rank's
share) and get exactly those images of the whole batch. Decoding (PIL) and the augmentation
kernels (numba, nogil) release the GIL, so a couple of threads keep ahead of the network.
"""
from __future__ import annotations

import collections
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import CfgError, DataError
from ..vision.augment import AugmentConfig, augment_detection
from ..vision.augment_ab import AbAugmentConfig, track_id_base
from ..vision.image import load_image
from ..vision.mosaic_ab import load_data_detection_ab
from ..vision.sequence_ab import TrackSource
from .datasets import DetectionDataset, label_path

RESIZE_EVERY = 10   # train_detector: a new size every 10 batches when random=1


def multiscale_sizes(w: int) -> list[int]:
    """Darknet draws (rand()%10 + 10)*32, 320..608, for its 416 networks: 0.77x..1.46x the
    cfg size. Other sizes get the same ratio range, in steps of 32 (at least 32)."""
    if w == 416:
        return [(i + 10) * 32 for i in range(10)]
    lo = max(32, round(w * 320 / 416 / 32) * 32)
    hi = max(lo, round(w * 608 / 416 / 32) * 32)
    return list(range(lo, hi + 1, 32))


class MultiScale:
    """The input size of each batch: the cfg size unless random=1; then a size drawn every 10
    batches, and the largest for the last 200 batches (as train_detector does)."""

    def __init__(self, w, h, random: bool, seed: int, max_batches: int):
        self.w, self.h, self.random, self.seed, self.max_batches = w, h, random, seed, max_batches
        self.sizes = multiscale_sizes(w)

    def size(self, batch_index: int) -> tuple[int, int]:
        if not self.random:
            return self.w, self.h
        block = batch_index // RESIZE_EVERY
        if block * RESIZE_EVERY + 200 > self.max_batches:
            dim = self.sizes[-1]
        else:
            dim = self.sizes[np.random.default_rng([self.seed, 7, block]).integers(len(self.sizes))]
        return dim, dim


class AbMultiScale:
    """AlexeyAB's random resize (train_detector, `random` of the last [yolo] layer): every 10
    batches of the run a factor f drawn by rand_scale(c) (c = 1.4 for random=1, else `random`)
    gives a side of round(f * cfg side / resize_step + 1) * resize_step (its `+ 1` rounds up
    by one step), the cfg size when f < 1 would have grown it; the first 10 batches of a run and
    those past max_batches - 100 take the largest, round(c * side / step + 1) * step."""

    def __init__(self, w, h, random: float, resize_step: float, seed: int, max_batches: int,
                 start: int = 0):
        self.w, self.h, self.random, self.step = w, h, float(random), float(resize_step)
        self.seed, self.max_batches, self.start = seed, max_batches, start
        self.coef = 1.4 if self.random == 1 else self.random

    def _side(self, f, side) -> int:
        return max(int(self.step), int(math.floor(f * side / self.step + 1 + 0.5) * self.step))

    def size(self, batch_index: int) -> tuple[int, int]:
        if not self.random:
            return self.w, self.h
        block = (batch_index - self.start) // RESIZE_EVERY
        first = self.start + block * RESIZE_EVERY
        if block == 0 or first > self.max_batches - 100:
            return self._side(self.coef, self.w), self._side(self.coef, self.h)
        rng = np.random.default_rng([self.seed, 7, block])
        f = rng.uniform(1, self.coef)
        f = f if rng.integers(2) else 1 / f
        w, h = self._side(f, self.w), self._side(f, self.h)
        if f < 1 and (w > self.w or h > self.h):
            return self.w, self.h
        return w, h


class DetectionLoader:
    """Iterate (X (n,c,h,w) float32, truth (n, max_boxes*truth_size) float32) from batch
    `start` on: the batch's `images` images, or only those at `positions` among them
    (n = len(positions)). Images are drawn at random with replacement (get_random_paths;
    AlexeyAB's track=1: in sequences through the list, get_sequential_paths),
    loaded with `channels` channels (the network's c: 1 gives grey, as AlexeyAB's
    load_data_detection). `aug` says whose augmentation: AugmentConfig (pjreddie's
    load_data_detection, 5 floats per truth) or AbAugmentConfig (AlexeyAB's, with mosaic and
    mixup, 6 floats per truth; colour images only here). `decoder`: how JPEGs are decoded
    (vision.image.DECODERS; "stb" gives the pixels of Darknet's CPU build, which decodes its
    training images with stb_image too)."""

    def __init__(self, dataset: DetectionDataset, images: int,
                 aug: AugmentConfig | AbAugmentConfig, scales, seed: int = 0, start: int = 0,
                 workers: int = 2, prefetch: int = 2, positions=None, channels: int = 3,
                 decoder: str = "pillow"):
        if isinstance(aug, AbAugmentConfig) and channels != 3:
            raise CfgError(f"AlexeyAB's training augmentation (mosaic, mixup, blur) is built "
                           f"for 3-channel images; this network has channels={channels}")
        self.ds, self.images, self.aug, self.scales = dataset, images, aug, scales
        self.positions = list(range(images) if positions is None else positions)
        self.channels = channels
        self.decoder = decoder
        self.seed, self.next_index, self.start = seed, start, start
        self.prefetch = max(1, prefetch)
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers),
                                       thread_name_prefix="darknumba-loader")
        self.pending: collections.deque = collections.deque()
        self.ab = isinstance(aug, AbAugmentConfig)
        if self.ab:
            self.track_bases = [track_id_base(label_path(p)) for p in dataset.paths]
            for p, b in zip(dataset.paths, dataset.boxes):
                if len(b) > aug.max_boxes:      # fill_truth_detection cuts silently; we say so
                    dataset.issues.note(
                        "too-many-boxes", label_path(p),
                        f"{len(b)} boxes, the [yolo] layer takes {aug.max_boxes} (max=): each "
                        f"time {p} is loaded, a random {aug.max_boxes} of them are kept")

    def _first_readable(self, indexes):
        """(index, image) of the first readable image among `indexes` (an iterator, consumed
        only as far as needed); each unreadable one is reported. 100 in a row fail: an error."""
        for j in indexes:
            path = self.ds.paths[j]
            try:
                return j, load_image(path, c=self.channels, decoder=self.decoder)
            except DataError as e:  # report, take the next candidate
                self.ds.issues.report("unreadable-image", path, None, str(e), path)
        raise DataError("100 images in a row could not be read; " + self.ds.issues.summary())

    def draw_image(self, rng):
        """A random readable training image: (index, image); an unreadable one is reported
        and another drawn, up to 100 times."""
        return self._first_readable(int(rng.integers(len(self.ds))) for _ in range(100))

    def load_at(self, j: int):
        """Image j of the list for a track=1 sequence: (image, boxes, track id base); an
        unreadable one is reported and the next in the list taken instead, up to 100 times
        (AlexeyAB's loader leaves the row unfilled)."""
        i, im = self._first_readable((j + step) % len(self.ds) for step in range(100))
        return im, self.ds.boxes[i], self.track_bases[i]

    def load_batch(self, k: int):
        w, h = self.scales.size(k)

        def image_rng(position):
            return np.random.default_rng([self.seed, k, position])

        if self.ab:
            def draw(rng):
                j, im = self.draw_image(rng)
                return im, self.ds.boxes[j], self.track_bases[j]
            def pair_rng(position):
                return np.random.default_rng([self.seed, k, position, 1])
            track, threads = None, None
            if self.aug.track:
                track = TrackSource(
                    len(self.ds), self.load_at,
                    lambda start: np.random.default_rng([self.seed, k, start, 2]),
                    lambda start, q: np.random.default_rng([self.seed, k, start, 3, q]))
                threads = self.aug.sequential.threads(k, self.start)
            return load_data_detection_ab(np.random.default_rng([self.seed, k]), draw,
                                          self.images, w, h, self.aug, self.positions,
                                          image_rng, pair_rng, track, threads)
        X = np.empty((len(self.positions), self.channels, h, w), dtype=np.float32)
        T = np.zeros((len(self.positions), self.aug.max_boxes * 5), dtype=np.float32)
        for i, position in enumerate(self.positions):
            rng = image_rng(position)
            j, im = self.draw_image(rng)
            X[i], T[i] = augment_detection(rng, im, self.ds.boxes[j], w, h, self.aug)
        return X, T

    def _fill(self):
        while len(self.pending) < self.prefetch:
            self.pending.append(self.pool.submit(self.load_batch, self.next_index))
            self.next_index += 1

    def __iter__(self):
        return self

    def __next__(self):
        self._fill()
        batch = self.pending.popleft().result()
        self._fill()
        return batch

    def close(self):
        for f in self.pending:
            f.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
