"""Batches for training, prepared ahead in background threads (Darknet's `load_data` thread).

Reproducible with a seed whatever the thread timing: batch k draws its images and every random
number from its own generator seeded with (seed, k), and the multi-scale size of batch k is a
function of (seed, k // 10) alone. Decoding (PIL) and the augmentation kernels (numba, nogil)
release the GIL, so a couple of threads keep ahead of the network.
"""
from __future__ import annotations

import collections
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import DataError
from ..vision.augment import AugmentConfig, augment_detection
from ..vision.image import load_image
from .datasets import DetectionDataset

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


class DetectionLoader:
    """Iterate (X (n,c,h,w) float32, truth (n, max_boxes*5) float32) from batch `start` on.
    Images are drawn at random with replacement (get_random_paths), loaded with `channels`
    channels (the network's c: 1 gives grey, as AlexeyAB's load_data_detection)."""

    def __init__(self, dataset: DetectionDataset, images: int, aug: AugmentConfig,
                 scales: MultiScale, seed: int = 0, start: int = 0, workers: int = 2,
                 prefetch: int = 2, channels: int = 3):
        self.ds, self.images, self.aug, self.scales = dataset, images, aug, scales
        self.channels = channels
        self.seed, self.next_index = seed, start
        self.prefetch = max(1, prefetch)
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers),
                                       thread_name_prefix="darknumba-loader")
        self.pending: collections.deque = collections.deque()

    def load_batch(self, k: int):
        rng = np.random.default_rng([self.seed, k])
        w, h = self.scales.size(k)
        X = np.empty((self.images, self.channels, h, w), dtype=np.float32)
        T = np.zeros((self.images, self.aug.max_boxes * 5), dtype=np.float32)
        for i in range(self.images):
            for _ in range(100):
                j = int(rng.integers(len(self.ds)))
                path = self.ds.paths[j]
                try:
                    im = load_image(path, c=self.channels)
                except DataError as e:  # report, draw another image
                    self.ds.issues.report("unreadable-image", path, None, str(e), path)
                    continue
                X[i], T[i] = augment_detection(rng, im, self.ds.boxes[j], w, h, self.aug)
                break
            else:
                raise DataError("100 images in a row could not be read; "
                                + self.ds.issues.summary())
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
