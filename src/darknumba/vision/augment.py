"""Darknet's detection augmentation (`data.c: load_data_detection`, `image.c: place_image`,
`random_distort_image`), one image at a time.

Images are float32 CHW in [0, 1] (Darknet's `image`). Boxes are float32 rows
[x, y, w, h, class], relative, centre-based. A `Placement` says where the image lands on the
network canvas: scaled to nw x nh and shifted by (dx, dy) pixels, then optionally flipped;
`correct_boxes` moves the boxes the same way, so truths always follow the image.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..detections import letterbox_size


@dataclass
class AugmentConfig:
    """What `load_data_detection` reads from the network: jitter from the last layer,
    hue/saturation/exposure from [net]."""
    jitter: float = 0.2           # aspect-ratio jitter, fraction of the image size
    hue: float = 0.0              # hue shift drawn from [-hue, hue] (hue is in turns, 0..1)
    saturation: float = 1.0       # saturation scaled by s or 1/s, s drawn from [1, saturation]
    exposure: float = 1.0         # value scaled the same way
    scale: tuple = (0.25, 2.0)    # Darknet's rand_uniform(.25, 2) for the placed size
    flip: bool = True             # random horizontal flip
    letterbox: bool = False       # keep aspect, no scale jitter, centred (deterministic)
    max_boxes: int = 90           # truth slots per image (the yolo layer's `max`)

    @classmethod
    def from_network(cls, net, **overrides):
        last = net.layers[-1]
        a = cls(jitter=float(getattr(last, "jitter", 0.2)), hue=float(net.hue),
                saturation=float(net.saturation), exposure=float(net.exposure),
                max_boxes=int(getattr(last, "max_boxes", 90)))
        for k, v in overrides.items():
            setattr(a, k, v)
        return a


@dataclass
class Placement:
    nw: float
    nh: float
    dx: float
    dy: float
    flip: bool = False


def rand_uniform(rng, lo: float, hi: float) -> float:
    """rand_uniform: a draw between lo and hi in either order (Darknet swaps them, so a negative
    jitter, hue or angle is its absolute value); the same draw as rng.uniform(lo, hi)."""
    if hi < lo:
        lo, hi = hi, lo
    return lo + (hi - lo) * rng.random()


def rand_scale(rng, s):
    """rand_scale: a factor in [1, s], inverted half the time."""
    lo, hi = (1.0, s) if s >= 1 else (s, 1.0)
    f = rng.uniform(lo, hi)
    return f if rng.integers(2) else 1.0 / f


def random_placement(rng, im_w, im_h, w, h, a: AugmentConfig) -> Placement:
    """load_data_detection's crop/translate: a jittered aspect ratio, a random scale, a random
    offset (the image may overhang the canvas, or leave grey borders)."""
    flip = bool(a.flip and rng.integers(2))
    if a.letterbox:
        p = letterbox_placement(im_w, im_h, w, h)
        p.flip = flip
        return p
    dw, dh = a.jitter * im_w, a.jitter * im_h
    new_ar = (im_w + rand_uniform(rng, -dw, dw)) / (im_h + rand_uniform(rng, -dh, dh))
    scale = rand_uniform(rng, *a.scale)
    if new_ar < 1:
        nh = scale * h
        nw = nh * new_ar
    else:
        nw = scale * w
        nh = nw / new_ar
    dx = rng.uniform(0, w - nw) if w > nw else rng.uniform(w - nw, 0)
    dy = rng.uniform(0, h - nh) if h > nh else rng.uniform(h - nh, 0)
    return Placement(nw, nh, dx, dy, flip)


def letterbox_placement(im_w, im_h, w, h) -> Placement:
    """letterbox_image's geometry: fit inside w x h keeping the aspect ratio, centred."""
    nw, nh = letterbox_size(im_w, im_h, w, h)
    return Placement(float(nw), float(nh), float((w - nw) // 2), float((h - nh) // 2))


# -- kernels -------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _place_image(im, w, h, dx, dy, canvas):
    """place_image: bilinear sample of `im` scaled to w x h written at (dx, dy) on `canvas`;
    pixels outside the source read 0 (get_pixel_extend), outside the canvas are dropped."""
    c, ih, iw = im.shape
    ch, cw = canvas.shape[1], canvas.shape[2]
    for k in range(c):
        for y in range(h):
            cy = y + dy
            if cy < 0 or cy >= ch:
                continue
            ry = (np.float32(y) / h) * ih
            iy = int(np.floor(ry))
            fy = ry - iy
            for x in range(w):
                cx = x + dx
                if cx < 0 or cx >= cw:
                    continue
                rx = (np.float32(x) / w) * iw
                ix = int(np.floor(rx))
                fx = rx - ix
                v = np.float32(0.0)
                for oy in range(2):
                    yy = iy + oy
                    if yy < 0 or yy >= ih:
                        continue
                    wy = fy if oy else 1 - fy
                    for ox in range(2):
                        xx = ix + ox
                        if xx < 0 or xx >= iw:
                            continue
                        wx = fx if ox else 1 - fx
                        v += wy * wx * im[k, yy, xx]
                canvas[k, cy, cx] = v


@njit(cache=True, inline="always")
def hsv_to_rgb(hue, s, v):
    """Darknet's hsv_to_rgb (also AlexeyAB's OpenCV conversion): hue in [0, 1); with s = 0
    every sector gives (v, v, v)."""
    h6 = hue * 6
    sector = int(np.floor(h6))
    f = h6 - sector
    p = v * (1 - s)
    q = v * (1 - s * f)
    t = v * (1 - s * (1 - f))
    if sector == 0:
        return v, t, p
    if sector == 1:
        return q, v, p
    if sector == 2:
        return p, v, t
    if sector == 3:
        return p, q, v
    if sector == 4:
        return t, p, v
    return v, p, q


@njit(cache=True, nogil=True)
def _distort_image(im, dhue, dsat, dexp):
    """distort_image: rgb_to_hsv, scale s and v, shift h (wrapping), hsv_to_rgb, clip to [0,1]."""
    _, hh, ww = im.shape
    for j in range(hh):
        for i in range(ww):
            r, g, b = im[0, j, i], im[1, j, i], im[2, j, i]
            mx = max(r, max(g, b))
            mn = min(r, min(g, b))
            delta = mx - mn
            v = mx
            if mx == 0:
                s = np.float32(0.0)
                hue = np.float32(0.0)
            else:
                s = delta / mx
                if delta == 0:
                    hue = np.float32(0.0)
                elif r == mx:
                    hue = (g - b) / delta
                elif g == mx:
                    hue = 2 + (b - r) / delta
                else:
                    hue = 4 + (r - g) / delta
                if hue < 0:
                    hue += 6
                hue = hue / 6
            s *= dsat
            v *= dexp
            hue += dhue
            if hue > 1:
                hue -= 1
            if hue < 0:
                hue += 1
            r, g, b = hsv_to_rgb(hue, s, v)
            im[0, j, i] = min(max(r, 0.0), 1.0)
            im[1, j, i] = min(max(g, 0.0), 1.0)
            im[2, j, i] = min(max(b, 0.0), 1.0)


# -- public --------------------------------------------------------------------------------------
def place_image(im, p: Placement, w: int, h: int) -> np.ndarray:
    """The network canvas (c, h, w) filled with 0.5, the image placed on it, flipped if asked."""
    canvas = np.full((im.shape[0], h, w), 0.5, dtype=np.float32)
    _place_image(np.ascontiguousarray(im, dtype=np.float32), int(p.nw), int(p.nh),
                 int(p.dx), int(p.dy), canvas)
    if p.flip:
        canvas = np.ascontiguousarray(canvas[:, :, ::-1])
    return canvas


def random_distort_image(rng, im, hue, saturation, exposure):
    """random_distort_image, in place. Skipped (bit-exact) when all three are neutral. An image
    of fewer than 3 channels (a grey `channels=1` network) has its first channel scaled by the
    exposure factor only, as AlexeyAB's distort_image does; a fourth channel is left alone."""
    dhue = rand_uniform(rng, -hue, hue) if hue else 0.0
    dsat = rand_scale(rng, saturation) if saturation != 1 else 1.0
    dexp = rand_scale(rng, exposure) if exposure != 1 else 1.0
    if dhue == 0 and dsat == 1 and dexp == 1:
        return im
    if im.shape[0] < 3:
        im[0] *= np.float32(dexp)
        np.clip(im, 0, 1, out=im)
        return im
    _distort_image(im, np.float32(dhue), np.float32(dsat), np.float32(dexp))
    return im


def correct_boxes(boxes, p: Placement, w: int, h: int) -> np.ndarray:
    """correct_boxes: move [x,y,w,h,class] rows with the placement (scale nw/w, nh/h; shift
    dx/w, dy/h; flip), clip the corners to [0,1], recompute centre and size. Float32 like C.
    The placement is taken as place_image draws it (whole pixels); Darknet passes the
    unrounded floats here, which puts its truths up to a pixel off the drawn image."""
    b = np.asarray(boxes, dtype=np.float32).reshape(-1, 5).copy()
    if not len(b):
        return b
    sx, sy = np.float32(int(p.nw) / w), np.float32(int(p.nh) / h)
    ox, oy = np.float32(int(p.dx) / w), np.float32(int(p.dy) / h)
    left = (b[:, 0] - b[:, 2] / 2) * sx + ox
    right = (b[:, 0] + b[:, 2] / 2) * sx + ox
    top = (b[:, 1] - b[:, 3] / 2) * sy + oy
    bottom = (b[:, 1] + b[:, 3] / 2) * sy + oy
    if p.flip:
        left, right = 1 - right, 1 - left
    left, right, top, bottom = (np.clip(v, 0, 1) for v in (left, right, top, bottom))
    b[:, 0] = (left + right) / 2
    b[:, 1] = (top + bottom) / 2
    b[:, 2] = np.clip(right - left, 0, 1)
    b[:, 3] = np.clip(bottom - top, 0, 1)
    return b


def fill_truth(boxes, max_boxes: int) -> np.ndarray:
    """fill_truth_detection's tail: keep at most max_boxes, drop boxes under .001 wide or high,
    lay out [x, y, w, h, class] per slot, zeros after the last box."""
    truth = np.zeros(max_boxes * 5, dtype=np.float32)
    b = boxes[:max_boxes]
    b = b[(b[:, 2] >= 0.001) & (b[:, 3] >= 0.001)]
    truth[:b.size] = b.reshape(-1)
    return truth


def augment_detection(rng, im, boxes, w: int, h: int, a: AugmentConfig):
    """One image of load_data_detection: place (crop/translate/scale), distort, flip, and the
    truths moved alike. Boxes are shuffled first (randomize_boxes) so max_boxes drops at random.
    Returns (canvas (c,h,w) float32, truth (max_boxes*5,) float32)."""
    p = random_placement(rng, im.shape[2], im.shape[1], w, h, a)
    canvas = place_image(im, Placement(p.nw, p.nh, p.dx, p.dy, False), w, h)
    random_distort_image(rng, canvas, a.hue, a.saturation, a.exposure)
    if p.flip:
        canvas = np.ascontiguousarray(canvas[:, :, ::-1])
    b = np.asarray(boxes, dtype=np.float32).reshape(-1, 5)
    b = b[rng.permutation(len(b))]
    return canvas, fill_truth(correct_boxes(b, p, w, h), a.max_boxes)
