"""AlexeyAB's [yolo] (layers/yolo_ab.py, kernels/yolo_ab.py, kernels/box_ab.py, box_ab.py):
its keys and defaults, its forward and detections, its NMS kinds and print-out, against plain
numpy references written from AlexeyAB's C (naive_yolo_ab.py)."""
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import naive_yolo_ab as naive
from darknumba.vision.box import Detections, do_nms_sort
from darknumba.vision.box_ab import detection_results_v3, do_nms, format_lines_v3
from darknumba.cfg import parse_cfg_text
from darknumba.dialect import quirks_for
from darknumba.errors import CfgError
from darknumba.layers import LAYER_TYPES
from darknumba.layers.base import SizeParams
from darknumba.layers.yolo import AB_YOLO_KEYS, YoloLayer
from darknumba.layers.yolo_ab import FLT_MAX, AbYoloLayer
from darknumba.kernels import box_ab
from darknumba.kernels.box_ab import CIOU, DEFAULT_NMS, DIOU_NMS, GIOU, GREEDY_NMS, IOU, MSE

f32 = np.float32
ANCHORS = "10,14, 23,27, 37,58, 81,82, 135,169, 344,319"


def build(text, dialect="alexeyab", classes=3, n=3, h=4, w=5, batch=2, index=1, path="t.cfg"):
    """One [yolo] section built as a network of `dialect` would build it, its input the
    (classes + 5) * n channels it needs."""
    s = parse_cfg_text(text, path)[0]
    net = SimpleNamespace(layers=[], quirks=quirks_for(dialect))
    c = n * (classes + 5)
    params = SizeParams(batch=batch, h=h, w=w, c=c, inputs=h * w * c, index=index, net=net,
                        path=path)
    return LAYER_TYPES[s.type].from_cfg(s, params), s


def yolo_text(extra="", classes=3, mask="3,4,5", anchors=ANCHORS):
    return (f"[yolo]\nmask={mask}\nanchors={anchors}\nclasses={classes}\nnum=6\n" + extra)


# -- 1. keys and defaults --------------------------------------------------------------------

def test_alexeyab_defaults():
    l, s = build(yolo_text())
    assert isinstance(l, AbYoloLayer)
    assert (l.max_boxes, l.truth_size, l.truths) == (200, 6, 1200)
    assert (l.iou_normalizer, l.obj_normalizer, l.cls_normalizer, l.delta_normalizer) == \
        (0.75, 1.0, 1.0, 1.0)
    assert (l.iou_loss, l.iou_thresh_kind, l.nms_kind, l.beta_nms) == (MSE, IOU, DEFAULT_NMS, 0.6)
    assert (l.scale_x_y, l.new_coords, l.objectness_smooth, l.focal_loss) == (1.0, 0, 0, 0)
    assert (l.max_delta, l.iou_thresh, l.truth_thresh, l.ignore_thresh) == (FLT_MAX, 1.0, 1.0, 0.5)
    assert (l.label_smooth_eps, l.jitter, l.resize_range, l.random, l.show_details) == \
        (0.0, 0.2, 1.0, 0.0, 1)
    assert l.classes_multipliers.size == 0 and l.map.size == 0 and l.embedding_layer is None
    assert l.mask.tolist() == [3, 4, 5] and l.biases[6:8].tolist() == [81, 82]
    assert not s.unused()


def test_pjreddie_defaults_unchanged_and_ab_keys_refused():
    l, _ = build(yolo_text(), dialect="pjreddie")
    assert type(l) is YoloLayer and (l.max_boxes, l.truths) == (90, 450)
    for key in AB_YOLO_KEYS:
        with pytest.raises(CfgError, match=rf"t.cfg:6: \[yolo\] {key}: .*dialect='alexeyab'"):
            build(yolo_text(f"{key}=1\n"), dialect="pjreddie")


def test_every_key_parsed(tmp_path):
    mapfile = tmp_path / "c.map"
    mapfile.write_text("2\n0\n1\n")
    l, s = build(yolo_text(
        "max=50\nshow_details=0\nmax_delta=5\ncounters_per_class=100, 25, 0\n"
        "label_smooth_eps=0.1\nscale_x_y=1.05\nobjectness_smooth=1\nnew_coords=1\n"
        "iou_normalizer=0.07\nobj_normalizer=4\ncls_normalizer=0.5\ndelta_normalizer=2\n"
        "iou_loss=ciou\niou_thresh_kind=giou\nbeta_nms=0.7\nnms_kind=diounms\njitter=.3\n"
        "resize=1.5\nfocal_loss=1\nignore_thresh=.7\ntruth_thresh=.9\niou_thresh=0.213\n"
        "random=1.4\ntrack_history_size=7\nsim_thresh=.5\ndets_for_track=2\n"
        "dets_for_show=3\ntrack_ciou_norm=.02\nembedding_layer=-1\n"
        f"map={mapfile}\n"), index=4)
    assert (l.max_boxes, l.truths, l.show_details, l.max_delta) == (50, 300, 0, 5.0)
    # max counter / counter, counters below 1 count as 1, capped at max_delta
    np.testing.assert_array_equal(l.classes_multipliers, f32([1, 4, 5]))
    assert (l.label_smooth_eps, l.scale_x_y, l.objectness_smooth, l.new_coords) == \
        (0.1, 1.05, 1, 1)
    assert (l.iou_normalizer, l.obj_normalizer, l.cls_normalizer, l.delta_normalizer) == \
        (0.07, 4.0, 0.5, 2.0)
    assert (l.iou_loss, l.iou_thresh_kind, l.beta_nms, l.nms_kind) == (CIOU, GIOU, 0.7, DIOU_NMS)
    assert (l.jitter, l.resize_range, l.focal_loss, l.random) == (0.3, 1.5, 1, 1.4)
    assert (l.ignore_thresh, l.truth_thresh, l.iou_thresh) == (0.7, 0.9, 0.213)
    assert l.tracking == {"track_history_size": 7, "sim_thresh": 0.5, "dets_for_track": 2,
                          "dets_for_show": 3, "track_ciou_norm": 0.02}
    assert l.embedding_layer == 3 and l.map.tolist() == [2, 0, 1]
    assert not s.unused()


@pytest.mark.parametrize("value,kind", [("mse", MSE), ("iou", IOU), ("giou", GIOU),
                                        ("ciou", CIOU)])
def test_iou_loss_kinds(value, kind):
    assert build(yolo_text(f"iou_loss={value}\n"))[0].iou_loss == kind


@pytest.mark.parametrize("value,kind", [("default", DEFAULT_NMS), ("greedynms", GREEDY_NMS),
                                        ("diounms", DIOU_NMS), ("cornersnms", DEFAULT_NMS)])
def test_nms_kinds(value, kind):
    assert build(yolo_text(f"nms_kind={value}\n"))[0].nms_kind == kind


@pytest.mark.parametrize("text,match", [
    ("iou_loss=l1\n", r"iou_loss: expected one of mse, iou, giou, diou, ciou, found 'l1'"),
    ("iou_thresh_kind=mse\n", r"iou_thresh_kind: expected one of iou, giou, diou, ciou"),
    ("nms_kind=soft\n", r"nms_kind: expected one of default, greedynms, diounms"),
    ("counters_per_class=1,2\n", r"counters_per_class: has 2 values; classes=3"),
    ("embedding_layer=5\n", r"embedding_layer: names layer 5; it must be one of the layers"),
    ("max=0\n", r"max: must be at least 1"),
    ("scale_x_y=big\n", r"scale_x_y: expected a number"),
])
def test_bad_values_name_the_key(text, match):
    with pytest.raises(CfgError, match=r"t.cfg:\d+: \[yolo\] " + match):
        build(yolo_text(text))


def test_bad_class_map(tmp_path):
    short = tmp_path / "short.map"
    short.write_text("0\n1\n")
    wide = tmp_path / "wide.map"
    wide.write_text("0\n1\n3\n")
    for f in (short, wide):
        with pytest.raises(CfgError, match=r"\[yolo\] map: the class map needs 3 ids"):
            build(yolo_text(f"map={f}\n"))


def test_filters_must_fit():
    s = parse_cfg_text(yolo_text())[0]
    net = SimpleNamespace(layers=[], quirks=quirks_for("alexeyab"))
    params = SizeParams(batch=1, h=4, w=4, c=20, inputs=320, index=1, net=net)
    with pytest.raises(CfgError, match="has 20 filters"):
        LAYER_TYPES["yolo"].from_cfg(s, params)


def test_network_truths_follow_the_dialect(tmp_path):
    import darknumba as dn
    cfg = tmp_path / "n.cfg"
    cfg.write_text("[net]\nwidth=32\nheight=32\nchannels=3\n[convolutional]\nfilters=24\n"
                   "size=1\nactivation=linear\n" + yolo_text("scale_x_y=1.1\n"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # no "unused field" for AlexeyAB's keys
        net = dn.parse_network_cfg(cfg, dialect="alexeyab")
    assert net.truths == 1200 and net.layers[-1].scale_x_y == 1.1
    cfg.write_text(cfg.read_text().replace("scale_x_y=1.1\n", ""))
    assert dn.parse_network_cfg(cfg).truths == 450


# -- 2. forward and detections ---------------------------------------------------------------

def _input(l, seed, new_coords=False):
    """Raw inputs: logits, or with new_coords values a logistic convolution could give."""
    rng = np.random.default_rng(seed)
    if new_coords:
        return rng.uniform(0.01, 0.99, l.batch * l.outputs).astype(f32)
    return rng.normal(0, 2, l.batch * l.outputs).astype(f32)


@pytest.mark.parametrize("new_coords,scale", [(0, 1.0), (0, 1.05), (0, 2.0), (1, 2.0), (1, 1.0)])
def test_forward_matches_reference(new_coords, scale):
    l, _ = build(yolo_text(f"new_coords={new_coords}\nscale_x_y={scale}\n"), h=3, w=5)
    x = _input(l, 1, new_coords)
    l.forward(SimpleNamespace(input=x, train=False, truth=None))
    expected = naive.forward(x, l.batch, l.n, l.classes, l.w * l.h, new_coords, scale)
    np.testing.assert_allclose(l.output, expected, rtol=2e-6, atol=2e-7)
    assert not l.delta.any()


def _set_output(l, seed, new_coords):
    """An activated output with objectness spread over [0, 1] and a few NaN objectness."""
    l.forward(SimpleNamespace(input=_input(l, seed, new_coords), train=False, truth=None))
    o = l.output.reshape(l.batch, l.n, 5 + l.classes, l.h * l.w)
    rng = np.random.default_rng(seed)
    o[:, :, 4] = rng.uniform(0, 1, o[:, :, 4].shape)
    o[0, 1, 4, 2] = np.nan
    return o


@pytest.mark.parametrize("new_coords,letter,relative,size", [
    (0, False, True, (640, 480)), (0, True, True, (640, 480)), (0, True, False, (300, 500)),
    (1, False, False, (640, 480)), (1, True, True, (333, 200))])
def test_detections_match_reference(new_coords, letter, relative, size):
    l, _ = build(yolo_text(f"new_coords={new_coords}\n"), h=3, w=5)
    _set_output(l, 2, new_coords)
    w, h = size
    for b in range(l.batch):
        d = l.get_detections(w, h, 160, 96, 0.3, relative, b, letter)
        expected = naive.detections(l.output.astype(np.float64), b, l.n, l.w, l.h, l.classes,
                                    l.biases.astype(np.float64), l.mask, 160, 96, f32(0.3),
                                    new_coords, w, h, relative, letter)
        assert len(d) == len(expected) > 5
        np.testing.assert_allclose(d.bbox, [e[0] for e in expected], rtol=2e-6, atol=1e-6)
        np.testing.assert_array_equal(d.objectness, f32([e[1] for e in expected]))
        np.testing.assert_allclose(d.prob, [e[2] for e in expected], rtol=1e-6)


def test_correct_boxes_hand():
    """An 8x4 image letterboxed into a 4x4 network fills 4x2, a row of padding above and
    below: y <- (y - .25) / .5, h <- h * 2; resized instead, the boxes stay."""
    l, _ = build(yolo_text(mask="0", classes=1), classes=1, n=1, h=2, w=2, batch=1)
    o = l.output.reshape(1, 6, 2, 2)
    o[0, :2, 0, 1] = [.5, .25]                      # cell (col 1, row 0)
    o[0, 2:4, 0, 1] = [np.log(2.0), 0.0]            # w = 2 * 10 / 4, h = 14 / 4
    o[0, 4, 0, 1] = o[0, 5, 0, 1] = 1.0
    d = l.get_detections(8, 4, 4, 4, 0.5, True, 0, True)
    np.testing.assert_allclose(d.bbox[0], [.75, (.125 - .25) / .5, 5.0, 3.5 * 2], rtol=1e-6)
    d = l.get_detections(8, 4, 4, 4, 0.5, True, 0, False)
    np.testing.assert_allclose(d.bbox[0], [.75, .125, 5.0, 3.5], rtol=1e-6)
    d = l.get_detections(1, 1000, 4, 4, 0.5, True, 0, True)          # letterboxed width 0
    assert not np.isfinite(d.bbox[0, [0, 2]]).any()


def test_network_boxes_use_alexeyabs_decoding(tmp_path):
    """get_network_boxes on an alexeyab network: new_coords boxes (w = 4 t^2 anchor / netw),
    no logistic in the layer, and detect() applies the layer's NMS kind."""
    import darknumba as dn
    from darknumba.vision.box import detect, get_network_boxes
    cfg = tmp_path / "n.cfg"
    cfg.write_text("[net]\nwidth=32\nheight=32\nchannels=3\n[convolutional]\nfilters=8\n"
                   "size=1\nactivation=logistic\n[yolo]\nmask=0\nanchors=16,8\nclasses=3\n"
                   "num=1\nnew_coords=1\nscale_x_y=2.0\nnms_kind=greedynms\n")
    net = dn.parse_network_cfg(cfg, dialect="alexeyab")
    net.forward(np.random.default_rng(0).uniform(0, 1, (1, 3, 32, 32)).astype(f32))
    l = net.layers[-1]
    conv = net.layers[0].output
    np.testing.assert_array_equal(l.output[2 * 1024:], conv[2 * 1024:])
    d = get_network_boxes(net, 64, 32, thresh=0.0, letterbox=False)
    t = conv.reshape(8, 32, 32)
    np.testing.assert_allclose(d.bbox[:, 2], (t[2] * t[2] * 4 * 16 / 32).ravel(), rtol=1e-6)
    np.testing.assert_allclose(d.bbox[:, 0], ((np.arange(32) + 2 * t[0] - .5) / 32).ravel(),
                               rtol=1e-5)
    from darknumba.vision.box_ab import do_nms
    im = np.zeros((3, 32, 64), f32)
    out = detect(net, [im], thresh=0.3, nms=0.45, letterbox=False)[0]
    expected = do_nms(get_network_boxes(net, 64, 32, 0.3, letterbox=False), 0.45, GREEDY_NMS)
    np.testing.assert_array_equal(out.prob, expected.prob)


# -- 3. IoU kinds and NMS kinds ------------------------------------------------------------

def _boxes(rng, k, zero_area=False):
    b = np.column_stack([rng.uniform(0.2, 0.8, (k, 2)), rng.uniform(0.05, 0.5, (k, 2))])
    if zero_area:
        b[::4, 2] = 0                                      # zero width
        b[1::4, 3] = 0                                     # zero height
        b[2::8] = [0.5, 0.5, 0, 0]                         # points, some at the same place
    return b.astype(f32)


@pytest.mark.parametrize("zero_area", [False, True])
def test_iou_kinds_match_reference(zero_area):
    """Random pairs, identical pairs and, with zero_area, boxes of zero width or height and
    points: IoU, GIoU and DIoU stay finite (AlexeyAB's guards); CIoU's aspect term of a point
    is NaN in the C too (0/0)."""
    rng = np.random.default_rng(3)
    a, b = _boxes(rng, 64, zero_area), _boxes(rng, 64, zero_area)
    b[:8] = a[:8]
    pairs = [(x, y) for x, y in zip(a, b)] + [(x, y) for x, y in zip(a[:16], b[1:17])]
    for fn, ref, finite in [
            (box_ab.box_iou, naive.box_iou, True), (box_ab.box_giou, naive.box_giou, True),
            (box_ab.box_diou, naive.box_diounms, True), (box_ab.box_ciou, naive.box_ciou, False),
            (lambda *v: box_ab.box_diounms(*v, f32(0.8)),
             lambda p, q: naive.box_diounms(p, q, 0.8), True)]:
        got = np.array([fn(*p, *q) for p, q in pairs])
        with np.errstate(divide="ignore", invalid="ignore"):
            want = np.array([ref(p.astype(float), q.astype(float)) for p, q in pairs])
        assert np.isfinite(got).all() or not finite
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def _detections(rng, k, classes, zero_area=False):
    """Candidates as get_network_boxes gives them: clusters of overlapping boxes, probs kept
    above a threshold, some objectness exactly 0 (already suppressed)."""
    centres = rng.uniform(0.2, 0.8, (4, 2))
    xy = centres[rng.integers(0, 4, k)] + rng.normal(0, 0.05, (k, 2))
    wh = rng.uniform(0.1, 0.3, (k, 2))
    bbox = np.column_stack([xy, wh]).astype(f32)
    if zero_area:
        bbox[::5, 2] = 0
        bbox[1::5] = bbox[0]
    obj = rng.uniform(0.3, 1, k).astype(f32)
    obj[::7] = 0
    prob = (obj[:, None] * rng.uniform(0, 1, (k, classes))).astype(f32)
    prob[prob <= 0.3] = 0
    prob[3::9] = prob[2::9][:len(prob[3::9])]            # ties
    return Detections(bbox, obj, prob)


@pytest.mark.parametrize("kind,name", [(DEFAULT_NMS, "default"), (GREEDY_NMS, "greedynms"),
                                       (DIOU_NMS, "diounms")])
@pytest.mark.parametrize("zero_area", [False, True])
def test_nms_kinds_match_reference(kind, name, zero_area):
    rng = np.random.default_rng(5)
    for trial in range(3):
        d = _detections(rng, 40, 3, zero_area)
        out = do_nms(d, 0.45, kind, 0.7)
        order, prob = naive.nms_sort(d.bbox.astype(float), d.objectness, d.prob, 0.45, name, 0.7)
        np.testing.assert_array_equal(out.bbox, d.bbox[order])
        np.testing.assert_array_equal(out.prob, prob[order].astype(f32))
        assert (out.prob == 0).sum() > (d.prob == 0).sum()        # something was suppressed


def test_default_nms_is_do_nms_sort():
    d = _detections(np.random.default_rng(6), 50, 4)
    a = do_nms(d, 0.45)
    b = do_nms_sort(Detections(d.bbox, d.objectness, d.prob.copy()), 0.45)
    np.testing.assert_array_equal(a.bbox, b.bbox)
    np.testing.assert_array_equal(a.prob, b.prob)


def test_nms_kinds_hand():
    """Two boxes of IoU 1/2 whose centres are 1/4 apart: IoU .5 > .45 suppresses; DIoU =
    .5 - (.0625 / (.75^2 + .5^2))^.6 = .367 does not; with beta 2 the DIoU test is .494."""
    bbox = f32([[0.5, 0.5, 0.5, 0.5], [0.5 + 1 / 6, 0.5, 0.5, 0.5]])
    d = Detections(bbox, f32([0.9, 0.8]), f32([[0.9], [0.8]]))
    assert naive.box_iou(bbox[0], bbox[1]) == pytest.approx(0.5, rel=1e-6)
    assert do_nms(d, 0.45).prob[1, 0] == 0
    assert do_nms(d, 0.45, GREEDY_NMS).prob[1, 0] == f32(0.8)
    assert do_nms(d, 0.45, DIOU_NMS, 0.6).prob[1, 0] == f32(0.8)
    assert do_nms(d, 0.45, DIOU_NMS, 4.0).prob[1, 0] == 0


# -- 4. draw_detections_v3's lines -----------------------------------------------------------

def test_print_order_and_classes():
    """get_actual_detections + the left-edge sort + the class loop, by hand: a box is shown
    when a class not named dont_show* is > thresh (its best class, first of ties, comes
    first), the rest of its classes > thresh follow in class order, dont_show ones included."""
    names = ["a", "b", "dont_show"]
    bbox = f32([[.5, .5, .2, .4], [.2, .5, .2, .2], [.3, .4, .2, .2], [.5, .2, .2, .2],
                [.9, .9, .1, .1]])
    prob = f32([[.3, .6, 0], [0, 0, .9], [.5, 0, .8], [.7, .7, 0], [.25, 0, 0]])
    d = Detections(bbox, np.ones(5, f32), prob)
    res = detection_results_v3(d, 200, 100, 0.25, names)
    assert [(r["box"], r["class_id"], r["best"]) for r in res] == \
        [(2, 0, True), (2, 2, False), (0, 1, True), (0, 0, False), (3, 0, True), (3, 1, False)]
    assert format_lines_v3(res) == ["a: 50%", "dont_show: 80%", "b: 60%", "a: 30%", "a: 70%",
                                    "b: 70%"]
    assert format_lines_v3(res, ext_output=True)[:2] == [
        "a: 50%\t(left_x:   40   top_y:   30   width:   40   height:   20)",
        "dont_show: 80%\t(left_x:   40   top_y:   30   width:   40   height:   20)"]


def test_ext_output_rounds_halves_away_from_zero():
    """C's round(): 0.5 -> 1, -0.25 -> -0 (printed "-0"), -0.5 -> -1."""
    bbox = f32([[.25, .125, .25, .25], [.0625, .5, .25, .25], [0, .5, .25, .25]])
    d = Detections(bbox, np.ones(3, f32), f32([[.9], [.8], [.7]]))
    lines = format_lines_v3(detection_results_v3(d, 4, 4, .5, ["x"]), ext_output=True)
    assert lines == ["x: 70%\t(left_x:   -1   top_y:    2   width:    1   height:    1)",
                     "x: 80%\t(left_x:   -0   top_y:    2   width:    1   height:    1)",
                     "x: 90%\t(left_x:    1   top_y:    0   width:    1   height:    1)"]


def test_print_needs_names():
    d = Detections(f32([[.5, .5, .1, .1]]), f32([1]), f32([[.9, .9]]))
    with pytest.raises(ValueError, match="1 names for 2 classes"):
        detection_results_v3(d, 10, 10, .5, ["x"])
    assert detection_results_v3(Detections(np.zeros((0, 4), f32), np.zeros(0, f32),
                                           np.zeros((0, 2), f32)), 10, 10, .5, ["x", "y"]) == []
