"""AlexeyAB's [yolo] loss (kernels/yolo_ab_loss.py process_batch) against naive_yolo_ab.Loss, a
loop-by-loop translation of its forward_yolo_layer, on configurations like the cfgs that use
them (yolov4-tiny, yolov4, yolov4-csp) and on the corners: truths sharing a cell, truth_thresh,
focal loss, label smoothing, counters_per_class, class maps, bad class ids, NaN objectness,
NaN/Inf box gradients; then dx_box_iou against finite differences of the IoU functions."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

import naive_yolo_ab as naive
from darknumba.errors import DarknumbaError
from darknumba.kernels.box_ab import dx_box_iou
from darknumba.layers.yolo_ab import IOU_KIND_NAMES
from test_yolo_ab import build, yolo_text

f32 = np.float32
SMALL_ANCHORS = "6,8, 10,14, 16,12, 20,26, 30,24, 40,44"          # for a 64 x 64 network
NET = 64


def truth_array(l, images):
    t = np.zeros(l.batch * l.truths, f32)
    for b, boxes in enumerate(images):
        for k, box in enumerate(boxes):
            o = b * l.truths + k * l.truth_size
            t[o:o + 5] = box
    return t


def random_boxes(rng, k, classes):
    return [(*rng.uniform(0.02, 0.98, 2), *rng.uniform(0.08, 0.6, 2), rng.integers(0, classes))
            for _ in range(k)]


def run(text, images, seed=0, classes=3, mask="1,2,3", x=None, check=True):
    """Forward one layer in train mode and compare delta, output, statistics and cost with
    the reference."""
    l, _ = build(yolo_text(text, classes, mask, SMALL_ANCHORS), classes=classes,
                 n=len(mask.split(",")), h=4, w=5, batch=len(images))
    rng = np.random.default_rng(seed)
    if x is None:
        x = (rng.uniform(0.05, 0.95, l.batch * l.outputs) if l.new_coords
             else rng.normal(0, 1.5, l.batch * l.outputs)).astype(f32)
    truth = truth_array(l, images)
    l.forward(SimpleNamespace(input=x, train=True, truth=truth, w=NET, h=NET, index=7))
    if not check:
        return l, None
    act = naive.forward(x, l.batch, l.n, l.classes, l.w * l.h, l.new_coords, l.scale_x_y)
    ref = naive.Loss(l, NET, NET, IOU_KIND_NAMES[l.iou_loss], IOU_KIND_NAMES[l.iou_thresh_kind])
    delta, out, st = ref.run(act, truth)
    np.testing.assert_allclose(l.delta, delta, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(l.output, out, rtol=2e-5, atol=2e-6)
    s = l.stats
    count = max(st["count"], 1)
    assert s["count"] == st["count"] and s["total_bbox"] == st["total_bbox"]
    assert s["rewritten_bbox"] == st["rewritten"] and s["skipped_truths"] == st["bad_class"]
    assert s["nan_deltas"] == st["nan"]
    for key, ref_key in [("avg_iou", "iou"), ("giou", "giou"), ("obj", "obj"),
                         ("recall50", "recall"), ("recall75", "recall75")]:
        assert s[key] == pytest.approx(st[ref_key] / count, rel=1e-4, abs=1e-6, nan_ok=True), key
    assert s["no_obj"] == pytest.approx(st["anyobj"] / (l.w * l.h * l.n * l.batch), rel=1e-5)
    # the cost as the C ends forward_yolo_layer (show_details=1 unless set)
    sq = float(np.sum(delta ** 2))
    box = delta.reshape(l.batch, l.n, 5 + l.classes, -1)[:, :, :4]
    class_loss = l.obj_normalizer * (sq - float(np.sum(box ** 2)))
    if l.show_details and IOU_KIND_NAMES[l.iou_loss] != "mse":
        tot = st["giou_loss"] if IOU_KIND_NAMES[l.iou_loss] == "giou" else st["iou_loss"]
        cost = l.iou_normalizer * tot / count + class_loss
    else:
        cost = sq
    assert l.cost == pytest.approx(cost, rel=1e-4, abs=1e-6)
    assert s["class_loss"] == pytest.approx(class_loss / l.batch, rel=1e-4, abs=1e-6)
    assert s["loss"] == pytest.approx(sq / l.batch, rel=1e-4, abs=1e-6)
    return l, st


CFGS = {
    "defaults (mse)": "",
    "yolov4-tiny": "scale_x_y=1.05\niou_normalizer=0.07\niou_loss=ciou\nignore_thresh=.5\n",
    "yolov4": "scale_x_y=1.1\niou_thresh=0.213\ncls_normalizer=1.0\niou_normalizer=0.07\n"
              "iou_loss=ciou\nnms_kind=greedynms\nbeta_nms=0.6\nmax_delta=5\nignore_thresh=.4\n",
    "yolov4-csp": "scale_x_y=2.0\nnew_coords=1\nobjectness_smooth=1\niou_thresh=0.2\n"
                  "iou_normalizer=0.05\nobj_normalizer=1.0\ncls_normalizer=0.5\niou_loss=ciou\n"
                  "max_delta=20\nignore_thresh=.3\n",
    "giou": "iou_loss=giou\niou_thresh=.3\niou_thresh_kind=giou\nignore_thresh=.3\n",
    "diou": "iou_loss=diou\nscale_x_y=1.2\niou_thresh=.25\niou_thresh_kind=diou\n",
    "iou": "iou_loss=iou\ntruth_thresh=.3\nignore_thresh=.2\n",
    "mse new_coords": "new_coords=1\nscale_x_y=2\n",
    "focal": "focal_loss=1\ntruth_thresh=.4\nignore_thresh=.25\n",
    "smoothing": "label_smooth_eps=.1\ncounters_per_class=50,10,200\ncls_normalizer=.5\n"
                 "objectness_smooth=1\ntruth_thresh=.5\nignore_thresh=.25\niou_loss=ciou\n"
                 "max_delta=3\n",
    "clip": "iou_loss=ciou\nmax_delta=0.02\niou_normalizer=2\n",
    "short": "iou_loss=giou\nshow_details=0\n",
}


@pytest.mark.parametrize("name", list(CFGS))
@pytest.mark.parametrize("seed", [1, 2])
def test_loss_matches_reference(name, seed):
    rng = np.random.default_rng(seed)
    images = [random_boxes(rng, rng.integers(4, 14), 3), random_boxes(rng, 3, 3), []]
    l, st = run(CFGS[name], images, seed)
    assert st["count"] > 0 and l.delta.any()


def test_truths_sharing_a_cell_and_anchor():
    """A second truth at the same cell and anchor rewrites the box (counted) and only its own
    class delta; a third class with smoothing and multipliers."""
    same = [(0.51, 0.52, 0.3, 0.36, 0), (0.53, 0.55, 0.31, 0.37, 2), (0.52, 0.51, 0.29, 0.35, 1)]
    for text in ("", "iou_loss=ciou\nlabel_smooth_eps=.2\ncounters_per_class=5,10,20\n"):
        l, st = run(text, [same, same[:1]], seed=3)
        assert st["rewritten"] >= 2


def test_class_map_and_bad_class_ids(tmp_path):
    m = tmp_path / "c.map"
    m.write_text("2\n0\n1\n")
    images = [[(0.3, 0.3, 0.3, 0.3, 0), (0.6, 0.6, 0.2, 0.4, 1), (0.7, 0.2, 0.3, 0.2, 5),
               (0.2, 0.7, 0.3, 0.2, -1)], [(0.5, 0.5, 0.4, 0.4, 2.7)]]
    with pytest.warns(UserWarning, match="class ids outside"):
        l, st = run(f"map={m}\niou_loss=ciou\ntruth_thresh=.5\nignore_thresh=.2\n", images)
    assert l.stats["skipped_truths"] == 2 and st["count"] >= 2


def test_nan_objectness_is_zeroed_and_huge_sizes_give_zeroed_deltas():
    """A NaN objectness logit: zeroed in the output (an image with a truth); a huge w logit
    at a truth's cell: exp overflows, dx_box_iou's NaN/Inf become 0, counted."""
    l0, _ = build(yolo_text("", 3, "1,2,3", SMALL_ANCHORS), n=3, h=4, w=5, batch=1)
    x = np.random.default_rng(4).normal(0, 1.5, l0.outputs).astype(f32)
    v = x.reshape(3, 8, 4, 5)
    v[0, 4, 1, 1] = np.nan
    v[:, 2, 2, 2] = 120.0                       # cell (2, 2): w = e^120 * anchor = inf
    box = (0.5, 0.55, 0.31, 0.4, 1)             # centre in cell (2, 2), best anchor 3
    l, st = run("iou_loss=ciou\n", [[box]], x=x)
    assert np.isfinite(l.delta).all() and st["nan"] > 0 and l.stats["nan_deltas"] == st["nan"]
    assert l.output.reshape(3, 8, 4, 5)[0, 4, 1, 1] == 0


def test_ignore_rule_needs_a_class_over_a_quarter():
    """Anchor 2 (16 x 12) predicted exactly at a 10 x 14 truth's cell: IoU .57 > .5, yet its
    no-object delta stays unless some class prob there is > 0.25 (any class; objectness,
    here .047, not multiplied in)."""
    l0, _ = build(yolo_text("", 3, "1,2,3", SMALL_ANCHORS), n=3, h=4, w=5, batch=1)
    truth = (0.5, 0.625, 10 / 64, 14 / 64, 0)          # anchor 1's size, centred in cell (2, 2)
    for classes_logit, zeroed in [(-3.0, False), (0.0, True)]:
        x = np.full((3, 8, 4, 5), -3.0, f32)
        x[:, 0:2] = 0.0                                 # centred in each cell
        x[:, 2:4] = 0.0                                 # exactly the anchor sizes
        x[:, 5:] = classes_logit
        l, _ = run("ignore_thresh=.5\n", [[truth]], x=x.ravel())
        wh = 20
        obj = l.output[4 * wh + 2 * 5 + 2 + 8 * wh]     # anchor index 1 (anchor 2), same cell
        d = l.delta[4 * wh + 2 * 5 + 2 + 8 * wh]
        assert (d == 0) == zeroed and (zeroed or d == pytest.approx(-obj))


def test_two_hundred_truths():
    rng = np.random.default_rng(8)
    l, st = run("iou_loss=ciou\n", [random_boxes(rng, 200, 3)], check=True)
    assert l.truths == 1200 and st["count"] > 20


@pytest.mark.parametrize("bad", [(np.nan, 0.5, 0.1, 0.1, 0), (1.0, 0.5, 0.1, 0.1, 0),
                                 (0.5, -0.1, 0.1, 0.1, 0), (0.5, 0.5, -0.1, 0.1, 0),
                                 (0.5, 0.5, 0.1, 0, 0), (0.5, 0.5, 0.1, 0.1, np.nan)])
def test_bad_truths_are_refused(bad):
    with pytest.raises(DarknumbaError, match=r"image 1, box 1 is .*centres must lie in"):
        run("", [[(0.5, 0.5, 0.2, 0.2, 0)], [(0.4, 0.4, 0.2, 0.2, 1), bad]], check=False)


def test_stats_line():
    l, _ = run("iou_loss=ciou\niou_normalizer=0.07\n", [[(0.5, 0.5, 0.3, 0.3, 1)]], seed=5)
    s = l.stats
    assert l.stats_line() == (
        f"v3 (iou loss, Normalizer: (iou: 0.07, obj: 1.00, cls: 1.00) Region 7 Avg (IOU: "
        f"{s['avg_iou']:f}), count: 1, class_loss = {s['class_loss']:f}, iou_loss = "
        f"{s['iou_loss']:f}, total_loss = {s['loss']:f}")
    l, _ = run("iou_loss=giou\nshow_details=0\n", [[]], seed=5)
    assert l.stats_line() == (f"v3 (giou loss, Normalizer: (iou: 0.75, obj: 1.00, cls: 1.00) "
                              f"Region 7 Avg (IOU: 0.000000), count: 1, total_loss = "
                              f"{l.stats['loss']:f}")
    assert l.stats["count"] == 0 and l.cost == pytest.approx(l.stats["loss"], rel=1e-6)


# -- dx_box_iou against finite differences --------------------------------------------------

def _fd(f, box, k, eps=1e-6):
    hi, lo = list(box), list(box)
    hi[k] += eps
    lo[k] -= eps
    return (f(hi) - f(lo)) / (2 * eps)


def _pairs(rng, k):
    """Overlapping prediction / truth pairs in general position."""
    out = []
    while len(out) < k:
        t = (*rng.uniform(0.3, 0.7, 2), *rng.uniform(0.1, 0.4, 2))
        p = (t[0] + rng.normal(0, 0.05), t[1] + rng.normal(0, 0.05),
             t[2] * rng.uniform(0.5, 1.8), t[3] * rng.uniform(0.5, 1.8))
        if naive.box_iou(p, t) > 0.05:
            out.append((p, t))
    return out


def _kernel(p, t, kind):
    return np.array(dx_box_iou(*f32(p), *f32(t), {"iou": 0, "giou": 1, "diou": 3,
                                                 "ciou": 4}[kind]), np.float64)


@pytest.mark.parametrize("kind,f", [("iou", naive.box_iou), ("giou", naive.box_giou)])
def test_iou_gradients_are_finite_differences(kind, f):
    """IoU and GIoU: d/dx, d/dy exact; w, h carry twice d/dw (the C does not halve them)."""
    for p, t in _pairs(np.random.default_rng(10), 40):
        g = _kernel(p, t, kind)
        fd = np.array([_fd(lambda q: f(q, t), p, k) for k in range(4)]) * [1, 1, 2, 2]
        np.testing.assert_allclose(g, fd, rtol=1e-3, atol=2e-3)
        np.testing.assert_allclose(g, naive.dx_box_iou(p, t, kind), rtol=1e-3, atol=1e-4)


def _distance(p, t):
    """-S / C: DIoU's penalty with exponent 1, the one dx_box_iou differentiates."""
    cw, ch = naive._enclosing(p, t)
    return -((p[0] - t[0]) ** 2 + (p[1] - t[1]) ** 2) / (cw * cw + ch * ch)


def test_diou_gradient_against_finite_differences():
    """DIoU = IoU's gradient + the distance term: exact for w, h; for x (y), exact when the
    enclosing box does not move with x, otherwise off by 2 S C'/C^2 (the C's sign of the
    C' term is reversed)."""
    for p, t in _pairs(np.random.default_rng(11), 40):
        g = _kernel(p, t, "diou") - _kernel(p, t, "iou")
        fd = np.array([_fd(lambda q: _distance(q, t), p, k) for k in range(4)])
        np.testing.assert_allclose(g[2:], fd[2:], rtol=1e-3, atol=2e-3)
        for k, side in ((0, 2), (1, 3)):
            lo = p[k] - p[side] / 2 < t[k] - t[side] / 2
            hi = p[k] + p[side] / 2 > t[k] + t[side] / 2
            dc = (2 * (naive._enclosing(p, t)[k]) * (float(hi) - float(lo)))
            cw, ch = naive._enclosing(p, t)
            c = cw * cw + ch * ch
            s = (p[0] - t[0]) ** 2 + (p[1] - t[1]) ** 2
            np.testing.assert_allclose(g[k], fd[k] - 2 * s * dc / c ** 2, rtol=1e-3, atol=2e-3)
        np.testing.assert_allclose(_kernel(p, t, "diou"), naive.dx_box_iou(p, t, "diou"),
                                   rtol=1e-3, atol=1e-4)


def test_ciou_aspect_term_against_finite_differences():
    """CIoU adds alpha * 8/pi^2 (atan(tw/th) - atan(pw/ph)) * (ph, -pw): the gradient of
    -alpha v (alpha held constant) times (pw^2 + ph^2), as the CIoU paper drops that factor."""
    for p, t in _pairs(np.random.default_rng(12), 40):
        g = _kernel(p, t, "ciou") - _kernel(p, t, "diou")
        iou = naive.box_iou(p, t)

        def v(q):
            return 4 / math.pi ** 2 * (math.atan(t[2] / t[3]) - math.atan(q[2] / q[3])) ** 2
        alpha = v(p) / (1 - iou + v(p) + 1e-6)
        fd = np.array([_fd(lambda q: -alpha * v(q), p, k) for k in (2, 3)])
        np.testing.assert_allclose(g[2:], fd * (p[2] ** 2 + p[3] ** 2), rtol=2e-3, atol=1e-4)
        np.testing.assert_allclose(g[:2], 0, atol=1e-6)
        np.testing.assert_allclose(_kernel(p, t, "ciou"), naive.dx_box_iou(p, t, "ciou"),
                                   rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("size", [(2, 3, 8, 5), (1, 2, 6, 7), (1, 1, 6, 1)])
def test_sums_of_squares_as_the_c_adds_them(size):
    """|delta|^2 and its class/objectness part in four float lanes, bit for bit."""
    from darknumba.kernels.yolo_ab_loss import yolo_delta_squares
    b, n, entries, wh = size
    d = np.random.default_rng(1).normal(0, 3, b * n * entries * wh).astype(f32)
    t, p = yolo_delta_squares(d, b * n, entries, wh)
    masked = d.reshape(b * n, entries, wh).copy()
    masked[:, :4] = 0
    assert t == naive.sum_squares_sse(d) and p == naive.sum_squares_sse(masked.ravel())
    assert t == pytest.approx(float(np.sum(d.astype(np.float64) ** 2)), rel=1e-5)
