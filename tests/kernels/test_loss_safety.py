"""The region, iseg and detection losses fed truths and outputs from which their kernels
would compute indices outside the buffers: the layers refuse such truths with a clear error,
and the kernels (with the check bypassed) write nothing outside their buffers and give the
deltas stated in each test."""
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import guarded, guards_intact

from darknumba.errors import DataError
from darknumba.layers.detection import DetectionLayer
from darknumba.layers.iseg import IsegLayer
from darknumba.layers.region import RegionLayer

f32 = np.float32


def region_layer(classes=3, coords=4):
    l = RegionLayer(1, 4, 4, 2, classes, coords, [1, 1.5, 2, 2.5])
    l.softmax = 1
    return l


def region_forward(l, boxes, check=True):
    truth = np.zeros(l.truths, f32)
    for k, box in enumerate(boxes):
        truth[k * 5:k * 5 + 5] = box
    x = np.random.default_rng(3).normal(0, 1, l.outputs).astype(f32)
    net = SimpleNamespace(input=x, truth=truth, train=True, seen=20000, index=9)
    if not check:
        l.check_truth = lambda net: None
    l.delta, big = guarded(l.outputs)
    l.forward(net)
    assert guards_intact(big)
    return l.delta.copy()


GOOD = (.4, .6, .3, .2, 1)


@pytest.mark.parametrize("box,what", [((np.nan, .5, .2, .2, 0), "x = nan"),
                                      ((2e5, .5, .2, .2, 0), "x = 200000"),
                                      ((.5, -.5, .2, .2, 0), "y = -0.5"),
                                      ((.5, .5, .2, .2, 7), "class = 7")])
def test_region_layer_refuses_a_truth_it_cannot_index(box, what):
    with pytest.raises(DataError, match=rf"\[region\] layer 9: .*box 1: .*{what}"):
        region_forward(region_layer(), [GOOD, box])


@pytest.mark.parametrize("x", [np.nan, np.inf, -np.inf, 1e6, -1e6, -.5])
def test_region_kernel_skips_a_box_outside_the_grid(x):
    """With the layer's check bypassed, the kernel itself writes nothing for the box (its
    coordinates are far or NaN, so it changes no other prediction's best IoU either)."""
    want = region_forward(region_layer(), [GOOD])
    got = region_forward(region_layer(), [GOOD, (x, .5, .01, .01, 0)], check=False)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cls", [-1, 3, 1e10, np.nan])
def test_region_kernel_bad_class_writes_no_class_delta(cls):
    good = region_forward(region_layer(), [GOOD]).reshape(2, 8, 16)
    without = region_forward(region_layer(), [(.4, .6, .3, .2, 0)]).reshape(2, 8, 16)
    got = region_forward(region_layer(), [(.4, .6, .3, .2, cls)], check=False).reshape(2, 8, 16)
    np.testing.assert_array_equal(got[:, :5], good[:, :5])
    cell = (slice(None), slice(5, None), 2 * 4 + 1)           # the truth's cell: row 2, col 1
    assert not np.any(got[cell]) and np.any(without[cell])


@pytest.mark.parametrize("cls", [5, np.inf])
def test_iseg_refuses_and_kernel_skips_a_bad_class(cls):
    l = IsegLayer(1, 3, 3, 2, 2)
    truth = np.full(l.truths, -1, f32)
    truth[:10] = [1, 1, 0, 0, 0, 0, 0, 0, 0, 1]
    truth[10:20] = [cls, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    net = SimpleNamespace(input=np.random.default_rng(0).normal(0, 1, l.outputs).astype(f32),
                          truth=truth, train=True, index=2)
    with pytest.raises(DataError, match=r"\[iseg\] layer 2: .*instance 1: class (5|inf)"):
        l.forward(net)
    l.check_truth = lambda net: None
    l.delta, big = guarded(l.outputs)
    l.forward(net)
    assert guards_intact(big)
    # no class-mask delta for the bad instance: class planes hold -output except instance 0's
    wh = 9
    cls_delta = l.delta[:2 * wh]
    expected = -l.output[:2 * wh]
    expected[wh + 0] = 1 - l.output[wh + 0]
    expected[wh + 8] = 1 - l.output[wh + 8]
    np.testing.assert_array_equal(cls_delta, expected)


def detection_run(out_boxes, n=2, forced=0, side=2, classes=1):
    L = side * side
    inputs = L * ((1 + 4) * n + classes)
    l = DetectionLayer(1, inputs, n, side, classes, 4)
    l.forced = forced
    x = np.zeros(inputs, f32)
    x[L * (classes + n):] = np.tile(out_boxes, L * n)[:L * n * 4]
    truth = np.zeros(L * (1 + 4 + classes), f32)
    last = (L - 1) * (1 + 4 + classes)
    truth[last:last + 6] = (1, 1, .5, .5, .2, .2)             # a small truth in the last cell
    net = SimpleNamespace(input=x, truth=truth, train=True, seen=10 ** 6)
    l.delta, big = guarded(l.outputs)
    l.forward(net)
    assert guards_intact(big)
    return l


def test_detection_box_nowhere_near_the_truth_trains_box_0():
    """Outputs far from the truth (no overlap, rmse > 20) leave Darknet's best_index at -1, the
    previous cell's last box; box 0 of the cell takes the deltas instead."""
    l = detection_run([-1000, -1000, 1000, 1000])
    L, n = 4, 2
    base = L * (1 + n) + (3 * n + 0) * 4
    np.testing.assert_allclose(l.delta[base:base + 4],
                               np.array([.5, .5, .2, .2], f32) - np.array([-1000, -1000, 1000, 1000], f32))
    assert not np.any(l.delta[L * (1 + n):base])              # no other box got deltas
    assert not np.any(l.delta[base + 4:])


def test_detection_forced_with_one_box_per_cell():
    """forced=1 picks box 1 for a small truth; with num=1 there is none (Darknet writes into
    the next cell, past the buffer for the last one): box 0 instead."""
    l = detection_run([.5, .5, .3, .3], n=1, forced=1)
    base = 4 * 2 + 3 * 4
    np.testing.assert_allclose(l.delta[base:base + 4], np.array([.5, .5, .2, .2], f32)
                               - np.array([.5, .5, .3, .3], f32), rtol=1e-6)
