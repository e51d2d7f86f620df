"""mAP on hand-made cases: VOC all-point AP, COCO mAP@[.5:.95], P/R/F1/IoU at a threshold."""
import numpy as np
import pytest
from tiny_nets import SMALL_CFG

from darknumba.train.evaluate import box_iou, compute_map, recall_stats, voc_ap

A = [0.2, 0.2, 0.1, 0.1]
B = [0.5, 0.5, 0.1, 0.1]
C = [0.8, 0.8, 0.1, 0.1]


def det(img, cls, score, box):
    return [img, cls, score, *box]


def test_box_iou():
    assert box_iou(A, A)[0, 0] == pytest.approx(1.0)
    assert box_iou(A, B)[0, 0] == 0.0
    half = [0.25, 0.2, 0.1, 0.1]            # shifted by half a width: 1/3
    assert box_iou(A, half)[0, 0] == pytest.approx(1 / 3)


def test_perfect_detections():
    truths = [np.array([A + [0], B + [1]]), np.array([C + [2]])]
    dets = [det(0, 0, .9, A), det(0, 1, .8, B), det(1, 2, .7, C)]
    r = compute_map(dets, truths, 3)
    np.testing.assert_allclose(r.ap, 1.0)
    assert r.mean_ap == pytest.approx(1.0) and r.map_coco == pytest.approx(1.0)
    assert (r.tp, r.fp, r.fn) == (3, 0, 0)
    assert r.f1 == pytest.approx(1.0) and r.avg_iou == pytest.approx(1.0)


def test_voc_all_point_by_hand():
    """Scores .9 TP(A), .8 FP, .7 TP(B), .6 duplicate of A (FP); C never found.
    precision 1, 1/2, 2/3, 1/2 at recall 1/3, 1/3, 2/3, 2/3 -> AP = 1/3*1 + 1/3*2/3 = 5/9."""
    truths = [np.array([A + [0], B + [0], C + [0]])]
    dets = [det(0, 0, .9, A), det(0, 0, .8, [.35, .35, .05, .05]), det(0, 0, .7, B),
            det(0, 0, .6, [.2, .2, .1, .11])]
    r = compute_map(dets, truths, 1, thresh=0.65)
    assert r.ap[0] == pytest.approx(5 / 9)
    assert (r.tp, r.fp, r.fn) == (2, 1, 1)
    assert r.precision == pytest.approx(2 / 3) and r.recall == pytest.approx(2 / 3)
    assert r.f1 == pytest.approx(2 / 3)
    assert voc_ap(np.array([1 / 3, 1 / 3, 2 / 3, 2 / 3]), np.array([1, .5, 2 / 3, .5])) == \
        pytest.approx(5 / 9)


def test_wrong_class_and_low_iou_are_false_positives():
    truths = [np.array([A + [0]])]
    low = [0.2 + 0.07, 0.2, 0.1, 0.1]         # IoU 0.03/0.17 < 0.5
    r = compute_map([det(0, 1, .9, A), det(0, 0, .8, low)], truths, 2)
    assert r.ap[0] == 0.0 and r.mean_ap == 0.0        # AlexeyAB averages over every class
    assert (r.tp, r.fp, r.fn) == (0, 2, 1)


def test_coco_map_counts_iou_thresholds():
    """One truth, one detection with IoU 0.78: a hit at .50 .. .75 (6 of 10 thresholds)."""
    d = 0.2 * (1 - 0.78) / 1.78
    box = [0.5 + d, 0.5, 0.2, 0.2]
    truths = [np.array([[0.5, 0.5, 0.2, 0.2, 0]])]
    assert box_iou(box, truths[0][:, :4])[0, 0] == pytest.approx(0.78)
    r = compute_map([det(0, 0, .9, box)], truths, 1)
    assert r.mean_ap == pytest.approx(1.0)
    assert r.map_coco == pytest.approx(0.6)
    assert r.avg_iou == pytest.approx(0.78)


def test_images_are_matched_separately():
    truths = [np.array([A + [0]]), np.array([A + [0]])]
    r = compute_map([det(0, 0, .9, A), det(0, 0, .8, A)], truths, 1)   # both on image 0
    assert (r.tp, r.fp, r.fn) == (1, 1, 1)
    assert r.ap[0] == pytest.approx(0.5)


def test_recall_stats():
    n, correct, iou = recall_stats(np.array([A, [0.5, 0.5, 0.3, 0.3]]),
                                   np.array([A + [0], B + [1], C + [0]]))
    assert (n, correct) == (3, 1)
    assert iou == pytest.approx(1 + 1 / 9)


def test_ap_points_rules_by_hand():
    """Ranked recall 1/3, 1/3, 2/3, 2/3 with precision 1, 1/2, 2/3, 1/2 (as above)."""
    from darknumba.train.evaluate import ap_points
    rec, prec = np.array([1 / 3, 1 / 3, 2 / 3, 2 / 3]), np.array([1, .5, 2 / 3, .5])
    assert ap_points(rec, prec, 0) == pytest.approx(5 / 9)
    # 11 points 0, .1, ..., 1: r <= 1/3 -> 1 (4 points), 1/3 < r <= 2/3 -> 2/3 (3), r > 2/3 -> 0
    assert ap_points(rec, prec, 11) == pytest.approx((4 * 1 + 3 * 2 / 3) / 11)
    r101 = np.linspace(0, 1, 101)
    ref = np.mean([1 if r <= 1 / 3 else 2 / 3 if r <= 2 / 3 else 0 for r in r101])
    assert ap_points(rec, prec, 101) == pytest.approx(ref)
    truths = [np.array([A + [0], B + [0], C + [0]])]
    dets = [det(0, 0, .9, A), det(0, 0, .8, [.35, .35, .05, .05]), det(0, 0, .7, B),
            det(0, 0, .6, [.2, .2, .1, .11])]
    assert compute_map(dets, truths, 1, points=11).ap[0] == pytest.approx((4 + 2) / 11)


def test_threshold_counts_follow_the_detectors_order():
    """AlexeyAB counts a detection over thresh as a TP only if no earlier detection of its
    image (any score) hit the same truth; its average IoU divides by TP + FP."""
    truths = [np.array([A + [0]])]
    near = [0.21, 0.2, 0.1, 0.1]                          # IoU 0.9/1.1 with A
    r = compute_map([det(0, 0, .1, A), det(0, 0, .9, near)], truths, 1, thresh=0.25)
    assert (r.tp, r.fp) == (0, 1)                          # the low-score one came first
    assert r.ap[0] == pytest.approx(1.0)                   # the ranking still finds A once
    r = compute_map([det(0, 0, .9, near), det(0, 0, .8, [.8, .8, .1, .1])], truths, 1,
                    thresh=0.25)
    assert (r.tp, r.fp) == (1, 1)
    assert r.avg_iou == pytest.approx((0.9 / 1.1) / 2)


def test_map_iou_thresh_is_used():
    truths = [np.array([A + [0]])]
    shifted = [0.2 + 0.1 / 3, 0.2, 0.1, 0.1]              # IoU 0.5 exactly: not > 0.5
    assert compute_map([det(0, 0, .9, shifted)], truths, 1, iou_thresh=0.5).ap[0] == 0.0
    assert compute_map([det(0, 0, .9, shifted)], truths, 1, iou_thresh=0.4).ap[0] == \
        pytest.approx(1.0)



def test_result_files_voc_and_coco(tmp_path):
    """validate_detector: the same detections as per-class VOC lines (1-based pixel corners
    clipped to the image) and as COCO json (0-based x, y, w, h; image id from the name)."""
    import json

    from PIL import Image

    import darknumba as dn
    from darknumba.train.evaluate import detect_list, validate_detector
    (tmp_path / "s.cfg").write_text(SMALL_CFG)
    net = dn.load_network(tmp_path / "s.cfg")
    rng = np.random.default_rng(3)
    paths = []
    for k, (h, w) in enumerate([(40, 56), (30, 30)]):
        p = tmp_path / f"COCO_val_{17 + k:06d}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))
    names = ["ring", "block"]
    n = validate_detector(net, paths, names, tmp_path / "voc", thresh=0.3)
    lines = {c: (tmp_path / "voc" / f"comp4_det_test_{c}.txt").read_text().splitlines()
             for c in names}
    assert n == sum(map(len, lines.values())) > 10
    m = validate_detector(net, paths, names, tmp_path / "coco", thresh=0.3, coco=True)
    coco = json.loads((tmp_path / "coco" / "coco_results.json").read_text())
    assert m == len(coco) == n
    want = []                       # the same figures from detect_list: id, class, score, corners
    for _, p, (w, h), boxes, probs, _ in detect_list(net, paths, 0.3):
        for b, pr in zip(boxes.astype(np.float64), probs):
            for c in pr.nonzero()[0]:
                want.append((int(p[-10:-4]), int(c), float(pr[c]), w, h,
                             (b[0] - b[2] / 2) * w, (b[1] - b[3] / 2) * h,
                             (b[0] + b[2] / 2) * w, (b[1] + b[3] / 2) * h))
    assert any(x0 < 0 or x1 > w for *_, w, h, x0, y0, x1, y1 in want)     # clipping is tested
    got = [(d["image_id"], d["category_id"], d["score"], *d["bbox"]) for d in coco]
    expect = [(i, c, s, max(x0, 0), max(y0, 0), min(x1, w) - max(x0, 0), min(y1, h) - max(y0, 0))
              for i, c, s, w, h, x0, y0, x1, y1 in want]
    np.testing.assert_allclose(np.array(got), np.array(expect), rtol=1e-5, atol=1e-4)
    voc = sorted((float(v.split()[1]), *map(float, v.split()[2:])) for c in names
                 for v in lines[c])
    expect = sorted((round(s, 6), max(x0 + 1, 1), max(y0 + 1, 1), min(x1 + 1, w), min(y1 + 1, h))
                    for _, _, s, w, h, x0, y0, x1, y1 in want)
    np.testing.assert_allclose(np.array(voc), np.array(expect), atol=1e-4)


def test_blocked_iou_matching_equals_one_block(rng, monkeypatch):
    """_match and recall_stats compute IoU in blocks (a diverged network's candidates against
    many truths would otherwise be gigabytes at once): blocks of 7 entries give what one
    block gives."""
    import darknumba.train.evaluate as ev
    truths = [np.column_stack([rng.uniform(0.2, 0.8, (n, 4)) * [1, 1, 0.3, 0.3],
                               rng.integers(0, 3, n)]) for n in (5, 0, 9)]
    near = [(i, t) for i in (0, 2) for t in truths[i]] * 20         # jittered truths
    dets = np.array([det(i, int(t[4]), rng.uniform(0, 1), tuple(t[:4] + rng.normal(0, 0.03, 4)))
                     for i, t in near])
    whole = compute_map(dets, truths, 3)
    recall_whole = recall_stats(dets[:50, 3:7], truths[2])
    monkeypatch.setattr(ev, "IOU_BLOCK", 7)
    blocked = compute_map(dets, truths, 3)
    assert np.array_equal(whole.ap, blocked.ap) and whole.ap.min() > 0
    assert whole.tp == blocked.tp > 0 and whole.fp == blocked.fp
    assert recall_stats(dets[:50, 3:7], truths[2]) == recall_whole
