"""AlexeyAB's [Gaussian_yolo] (layers/gaussian_yolo.py, kernels/gaussian_yolo*.py): its keys and
defaults, forward activations, loss deltas and statistics, detections, against the loop-by-loop
reference written from its C (tests/naive/gaussian_yolo.py); the Gaussian box deltas against
finite differences of the negative log-likelihood they descend. (Recorded AlexeyAB runs:
tests/networks/test_ab_new_layers.py.)"""
import math
from types import SimpleNamespace

import numpy as np
import pytest
from naive import gaussian_yolo as naive

from darknumba.cfg import parse_cfg_text
from darknumba.dialect import quirks_for
from darknumba.errors import CfgError, DataError
from darknumba.kernels.box_ab import DEFAULT_NMS, GIOU, GREEDY_NMS, IOU, MSE
from darknumba.kernels.gaussian_yolo import gaussian_delta_squares
from darknumba.layers import LAYER_TYPES
from darknumba.layers.base import SizeParams
from darknumba.layers.gaussian_yolo import GaussianYoloLayer
from darknumba.layers.yolo_ab import FLT_MAX, IOU_KIND_NAMES

f32 = np.float32
ANCHORS = "6,8, 10,14, 16,12, 20,26, 30,24, 40,44"
NET = 64


def text(extra="", classes=3, mask="1,2,3"):
    return (f"[Gaussian_yolo]\nmask={mask}\nanchors={ANCHORS}\nclasses={classes}\nnum=6\n"
            + extra)


def build(extra="", classes=3, mask="1,2,3", h=4, w=5, batch=2, c=None):
    s = parse_cfg_text(text(extra, classes, mask), "g.cfg")[0]
    n = len(mask.split(","))
    c = n * (classes + 9) if c is None else c
    net = SimpleNamespace(layers=[], quirks=quirks_for("alexeyab"))
    params = SizeParams(batch=batch, h=h, w=w, c=c, inputs=h * w * c, index=3, net=net,
                        path="g.cfg")
    return LAYER_TYPES[s.type].from_cfg(s, params), s


def truth_of(l, images):
    t = np.zeros(l.batch * l.truths, f32)
    for b, boxes in enumerate(images):
        for k, box in enumerate(boxes):
            o = b * l.truths + k * l.truth_size
            t[o:o + len(box)] = box
    return t


def boxes(rng, k, classes):
    return [(*rng.uniform(0.03, 0.97, 2), *rng.uniform(0.1, 0.6, 2), rng.integers(0, classes))
            for _ in range(k)]


def test_keys_and_defaults():
    l, s = build()
    assert isinstance(l, GaussianYoloLayer) and l.type == "gaussian_yolo"
    assert (l.max_boxes, l.truth_size, l.truths, l.c) == (200, 6, 1200, 3 * 12)
    assert (l.iou_normalizer, l.uc_normalizer, l.obj_normalizer, l.cls_normalizer) == \
        (0.75, 1.0, 1.0, 1.0)
    assert (l.iou_loss, l.iou_thresh_kind, l.yolo_point, l.max_delta) == (MSE, IOU, 1, FLT_MAX)
    assert not s.unused()
    l, s = build("iou_loss=giou\niou_thresh=0.213\nuc_normalizer=0.5\nyolo_point=left_top\n"
                 "nms_kind=greedynms\nmax=20\nscale_x_y=1.1\nrandom=1\ncounters_per_class=5,10,20")
    assert (l.iou_loss, l.iou_thresh, l.uc_normalizer, l.yolo_point, l.nms_kind) == \
        (GIOU, 0.213, 0.5, 2, GREEDY_NMS)
    assert (l.max_boxes, l.truths, l.random) == (20, 120, 1.0)
    np.testing.assert_allclose(l.classes_multipliers, [4, 2, 1])
    assert not s.unused()
    assert build("nms_kind=cornersnms")[0].nms_kind == DEFAULT_NMS    # what its C computes


@pytest.mark.parametrize("extra, match", [
    ("", r"has 30 filters, but \(classes\+9\)\*len\(mask\) = \(3\+9\)\*3 = 36"),
    ("yolo_point=middle", "yolo_point: expected one of center, left_top, right_bottom"),
])
def test_bad_cfg_is_a_clear_error(extra, match):
    with pytest.raises(CfgError, match=match):
        build(extra, c=30 if not extra else None)


def run(extra="", images=None, seed=0, x=None, batch=2):
    l, _ = build(extra, batch=batch)
    rng = np.random.default_rng(seed)
    if images is None:
        images = [boxes(rng, 3, 3) for _ in range(batch)]
    x = rng.normal(0, 1.5, l.batch * l.outputs).astype(f32) if x is None else x
    truth = truth_of(l, images)
    l.forward(SimpleNamespace(input=x, train=True, truth=truth, w=NET, h=NET, index=9))
    out = naive.forward(x, l.batch, l.n, l.classes, l.w * l.h, float(l.scale_x_y))
    np.testing.assert_allclose(l.output, out, rtol=2e-6, atol=2e-7)
    ref = naive.Loss(l, NET, NET, IOU_KIND_NAMES[l.iou_loss], IOU_KIND_NAMES[l.iou_thresh_kind])
    delta, st = ref.run(l.output, truth)
    return l, delta, st


CASES = {
    "mse": "",
    "giou, iou_thresh (Gaussian_yolov3_BDD)": "iou_loss=giou\niou_thresh=0.213\n"
                                              "iou_normalizer=0.5\nignore_thresh=.5",
    "ciou, scale_x_y, max_delta": "iou_loss=ciou\nscale_x_y=1.05\nmax_delta=0.3",
    "smooth, label smoothing, counters": "objectness_smooth=1\nlabel_smooth_eps=0.1\n"
                                         "counters_per_class=30,10,5\nignore_thresh=0.1",
    "truth_thresh below 1": "truth_thresh=0.3\nignore_thresh=0.2",
    "left_top": "yolo_point=left_top",
    "right_bottom, diou": "yolo_point=right_bottom\niou_loss=diou",
}


@pytest.mark.parametrize("case", CASES)
def test_loss_matches_the_reference(case):
    l, delta, st = run(CASES[case])
    np.testing.assert_allclose(l.delta, delta, rtol=3e-4, atol=3e-5)
    s = l.stats
    assert s["count"] == st["count"] > 0
    for key, ref in [("avg_iou", "iou"), ("obj", "obj"), ("recall50", "recall")]:
        assert s[key] == pytest.approx(st[ref] / st["count"], rel=1e-4, abs=1e-6), key
    assert s["no_obj"] == pytest.approx(st["anyobj"] / (l.w * l.h * l.n * l.batch), rel=1e-5)
    assert l.cost == pytest.approx(float(np.sum(delta ** 2)), rel=2e-4)
    d = delta.reshape(l.batch, l.n, 9 + l.classes, -1)
    assert s["class_loss"] == pytest.approx(float(np.sum(d[:, :, 8:] ** 2)) / l.batch, rel=2e-4)
    assert s["uc_loss"] == pytest.approx(float(np.sum(d[:, :, 4:8] ** 2)) / l.batch, rel=2e-3,
                                         abs=1e-5)
    line = l.stats_line()
    assert line.startswith("Region 9 Avg IOU: ") and ", uc_loss = " in line
    assert line.endswith(f"total_loss = {s['loss']:.2f}")


def test_gaussian_deltas_descend_the_negative_log_likelihood():
    """MSE mode, one truth, one class: the trained anchor's eight box deltas are
    0.5 (2 - w h) times the normaliser times minus the gradient, w.r.t. the layer's output,
    of -log N(target; mean, sigma) with the density's sigma + 0.3 (float64 central
    differences)."""
    l, _ = build("iou_normalizer=0.6\nuc_normalizer=0.8", batch=1)
    box = (0.41, 0.58, 0.3, 0.22, 1)
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, l.outputs).astype(f32)
    truth = truth_of(l, [[box]])
    l.forward(SimpleNamespace(input=x, train=True, truth=truth, w=NET, h=NET, index=0))
    wh = l.w * l.h
    cell = int(box[1] * l.h) * l.w + int(box[0] * l.w)
    ious = [naive.ab.box_iou((0, 0, l.biases[2 * a] / NET, l.biases[2 * a + 1] / NET),
                             (0, 0, box[2], box[3])) for a in range(l.total)]
    a = int(np.argmax(ious))
    m = list(l.mask).index(a)
    out = l.output.astype(np.float64)
    base = m * (9 + l.classes) * wh + cell
    i, j = cell % l.w, cell // l.w
    targets = [box[0] * l.w - i, box[1] * l.h - j, math.log(box[2] * NET / l.biases[2 * a]),
               math.log(box[3] * NET / l.biases[2 * a + 1])]

    def nll(o):
        total = 0.0
        for k in range(4):
            mean, sg = o[base + 2 * k * wh], o[base + (2 * k + 1) * wh]
            total += ((targets[k] - mean) ** 2 / (2 * sg * sg) + math.log(sg + 0.3))
        return total

    scale = 2 - box[2] * box[3]
    for e, norm in [(0, 0.6), (1, 0.8), (2, 0.6), (3, 0.8), (4, 0.6), (5, 0.8), (6, 0.6),
                    (7, 0.8)]:
        k = base + e * wh
        h = 1e-6
        up, down = out.copy(), out.copy()
        up[k] += h
        down[k] -= h
        grad = (nll(up) - nll(down)) / (2 * h)
        assert l.delta[k] == pytest.approx(-0.5 * scale * norm * grad, rel=2e-3, abs=1e-5), e


def test_stats_line_without_truths_prints_cs_nan():
    l, _ = build(batch=1)
    l.forward(SimpleNamespace(input=np.zeros(l.outputs, f32), train=True,
                              truth=np.zeros(l.truths, f32), w=NET, h=NET, index=4))
    assert l.stats_line().startswith("Region 4 Avg IOU: -nan, Class: -nan, Obj: -nan, "
                                     "No Obj: 0.500000, .5R: -nan, .75R: -nan,  count: 0, ")


def test_bad_truth_is_a_clear_error():
    l, _ = build(batch=1)
    truth = truth_of(l, [[(0.5, 0.5, 0.2, 0.2, 7)]])
    with pytest.raises(DataError, match=r"\[Gaussian_yolo\] layer 0: .*class = 7.*0\.\.2"):
        l.forward(SimpleNamespace(input=np.zeros(l.outputs, f32), train=True, truth=truth,
                                  w=NET, h=NET, index=0))


@pytest.mark.parametrize("letter, relative", [(False, True), (True, True), (True, False)])
def test_detections_match_the_reference(letter, relative):
    l, _ = build("scale_x_y=1.05", batch=2)
    rng = np.random.default_rng(5)
    x = rng.normal(0, 2, l.batch * l.outputs).astype(f32)
    l.forward(SimpleNamespace(input=x, train=False, truth=None, w=NET, h=NET, index=0))
    dets, uc = l.detections_with_uncertainty(640, 480, NET, NET, 0.3, relative, 1, letter)
    ref = naive.detections(l.output.astype(np.float64), 1, l, NET, NET, 0.3, 640, 480, relative,
                           letter)
    assert len(dets) == len(ref) > 3
    np.testing.assert_allclose(dets.bbox, [r[0] for r in ref], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dets.objectness, [r[1] for r in ref], rtol=1e-6)
    np.testing.assert_allclose(dets.prob, [r[2] for r in ref], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(uc, [r[3] for r in ref], rtol=1e-6)
    same = l.detections(SimpleNamespace(w=NET, h=NET), 640, 480, 0.3, 0.5, relative, 1, letter)
    np.testing.assert_array_equal(same.prob, dets.prob)


def test_delta_squares_are_the_three_sums():
    rng = np.random.default_rng(1)
    n_rows, entries, wh = 5, 12, 7
    d = rng.normal(0, 1, n_rows * entries * wh).astype(f32)
    total, cls, except_uc = gaussian_delta_squares(d, n_rows, entries, wh)
    r = d.astype(np.float64).reshape(n_rows, entries, wh) ** 2
    assert total == pytest.approx(r.sum(), rel=1e-6)
    assert cls == pytest.approx(r[:, 8:].sum(), rel=1e-6)
    assert except_uc == pytest.approx(r.sum() - r[:, 4:8].sum(), rel=1e-6)
