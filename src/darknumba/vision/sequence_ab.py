"""AlexeyAB's tracking training, [net] track=1 (`data.c` get_sequential_paths and
load_data_detection's `track` branch; `detector.c` train_detector; `network.c`
get_current_seq_subdivisions): the images of a batch are short videos cut from the training
list, read as a film in list order.

Dimensions: the cfg's batch B and subdivisions S; time_steps T; a mini-batch (one forward) is
net.batch = B/S x T images, mini_batch = B/S sequences side by side, row t*mini_batch + s
holding sequence s at time step t (as a recurrent layer reads its batch). A loader thread
loads (B x T) / threads consecutive rows; under track=1 the threads are the
`sequential_subdivisions` (at most S), so each thread's sequences run on through
S / sequential_subdivisions mini-batches.

get_sequential_paths, per thread and per picture of a mosaic / mixup: one speed drawn in
1..augment_speed for the whole share, one start drawn in the list for each of the mini_batch
sequences (contrastive=1: an odd sequence copies the start of the even one before it), then
row i takes the sequence i % mini_batch's next image, the start advanced by speed each time
(modulo the list's length). AlexeyAB's draws come from rand(); ours from a seeded numpy
Generator through the same `random_gen() % n` rule (RAND_MAX = 2**31 - 1 as glibc's).

The augmentation: load_data_detection draws its crop, flip, colour, blur and noise once per
thread and picture and keeps them for every image of the share (not per sequence), so a
sequence's frames are cropped and coloured alike. AlexeyAB's quirk that we do not copy: when
one image's small objects cut the blur kernel (min side / 8), its shared `blur` stays cut for
the rest of the share; ours cuts it for that image only (each image, as when track=0).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

RAND_MAX = 2 ** 31 - 1      # glibc's rand(): AlexeyAB's random_gen() on Linux


def generator_rand(rng):
    """random_gen() on a numpy Generator: an int in [0, RAND_MAX]."""
    return lambda: int(rng.integers(RAND_MAX + 1))


def rand_int(random_gen, lo: int, hi: int) -> int:
    """utils.c rand_int: random_gen() % (hi - lo + 1) + lo, the bounds put in order first."""
    lo, hi = min(lo, hi), max(lo, hi)
    return random_gen() % (hi - lo + 1) + lo


def get_sequential_paths(random_gen, n: int, m: int, mini_batch: int, augment_speed: int,
                         contrastive: bool) -> np.ndarray:
    """The list indices of a thread's n images (get_sequential_paths): `mini_batch` sequences
    through a list of m images, each from a random start, all at one random speed. Draws, in
    AlexeyAB's order: the speed, then each sequence's start. (AlexeyAB also steps past empty
    lines of the list; our lists have none.)"""
    speed = max(1, rand_int(random_gen, 1, augment_speed))
    starts = np.zeros(mini_batch, np.int64)
    for s in range(mini_batch):
        starts[s] = starts[s - 1] if contrastive and s % 2 == 1 else random_gen() % m
    t = np.arange(n, dtype=np.int64)
    return (starts[t % mini_batch] + (t // mini_batch) * speed) % m


@dataclass
class SequentialSubdivisions:
    """How many loader threads share a batch under track=1 (train_detector's args.threads,
    one process, one GPU's worth): `sequential_subdivisions` ([net], default and at most
    subdivisions), multiplied at each `steps` entry reached by its `seq_scales` factor (1 if
    absent, where AlexeyAB's parser reads past the list's end), truncated to an int after each product (C's int *= float), kept in
    1..subdivisions (get_current_seq_subdivisions). train_detector loads a run's first batch
    with the cfg's value, and each later batch with the value at the iteration before it (it
    sets the threads after taking a batch, for the next one)."""
    init: int
    subdivisions: int
    steps: list[int] = field(default_factory=list)
    seq_scales: list[float] = field(default_factory=list)

    @classmethod
    def from_network(cls, net):
        steps = list(net.steps) if net.policy in ("steps", "sgdr") else []
        return cls(int(net.sequential_subdivisions), int(net.subdivisions), steps,
                   list(net.seq_scales))

    def current(self, batch_num: int) -> int:
        """get_current_seq_subdivisions at `batch_num` iterations done."""
        seq = self.init
        for i, step in enumerate(self.steps):
            if step > batch_num:
                break
            scale = self.seq_scales[i] if i < len(self.seq_scales) else 1.0
            seq = int(np.float32(seq) * np.float32(scale))
        return min(max(seq, 1), self.subdivisions)

    def threads(self, k: int, start: int) -> int:
        """The loader threads of batch k (the iteration k + 1) of a run started at `start`."""
        if k <= start:
            return self.init or self.subdivisions       # sequential_subdivisions=0: S
        return self.current(k - 1)

    def sequence(self, batch_num: int) -> int:
        """get_sequence_value: mini-batches a thread's sequences run through."""
        return max(1, self.subdivisions // self.current(batch_num))


@dataclass
class TrackSource:
    """What a track=1 batch needs from its loader: the list's length m, image j of the list
    (`load(j)`: image, boxes, track id base), each thread share's generator of paths
    (`paths_rng(first position of the share)`), and the generator of a share's common
    augmentation of one picture (`augment_rng(first position, picture)`: a fresh generator
    on each call, so that every image of the share draws the same values)."""
    m: int
    load: Callable[[int], tuple]
    paths_rng: Callable[[int], np.random.Generator]
    augment_rng: Callable[[int, int], np.random.Generator]


def sequential_plan(shares, pictures, m: int, mini_batch: int, augment_speed: int,
                    contrastive: bool, paths_rng) -> dict[int, list[int]]:
    """{position: its list index for each picture} for a batch whose loader threads take
    `shares` (ranges of positions), share s making pictures[s] pictures per image (1; 2 for
    mixup; 4 for mosaic): get_sequential_paths once per share and picture, the share's
    draws from paths_rng(share.start) one picture after the other."""
    plan: dict[int, list[int]] = {}
    for share, count in zip(shares, pictures):
        gen = generator_rand(paths_rng(share.start))
        picks = [get_sequential_paths(gen, len(share), m, mini_batch, augment_speed,
                                      contrastive) for _ in range(count)]
        for i, p in enumerate(share):
            plan[p] = [int(pk[i]) for pk in picks]
    return plan
