"""AlexeyAB's detection augmentation (vision/augment_ab.py, mosaic_ab.py): the crop rule, the
truth transforms (fill_truth_detection, blend_truth_mosaic) against hand-computed boxes, the
pixel operations against OpenCV / colorsys, and images that keep their truths on their objects
through mosaic, letter_box, flip and mixup."""
import colorsys

import cv2
import numpy as np
import pytest

from darknumba.vision.augment_ab import (AbAugmentConfig, Crop, _crop_resize_linear,
                                         _distort_hsv_ab, add_gaussian_noise, augment_ab,
                                         blur_image, fill_truth_ab, gaussian_blur, jitter_crop,
                                         track_id_base)
from darknumba.vision.mosaic_ab import (blend_truth, blend_truth_mosaic, load_data_detection_ab,
                                        mosaic_shifts, paste_quarter, thread_shares)

RNG = np.random.default_rng


class StubRng:
    """Hands out given numbers in the order jitter_crop draws them."""

    def __init__(self, randoms, ints):
        self.randoms, self.ints = list(randoms), list(ints)

    def random(self, n=None):
        if n is None:
            return self.randoms.pop(0)
        return np.array([self.randoms.pop(0) for _ in range(n)])

    def integers(self, n):
        return self.ints.pop(0)


# -- the crop rule -----------------------------------------------------------------------------
def test_jitter_and_resize_crop_by_hand():
    a = AbAugmentConfig(jitter=0.3, resize=1.5, flip=True)
    # draws: resize r1, r2; jitter r1..r4; flip
    c = jitter_crop(StubRng([0.5, 0.0, 0.5, 0.25, 0.75, 0.0], [1]), 100, 80, 64, 64, a)
    # dw 30, dh 24; resize range -25..16 (w), -20..13 (h); each side truncated after each step
    # pleft int(-30 + .5*60) = 0 -> int(0 + (-25 + .5*41)) = -4; pright int(-15) + -25 = -40
    # ptop int(-24 + .75*48) = 12 -> int(12 + (-20 + .5*33)) = 8; pbot -24 + -20 = -44
    assert (c.pleft, c.pright, c.ptop, c.pbot, c.flip) == (-4, -40, 8, -44, True)
    assert (c.swidth, c.sheight) == (144, 116)


def test_crop_without_jitter_is_the_image_and_letter_box_squares_it():
    a = AbAugmentConfig(jitter=0, resize=1, flip=False)
    c = jitter_crop(RNG(0), 100, 80, 64, 64, a)
    assert (c.pleft, c.pright, c.ptop, c.pbot, c.swidth, c.sheight) == (0, 0, 0, 0, 100, 80)
    a.letter_box = True
    c = jitter_crop(RNG(0), 200, 100, 64, 64, a)       # wide: 50 rows of border above, below
    assert (c.ptop, c.pbot, c.swidth, c.sheight) == (-50, -50, 200, 200)
    c = jitter_crop(RNG(0), 60, 120, 128, 64, a)       # tall on a 2:1 network
    assert (c.pleft, c.pright, c.swidth, c.sheight) == (-90, -90, 240, 120)


@pytest.mark.parametrize("quarter, flip, expect", [
    (0, False, (0, -20, 0, -10)), (1, False, (-20, 0, 0, -10)),
    (2, False, (0, -20, -10, 0)), (3, True, (0, -20, -10, 0))])
def test_mosaic_corner_rule(quarter, flip, expect):
    """Half the time a mosaic image's window keeps its outer sides on the image's edges; all
    the jitter goes to the sides facing the mosaic centre (mirrored for a flipped image)."""
    a = AbAugmentConfig(jitter=0.1, resize=1, flip=True)
    # jitter draws .25 for each side: pleft = pright = ptop = pbot = int(-10 + .25 * 20) = -5
    # on 200 x 100 -> dw 20, dh 10: sides -10 and -5 ... then the corner coin (0: move)
    c = jitter_crop(StubRng([0, 0, 0.25, 0.25, 0.25, 0.25], [int(flip), 0]), 200, 100, 64, 64,
                    a, quarter)
    assert (c.pleft, c.pright, c.ptop, c.pbot) == expect


# -- truths ------------------------------------------------------------------------------------
def test_fill_truth_moves_boxes_into_the_crop_by_hand():
    boxes = np.array([[0.5, 0.5, 0.2, 0.4, 2], [0.3, 0.5, 0.2, 0.4, 1]], np.float32)
    crop = Crop(pleft=10, pright=10, ptop=-5, pbot=-5, swidth=80, sheight=60)
    t, min_side = fill_truth_ab(RNG(0), boxes, 1000, crop, 100, 50, 64, 64, 200)
    rows = {int(r[4]): r for r in t[:2]}
    # box 0: x 40..60 px -> (30..50)/80, y 15..35 px -> (20..40)/60
    np.testing.assert_allclose(rows[2][:4], [0.5, 0.5, 0.25, 1 / 3], atol=1e-6)
    np.testing.assert_allclose(rows[1][:4], [0.25, 0.5, 0.25, 1 / 3], atol=1e-6)
    assert {rows[2][5], rows[1][5]} == {1000, 1001}       # track id: base + line index
    assert t[2:].sum() == 0
    assert min_side == int(t[:2, 2].min() * 64) in (15, 16)   # 0.25 * 64, truncated
    crop.flip = True
    t, _ = fill_truth_ab(RNG(0), boxes, 0, crop, 100, 50, 64, 64, 200)
    rows = {int(r[4]): r for r in t[:2]}
    np.testing.assert_allclose(rows[1][:4], [0.75, 0.5, 0.25, 1 / 3], atol=1e-6)


def test_fill_truth_cuts_after_the_shuffle_then_filters():
    """max_boxes is taken before small boxes are dropped (AlexeyAB's order): a dropped box
    still uses a slot. A box at (0, 0) is an annotation error and dropped."""
    boxes = np.array([[0.2, 0.2, 0.1, 0.1, 0], [0.5, 0.5, 0.001, 0.2, 1],
                      [0.8, 0.8, 0.1, 0.1, 2], [0, 0, 0.1, 0.1, 0]], np.float32)
    full = Crop(0, 0, 0, 0, 100, 100)
    t, _ = fill_truth_ab(RNG(0), boxes, 0, full, 100, 100, 64, 64, 200)
    assert sorted(t[:2, 4]) == [0, 2] and t[2:].sum() == 0
    counts = set()
    for seed in range(20):
        t, _ = fill_truth_ab(RNG(seed), boxes, 0, full, 100, 100, 64, 64, 2)
        kept = t[t[:, 2] > 0]
        assert set(kept[:, 4]) <= {0, 2}
        counts.add(len(kept))
    assert counts == {0, 1, 2}


def test_track_id_base_is_djb2_of_the_label_path():
    assert track_id_base("a") == ((5381 * 33 + 97) % 4000) * 4000
    h = 5381
    for ch in b"data/labels/x.txt":
        h = h * 33 + ch
    assert track_id_base("data/labels/x.txt") == (h % 2**64 % 4000) * 4000


def test_blend_truth_mosaic_by_hand():
    w = h = 64
    cut_x, cut_y = 16, 32
    T = np.zeros((10, 6), np.float32)
    T[0] = [0.9, 0.9, 0.05, 0.05, 1, 0]                   # an earlier quarter's box stays first
    new = np.zeros((10, 6), np.float32)
    new[0] = [0.875, 0.75, 0.25, 0.25, 2, 77]             # ai px x 48..64, y 40..56
    new[1] = [0.75, 0.75, 0.25, 0.25, 0, 78]              # x 40..56: crosses the canvas edge
    new[2] = [0.125, 0.75, 0.25, 0.25, 1, 79]             # x 0..16: outside the window, gone
    blend_truth_mosaic(T, new, w, h, cut_x, cut_y, 0, (0, 0, 0, 0))
    # quarter 0 shows ai's x in [48, 64), y in [32, 64): x -= 48/64, y -= 32/64
    np.testing.assert_array_equal(T[1], [0.125, 0.25, 0.25, 0.25, 2, 0])
    # left edge at -8 px: the centre moves right by 4 px, the width loses 8 px
    np.testing.assert_array_equal(T[2], [0.0625, 0.25, 0.125, 0.25, 0, 0])
    assert T[3:].sum() == 0
    # quarter 3 with shifts (left 4, top 2): x += (16 - 4)/64, y += (32 - 2)/64
    new[:] = 0
    new[0] = [0.125, 0.125, 0.125, 0.125, 1, 5]
    blend_truth_mosaic(T, new, w, h, cut_x, cut_y, 3, (4, 0, 2, 0))
    np.testing.assert_array_equal(T[3], [0.3125, 0.59375, 0.125, 0.125, 1, 0])
    # a quarter-0 box reaching past cut_x (x 4..20 px): cut there only with mosaic_bound
    new[0] = [0.9375, 0.75, 0.25, 0.25, 1, 0]
    U = np.zeros((4, 6), np.float32)
    blend_truth_mosaic(U, new, w, h, cut_x, cut_y, 0, (0, 0, 0, 0), mosaic_bound=True)
    np.testing.assert_array_equal(U[0, :4], [10 / 64, 0.25, 12 / 64, 0.25])
    V = np.zeros((4, 6), np.float32)
    blend_truth_mosaic(V, new, w, h, cut_x, cut_y, 0, (0, 0, 0, 0))
    np.testing.assert_array_equal(V[0, :4], [0.1875, 0.25, 0.25, 0.25])


def test_blend_truth_appends_the_second_images_boxes():
    T = np.zeros((3, 6), np.float32)
    T[0] = [0.5, 0.5, 0.1, 0.1, 0, 9]
    new = np.zeros((3, 6), np.float32)
    new[:3] = [[0.2, 0.2, 0.1, 0.1, 1, 7], [0.3, 0.3, 0.1, 0.1, 2, 8], [0.4, 0.4, .1, .1, 0, 1]]
    blend_truth(T, new)
    np.testing.assert_array_equal(T[:, 4], [0, 1, 2])       # two fit, the third is cut
    assert T[0, 5] == 9 and T[1, 5] == 0


def test_mosaic_shifts_and_paste_by_hand():
    crop = Crop(pleft=-20, pright=10, ptop=-5, pbot=-40, swidth=110, sheight=145)
    # border x w / crop size, capped by the window's slack: 20*64//110, 5*64//145, 40*64//145
    assert mosaic_shifts(crop, 64, 64, 30, 40) == (11, 0, 2, 17)
    assert mosaic_shifts(crop, 64, 64, 5, 40) == (5, 0, 2, 17)      # capped at cut_x
    crop.flip = True                                                # the borders change sides
    assert mosaic_shifts(crop, 64, 64, 30, 40) == (0, 11, 2, 17)
    ai = np.arange(3 * 8 * 10, dtype=np.float32).reshape(3, 8, 10)
    out = np.zeros_like(ai)
    paste_quarter(out, ai, 0, 4, 3, (1, 2, 1, 1))
    np.testing.assert_array_equal(out[:, :3, :4], ai[:, 4:7, 4:8])
    paste_quarter(out, ai, 3, 4, 3, (1, 2, 1, 1))
    np.testing.assert_array_equal(out[:, 3:, 4:], ai[:, 1:6, 1:7])
    assert [len(s) for s in thread_shares(8)] == [1, 1, 2, 1, 1, 2]


# -- pixels ------------------------------------------------------------------------------------
def test_crop_resize_matches_opencv():
    im = RNG(1).random((3, 37, 53)).astype(np.float32)
    fill = im.reshape(3, -1).mean(axis=1).astype(np.float32)
    for pleft, ptop, sw, sh, w, h in [(0, 0, 53, 37, 64, 48), (-7, 5, 70, 25, 32, 32),
                                      (10, -12, 30, 60, 61, 17)]:
        out = np.empty((3, h, w), np.float32)
        _crop_resize_linear(im, pleft, ptop, sw, sh, fill, out)
        pad = np.empty((sh, sw, 3), np.float32)
        pad[:] = fill
        hwc = im.transpose(1, 2, 0)
        ys, xs = np.arange(sh) + ptop, np.arange(sw) + pleft
        iy, ix = (ys >= 0) & (ys < 37), (xs >= 0) & (xs < 53)
        pad[np.ix_(iy, ix)] = hwc[np.ix_(ys[iy], xs[ix])]
        ref = cv2.resize(pad, (w, h), interpolation=cv2.INTER_LINEAR).transpose(2, 0, 1)
        np.testing.assert_allclose(out, ref, atol=1e-2)     # OpenCV's fixed-point weights


def test_gaussian_blur_matches_opencv():
    im = RNG(2).random((3, 40, 50)).astype(np.float32)
    for k in (3, 5, 9, 17):
        ref = cv2.GaussianBlur(im.transpose(1, 2, 0), (k, k), 0).transpose(2, 0, 1)
        np.testing.assert_allclose(gaussian_blur(im, k), ref, atol=1e-5)


def test_background_blur_keeps_the_boxes_sharp():
    im = RNG(3).random((3, 32, 32)).astype(np.float32)
    truth = np.zeros((4, 6), np.float32)
    truth[0] = [0.5, 0.5, 0.5, 0.5, 0, 0]                   # pixels 8..24
    out = blur_image(im, 1, truth)
    np.testing.assert_array_equal(out[:, 8:24, 8:24], im[:, 8:24, 8:24])
    assert np.abs(out[:, :6] - im[:, :6]).mean() > 0.05


def test_hsv_shift_against_colorsys():
    im = RNG(4).random((3, 6, 7)).astype(np.float32)
    for dhue, dsat, dexp in [(0.1, 1.5, 0.7), (-0.3, 0.6, 1.4), (0.0, 2.0, 2.0)]:
        out = im.copy()
        _distort_hsv_ab(out, np.float32(dhue), np.float32(dsat), np.float32(dexp))
        ref = np.empty_like(im)
        for j in range(6):
            for i in range(7):
                hh, s, v = colorsys.rgb_to_hsv(*im[:, j, i])
                # AlexeyAB's 8-bit channels: s, v saturate at 1; hue saturates at 0 (no wrap
                # below) and wraps above one turn
                hh = min(max(hh + dhue, 0.0), 255 / 180) % 1.0
                ref[:, j, i] = colorsys.hsv_to_rgb(hh, min(s * dsat, 1), min(v * dexp, 1))
        np.testing.assert_allclose(out, ref, atol=2e-5)


def test_gaussian_noise_only_brightens():
    im = np.full((3, 20, 20), 0.5, np.float32)
    add_gaussian_noise(RNG(5), im, 30)
    assert im.min() == 0.5 and im.max() > 0.6 and (im > 0.5).mean() > 0.4


# -- whole images ------------------------------------------------------------------------------
def _scene(seed, w=120, h=90):
    """Black with up to three lit rectangles, each lit on the channel of its class."""
    rng = RNG(seed)
    im = np.zeros((3, h, w), np.float32)
    boxes = []
    for c in range(3):
        bw, bh = int(rng.integers(20, 40)), int(rng.integers(20, 40))
        x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
        if im[:, y0:y0 + bh, x0:x0 + bw].any():
            continue
        im[c, y0:y0 + bh, x0:x0 + bw] = 1
        boxes.append(((x0 + bw / 2) / w, (y0 + bh / 2) / h, bw / w, bh / h, c))
    return im, np.array(boxes, np.float32)


def _check_on_objects(X, T):
    """Each truth's inside (2 px in) is lit on its class's channel."""
    n, _, h, w = X.shape
    found = 0
    for i in range(n):
        for x, y, bw, bh, c, _ in T[i].reshape(-1, 6):
            if x == 0:
                break
            x0, x1 = int((x - bw / 2) * w) + 2, int(np.ceil((x + bw / 2) * w)) - 2
            y0, y1 = int((y - bh / 2) * h) + 2, int(np.ceil((y + bh / 2) * h)) - 2
            if x1 > x0 and y1 > y0:
                assert X[i, int(c), y0:y1, x0:x1].min() > 0.9, (i, x, y, bw, bh, c)
                found += 1
    return found


@pytest.mark.parametrize("mixup, letter_box", [(0, False), (3, False), (3, True), (0, True)])
def test_truths_stay_on_their_objects(mixup, letter_box):
    scenes = [_scene(s) for s in range(6)]
    a = AbAugmentConfig(jitter=0.3, resize=1.5, mixup=mixup, letter_box=letter_box, flip=True)

    def draw(rng):
        im, boxes = scenes[int(rng.integers(len(scenes)))]
        return im, boxes, 0
    found = 0
    for seed in range(4):
        X, T = load_data_detection_ab(RNG(seed), draw, 8, 64, 64, a)
        assert X.shape == (8, 3, 64, 64) and T.shape == (8, 1200)
        found += _check_on_objects(X, T)
    assert found > 20


def test_mosaic_makes_four_quarters_and_is_seeded():
    colours = [np.full((3, 50, 60), v, np.float32) for v in (0.1, 0.3, 0.6, 0.9)]
    a = AbAugmentConfig(jitter=0.2, mixup=3, flip=False)
    k = iter(range(10 ** 6))

    def draw(rng):
        return colours[next(k) % 4], np.zeros((0, 5), np.float32), 0
    X, _ = load_data_detection_ab(RNG(3), draw, 12, 64, 64, a)
    levels = [len(np.unique(np.round(x[0], 3))) for x in X]
    assert 4 in levels and 1 in levels          # mosaics and single images in one batch
    k = iter(range(10 ** 6))
    X3, _ = load_data_detection_ab(RNG(3), draw, 12, 64, 64, a)
    np.testing.assert_array_equal(X, X3)


def test_mosaic_with_letter_box_truth_is_the_picture():
    """A tall picture that is all object (one box, the whole image), letterboxed into each
    quarter: the quarter's truth covers exactly the picture's columns. Black and white bands
    (channel 1) tell picture (0 or 1) from border (the image's mean, 0.5). AlexeyAB's border
    measure (at the image's scale) would put truths over its neighbour quarter."""
    im = np.zeros((3, 200, 60), np.float32)
    for y0 in range(0, 200, 40):
        im[1, y0:y0 + 20] = 1
    whole = np.array([[0.5, 0.5, 1, 1, 0]], np.float32)
    a = AbAugmentConfig(jitter=0, resize=1, mixup=3, letter_box=True, flip=True)
    w = h = 64
    overhang = 0
    for seed in range(6):
        for cut in (24, 40):
            for q in range(4):
                ai, truth, crop = augment_ab(RNG(seed), im, whole, 0, w, h, a, quarter=q)
                out = np.full((3, h, w), -1, np.float32)
                s = mosaic_shifts(crop, w, h, cut, cut)
                paste_quarter(out, ai, q, cut, cut, s)
                T = np.zeros((4, 6), np.float32)
                blend_truth_mosaic(T, truth, w, h, cut, cut, q, s)
                x, _, bw, _ = T[0, :4]
                x0, x1 = round((x - bw / 2) * w), round((x + bw / 2) * w)
                rows = slice(0, cut) if q < 2 else slice(cut, h)
                qx0, qx1 = (0, cut) if q in (0, 2) else (cut, w)
                picture = (np.abs(out[1, rows, qx0:qx1] - 0.5) > 0.4).mean(axis=0) > 0.7
                cols = qx0 + np.flatnonzero(picture)
                assert cols.min() in (x0, x0 + 1) and cols.max() in (x1 - 1, x1 - 2), \
                    (seed, cut, q, crop, x0, x1, cols)
                assert qx0 <= x0 and x1 <= qx1
                # AlexeyAB's measure of the same border
                pl, pr = (crop.pright, crop.pleft) if crop.flip else (crop.pleft, crop.pright)
                ab = (min(cut, max(0, -pl * w // 60)), min(w - cut, max(0, -pr * w // 60)),
                      0, 0)
                U = np.zeros((4, 6), np.float32)
                blend_truth_mosaic(U, truth, w, h, cut, cut, q, ab)
                ux0, ux1 = (U[0, 0] - U[0, 2] / 2) * w, (U[0, 0] + U[0, 2] / 2) * w
                overhang += ux0 < qx0 - 1 or ux1 > qx1 + 1
    assert overhang > 0


# -- the loader under the alexeyab dialect -----------------------------------------------------
def _ab_net(tmp_path, **net):
    from ab_tiny import ab_tiny_cfg

    from darknumba.parser import parse_network_cfg
    p = tmp_path / "ab.cfg"
    p.write_text(ab_tiny_cfg(**net))
    return parse_network_cfg(p)


def test_config_from_network(tmp_path):
    net = _ab_net(tmp_path)
    assert net.dialect == "alexeyab"
    a = AbAugmentConfig.from_network(net)
    assert (a.mixup, a.jitter, a.resize, a.blur, a.gaussian_noise, a.max_boxes, a.truth_size,
            a.flip, a.letter_box) == (3, 0.3, 1.5, 1, 10, 200, 6, True, False)
    msgs = []
    a = AbAugmentConfig.from_network(_ab_net(tmp_path, mosaic=None, cutmix=1, mixup=1),
                                     log=msgs.append)
    assert a.mixup == 0 and "cutmix" in msgs[0]          # cutmix wins over mixup, then dropped
    assert AbAugmentConfig.from_network(_ab_net(tmp_path, mosaic=None, mixup=1)).mixup == 1
    assert AbAugmentConfig.from_network(_ab_net(tmp_path, mixup=1)).mixup == 3
    a = AbAugmentConfig.from_network(_ab_net(tmp_path, flip=0, letter_box=1))
    assert not a.flip and a.letter_box


def test_loader_keeps_200_boxes_and_says_so(tmp_path):
    from PIL import Image

    from darknumba.data.datasets import DataIssues, DetectionDataset
    from darknumba.data.loader import AbMultiScale, DetectionLoader
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    Image.fromarray(np.full((80, 80, 3), 128, np.uint8)).save(tmp_path / "images" / "a.png")
    rng = RNG(0)
    lines = [f"{rng.integers(3)} {x:.4f} {y:.4f} 0.1 0.1" for x, y in rng.uniform(.1, .9, (250, 2))]
    (tmp_path / "labels" / "a.txt").write_text("\n".join(lines))
    msgs = []
    ds = DetectionDataset([str(tmp_path / "images" / "a.png")], 3, DataIssues(log=msgs.append))
    a = AbAugmentConfig.from_network(_ab_net(tmp_path))
    a.mixup, a.jitter, a.resize = 0, 0, 1
    with DetectionLoader(ds, 4, a, AbMultiScale(64, 64, 0, 32, 0, 10), seed=1) as L:
        X, T = next(L)
    assert X.shape == (4, 3, 64, 64) and T.shape == (4, 1200)
    assert (T.reshape(4, 200, 6)[:, :, 2] > 0).sum(axis=1).tolist() == [200] * 4
    assert len(msgs) == 1 and "labels/a.txt" in msgs[0] and "250 boxes" in msgs[0], msgs
    with DetectionLoader(ds, 4, a, AbMultiScale(64, 64, 0, 32, 0, 10), seed=1) as L:
        X2, T2 = next(L)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(T, T2)
    assert len(msgs) == 1                                 # once per file


def test_random_resize_rule():
    from darknumba.data.loader import AbMultiScale
    assert AbMultiScale(416, 416, 0, 32, 0, 1000).size(55) == (416, 416)
    ms = AbMultiScale(416, 416, 1, 32, seed=0, max_batches=1000, start=3)
    sizes = [ms.size(k) for k in range(3, 1000)]
    # round(1.4 * 416 / 32 + 1) * 32 = 608 for the run's first 10 batches and the last 100
    assert sizes[:10] == [(608, 608)] * 10
    assert ms.size(903) == (608, 608) and ms.size(900) == ms.size(893)  # blocks from 3
    assert all(sizes[k] == sizes[k - k % 10] for k in range(len(sizes)))
    sides = {s[0] for s in sizes}
    # f in [1/1.4, 1.4]: round(f * 13 + 1) * 32 in 320..608, never above 416 when f < 1
    assert sides <= set(range(320, 609, 32)) and len(sides) > 4
    # random=1.2: round(1.2 * 64/32 + 1) = 3, round(1.2 * 96/32 + 1) = 5 steps of 32
    assert AbMultiScale(64, 96, 1.2, 32, 0, 1000).size(0) == (96, 160)


def test_loader_refuses_a_grey_network_for_alexeyab_augmentation(tmp_path):
    """AlexeyAB's augmentation (mosaic, mixup, blur) is built for colour images: a network of
    another channel count is refused before any batch is drawn."""
    from PIL import Image

    from darknumba.data.datasets import DataIssues, DetectionDataset
    from darknumba.data.loader import AbMultiScale, DetectionLoader
    from darknumba.errors import CfgError
    Image.fromarray(np.full((8, 8, 3), 128, np.uint8)).save(tmp_path / "a.png")
    (tmp_path / "a.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    ds = DetectionDataset([str(tmp_path / "a.png")], 3, DataIssues())
    with pytest.raises(CfgError, match=r"built for 3-channel images; this network has "
                                       r"channels=1"):
        DetectionLoader(ds, 4, AbAugmentConfig(), AbMultiScale(64, 64, 0, 32, 0, 10), channels=1)


@pytest.mark.parametrize("jit_flip, color", [(False, False), (True, True)])
def test_contrastive_pairs_one_picture(jit_flip, color):
    """[net] contrastive=1 (get_random_paths_custom): positions 2k, 2k+1 of each loader
    thread's share hold one picture (the same track ids), whose crop and flip they share
    unless contrastive_jit_flip and whose colour unless contrastive_color; the rest of each
    image's draws (the crop's scale, mosaic) are its own."""
    scenes = [_scene(s) for s in range(6)]
    picked = {}

    def draw(rng):
        j = int(rng.integers(len(scenes)))
        im, boxes = scenes[j]
        return im, boxes, 1000 * (j + 1)
    a = AbAugmentConfig(jitter=0.3, resize=1.0, hue=0.1, saturation=1.5, exposure=1.5, flip=True,
                        contrastive=True, contrastive_jit_flip=jit_flip, contrastive_color=color)
    X, T = load_data_detection_ab(RNG(1), draw, 12, 64, 64, a,        # 6 shares of 2
                                  image_rng=lambda p: RNG([7, p]),
                                  pair_rng=lambda p: RNG([7, p, 1]))
    pictures = [{int(t) // 1000 for t in T[p].reshape(200, 6)[:, 5] if t} for p in range(12)]
    same_image = []
    for share in thread_shares(12):
        for p in list(share)[1::2]:
            assert len(pictures[p]) == 1 and pictures[p] == pictures[p - 1]
            same_image.append(np.array_equal(X[p], X[p - 1]))
    # resize=1: no scale draws, so sharing crop, flip and colour gives the very same image
    assert all(same_image) == (not jit_flip and not color)
    assert len(set().union(*pictures)) > 1
    with pytest.raises(ValueError, match="pair_rng"):
        load_data_detection_ab(RNG(1), draw, 4, 64, 64, a)


def test_contrastive_config_from_network(tmp_path):
    """AlexeyAB's train_detector also cuts its loader threads to mini-batch / 2 (each thread
    then holds whole pairs)."""
    net = _ab_net(tmp_path, contrastive=1, contrastive_color=1, batch=8, subdivisions=2)
    a = AbAugmentConfig.from_network(net)
    assert (a.contrastive, a.contrastive_jit_flip, a.contrastive_color) == (True, False, True)
    assert net.batch == 4 and a.threads == 2
    assert AbAugmentConfig.from_network(_ab_net(tmp_path)).threads is None
