"""The yolo loss kernels against naive.yolo_loss (Darknet's loops, in float64) on cases the
golden fixture does not reach: two truths in one cell and anchor (the class-delta quirk),
truths whose best anchor belongs to another layer, truth_thresh < 1, an image with no boxes."""
from types import SimpleNamespace

import naive
import numpy as np
import pytest

from darknumba.errors import DarknumbaError
from darknumba.layers.yolo import YoloLayer

ANCHORS = [3, 4, 6, 8, 10, 12, 16, 18]          # 4 anchors, in network pixels (40 x 40)
NETW = NETH = 40


def make_layer(mask, classes=3, w=5, h=5, batch=2, ignore=0.5, truth_thresh=1.0):
    l = YoloLayer(batch, w, h, len(mask), 4, mask, classes, ANCHORS)
    l.ignore_thresh, l.truth_thresh = ignore, truth_thresh
    return l


def truth_array(boxes_per_image, batch=2):
    t = np.zeros(batch * 450, dtype=np.float32)
    for b, boxes in enumerate(boxes_per_image):
        for k, box in enumerate(boxes):
            t[b * 450 + 5 * k:b * 450 + 5 * k + 5] = box
    return t


def run(l, truth, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, l.batch * l.outputs).astype(np.float32)
    net = SimpleNamespace(input=x, truth=truth, train=True, w=NETW, h=NETH, index=7)
    l.forward(net)
    ref_delta, ref_cost, ref_stats = naive.yolo_loss(
        l.output, truth, np.asarray(l.biases, np.float64), list(l.mask), l.total, l.batch, l.n,
        l.w, l.h, l.classes, NETW, NETH, l.ignore_thresh, l.truth_thresh)
    np.testing.assert_allclose(l.delta, ref_delta, rtol=1e-5, atol=1e-6)
    assert l.cost == pytest.approx(ref_cost, rel=1e-5)
    for k, v in ref_stats.items():
        if isinstance(v, float) and np.isnan(v):
            assert np.isnan(l.stats[k]), k
        else:
            assert l.stats[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k
    return l


# (x, y, w, h, class); w=0.2, h=0.25 fits anchor 2 (10x12 -> 0.25 x 0.3) best
SAME_CELL = [(0.51, 0.52, 0.2, 0.25, 0), (0.55, 0.57, 0.22, 0.27, 2)]


def test_second_truth_in_same_cell_keeps_class_deltas():
    l = run(make_layer([2, 3]), truth_array([SAME_CELL, [(0.3, 0.7, 0.1, 0.1, 1)]]))
    # cell (2, 2), anchor index 0 of this layer: class 0 keeps 1 - p0, class 2 gets 1 - p2
    wh = l.w * l.h
    cls0 = 5 * wh + 2 * l.w + 2
    p = l.output
    assert l.delta[cls0] == pytest.approx(1 - p[cls0])
    assert l.delta[cls0 + 2 * wh] == pytest.approx(1 - p[cls0 + 2 * wh])
    assert l.delta[cls0 + wh] == pytest.approx(-p[cls0 + wh])
    assert l.stats["count"] == 2          # the (0.3, 0.7) box's best anchor is not in [2, 3]


def test_best_anchor_elsewhere_and_empty_image():
    l = run(make_layer([0, 1]), truth_array([[(0.3, 0.7, 0.08, 0.1, 1)], []]))
    assert l.stats["count"] == 1
    l = run(make_layer([3]), truth_array([[(0.3, 0.7, 0.08, 0.1, 1)], []]))
    assert l.stats["count"] == 0 and np.isnan(l.stats["avg_iou"])
    assert l.stats_line().startswith("Region 7 Avg IOU: nan")


def test_truth_thresh_branch():
    boxes = [(0.5, 0.5, 0.3, 0.3, 1), (0.2, 0.25, 0.15, 0.2, 0), (0.8, 0.3, 0.4, 0.35, 2)]
    run(make_layer([0, 1, 2], ignore=0.05, truth_thresh=0.1), truth_array([boxes, boxes[1:]]),
        seed=3)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_boxes(seed):
    rng = np.random.default_rng(seed)
    images = [[(*rng.uniform(0.05, 0.95, 2), *rng.uniform(0.05, 0.5, 2), rng.integers(0, 3))
               for _ in range(rng.integers(1, 12))] for _ in range(2)]
    run(make_layer([1, 2, 3], ignore=0.3), truth_array(images), seed=seed)


def test_truth_outside_image_is_rejected():
    with pytest.raises(DarknumbaError, match=r"box 0: x = 1, .*expected x, y in \[0, 1\)"):
        run(make_layer([0, 1]), truth_array([[(1.0, 0.5, 0.1, 0.1, 0)], []]))
