"""Box decoding, correct_yolo_boxes, box_iou and do_nms_sort on hand-computed cases, then the
whole chain on darknet's recorded yolov3-tiny outputs for dog.jpg (same boxes, same order)."""
import json
import math
from types import SimpleNamespace

import naive
import numpy as np
import pytest
from conftest import ROOT, golden_dir

from darknumba.errors import CfgError
from darknumba.kernels.box import box_iou, stable_argsort
from darknumba.vision.box import (Detections, box_corners, detection_layers, detection_results,
                                  do_nms_sort, format_lines, get_network_boxes, get_yolo_detections)

f32 = np.float32


def iou(a, b):
    return float(box_iou(np.array(a, f32), np.array(b, f32)))


def test_box_iou_hand():
    assert iou([0, 0, 2, 2], [1, 0, 2, 2]) == pytest.approx(2 / 6)      # 1x2 over 4+4-2
    assert iou([0, 0, 2, 2], [0, 0, 2, 2]) == 1.0
    assert iou([0, 0, 1, 1], [5, 5, 1, 1]) == 0.0
    assert iou([0, 0, 2, 2], [2, 0, 2, 2]) == 0.0                        # touching edges
    assert iou([0, 0, 4, 4], [0, 0, 2, 2]) == pytest.approx(4 / 16)


def fake_yolo(out, n, w, h, classes, biases, mask):
    """A stand-in yolo layer: output already activated, [n][4+1+classes][h][w]."""
    out = np.asarray(out, f32).reshape(-1)
    return SimpleNamespace(type="yolo", output=out, outputs=out.size, n=n, w=w, h=h,
                           classes=classes, biases=np.asarray(biases, f32),
                           mask=np.asarray(mask, np.int32))


def one_cell_layer():
    """2x2 cells, 1 anchor (mask -> anchor 1 = 2x4 px), 2 classes; only cell (col 1, row 0)
    is confident: x = .5, y = .25, tw = log 2, th = 0, obj .8, classes .5 and .9."""
    o = np.zeros((1, 4 + 1 + 2, 2, 2), f32)
    o[0, 0, 0, 1], o[0, 1, 0, 1] = .5, .25
    o[0, 2, 0, 1], o[0, 3, 0, 1] = math.log(2), 0
    o[0, 4] = [[.1, .8], [.3, .5]]
    o[0, 5, 0, 1], o[0, 6, 0, 1] = .5, .9
    return fake_yolo(o, 1, 2, 2, 2, [9, 9, 2, 4], [1])


def test_yolo_decoding_hand():
    l = one_cell_layer()
    # network 4x4, image 4x4: the letterbox is the identity
    d = get_yolo_detections(l, 4, 4, 4, 4, thresh=.5, relative=True)
    assert len(d) == 1                                                  # .5 is not > .5
    # x = (1 + .5)/2, y = (0 + .25)/2, w = e^log2 * 2/4, h = e^0 * 4/4
    np.testing.assert_allclose(d.bbox[0], [.75, .125, 1.0, 1.0], rtol=1e-6)
    assert d.objectness[0] == f32(.8)
    # prob = obj * p kept when > thresh: .8*.5 = .4 -> 0, .8*.9 = .72
    np.testing.assert_array_equal(d.prob[0], [0, f32(.8) * f32(.9)])


def test_correct_yolo_boxes_hand():
    l = one_cell_layer()
    # image 8x4 into a 4x4 network: letterboxed to 4x2, 1 row of padding above and below
    d = get_yolo_detections(l, 8, 4, 4, 4, thresh=.5, relative=True)
    # x: (.75 - 0)/1; y: (.125 - .25)/.5; w: 1 * 4/4; h: 1 * 4/2
    np.testing.assert_allclose(d.bbox[0], [.75, -.25, 1.0, 2.0], rtol=1e-6)
    px = get_yolo_detections(l, 8, 4, 4, 4, thresh=.5, relative=False)
    np.testing.assert_allclose(px.bbox[0], [6, -1, 8, 8], rtol=1e-6)
    plain = get_yolo_detections(l, 8, 4, 4, 4, thresh=.5, letterbox=False)
    np.testing.assert_allclose(plain.bbox[0], [.75, .125, 1.0, 1.0], rtol=1e-6)


def test_candidates_in_darknet_order():
    """Cells in row-major order, anchors inside each cell; objectness > thresh only."""
    o = np.zeros((2, 5 + 1, 1, 2), f32)                  # 2 anchors, 1 class, 1 row x 2 cols
    o[:, 4] = [[[.9, .6]], [[.7, .2]]]                     # obj[anchor][row][col]
    o[:, 5] = 1
    l = fake_yolo(o, 2, 2, 1, 1, [1, 1, 1, 1], [0, 1])
    d = get_yolo_detections(l, 2, 1, 2, 1, thresh=.5)
    np.testing.assert_array_equal(d.objectness, f32([.9, .7, .6]))   # (c0,a0) (c0,a1) (c1,a0)


def dets(boxes, probs, obj=None):
    probs = np.asarray(probs, f32).reshape(len(boxes), -1)
    obj = np.ones(len(boxes), f32) if obj is None else np.asarray(obj, f32)
    return Detections(np.asarray(boxes, f32), obj, probs.copy())


def test_nms_hand():
    a, b, c = [0, 0, 1, 1], [.1, 0, 1, 1], [3, 3, 1, 1]      # iou(a, b) = .9/1.1 = .82
    d = do_nms_sort(dets([b, c, a], [.8, .7, .9]), .45)
    np.testing.assert_array_equal(d.bbox, f32([a, b, c]))      # sorted by prob, descending
    np.testing.assert_array_equal(d.prob[:, 0], f32([.9, 0, .7]))
    d = do_nms_sort(dets([b, c, a], [.8, .7, .9]), .9)         # .82 is not > .9: all kept
    np.testing.assert_array_equal(d.prob[:, 0], f32([.9, .8, .7]))


def test_nms_is_per_class():
    a, b = [0, 0, 1, 1], [.1, 0, 1, 1]
    d = do_nms_sort(dets([a, b], [[.9, .3], [.8, .6]]), .45)
    # class 0 keeps a and drops b; class 1 (sorted last, so its order stays) keeps b, drops a
    np.testing.assert_array_equal(d.bbox, f32([b, a]))
    np.testing.assert_array_equal(d.prob, f32([[0, .6], [.9, 0]]))


def test_nms_ties_keep_order_and_zero_objectness_goes_last():
    far = [[0, 0, 1, 1], [5, 5, 1, 1], [10, 10, 1, 1], [15, 15, 1, 1]]
    d = do_nms_sort(dets(far, [.5, .5, .5, .5]), .45)          # stable sort: ties keep order
    np.testing.assert_array_equal(d.bbox, f32(far))
    # Darknet's swap loop: objectness [0, a, 0, b] -> order [3, 1, 2, 0], the sort sees 2
    d = do_nms_sort(dets(far, [0, .6, 0, .7], obj=[0, .8, 0, .9]), .45)
    np.testing.assert_array_equal(d.bbox, f32([far[3], far[1], far[2], far[0]]))
    d = do_nms_sort(dets(far, [0, .7, 0, .6], obj=[0, .8, 0, .9]), .45)
    np.testing.assert_array_equal(d.bbox, f32([far[1], far[3], far[2], far[0]]))


def test_zero_area_boxes_suppress_nothing():
    """An untrained network's boxes can have zero size: C's box_iou gives 0/0 = NaN there,
    which fails every `> thresh`; ours gives 0, which fails them alike (numba's default
    error model would raise ZeroDivisionError)."""
    z = [.5, .5, 0, 0]
    assert iou(z, z) == 0
    d = do_nms_sort(dets([z, z, [.5, .5, 1, 1]], [.9, .8, .7]), .45)
    np.testing.assert_array_equal(d.prob[:, 0], f32([.9, .8, .7]))


def test_corners_truncate_and_clip():
    c = box_corners(np.array([[.5, .5, .2, .2], [.01, .9, .1, .3], [.123, .5, .01, .01]]), 100, 50)
    np.testing.assert_array_equal(c[0], [40, 20, 60, 30])
    np.testing.assert_array_equal(c[1], [0, 37, 6, 49])         # clipped to 0 and h-1
    np.testing.assert_array_equal(c[2], [11, 24, 12, 25])       # (int) truncates


def test_lines_follow_draw_detections():
    d = dets([[.5, .5, .2, .2], [.2, .2, .1, .1]], [[.6, 0, .7], [0, 0, .505]])
    r = detection_results(d, 100, 100, .5, ["a", "b", "c"])
    assert format_lines(r) == ["a: 60%", "c: 70%", "c: 50%"]    # %.0f of prob*100 in float32
    assert r[1]["label"] == "a, c" and r[1]["label_class"] == 0


def test_no_yolo_layer_is_an_error():
    import darknumba as dn
    d = golden_dir("cls-small")
    net = dn.load_network(d / "cls-small.cfg", None, batch=1)
    with pytest.raises(CfgError, match="no \\[yolo\\], \\[region\\] or \\[detection\\] layer"):
        detection_layers(net)


def test_dog_chain_matches_darknet():
    """darknet's recorded yolo outputs -> get_network_boxes -> do_nms_sort: every box after
    NMS (including the one left with no class) in darknet's order, its probs and corners."""
    import darknumba as dn
    d = golden_dir("yolov3-tiny-detect") / "dog"
    data = np.load(d / "data.npz")
    ref = json.loads((d / "detections.json").read_text())
    net = dn.load_network(ROOT / "cfg" / "yolov3-tiny.cfg", None, batch=1)
    for i, l in enumerate(net.layers):
        if l.type == "yolo":
            l.output[:] = data[f"L{i:03d}_output"]
    w, h = ref["im_w"], ref["im_h"]
    out = do_nms_sort(get_network_boxes(net, w, h, ref["thresh"], ref["hier"]), ref["nms"])
    assert len(out) == ref["nboxes"]
    for k, rb in enumerate(ref["all_boxes_after_nms"]):
        np.testing.assert_allclose(out.bbox[k], rb["bbox"], rtol=0, atol=1e-6)
        assert out.objectness[k] == pytest.approx(rb["objectness"], abs=1e-7)
        want = {int(c): p for c, p in rb["nonzero_probs"].items()}
        got = {int(c): float(out.prob[k, c]) for c in np.nonzero(out.prob[k])[0]}
        assert got.keys() == want.keys()
        for c in want:
            assert got[c] == pytest.approx(want[c], abs=1e-7)
    names = (ROOT / "cfg" / "coco.names").read_text().split("\n")
    res = detection_results(out, w, h, ref["thresh"], names)
    printed = (d / "darknet_detect_stdout.txt").read_text().split()
    assert format_lines(res) == [" ".join(printed[i:i + 2]) for i in range(0, len(printed), 2)]
    labelled = [r for r in res if r["class_id"] == r["label_class"]]
    for r, rd in zip(labelled, ref["detections"], strict=True):
        assert (r["left"], r["top"], r["right"], r["bottom"]) == \
            (rd["left"], rd["top"], rd["right"], rd["bot"])


@pytest.mark.parametrize("seed", range(5))
def test_nms_matches_naive(seed):
    rng = np.random.default_rng(seed)
    n, classes = 40, 4
    bbox = np.concatenate([rng.uniform(0, 1, (n, 2)), rng.uniform(.05, .5, (n, 2))], 1).astype(f32)
    keep = rng.uniform(size=(n, classes)) > .4
    prob = (rng.integers(0, 6, (n, classes)) / 5 * keep).astype(f32)
    obj = np.where(rng.uniform(size=n) > .2, prob.max(1) + .01, 0).astype(f32)
    order, want = naive.nms_sort(bbox, obj, prob, .3)
    got = do_nms_sort(Detections(bbox.copy(), obj.copy(), prob.copy()), .3)
    np.testing.assert_array_equal(got.bbox, bbox[order])
    np.testing.assert_array_equal(got.prob, want[order])


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 9, 64, 333])
def test_stable_argsort_is_numpys(n):
    rng = np.random.default_rng(n)
    keys = rng.integers(-3, 3, n).astype(f32)           # many ties
    keys[::5] = np.nan
    perm = np.full(n + 2, -1, np.int64)                 # only the first n entries are written
    stable_argsort(keys, n, perm, np.empty(n, np.int64))
    np.testing.assert_array_equal(perm[:n], np.argsort(keys, kind="stable"))
    assert (perm[n:] == -1).all()


def test_batch_decodes_each_image_on_its_own():
    """Darknet averages with a flipped copy when batch == 2; here image b of a batch of 2
    gives what it gives alone."""
    from conftest import sample_photos, tiny_weights

    import darknumba as dn
    from darknumba.vision.box import detect
    from darknumba.vision.image import load_image_color
    w = tiny_weights()
    photo = sample_photos()[0]
    ims = [load_image_color(photo)[:, :300, :350], load_image_color(photo)]
    two = detect(dn.load_network(ROOT / "cfg" / "yolov3-tiny.cfg", w, batch=2), ims)
    one = dn.load_network(ROOT / "cfg" / "yolov3-tiny.cfg", w, batch=1)
    for im, d2 in zip(ims, two, strict=True):
        d1 = detect(one, [im])[0]
        np.testing.assert_allclose(d2.bbox, d1.bbox, atol=1e-5)
        np.testing.assert_allclose(d2.prob, d1.prob, atol=1e-5)


REGION_CFG = """[net]
width=32
height=32
channels=3

[convolutional]
filters=14
size=8
stride=8
pad=0
activation=linear

[region]
anchors=1,1, 2,3
classes=2
coords=4
num=2
softmax=1
"""


def test_region_layers_are_read_too(tmp_path):
    """fill_network_boxes: a [region] layer gives all n*w*h candidates (objectness 0 below
    thresh), which do_nms_sort moves to the end."""
    import darknumba as dn
    from darknumba.vision.box import detect
    (tmp_path / "region.cfg").write_text(REGION_CFG)
    net = dn.load_network(tmp_path / "region.cfg", None, batch=1)
    rng = np.random.default_rng(0)
    conv = net.layers[0]
    conv.weights[:] = rng.normal(0, .5, conv.weights.size)
    im = rng.uniform(0, 1, (3, 20, 40)).astype(f32)
    d = detect(net, [im], thresh=.3, nms=.45)[0]
    assert len(d) == 2 * 4 * 4
    live = d.objectness != 0
    assert 0 < live.sum() < len(d) and (d.prob > 0).any()
    assert np.all(live[:live.sum()])                      # the zero-objectness ones come last
    assert np.all(d.prob[~live] == 0)
