"""Darknet's load_data_detection augmentation: truths follow the image through crop/translate,
flip and letterbox; clipping, dropping and max_boxes as fill_truth_detection."""
import numpy as np
import pytest

from darknumba.vision.augment import (AugmentConfig, Placement, augment_detection, correct_boxes,
                                      fill_truth, letterbox_placement, place_image)


def _scene(w=120, h=80):
    """A black image with two bright rectangles (distinct colours) and their boxes."""
    im = np.zeros((3, h, w), np.float32)
    rects = [(10, 8, 50, 40, 0), (70, 30, 110, 70, 1)]     # x0, y0, x1, y1, class (pixels)
    boxes = []
    for k, (x0, y0, x1, y1, c) in enumerate(rects):
        im[k, y0:y1, x0:x1] = 1.0
        boxes.append(((x0 + x1) / 2 / w, (y0 + y1) / 2 / h, (x1 - x0) / w, (y1 - y0) / h, c))
    return im, np.array(boxes, np.float32)


def _check_follow(canvas, truth):
    """Inside each truth box (shrunk by 2 px) the box's colour channel is lit; just outside
    it, along the box's edges, it is not (on the same channel)."""
    h, w = canvas.shape[1:]
    rows = truth.reshape(-1, 5)
    rows = rows[rows[:, 0] > 0]
    assert len(rows)
    for x, y, bw, bh, c in rows:
        ch = int(c)
        x0, x1 = (x - bw / 2) * w, (x + bw / 2) * w
        y0, y1 = (y - bh / 2) * h, (y + bh / 2) * h
        inner = canvas[ch, int(y0) + 2:int(np.ceil(y1)) - 2, int(x0) + 2:int(np.ceil(x1)) - 2]
        if inner.size:
            assert inner.min() > 0.9, (x, y, bw, bh, c)
        for yy, xx in ((int(y0) - 3, int(x)), (int(np.ceil(y1)) + 2, int(x)),
                       (int(y), int(x0) - 3), (int(y), int(np.ceil(x1)) + 2)):
            if 0 <= yy < h and 0 <= xx < w:
                assert canvas[ch, yy, xx] < 0.6, (yy, xx, canvas[ch, yy, xx])


def test_letterbox_keeps_boxes_on_their_objects():
    im, boxes = _scene()
    p = letterbox_placement(120, 80, 96, 96)
    assert (p.nw, p.nh, p.dx, p.dy) == (96, 64, 0, 16)
    canvas = place_image(im, p, 96, 96)
    assert canvas[0, 0, 0] == pytest.approx(0.5)               # grey border
    _check_follow(canvas, fill_truth(correct_boxes(boxes, p, 96, 96), 90))


def test_flip_keeps_boxes_on_their_objects():
    im, boxes = _scene()
    p = Placement(120, 80, 0, 0, flip=True)
    canvas = place_image(im, p, 120, 80)
    t = correct_boxes(boxes, p, 120, 80)
    np.testing.assert_allclose(t[:, 0], 1 - boxes[:, 0], atol=1e-6)
    _check_follow(canvas, fill_truth(t, 90))


@pytest.mark.parametrize("seed", range(12))
def test_random_crop_translate_flip_keep_boxes_on_their_objects(seed):
    im, boxes = _scene()
    a = AugmentConfig(jitter=0.3, hue=0, saturation=1, exposure=1, scale=(0.8, 1.6))
    canvas, truth = augment_detection(np.random.default_rng(seed), im, boxes, 96, 96, a)
    assert canvas.shape == (3, 96, 96) and truth.shape == (450,)
    rows = truth.reshape(-1, 5)
    rows = rows[rows[:, 0] > 0]
    assert np.all((rows[:, :2] > 0) & (rows[:, :2] < 1)) and np.all(rows[:, 2:4] <= 1)
    _check_follow(canvas, truth)


def test_clip_drop_and_max_boxes():
    boxes = np.array([[0.95, 0.5, 0.2, 0.2, 0], [0.5, 0.5, 0.0005, 0.2, 1],
                      [0.2, 0.2, 0.1, 0.1, 2]], np.float32)
    t = correct_boxes(boxes, Placement(100, 100, 0, 0), 100, 100)
    np.testing.assert_allclose(t[0], [0.925, 0.5, 0.15, 0.2, 0], atol=1e-6)   # clipped at 1
    truth = fill_truth(t, 90).reshape(-1, 5)
    assert truth[1, 4] == 2 and truth[2:].sum() == 0                       # tiny box dropped
    assert fill_truth(t, 1).reshape(-1, 5)[0, 4] == 0                        # max_boxes
    gone = correct_boxes(boxes, Placement(100, 100, 200, 0), 100, 100)     # moved off canvas
    assert fill_truth(gone, 90).sum() == 0


def test_hsv_distortion_changes_colours_in_range_and_is_seeded():
    im, boxes = _scene()
    a = AugmentConfig(jitter=0.2, hue=0.1, saturation=1.5, exposure=1.5)
    c1, t1 = augment_detection(np.random.default_rng(3), im * 0.7 + 0.1, boxes, 64, 64, a)
    c2, t2 = augment_detection(np.random.default_rng(3), im * 0.7 + 0.1, boxes, 64, 64, a)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(t1, t2)
    assert c1.min() >= 0 and c1.max() <= 1
