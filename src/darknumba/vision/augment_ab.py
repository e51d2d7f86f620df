"""AlexeyAB's detection augmentation for one image (its OpenCV build: `data.c`
`load_data_detection`, `fill_truth_detection`, `correct_boxes`; `image_opencv.cpp`
`image_data_augmentation`), following its rules with numpy and numba, not its bits (it draws
with `rand()` and works on 8-bit OpenCV images; we draw from a seeded numpy Generator and work
on float32 CHW images in [0, 1]). vision/mosaic_ab.py puts images together (mosaic, mixup).

The jitter crop rule: the crop window is the image with each side moved by up to jitter x its
size (in or out: outside the image the crop reads the image's mean colour), then, with
`resize` (the [yolo] key) != 1, each side moves again so that the window's size ranges from
1/resize to resize times the image's (one draw for left and top, another for right and
bottom); letter_box widens the window to the
network's aspect ratio so the image keeps its own. The window is resized to w x h (bilinear,
OpenCV's pixel centres, whatever the aspect ratio), flipped, shifted in HSV, blurred, noised.
Truths are 6 floats per box: x, y, w, h, class, track id.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..errors import CfgError
from .augment import hsv_to_rgb, rand_scale
from .sequence_ab import SequentialSubdivisions

TRUTH_SIZE = 6          # x, y, w, h, class, track id


@dataclass
class AbAugmentConfig:
    """What AlexeyAB's train_detector hands load_data_detection: jitter and resize from the
    last [yolo] layer, the rest from [net]."""
    jitter: float = 0.2
    resize: float = 1.0           # [yolo] resize: crop scale drawn in [1/resize, resize]
    hue: float = 0.0
    saturation: float = 1.0
    exposure: float = 1.0
    flip: bool = True
    blur: int = 0                 # 1: blur background or whole image; > 1: kernel size
    gaussian_noise: int = 0       # standard deviation in 8-bit levels (0..127)
    mixup: int = 0                # 0: one image; 1: mixup (2 images); 3: mosaic (4 images)
    letter_box: bool = False
    mosaic_bound: bool = False    # clip mosaic truths to their own quarter
    max_boxes: int = 200
    truth_size: int = TRUTH_SIZE
    # [net] contrastive=1: images come in pairs of one picture (positions 2k, 2k+1 of a loader
    # thread's share, get_random_paths_custom), sharing their crop and flip unless
    # contrastive_jit_flip, their hue, saturation and exposure unless contrastive_color
    contrastive: bool = False
    contrastive_jit_flip: bool = False
    contrastive_color: bool = False
    threads: int | None = None    # loader threads sharing a batch (None: 6; contrastive=1:
                                  # at most mini-batch / 2, so that each holds whole pairs)
    # [net] track=1 (vision/sequence_ab.py): each thread's images are mini_batch sequences
    # stepping through the list at a speed in 1..augment_speed, augmented alike; the threads
    # are `sequential` (sequential_subdivisions, by iteration)
    track: bool = False
    augment_speed: int = 2
    mini_batch: int = 1
    sequential: SequentialSubdivisions | None = None

    @classmethod
    def from_network(cls, net, log=None):
        """AlexeyAB's parser turns mosaic/cutmix/mixup into one mode (mosaic wins over mixup;
        cutmix is for classifiers: load_data_detection drops it with a message, as here)."""
        if net.track and net.sequential_subdivisions < 0:
            raise CfgError(f"{net.cfg_path}: [net] sequential_subdivisions="
                           f"{net.sequential_subdivisions}: expected 0 (= subdivisions) to "
                           f"subdivisions={net.subdivisions}")
        last = [l for l in net.layers if l.detector_head][-1]
        mode = int(net.mixup)
        if net.cutmix and not net.mosaic:
            mode = 0
        if net.mosaic:
            mode = 3
        if net.cutmix and log is not None:
            log("cutmix=1 is for classifiers: detector training ignores it (as AlexeyAB's does)")
        return cls(jitter=float(getattr(last, "jitter", 0.2)),
                   resize=float(getattr(last, "resize_range", 1.0)),
                   hue=float(net.hue), saturation=float(net.saturation),
                   exposure=float(net.exposure), flip=bool(net.flip),
                   blur=int(net.blur),
                   gaussian_noise=int(net.gaussian_noise), mixup=mode,
                   letter_box=bool(net.letter_box),
                   mosaic_bound=bool(net.mosaic_bound),
                   max_boxes=int(getattr(last, "max_boxes", 200)),
                   truth_size=int(getattr(last, "truth_size", TRUTH_SIZE)),
                   contrastive=bool(net.contrastive),
                   contrastive_jit_flip=bool(net.contrastive_jit_flip),
                   contrastive_color=bool(net.contrastive_color),
                   threads=max(1, min(6, net.batch // 2)) if net.contrastive else None,
                   track=bool(net.track), augment_speed=int(net.augment_speed),
                   mini_batch=max(1, net.batch // net.time_steps),
                   sequential=SequentialSubdivisions.from_network(net) if net.track else None)


@dataclass
class Crop:
    """The crop window in source pixels: sides moved in by pleft/pright/ptop/pbot (negative:
    out, reading the mean colour); swidth x sheight is what is resized to the network size."""
    pleft: int
    pright: int
    ptop: int
    pbot: int
    swidth: int
    sheight: int
    flip: bool = False


def _between(lo, hi, r):
    """rand_precalc_random: lo + r * (hi - lo) for a draw r in [0, 1), the bounds in order."""
    lo, hi = min(lo, hi), max(lo, hi)
    return r * (hi - lo) + lo


def jitter_crop(rng, ow, oh, w, h, a: AbAugmentConfig, quarter: int | None = None,
                shared=None, track=None) -> Crop:
    """load_data_detection's crop window for an ow x oh image on a w x h network. `quarter`
    (0..3: top-left, top-right, bottom-left, bottom-right) is the mosaic quarter the image
    goes to: half the time the window's outer sides are put on the image's edges (AlexeyAB's
    "move each 2nd image to the corner"), so that the quarter shows mostly picture.
    C truncates each side to an int after every step; so do we. `shared`: where the side
    jitters and the flip are drawn instead of rng (a contrastive pair's common draws);
    `track`: where the scale draws are too (track=1: a thread share's common draws)."""
    dw, dh = int(ow * a.jitter), int(oh * a.jitter)
    down = 1 / a.resize if a.resize > 1 else a.resize
    up = 1 / a.resize if a.resize < 1 else a.resize
    min_rdw, min_rdh = int(ow * (1 - 1 / down) / 2), int(oh * (1 - 1 / down) / 2)   # <= 0
    max_rdw, max_rdh = int(ow * (1 - 1 / up) / 2), int(oh * (1 - 1 / up) / 2)       # >= 0
    src = rng if track is None else track
    rs1, rs2 = src.random(), src.random()
    src = src if shared is None else shared
    r1, r2, r3, r4 = src.random(4)
    flip = bool(a.flip and src.integers(2))
    pleft, pright = int(_between(-dw, dw, r1)), int(_between(-dw, dw, r2))
    ptop, pbot = int(_between(-dh, dh, r3)), int(_between(-dh, dh, r4))
    hi_w, hi_h = (0, 0) if a.resize < 1 else (max_rdw, max_rdh)
    pleft = int(pleft + _between(min_rdw, hi_w, rs1))
    pright = int(pright + _between(min_rdw, hi_w, rs2))
    ptop = int(ptop + _between(min_rdh, hi_h, rs1))
    pbot = int(pbot + _between(min_rdh, hi_h, rs2))
    if a.letter_box:
        net_ar = w / h
        if (ow / oh) / net_ar > 1:      # wider than the network: grow the window's height
            grow = (ow / net_ar - oh) / 2
            ptop, pbot = int(ptop - grow), int(pbot - grow)
        else:
            grow = (oh * net_ar - ow) / 2
            pleft, pright = int(pleft - grow), int(pright - grow)
    if quarter is not None and rng.integers(2) == 0:
        # the window's outer sides (away from the mosaic centre, mirrored when the image will
        # be flipped) move onto the image's edges; the centre-facing sides take all the jitter
        right = (quarter in (0, 2)) != flip
        if right:
            pleft, pright = 0, pright + pleft
        else:
            pleft, pright = pleft + pright, 0
        if quarter in (0, 1):
            ptop, pbot = 0, pbot + ptop
        else:
            ptop, pbot = ptop + pbot, 0
    swidth, sheight = ow - pleft - pright, oh - ptop - pbot
    if swidth <= 0 or sheight <= 0 or ow - pleft <= 0 or oh - ptop <= 0:
        # AlexeyAB's reset (pright and pbot are left as they were: its mosaic shift reads them)
        swidth, sheight, pleft, ptop = ow, oh, 0, 0
    return Crop(pleft, pright, ptop, pbot, swidth, sheight, flip)


# -- truths ------------------------------------------------------------------------------------
def track_id_base(label_file: str) -> int:
    """read_boxes' track ids start at (djb2 hash of the label path mod 4000) x 4000; each box
    adds its line index."""
    hsh = 5381
    for ch in label_file.encode():
        hsh = (hsh * 33 + (ch if ch < 128 else ch - 256)) % (1 << 64)
    return (hsh % 4000) * 4000


def fill_truth_ab(rng, boxes, track_base, crop: Crop, ow, oh, w, h, max_boxes):
    """fill_truth_detection: shuffle the boxes, move them into the crop window (flipped,
    clipped to [0, 1]), keep the first max_boxes (a cut before the filter, as AlexeyAB's), then
    drop boxes under one network pixel wide or high and boxes whose centre left the image.
    boxes: (n, 5) [x, y, w, h, class] float32 as read. Returns (truth (max_boxes, 6) float32,
    the smallest side of a kept box in network pixels (0 without boxes))."""
    b = np.asarray(boxes, np.float32).reshape(-1, 5)
    ids = np.arange(len(b), dtype=np.int64) + track_base
    order = rng.permutation(len(b))
    b, ids = b[order], ids[order]
    x, y, bw, bh = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    # correct_boxes: a box at (0, 0) or wholly outside the image is an error it flags
    bad = ((x == 0) & (y == 0)) | (x + bw / 2 < 0) | (y + bh / 2 < 0) | (x - bw / 2 > 1) \
        | (y - bh / 2 > 1)
    sx, sy = np.float32(ow / crop.swidth), np.float32(oh / crop.sheight)
    dx = np.float32((crop.pleft / ow) / (crop.swidth / ow))
    dy = np.float32((crop.ptop / oh) / (crop.sheight / oh))
    left, right = (x - bw / 2) * sx - dx, (x + bw / 2) * sx - dx
    top, bottom = (y - bh / 2) * sy - dy, (y + bh / 2) * sy - dy
    if crop.flip:
        left, right = 1 - right, 1 - left
    left, right, top, bottom = (np.clip(v, 0, 1) for v in (left, right, top, bottom))
    nx, ny = (left + right) / 2, (top + bottom) / 2
    nw, nh = np.clip(right - left, 0, 1), np.clip(bottom - top, 0, 1)
    n = min(len(b), max_boxes)
    keep = ~bad[:n] & (nw[:n] >= np.float32(1 / w)) & (nh[:n] >= np.float32(1 / h)) \
        & (nx[:n] > 0) & (nx[:n] <= 1) & (ny[:n] > 0) & (ny[:n] <= 1)
    rows = np.column_stack([nx[:n], ny[:n], nw[:n], nh[:n], b[:n, 4],
                            ids[:n].astype(np.float32)])[keep]
    truth = np.zeros((max_boxes, TRUTH_SIZE), np.float32)
    truth[:len(rows)] = rows
    min_side = int(min(rows[:, 2].min() * w, rows[:, 3].min() * h)) if len(rows) else 0
    return truth, min_side


# -- pixels ------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _linear_taps(n_out, n_src, offset, n_img):
    """OpenCV INTER_LINEAR along one axis: for each output pixel the two source pixels (in
    image coordinates: window start `offset` added; -1 where that pixel is outside the image)
    and the second one's weight. src = (dst + .5) * n_src / n_out - .5, clamped to the window."""
    i0 = np.empty(n_out, np.int64)
    i1 = np.empty(n_out, np.int64)
    wt = np.empty(n_out, np.float32)
    for d in range(n_out):
        f = (d + 0.5) * n_src / n_out - 0.5
        a = int(np.floor(f))
        t = f - a
        if a < 0:
            a, t = 0, 0.0
        if a >= n_src - 1:
            a, t = n_src - 1, 0.0
        b = min(a + 1, n_src - 1)
        a += offset
        b += offset
        i0[d] = a if 0 <= a < n_img else -1
        i1[d] = b if 0 <= b < n_img else -1
        wt[d] = t
    return i0, i1, wt


@njit(cache=True, nogil=True)
def _crop_resize_linear(im, pleft, ptop, swidth, sheight, fill, out):
    """The crop window (source pixels outside the image read `fill`, per channel) resized to
    out's h x w, bilinear as OpenCV's INTER_LINEAR."""
    c, ih, iw = im.shape
    _, h, w = out.shape
    y0, y1, wy = _linear_taps(h, sheight, ptop, ih)
    x0, x1, wx = _linear_taps(w, swidth, pleft, iw)
    for k in range(c):
        f = fill[k]
        for y in range(h):
            for x in range(w):
                p00 = im[k, y0[y], x0[x]] if y0[y] >= 0 and x0[x] >= 0 else f
                p01 = im[k, y0[y], x1[x]] if y0[y] >= 0 and x1[x] >= 0 else f
                p10 = im[k, y1[y], x0[x]] if y1[y] >= 0 and x0[x] >= 0 else f
                p11 = im[k, y1[y], x1[x]] if y1[y] >= 0 and x1[x] >= 0 else f
                out[k, y, x] = ((1 - wy[y]) * ((1 - wx[x]) * p00 + wx[x] * p01)
                                + wy[y] * ((1 - wx[x]) * p10 + wx[x] * p11))


@njit(cache=True, nogil=True)
def _distort_hsv_ab(im, dhue, dsat, dexp):
    """AlexeyAB's HSV shift, in place: s *= dsat and v *= dexp saturating at 1, h += dhue
    (turns). Its 8-bit hue channel saturates at 0 and 255 (= 255/180 turns) and OpenCV's
    HSV to RGB wraps hues past a turn: a negative shift stops at red, a positive one wraps."""
    _, hh, ww = im.shape
    hue_max = np.float32(255.0 / 180.0)
    for j in range(hh):
        for i in range(ww):
            r, g, b = im[0, j, i], im[1, j, i], im[2, j, i]
            mx = max(r, max(g, b))
            mn = min(r, min(g, b))
            d = mx - mn
            v = mx
            s = d / mx if mx > 0 else np.float32(0.0)
            if d == 0:
                hue = np.float32(0.0)
            elif r == mx:
                hue = (g - b) / d
            elif g == mx:
                hue = 2 + (b - r) / d
            else:
                hue = 4 + (r - g) / d
            hue = hue / 6
            if hue < 0:
                hue += 1
            s = min(s * dsat, np.float32(1.0))
            v = min(v * dexp, np.float32(1.0))
            hue = min(max(hue + dhue, np.float32(0.0)), hue_max)
            if hue >= 1:
                hue -= 1
            r, g, b = hsv_to_rgb(hue, s, v)
            im[0, j, i], im[1, j, i], im[2, j, i] = r, g, b


def gaussian_kernel(ksize: int) -> np.ndarray:
    """cv::getGaussianKernel(ksize, 0): OpenCV's fixed kernels up to 9 taps, else sigma =
    0.3 ((ksize - 1) / 2 - 1) + 0.8."""
    fixed = {1: [1.0], 3: [0.25, 0.5, 0.25], 5: [0.0625, 0.25, 0.375, 0.25, 0.0625],
             7: [0.03125, 0.109375, 0.21875, 0.28125, 0.21875, 0.109375, 0.03125],
             9: [0.015625, 0.05078125, 0.1171875, 0.19921875, 0.234375, 0.19921875,
                 0.1171875, 0.05078125, 0.015625]}
    if ksize in fixed:
        return np.array(fixed[ksize], np.float32)
    sigma = 0.3 * ((ksize - 1) * 0.5 - 1) + 0.8
    x = np.arange(ksize) - (ksize - 1) / 2
    k = np.exp(-x * x / (2 * sigma * sigma))
    return (k / k.sum()).astype(np.float32)


def gaussian_blur(im, ksize: int) -> np.ndarray:
    """cv::GaussianBlur(ksize x ksize, sigma from ksize), borders reflected without repeating
    the edge pixel (BORDER_REFLECT_101, numpy's "reflect"); separable, one pass per tap."""
    k = gaussian_kernel(ksize)
    r = ksize // 2
    c, h, w = im.shape
    if r >= min(h, w):                      # reflection needs the border inside the image
        r = min(h, w) - 1
        k = gaussian_kernel(2 * r + 1)
    p = np.pad(im, ((0, 0), (r, r), (0, 0)), mode="reflect")
    rows = sum(k[t] * p[:, t:t + h] for t in range(2 * r + 1))
    p = np.pad(rows, ((0, 0), (0, 0), (r, r)), mode="reflect")
    return sum(k[t] * p[:, :, t:t + w] for t in range(2 * r + 1)).astype(np.float32)


def blur_image(im, blur: int, truth) -> np.ndarray:
    """image_data_augmentation's blur: 1 blurs the background only (17x17; the truth boxes
    keep their pixels); > 1 blurs the whole image with a (blur/2)*2+1 kernel."""
    if blur == 1:
        out = gaussian_blur(im, 17)
        h, w = im.shape[1:]
        for x, y, bw, bh in truth[truth[:, 0] != 0, :4]:     # at most max_boxes rectangles
            x0, y0 = int((x - bw / 2) * w), int((y - bh / 2) * h)
            x1, y1 = x0 + int(bw * w), y0 + int(bh * h)
            x0, y0 = max(x0, 0), max(y0, 0)
            out[:, y0:max(y0, y1), x0:max(x0, x1)] = im[:, y0:max(y0, y1), x0:max(x0, x1)]
        return out
    return gaussian_blur(im, (blur // 2) * 2 + 1)


def add_gaussian_noise(rng, im, sigma: int):
    """gaussian_noise: OpenCV's randn into an 8-bit image saturates negative draws to 0, so
    AlexeyAB's noise only brightens: + max(0, round(N(0, sigma))) / 255, clipped at 1."""
    sigma = min(max(sigma, 0), 127)
    noise = np.maximum(np.rint(rng.normal(0.0, sigma, im.shape)), 0) / 255
    np.minimum(im + noise.astype(np.float32), 1, out=im)


# -- one image ---------------------------------------------------------------------------------
def augment_ab(rng, im, boxes, track_base, w, h, a: AbAugmentConfig, quarter=None,
               pair_rng=None, track_rng=None):
    """One image as load_data_detection prepares it: returns (image (3, h, w) float32, truth
    (max_boxes, 6) float32, the Crop used). pair_rng (contrastive=1): the generator both
    images of a pair draw their common crop and colour from. track_rng (track=1): the one
    every image of a thread share draws its crop, flip, colour, blur and noise choice from
    (AlexeyAB's augmentation_calculated), in AlexeyAB's order; the mosaic corner move, the
    box shuffle and the noise's pixels stay each image's own (from rng)."""
    _, oh, ow = im.shape
    pair = pair_rng is not None and track_rng is None
    crop = jitter_crop(rng, ow, oh, w, h, a, quarter,
                       pair_rng if pair and not a.contrastive_jit_flip else None, track_rng)
    csrc = pair_rng if pair and not a.contrastive_color else rng
    csrc = csrc if track_rng is None else track_rng
    dhue = csrc.uniform(-a.hue, a.hue) if a.hue else 0.0
    dsat = rand_scale(csrc, a.saturation)
    dexp = rand_scale(csrc, a.exposure)
    choose = rng if track_rng is None else track_rng      # the blur and noise choices
    blur = 0
    if a.blur:
        blur = (0, 1, a.blur)[int(choose.integers(3))]  # none, background, AlexeyAB's `blur`
    noise = a.gaussian_noise if a.gaussian_noise and choose.integers(2) else 0
    truth, min_side = fill_truth_ab(rng, boxes, track_base, crop, ow, oh, w, h, a.max_boxes)
    if blur > 1 and min_side // 8 < blur:
        blur = min_side // 8                           # do not blur away the smallest object
    out = np.empty((3, h, w), np.float32)
    fill = im.reshape(3, -1).mean(axis=1).astype(np.float32)
    _crop_resize_linear(np.ascontiguousarray(im, dtype=np.float32), crop.pleft, crop.ptop,
                        crop.swidth, crop.sheight, fill, out)
    if crop.flip:
        out = np.ascontiguousarray(out[:, :, ::-1])
    if dsat != 1 or dexp != 1 or dhue != 0:
        _distort_hsv_ab(out, np.float32(dhue), np.float32(dsat), np.float32(dexp))
    if blur:
        out = blur_image(out, blur, truth)
    if noise:
        add_gaussian_noise(rng, out, noise)
    return out, truth, crop
