"""Kernels fed NaN, Inf, negative and out-of-range values stay inside their buffers and give
what a plain reference gives; the layers refuse truths the kernels would index with.

Outputs are views into larger buffers whose guard cells hold a sentinel: a write past the end
changes one (numba checks no bounds unless NUMBA_BOUNDSCHECK=1). A negative index wraps round
to the view's own end, so the expected values are stated in full where one could arise."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from darknumba.box import Detections, box_corners, do_nms_sort, get_yolo_detections
from darknumba.errors import DataError
from darknumba.image import letterbox_size
from darknumba.kernels.box import box_iou, get_yolo_detections_cpu, yolo_num_detections_cpu
from darknumba.kernels.im2col import valid_span
from darknumba.kernels.pool import forward_maxpool_cpu
from darknumba.kernels.yolo import (_num_truths, box_iou as yolo_box_iou, truth_cell,
                                    truth_class, yolo_objectness_deltas, yolo_truth_deltas)
from darknumba.layers.detection import DetectionLayer
from darknumba.layers.iseg import IsegLayer
from darknumba.layers.region import RegionLayer
from darknumba.layers.yolo import YoloLayer

f32 = np.float32
SENTINEL = f32(-7.25)
GUARD = 64


def guarded(shape, dtype=np.float32, fill=0):
    """(view, big): a zero-filled array of `shape` inside a buffer with GUARD sentinel rows
    on either side."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    big = np.full((shape[0] + 2 * GUARD,) + shape[1:], SENTINEL, dtype)
    view = big[GUARD:GUARD + shape[0]]
    view[...] = fill
    return view, big


def guards_intact(big):
    return bool(np.all(big[:GUARD] == SENTINEL) and np.all(big[-GUARD:] == SENTINEL))


# -- yolo decoding: one predicate for counting and filling ---------------------------------------

def yolo_output(n, w, h, classes, obj, seed=0):
    """A [n][4+1+classes][h][w] output (already activated) with the given objectness map."""
    rng = np.random.default_rng(seed)
    o = rng.uniform(0, 1, (n, 5 + classes, h, w)).astype(f32)
    o[:, 4] = np.asarray(obj, f32).reshape(n, h, w)
    return o


def decode_reference(o, lw, lh, classes, biases, mask, netw, neth, thresh):
    """get_yolo_detections in plain numpy: candidates (cell, then anchor) with obj > thresh."""
    rows = []
    for i in range(lw * lh):
        r, c = divmod(i, lw)
        for a in range(o.shape[0]):
            obj = o[a, 4, r, c]
            if not obj > thresh:
                continue
            m = mask[a]
            box = [(f32(c) + o[a, 0, r, c]) / f32(lw), (f32(r) + o[a, 1, r, c]) / f32(lh),
                   f32(math.exp(o[a, 2, r, c]) * biases[2 * m] / netw),
                   f32(math.exp(o[a, 3, r, c]) * biases[2 * m + 1] / neth)]
            p = obj * o[a, 5:, r, c]
            rows.append((box, obj, np.where(p > thresh, p, 0).astype(f32)))
    return rows


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf, 0.5])
def test_yolo_count_and_fill_agree_on_special_objectness(special):
    """The bug: counting tested obj > thresh, filling skipped obj <= thresh; NaN failed both,
    so the fill wrote one row per NaN past the arrays. Now both use one test."""
    n, w, h, classes, thresh = 2, 3, 2, 2, f32(0.5)
    obj = np.array([.9, special, .2, .7, special, .6, special, .1, .95, .3, .8, special], f32)
    o = yolo_output(n, w, h, classes, obj)
    biases, mask = np.array([2, 3, 4, 5, 6, 7], f32), np.array([2, 0], np.int64)
    flat = o.reshape(-1)
    count = yolo_num_detections_cpu(flat, 0, n, w * h, classes, thresh)
    ref = decode_reference(o, w, h, classes, biases, mask, 8, 8, thresh)
    assert count == len(ref) == int(np.sum(obj > thresh))
    bbox, big_b = guarded((count, 4))
    objectness, big_o = guarded(count)
    prob, big_p = guarded((count, classes))
    filled = get_yolo_detections_cpu(bbox, objectness, prob, flat, 0, n, w, h, classes, biases,
                                     mask, 8, 8, thresh)
    assert filled == count
    assert guards_intact(big_b) and guards_intact(big_o) and guards_intact(big_p)
    for k, (box, ob, p) in enumerate(ref):
        np.testing.assert_allclose(bbox[k], box, rtol=1e-6)
        assert objectness[k] == ob
        np.testing.assert_array_equal(prob[k], p)


def test_yolo_fill_stops_at_the_rows_it_was_given():
    n, w, h, classes = 1, 4, 4, 1
    o = yolo_output(n, w, h, classes, np.full(16, .9, f32))
    bbox, big_b = guarded((5, 4))
    objectness, big_o = guarded(5)
    prob, big_p = guarded((5, classes))
    filled = get_yolo_detections_cpu(bbox, objectness, prob, o.reshape(-1), 0, n, w, h, classes,
                                     np.ones(2, f32), np.zeros(1, np.int64), 4, 4, f32(.5))
    assert filled == 5
    assert guards_intact(big_b) and guards_intact(big_o) and guards_intact(big_p)


def test_nan_weights_decode_without_crash_through_the_layer_api():
    """A layer whose outputs are NaN (weights with a NaN) gives no detections at all."""
    o = yolo_output(2, 3, 3, 2, np.full(18, np.nan, f32))
    o[:, :4] = np.nan
    l = SimpleNamespace(type="yolo", output=o.reshape(-1), outputs=o.size, n=2, w=3, h=3,
                        classes=2, biases=np.ones(4, f32), mask=np.array([0, 1], np.int32))
    d = get_yolo_detections(l, 2000, 1, 8, 8, thresh=.25)          # extreme aspect ratio too
    assert len(d) == 0


# -- box maths ---------------------------------------------------------------------------------

def iou_reference(a, b):
    """box_iou in float32, 0 where the union is not positive."""
    a, b = np.asarray(a, f32), np.asarray(b, f32)

    def ov(x1, w1, x2, w2):                  # overlap() with C's ternaries (NaN included)
        two = f32(2)
        l1, l2, r1, r2 = x1 - w1 / two, x2 - w2 / two, x1 + w1 / two, x2 + w2 / two
        return (r1 if r1 < r2 else r2) - (l1 if l1 > l2 else l2)
    with np.errstate(invalid="ignore"):
        w, h = ov(a[0], a[2], b[0], b[2]), ov(a[1], a[3], b[1], b[3])
        inter = f32(0) if (w < 0 or h < 0) else w * h
        union = a[2] * a[3] + b[2] * b[3] - inter
    return inter / union if union > 0 else f32(0)


@pytest.mark.parametrize("a,b", [
    ([.5, .5, 0, 0], [.5, .5, 0, 0]),          # two points: 0 / 0 in Darknet
    ([.5, .5, 0, .2], [.5, .5, 0, .1]),        # zero width
    ([.5, .5, .2, .2], [.5, .5, 0, 0]),        # a point inside a box
    ([np.nan, .5, .2, .2], [.5, .5, .2, .2]),
    ([.5, .5, np.nan, .2], [.5, .5, .2, .2]),
    ([.5, .5, np.inf, .2], [.5, .5, .2, .2]),
    ([.5, .5, -.2, .2], [.5, .5, .2, .2]),     # a negative size (YOLOv1 raw outputs)
    ([.5, .5, .2, .2], [.55, .5, .2, .2]),     # an ordinary overlap
])
def test_box_iou_never_divides_by_zero(a, b):
    want = iou_reference(a, b)
    got = box_iou(np.array(a, f32), np.array(b, f32))
    got_train = yolo_box_iou(*(f32(v) for v in a), *(f32(v) for v in b))
    for g in (got, got_train):
        assert not math.isnan(g)
        assert g == pytest.approx(float(want), rel=1e-6, abs=0)


def naive_nms(bbox, obj, prob, thresh):
    prob = prob.copy()
    order = list(range(len(obj)))
    k, i = len(order) - 1, 0
    while i <= k:
        if obj[order[i]] == 0:
            order[i], order[k] = order[k], order[i]
            k -= 1
        else:
            i += 1
    total = k + 1
    for c in range(prob.shape[1]):
        if not np.any(prob[order[:total], c] != 0):
            continue
        order[:total] = sorted(order[:total], key=lambda j: -prob[j, c])
        for i in range(total):
            if prob[order[i], c] == 0:
                continue
            for j in range(i + 1, total):
                if iou_reference(bbox[order[i]], bbox[order[j]]) > thresh:
                    prob[order[j], c] = 0
    return order, prob


def test_nms_on_zero_area_and_nan_boxes():
    """An untrained network's boxes: many of zero area, some NaN; NMS runs and matches the
    reference (zero-area boxes suppress nothing)."""
    rng = np.random.default_rng(4)
    n, classes = 24, 3
    bbox = np.concatenate([rng.uniform(0, 1, (n, 2)), rng.uniform(.05, .4, (n, 2))], 1).astype(f32)
    bbox[::3, 2:] = 0
    bbox[1, 2] = np.nan
    bbox[4, 0] = np.inf
    prob = (rng.integers(1, 6, (n, classes)) / 5).astype(f32)
    obj = np.full(n, .9, f32)
    obj[5] = 0
    order, want = naive_nms(bbox, obj, prob, .3)
    got = do_nms_sort(Detections(bbox.copy(), obj.copy(), prob.copy()), .3)
    np.testing.assert_array_equal(got.bbox, bbox[order])
    np.testing.assert_array_equal(got.prob, want[order])


def test_nms_with_nan_scores_keeps_a_permutation():
    bbox = np.tile(np.array([[.5, .5, .2, .2]], f32), (6, 1))
    prob = np.array([[.9], [np.nan], [.8], [np.nan], [0], [.7]], f32)
    obj = np.array([.9, np.nan, .8, .9, 0, .7], f32)
    got = do_nms_sort(Detections(bbox, obj, prob.copy()), .45)
    np.testing.assert_array_equal(np.sort(got.objectness), np.sort(obj))


def test_corners_of_nan_and_infinite_boxes_stay_in_the_image():
    c = box_corners(np.array([[np.nan, .5, .2, .2], [.5, .5, np.inf, .2], [-np.inf, .5, 1, 1]],
                             f32), 100, 50)
    assert np.all(c[:, :2] >= 0) and np.all(c[:, 2] <= 99) and np.all(c[:, 3] <= 49)
    same_y = box_corners(np.array([[.5, .5, .2, .2]], f32), 100, 50)[0]
    np.testing.assert_array_equal(c[0], [0, same_y[1], 0, same_y[3]])   # NaN x: both sides 0
    assert c[2, 2] < 0                        # wholly left of the image, as a finite box would be
    finite = box_corners(np.array([[.5, .5, 1, .2]], f32), 100, 50)[0]
    np.testing.assert_array_equal(c[1], [0, finite[1], 99, finite[3]])


@pytest.mark.parametrize("im_w,im_h", [(2000, 1), (1, 2000), (416, 416), (10 ** 6, 3)])
def test_letterbox_size_is_never_zero(im_w, im_h):
    new_w, new_h = letterbox_size(im_w, im_h, 416, 416)
    assert 1 <= new_w <= 416 and 1 <= new_h <= 416


# -- yolo loss: truth -> cell and class ------------------------------------------------------------

@pytest.mark.parametrize("x,size,want", [(0.0, 13, 0), (0.5, 13, 6), (np.nextafter(f32(1), f32(0)), 13, 12),
                                         (np.nan, 13, -1), (np.inf, 13, -1), (-np.inf, 13, -1),
                                         (-0.5, 13, -1), (-1e-8, 13, -1), (1.0, 13, -1),
                                         (7.0, 13, -1)])
def test_truth_cell(x, size, want):
    assert truth_cell(f32(x), size) == want


@pytest.mark.parametrize("v,want", [(0.0, 0), (2.9, 2), (np.nan, -1), (np.inf, -1), (-1.0, -1),
                                    (-0.5, -1), (3e9, -1)])
def test_truth_class(v, want):
    assert truth_class(f32(v)) == want


ANCHORS = np.array([3, 4, 6, 8, 10, 12, 16, 18], f32)


def truth_of(boxes, batch=1):
    t = np.zeros(batch * 450, f32)
    for k, box in enumerate(boxes):
        t[5 * k:5 * k + 5] = box
    return t


def yolo_args(classes=3, lw=5, lh=5, n=2):
    return dict(batch=1, n=n, lw=lw, lh=lh, classes=classes, netw=40, neth=40, truths=450,
                max_boxes=90)


def run_truth_pass(truth, classes=3):
    a = yolo_args(classes)
    mask = np.array([2, 3], np.int32)
    size = a["n"] * a["lw"] * a["lh"] * (5 + classes)
    out = np.random.default_rng(1).uniform(0, 1, size).astype(f32)
    delta, big = guarded(size)
    stats = np.zeros((1, 6))
    yolo_truth_deltas(out, truth, ANCHORS, mask, 4, a["batch"], a["n"], a["lw"], a["lh"],
                      classes, a["netw"], a["neth"], a["truths"], a["max_boxes"], delta, stats)
    return delta, big, stats


@pytest.mark.parametrize("x,y", [(np.nan, .5), (np.inf, .5), (-np.inf, .5), (-.5, .5), (1.0, .5),
                                 (7.0, .5), (.5, np.nan), (.5, -.3), (.5, 1.5), (-1e-7, .5)])
def test_yolo_truth_pass_skips_a_box_outside_the_grid(x, y):
    """x = -0.5 used to give cell int(-2.5) = -2: a negative index that wraps round."""
    delta, big, stats = run_truth_pass(truth_of([(x, y, .25, .3, 1)]))
    assert guards_intact(big)
    assert not np.any(delta) and stats[0, 5] == 0


@pytest.mark.parametrize("cls", [-1, -0.5, 3, 3.5, 1e10, np.nan, np.inf])
def test_yolo_truth_pass_bad_class_writes_no_class_delta(cls):
    """The box and objectness deltas of the cell are written (its index is valid); the class
    deltas are not (Darknet would index class `cls` of the cell, anywhere in the buffer)."""
    good, _, _ = run_truth_pass(truth_of([(.5, .5, .25, .3, 1)]))
    delta, big, stats = run_truth_pass(truth_of([(.5, .5, .25, .3, cls)]))
    assert guards_intact(big) and stats[0, 5] == 1
    d, g = delta.reshape(2, 8, 25), good.reshape(2, 8, 25)
    np.testing.assert_array_equal(d[:, :5], g[:, :5])
    assert not np.any(d[:, 5:]) and np.any(g[:, 5:])


@pytest.mark.parametrize("cls", [-1, 3, np.nan, 1e10])
def test_yolo_objectness_pass_bad_class_writes_no_class_delta(cls):
    """truth_thresh below the IoU trains the best-matching truth at every cell: a bad class
    gets no class deltas there, everything else is as with a good class."""
    a = yolo_args()
    mask = np.array([2, 3], np.int32)
    out = np.random.default_rng(2).uniform(0, 1, 2 * 25 * 8).astype(f32)

    def run(c):
        delta, big = guarded(out.size)
        anyobj = np.zeros(2 * 5)
        truth = truth_of([(.5, .5, .9, .9, c)])
        yolo_objectness_deltas(out, truth, ANCHORS, mask, a["batch"], a["n"], a["lw"], a["lh"],
                               3, 40, 40, 450, 90, 0.0, 0.0, delta, anyobj)
        return delta, big
    good, _ = run(1)
    delta, big = run(cls)
    assert guards_intact(big)
    d, g = delta.reshape(2, 8, 25), good.reshape(2, 8, 25)
    np.testing.assert_array_equal(d[:, :5], g[:, :5])
    assert not np.any(d[:, 5:]) and np.any(g[:, 5:])


def test_num_truths_stays_inside_the_image():
    """max=200 with 90 boxes per image: Darknet reads on into the next image's truth."""
    truth = np.full(3 * 450, .5, f32)
    assert _num_truths(truth, 450, 200, 450) == 90
    assert _num_truths(truth, 450, 40, 450) == 40


def yolo_layer():
    return YoloLayer(2, 5, 5, 2, 4, [2, 3], 3, ANCHORS)


@pytest.mark.parametrize("box,what", [
    ((np.nan, .5, .2, .2, 0), "x = nan"), ((.5, np.inf, .2, .2, 0), "y = inf"),
    ((-.5, .5, .2, .2, 0), "x = -0.5"), ((.5, .5, 0, .2, 0), "w = 0"),
    ((.5, .5, .2, np.nan, 0), "h = nan"), ((.5, .5, .2, .2, -1), "class = -1"),
    ((.5, .5, .2, .2, 3), "class = 3"), ((.5, .5, .2, .2, np.nan), "class = nan")])
def test_yolo_layer_refuses_a_truth_it_cannot_index(box, what):
    l = yolo_layer()
    truth = np.zeros(2 * 450, f32)
    truth[450:455] = (.3, .3, .1, .1, 2)
    truth[455:460] = box
    net = SimpleNamespace(input=np.zeros(l.batch * l.outputs, f32), truth=truth, train=True,
                          w=40, h=40, index=4)
    with pytest.raises(DataError, match=rf"\[yolo\] layer 4: truth of image 1 of the batch, "
                                        rf"box 1: .*{what}.*class in 0\.\.2"):
        l.forward(net)


def test_yolo_layer_ignores_what_follows_the_end_of_a_box_list():
    """Values after an image's first x == 0 are not boxes (as in Darknet)."""
    l = yolo_layer()
    truth = np.zeros(2 * 450, f32)
    truth[:5] = (.3, .3, .1, .1, 2)
    truth[10:15] = (np.nan, -4, 0, 0, 99)
    net = SimpleNamespace(input=np.zeros(l.batch * l.outputs, f32), truth=truth, train=True,
                          w=40, h=40, index=4)
    l.forward(net)
    assert l.stats["count"] <= 1


# -- region, iseg and detection losses --------------------------------------------------------------

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


# -- pooling and spans ------------------------------------------------------------------------------

def test_maxpool_window_of_a_billion_is_a_plane_maximum():
    """size=10^9 (padding size-1, stride 1) used to loop 10^18 times; every window now covers
    the image, so each output is its plane's maximum, the first in scan order winning."""
    b, c, h, w, size = 2, 3, 5, 4, 10 ** 9
    x = np.random.default_rng(5).normal(0, 1, b * c * h * w).astype(f32)
    x[7] = x.reshape(b * c, -1)[0].max()                      # a tie in plane 0
    pad = size - 1
    oh, ow = (h + pad - size) + 1, (w + pad - size) + 1
    out = np.zeros(b * c * oh * ow, f32)
    idx = np.zeros(out.size, np.int32)
    forward_maxpool_cpu(x, b, c, h, w, size, 1, pad, oh, ow, out, idx)
    planes = x.reshape(b * c, h * w)
    want = np.repeat(planes.max(1), oh * ow)
    want_idx = np.repeat(planes.argmax(1) + np.arange(b * c) * h * w, oh * ow)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(idx, want_idx)


def test_valid_span_against_brute_force():
    rng = np.random.default_rng(6)
    for _ in range(2000):
        col0 = int(rng.integers(-40, 40))
        stride = int(rng.integers(1, 6))
        n_out = int(rng.integers(1, 20))
        width = int(rng.integers(1, 30))
        lo, hi = valid_span(col0, stride, n_out, width)
        inside = [j for j in range(n_out) if 0 <= col0 + j * stride < width]
        assert 0 <= lo <= hi <= n_out
        assert list(range(lo, hi)) == inside


# -- divisions numba would raise on where C gives inf or NaN ----------------------------------------

def test_batch_variance_of_a_single_value_is_nan():
    """batch 1 on a 1x1 map: Darknet's 1/(n-1) is inf and the variance 0*inf = NaN; numba
    raised ZeroDivisionError."""
    from darknumba.kernels.blas import variance_cpu
    from darknumba.kernels.fused import mean_variance_cpu
    x = np.array([1.5, -2.0], f32)                        # batch 1, 2 channels, 1x1
    mean, var = np.zeros(2, f32), np.zeros(2, f32)
    mean_variance_cpu(x, 1, 2, 1, mean, var)
    np.testing.assert_array_equal(mean, x)
    assert np.all(np.isnan(var))
    var[:] = 0
    variance_cpu(x, mean, 1, 2, 1, var)
    assert np.all(np.isnan(var))


@pytest.mark.parametrize("body", [
    "[convolutional]\nsize=3\npad=1\nfilters=2\nbatch_normalize=1\n",      # direct kernel
    "[convolutional]\nsize=1\nfilters=2\nbatch_normalize=1\n",              # 1x1 direct
    ("[convolutional]\nsize=3\npad=1\nfilters=2\nbatch_normalize=1\n"
     "[convolutional]\nsize=3\npad=1\nfilters=2\nbatch_normalize=1\n"),
    "[connected]\noutput=3\nbatch_normalize=1\n",
])
def test_batch_norm_training_on_one_value_per_channel(tmp_path, body):
    """A cfg that trains batch norm on 1 image of 1x1 pixels: NaN outputs (as Darknet), which
    training reports as a NaN loss, not a ZeroDivisionError from inside a kernel."""
    from darknumba import parse_network_cfg
    p = tmp_path / "one.cfg"
    p.write_text("[net]\nbatch=1\nwidth=1\nheight=1\nchannels=20\n" + body)
    net = parse_network_cfg(p)
    out = net.forward(np.ones(20, f32), train=True)
    assert np.all(np.isnan(out))
    net.backward()


def test_batch_norm_backward_through_a_zero_divisor():
    """rolling_variance = -1e-5 (a hostile weights file) makes sqrt(var + 1e-5) zero in the
    test-mode backward: 1/0 = inf, as in C."""
    from darknumba.kernels.blas import mean_delta_cpu
    from darknumba.kernels.fused import batchnorm_backward
    var = np.array([-0.00001, 1.0], f32)
    delta = np.ones(4, f32)
    md = np.zeros(2, f32)
    mean_delta_cpu(delta, var, 1, 2, 2, md)
    assert md[0] == -np.inf and md[1] == pytest.approx(-2 / math.sqrt(1.00001), rel=1e-6)
    z = np.zeros(2, f32)
    batchnorm_backward(delta, np.ones(4, f32), z, var, np.ones(2, f32), 1, 2, 2, z.copy(),
                       z.copy(), z.copy(), z.copy(), z.copy(), np.ones(2, f32))
    assert not np.any(np.isfinite(delta[:2])) and np.all(np.isfinite(delta[2:]))


def test_l2norm_of_an_all_zero_pixel_is_nan():
    from darknumba.kernels.lrn import l2normalize_cpu
    x = np.array([0, 3, 0, 4], f32)                       # 2 channels x 2 pixels
    dx = np.zeros(4, f32)
    l2normalize_cpu(x, dx, 1, 2, 2)
    assert np.isnan(x[0]) and np.isnan(x[2])
    np.testing.assert_allclose(x[[1, 3]], [.6, .8], rtol=1e-6)


def test_softmax_of_all_minus_infinity_is_nan():
    from darknumba.kernels.softmax import softmax_cpu, softmax_cpu_one
    x = np.array([-np.inf, -np.inf, -np.inf, 0, 1, 2], f32)
    out = np.zeros(6, f32)
    softmax_cpu(x, 3, 1, 6, 2, 3, 1, 1.0, out)
    assert np.all(np.isnan(out[:3]))
    e = np.exp(np.arange(3.0))
    np.testing.assert_allclose(out[3:], e / e.sum(), rtol=1e-6)
    one = np.zeros(3, f32)
    softmax_cpu_one(x[:3], 3, 1.0, one)
    assert np.all(np.isnan(one))


# -- shapes whose kernels would index outside their maps ------------------------------------------

NET = "[net]\nbatch=1\nwidth=16\nheight=8\nchannels=3\n"


def cfg(tmp_path, body, name="s.cfg"):
    p = tmp_path / name
    p.write_text(NET + body)
    return p


def test_shortcut_needs_one_scale_in_both_directions(tmp_path):
    """16x8 onto 8x8 is 2 across but 1 down: shortcut_cpu would read rows 8..14 of an 8-row
    map (Darknet asserts it; the check allowed it when each side divided the other)."""
    from darknumba import parse_network_cfg
    from darknumba.errors import CfgError
    body = "[maxpool]\n[crop]\ncrop_height=8\ncrop_width=8\n[shortcut]\nfrom=0\n"
    with pytest.raises(CfgError, match=r"s\.cfg:11: \[shortcut\] from: layer 0 \(16x8\) and the "
                                       r"previous layer \(8x8\) do not differ by one integer scale"):
        parse_network_cfg(cfg(tmp_path, body))


@pytest.mark.parametrize("body,pattern", [
    ("[convolutional]\nfilters=6\n[reorg]\nstride=2\n", r"reorg needs channels \(6\) divisible by stride² \(4\)"),
    ("[reorg]\nextra=-5\n", r"\[reorg\] extra: expected at least 0, found -5"),
])
def test_reorg_shapes(tmp_path, body, pattern):
    from darknumba import parse_network_cfg
    from darknumba.errors import CfgError
    with pytest.raises(CfgError, match=pattern):
        parse_network_cfg(cfg(tmp_path, body))


@pytest.mark.parametrize("text,pattern", [
    ("a -1\nb 0\nc 5\n", r"node 2 \(c\): parent 5 must be -1 \(a root\) or an earlier node \(0\.\.1\)"),
    ("a 1\nb 0\n", r"node 0 \(a\): parent 1 must be -1"),             # a cycle
    ("a -1\nb x\n", r"node 1 \(b\): parent 'x' is not an integer"),
    ("a -1\nb ٠\n", r"node 1 \(b\): parent '٠' is not an integer"),
    ("\n\n", r"no `name parent` lines"),
])
def test_class_tree_indexes(tmp_path, text, pattern):
    from darknumba.errors import CfgError
    from darknumba.tree import read_tree
    p = tmp_path / "t.tree"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(CfgError, match=pattern):
        read_tree(p)


def test_class_tree_that_is_not_text(tmp_path):
    from darknumba.errors import CfgError
    from darknumba.tree import read_tree
    p = tmp_path / "t.tree"
    p.write_bytes(b"a -1\nb \xff\xfe 0\n")
    with pytest.raises(CfgError, match=r"t\.tree: not a class tree: not UTF-8 text \(byte 7\)"):
        read_tree(p)


def test_region_class_map_outside_the_classes(tmp_path):
    from darknumba import parse_network_cfg
    from darknumba.errors import CfgError
    (tmp_path / "m.map").write_text("0\n1\n7\n")
    body = ("[convolutional]\nfilters=16\n[region]\nclasses=3\ncoords=4\nnum=2\nmap=" +
            str(tmp_path / "m.map") + "\n")
    with pytest.raises(CfgError, match=r"\[region\] map: the class map sends ids to 7, outside "
                                       r"the layer's classes 0\.\.2"):
        parse_network_cfg(cfg(tmp_path, body))
