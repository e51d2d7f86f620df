"""Kernels fed NaN, Inf, negative and out-of-range values (yolo detections, box maths and
NMS, the yolo loss) stay inside their buffers and give what a plain reference gives; the yolo
layer refuses truths the kernels would index with.

Outputs are views into larger buffers whose guard cells hold a sentinel: a write past the end
changes one (numba checks no bounds unless NUMBA_BOUNDSCHECK=1). A negative index wraps round
to the view's own end, so the expected values are stated in full where one could arise."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import guarded, guards_intact

from darknumba.vision.box import Detections, box_corners, do_nms_sort, get_yolo_detections
from darknumba.errors import DataError
from darknumba.vision.image import letterbox_size
from darknumba.kernels.box import box_iou, get_yolo_detections_cpu, yolo_num_detections_cpu
from darknumba.kernels.yolo import (_num_truths, box_iou as yolo_box_iou, truth_cell,
                                    truth_class, yolo_objectness_deltas, yolo_truth_deltas)
from darknumba.layers.yolo import YoloLayer

f32 = np.float32
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


# -- [route]'s copies at batch > 1 -----------------------------------------------------------------
def test_copy_parts_against_numpy_and_refuses_parts_outside_their_buffers():
    """copy_parts_cpu copies (or adds) each image's part as numpy's strided copy does, the same
    floats, writing nowhere else; a part or a batch beyond either buffer is refused before
    anything is written."""
    from darknumba.kernels.blas import copy_parts_cpu
    rng = np.random.default_rng(7)
    batch, src_size, dst_size, first, part, offset = 3, 1000, 1500, 200, 700, 650
    src = rng.standard_normal(batch * src_size).astype(f32)
    for add in (False, True):
        before = rng.standard_normal(batch * dst_size).astype(f32)
        dst, big = guarded(before.size, fill=0.0)
        dst[:] = before
        copy_parts_cpu(src, src_size, first, part, dst, dst_size, offset, batch, add)
        want = before.reshape(batch, dst_size).copy()
        part_src = src.reshape(batch, src_size)[:, first:first + part]
        if add:
            want[:, offset:offset + part] += part_src
        else:
            want[:, offset:offset + part] = part_src
        np.testing.assert_array_equal(dst.reshape(batch, dst_size), want)
        assert guards_intact(big)
    for bad in ((first + 301, part, offset), (first, part, offset + 151),
                (-1, part, offset), (first, part, -1)):
        dst = np.zeros(batch * dst_size, f32)
        with pytest.raises(ValueError, match="outside its buffer"):
            copy_parts_cpu(src, src_size, bad[0], bad[1], dst, dst_size, bad[2], batch, False)
        assert not dst.any()
    with pytest.raises(ValueError, match="outside its buffer"):
        copy_parts_cpu(src, src_size, first, part, np.zeros(dst_size, f32), dst_size, offset,
                       batch, False)
