"""AlexeyAB's detection batch (its OpenCV `data.c:load_data_detection` with `blend_truth` and
`blend_truth_mosaic`): each image alone, or as a mosaic (four images, one per quarter around
a random centre), or as a mixup (two images blended half and half).

AlexeyAB loads a batch in 6 threads; each thread flips one coin for its share of the batch:
heads, its images are mosaics (or mixups), tails, single images. We split the batch and flip
the coins the same way.

Mosaic: the centre (cut_x, cut_y) is drawn in [0.2, 0.8] of the network size. Each quarter
shows a cut_x x cut_y (etc.) window of its own augmented full-size image, the window taken
from the side of that image facing the mosaic centre and moved inwards past the border the
crop added on that side (the "shift", at most the window's slack), so that the picture meets
the centre. Truths move with their window and are clipped at the canvas edges only (with
mosaic_bound=1, at their quarter's edges).

Where we differ, and why letter_box works with mosaic here (AlexeyAB stops on the pair):
AlexeyAB measures that border in network pixels as border x w / image width (height alike),
which is right only while the crop is about the image's size. A crop larger than the image
(jitter or resize outwards; and always with letter_box, whose crop grows to the network's
aspect ratio) overstates it: the window cuts into the picture, and the truths of the cut objects reach past
the quarter into its neighbour. We measure the border at the crop's own scale (border x w /
crop width): the window starts where the picture starts, and truths stay in their quarter.
"""
from __future__ import annotations

import numpy as np

from .augment_ab import AbAugmentConfig, Crop, augment_ab
from .sequence_ab import sequential_plan

LOADER_THREADS = 6          # AlexeyAB's OpenCV build: args.threads = 6 per GPU
MOSAIC_MIN_OFFSET = 0.2     # the mosaic centre stays in the middle 60% of each axis


def thread_shares(n: int, threads: int = LOADER_THREADS) -> list[range]:
    """load_threads: thread t loads images [t*n/threads, (t+1)*n/threads)."""
    return [range(t * n // threads, (t + 1) * n // threads) for t in range(threads)]


def mosaic_shifts(crop: Crop, w, h, cut_x, cut_y):
    """(left, right, top, bottom) shifts, in network pixels: how far each quarter's window
    moves inwards to skip the border the crop added on that side (the flipped image's borders
    change sides), at most the window's slack."""
    pleft, pright = (crop.pright, crop.pleft) if crop.flip else (crop.pleft, crop.pright)
    sw, sh = crop.swidth, crop.sheight
    left = min(cut_x, max(0, -pleft * w // sw))
    top = min(cut_y, max(0, -crop.ptop * h // sh))
    right = min(w - cut_x, max(0, -pright * w // sw))
    bottom = min(h - cut_y, max(0, -crop.pbot * h // sh))
    return left, right, top, bottom


def paste_quarter(out, ai, q, cut_x, cut_y, shifts):
    """Copy quarter q (0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right) of the mosaic
    `out` (3, h, w) from the augmented image `ai`."""
    left, right, top, bottom = shifts
    h, w = out.shape[1:]
    ys = slice(h - cut_y - bottom, h - bottom) if q < 2 else slice(top, top + h - cut_y)
    xs = slice(w - cut_x - right, w - right) if q in (0, 2) else slice(left, left + w - cut_x)
    oy = slice(0, cut_y) if q < 2 else slice(cut_y, h)
    ox = slice(0, cut_x) if q in (0, 2) else slice(cut_x, w)
    out[:, oy, ox] = ai[:, ys, xs]


def _count(truth) -> int:
    """Truth rows in use: up to the first with x == 0, as AlexeyAB counts them."""
    zero = np.flatnonzero(truth[:, 0] == 0)
    return int(zero[0]) if len(zero) else len(truth)


def blend_truth(truth, new) -> None:
    """blend_truth (mixup): `new`'s boxes appended after `truth`'s (x, y, w, h, class), as
    many as fit."""
    k = _count(truth)
    rows = new[:_count(new)][:len(truth) - k]
    truth[k:k + len(rows), :5] = rows[:, :5]


def blend_truth_mosaic(truth, new, w, h, cut_x, cut_y, q, shifts, mosaic_bound=False):
    """blend_truth_mosaic: `new` (truths relative to the quarter's full image) moved to the
    quarter's place on the canvas and appended to `truth`. Corners are whole pixels (C's
    truncation). Without mosaic_bound a box crossing the canvas edge is cut there; with it, at
    its quarter's edges. Boxes left under a pixel, or not inside the canvas, are dropped.
    The track id is not carried (0), as in AlexeyAB's."""
    left_s, right_s, top_s, bot_s = shifts
    k = _count(truth)
    b = new[:_count(new)][:len(truth) - k]
    if not len(b):
        return
    f32 = np.float32
    xb, yb, wb, hb = (b[:, j].copy() for j in range(4))
    xb += f32(-(w - cut_x - right_s) / w) if q in (0, 2) else f32((cut_x - left_s) / w)
    yb += f32(-(h - cut_y - bot_s) / h) if q < 2 else f32((cut_y - top_s) / h)

    def corners():
        return (np.trunc((xb - wb / 2) * w), np.trunc((xb + wb / 2) * w),
                np.trunc((yb - hb / 2) * h), np.trunc((yb + hb / 2) * h))

    left, right, top, bot = corners()
    if mosaic_bound:
        x0, x1 = (0, cut_x) if q in (0, 2) else (cut_x, w)
        y0, y1 = (0, cut_y) if q < 2 else (cut_y, h)
        left, right = np.maximum(left, x0), np.minimum(right, x1)
        top, bot = np.maximum(top, y0), np.minimum(bot, y1)
        xb, wb = ((right + left) / 2 / w).astype(f32), ((right - left) / w).astype(f32)
        yb, hb = ((bot + top) / 2 / h).astype(f32), ((bot - top) / h).astype(f32)
    else:
        dl = np.where(left < 0, left / w, 0).astype(f32)          # move the centre and
        dr = np.where(right > w, (right - w) / w, 0).astype(f32)  # size so the box ends at
        dt = np.where(top < 0, top / h, 0).astype(f32)            # the canvas edge
        db = np.where(bot > h, (bot - h) / h, 0).astype(f32)
        xb, wb = xb - dl / 2 - dr / 2, wb + dl - dr
        yb, hb = yb - dt / 2 - db / 2, hb + dt - db
        left, right, top, bot = corners()
    keep = ((left >= 0) & (right <= w) & (top >= 0) & (bot <= h) & (wb > 0) & (wb < 1)
            & (hb > 0) & (hb < 1) & (xb > 0) & (xb < 1) & (yb > 0) & (yb < 1)
            & (wb > f32(1 / w)) & (hb > f32(1 / h)))
    rows = np.column_stack([xb, yb, wb, hb, b[:, 4]])[keep]
    truth[k:k + len(rows), :5] = rows
    truth[k:k + len(rows), 5:] = 0


def load_data_detection_ab(rng, draw, n: int, w: int, h: int, a: AbAugmentConfig,
                           positions=None, image_rng=None, pair_rng=None, track=None,
                           threads=None):
    """A batch of n images at w x h as AlexeyAB's loader makes it. draw(rng) gives the next
    random training image: (image (3, ih, iw) float32, boxes (k, 5) [x, y, w, h, class],
    track id base). Returns X (n, 3, h, w) float32 and truths (n, max_boxes * 6) float32: of
    the images at `positions` of the batch only, if given (a data-parallel rank's share). The
    mosaic / mixup choice of each loader thread's share comes from rng; every image's draws
    from image_rng(position) if given, else from rng, image after image. With a.contrastive,
    the two images of a pair (a thread share's positions 2k, 2k+1, get_random_paths_custom)
    draw their pictures and their common augmentation from pair_rng(first position). With
    a.track, `track` (a sequence_ab.TrackSource) gives the pictures, in sequences through the
    list, and each share's common augmentation (draw is not used). `threads`: the loader
    threads sharing the batch, if not a.threads (track=1: the sequential subdivisions)."""
    positions = range(n) if positions is None else positions
    if a.contrastive and pair_rng is None and not a.track:
        raise ValueError("contrastive=1 needs pair_rng, the generator of each image pair")
    if a.track and track is None:
        raise ValueError("track=1 needs a TrackSource, the list the sequences run through")
    shares = thread_shares(n, threads or a.threads or LOADER_THREADS)
    first = {p: p - (p - share.start) % 2 for share in shares for p in share}
    owner = {p: share.start for share in shares for p in share}
    X = np.zeros((len(positions), 3, h, w), np.float32)
    T = np.zeros((len(positions), a.max_boxes, a.truth_size), np.float32)
    modes = np.zeros(n, np.int64)
    share_modes = [a.mixup if rng.integers(2) else 0 for _ in shares]
    for share, m in zip(shares, share_modes):
        modes[share.start:share.stop] = m
    plan = None
    if a.track:
        plan = sequential_plan(shares, [m + 1 if m else 1 for m in share_modes], track.m,
                               a.mini_batch, a.augment_speed, a.contrastive, track.paths_rng)
    mode = modes[list(positions)]
    for i, position in enumerate(positions):
        if image_rng is not None:
            rng = image_rng(position)
        prng = pair_rng(first[position]) if a.contrastive and not a.track else None
        src = rng if prng is None else prng        # where the pictures are drawn

        def picture(k):
            """Picture k of this image (mosaic quarter, mixup's second): its pixels, boxes,
            track id base, and the generator of its share's common augmentation (track=1)."""
            if plan is None:
                return (*draw(src), None)
            return (*track.load(plan[position][k]), track.augment_rng(owner[position], k))

        if mode[i] == 3:
            cut_x = int(rng.integers(int(w * MOSAIC_MIN_OFFSET), int(w * (1 - MOSAIC_MIN_OFFSET)) + 1))
            cut_y = int(rng.integers(int(h * MOSAIC_MIN_OFFSET), int(h * (1 - MOSAIC_MIN_OFFSET)) + 1))
            for q in range(4):
                im, boxes, track_base, trng = picture(q)
                ai, truth, crop = augment_ab(rng, im, boxes, track_base, w, h, a, quarter=q,
                                             pair_rng=prng, track_rng=trng)
                s = mosaic_shifts(crop, w, h, cut_x, cut_y)
                paste_quarter(X[i], ai, q, cut_x, cut_y, s)
                blend_truth_mosaic(T[i], truth, w, h, cut_x, cut_y, q, s, a.mosaic_bound)
            continue
        im, boxes, track_base, trng = picture(0)
        X[i], T[i], _ = augment_ab(rng, im, boxes, track_base, w, h, a, pair_rng=prng,
                                   track_rng=trng)
        if mode[i] == 1:
            im, boxes, track_base, trng = picture(1)
            ai, truth, _ = augment_ab(rng, im, boxes, track_base, w, h, a, pair_rng=prng,
                                      track_rng=trng)
            X[i] = 0.5 * ai + 0.5 * X[i]
            blend_truth(T[i], truth)
    return X, T.reshape(len(positions), -1)
