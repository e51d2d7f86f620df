"""`detector map`'s figures checked against references: the COCO ones against pycocotools'
COCOeval (on the shapes set with perturbed and with a network's detections, and on a hand-made
case with crowd, small, large and empty images); AlexeyAB's VOC AP against a plain VOC
evaluation written from the VOC devkit's rules."""
import contextlib
import io

import numpy as np
import pytest
from PIL import Image

from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from darknumba.train.cocoeval import STAT_NAMES, coco_evaluate
from darknumba.train.evaluate import box_iou, compute_map


def pycocotools_eval(dets, truths, classes, sizes, crowd=None):
    """COCOeval (bbox, default parameters) on the same detections and truths, written as
    COCO json: pixel boxes [x0, y0, w, h], truth areas w*h, image ids 1.., ids from 1."""
    images, anns = [], []
    for k, ((w, h), t) in enumerate(zip(sizes, truths)):
        images.append({"id": k + 1, "width": w, "height": h})
        for j, (x, y, bw, bh, c) in enumerate(np.asarray(t, np.float64).reshape(-1, 5)):
            box = [(x - bw / 2) * w, (y - bh / 2) * h, bw * w, bh * h]
            anns.append({"id": len(anns) + 1, "image_id": k + 1, "category_id": int(c) + 1,
                         "bbox": box, "area": box[2] * box[3],
                         "iscrowd": int(crowd[k][j]) if crowd is not None else 0})
    gt = {"images": images, "annotations": anns,
          "categories": [{"id": c + 1, "name": str(c)} for c in range(classes)]}
    results = []
    for k, c, s, x, y, bw, bh in np.asarray(dets, np.float64).reshape(-1, 7):
        w, h = sizes[int(k)]
        results.append({"image_id": int(k) + 1, "category_id": int(c) + 1, "score": float(s),
                        "bbox": [(x - bw / 2) * w, (y - bh / 2) * h, bw * w, bh * h]})
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        coco_dt = coco_gt.loadRes(results) if results else COCO()
        e = COCOeval(coco_gt, coco_dt, "bbox")
        e.evaluate()
        e.accumulate()
        e.summarize()
    return e


def assert_matches_pycocotools(dets, truths, classes, sizes, crowd=None):
    ours = coco_evaluate(dets, truths, classes, sizes, crowd)
    ref = pycocotools_eval(dets, truths, classes, sizes, crowd)
    diff = np.abs(ours.stats - ref.stats)
    assert diff.max() < 1e-4, dict(zip(STAT_NAMES, zip(ours.stats, ref.stats)))
    np.testing.assert_allclose(ours.precision, ref.eval["precision"], atol=1e-12)
    np.testing.assert_allclose(ours.recall, ref.eval["recall"], atol=1e-12)
    return ours, ref


def perturbed_detections(truths, classes, rng, n_images):
    """Detections near the truths (jittered boxes, some duplicated, some with the wrong class),
    false positives on every image, scores with ties; one image with 150 detections of one
    class (past maxDets = 100)."""
    rows = []
    for k, t in enumerate(truths):
        for x, y, w, h, c in t:
            for _ in range(rng.integers(0, 3)):
                j = rng.normal(0, 0.08, 4) * [w, h, w, h]
                cls = c if rng.random() < 0.85 else rng.integers(classes)
                rows.append([k, cls, round(rng.random(), 2), x + j[0], y + j[1],
                             abs(w + j[2]), abs(h + j[3])])
        for _ in range(rng.integers(0, 4)):
            rows.append([k, rng.integers(classes), round(rng.random() * 0.6, 2),
                         *rng.uniform([0.1, 0.1, 0.05, 0.05], [0.9, 0.9, 0.5, 0.5])])
    for _ in range(150):
        rows.append([n_images - 1, 0, round(rng.random(), 3),
                     *rng.uniform([0.2, 0.2, 0.05, 0.05], [0.8, 0.8, 0.3, 0.3])])
    return np.array(rows, np.float64)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """A small generated shapes set: label rows and image sizes of 40 images."""
    from darknumba.data.synthetic import generate_shapes
    from darknumba.data.datasets import valid_dataset
    data = generate_shapes(tmp_path_factory.mktemp("shapes"), n=40, valid_fraction=1.0, seed=5)
    _, ds = valid_dataset(data)
    sizes = [Image.open(p).size for p in ds.paths]
    return ds, sizes


def test_coco_figures_equal_pycocotools_on_shapes(shapes):
    ds, sizes = shapes
    truths = [np.asarray(b, np.float64) for b in ds.boxes]
    dets = perturbed_detections(truths, 3, np.random.default_rng(0), len(truths))
    ours, ref = assert_matches_pycocotools(dets, truths, 3, sizes)
    assert 0.1 < ours.stats[0] < 0.9                      # a meaningful figure, not 0 or 1
    r = compute_map(dets, truths, 3, sizes=sizes)
    assert r.map_coco == ours.stats[0] and r.ap50_coco == ours.stats[1]
    for c in range(3):
        assert abs(r.ap_coco[c] - ref.eval["precision"][:, :, c, 0, 2].mean()) < 1e-12


def test_coco_figures_of_a_network_on_shapes(shapes, tmp_path):
    """Detections of a small random network through Darknet's test path (detect_list, as
    `detector map` runs it), thresholds 0.005 and NMS 0.45."""
    import darknumba as dn
    from darknumba.train.evaluate import detect_list
    from test_evaluate import SMALL_CFG
    ds, sizes = shapes
    (tmp_path / "s.cfg").write_text(SMALL_CFG.replace("classes=2", "classes=3")
                                    .replace("filters=21", "filters=24"))
    net = dn.load_network(tmp_path / "s.cfg")
    rows = []
    for k, _, size, boxes, probs, _ in detect_list(net, ds.paths, 0.005):
        assert size == sizes[k]
        i, c = np.nonzero(probs > 0)
        rows.append(np.column_stack([np.full(len(i), k), c, probs[i, c], boxes[i]]))
    dets = np.concatenate(rows)
    assert len(dets) > 1000
    assert_matches_pycocotools(dets, [np.asarray(b, np.float64) for b in ds.boxes], 3, sizes)


def test_coco_hand_made_crowd_small_and_empty_images():
    """Image 0: a large truth, a crowd region of class 0 holding three detections, a small
    truth found twice. Image 1: no truths, two detections. Image 2: truths, no detections.
    Image 2 holds the one large truth. Image 3: class 2's only truth is a crowd one (the class is left out of the means).
    Image 4: a medium truth, a detection of IoU 0.5 exactly at the corner of being matched."""
    sizes = [(200, 100), (50, 60), (300, 300), (80, 80), (100, 100)]
    truths = [
        [[.3, .5, .5, .8, 0], [.8, .5, .3, .9, 0], [.9, .1, .05, .1, 1]],
        [],
        [[.5, .5, .5, .5, 0], [.2, .2, .1, .1, 1]],
        [[.5, .5, .5, .5, 2]],
        [[.5, .5, .4, .4, 1]],
    ]
    crowd = [[0, 1, 0], [], [0, 0], [1], [0]]
    dets = [
        [0, 0, .9, .3, .5, .5, .8], [0, 0, .8, .75, .4, .1, .2], [0, 0, .7, .85, .6, .1, .2],
        [0, 0, .6, .82, .5, .2, .5], [0, 1, .95, .9, .1, .05, .1], [0, 1, .5, .905, .1, .05, .1],
        [1, 0, .99, .5, .5, .5, .5], [1, 1, .3, .2, .2, .1, .1],
        [3, 2, .8, .5, .5, .5, .5], [3, 1, .4, .5, .5, .5, .5],
        [4, 1, .7, .5 + .4 / 3, .5, .4, .4],
    ]
    truths = [np.array(t, np.float64).reshape(-1, 5) for t in truths]
    ours, ref = assert_matches_pycocotools(dets, truths, 3, sizes, crowd)
    assert (ours.precision[:, :, 2] == -1).all()           # crowd-only class: not averaged
    assert ours.stats[3] > -1 and ours.stats[5] > -1       # small and large measured
    r = compute_map(dets, truths, 3, sizes=sizes, crowd=crowd)
    assert r.truths_per_class.tolist() == [2, 3, 0]         # crowd truths not counted
    # AlexeyAB's counts at 0.25: TPs the two exact boxes; FPs the three boxes in the crowd
    # region of image 0 (plain IoU < .5 there), the second find of the small truth, the three
    # on images without a truth of their class, and the IoU-0.5 one unless rounding lifts it
    # over; the detection on image 3's crowd truth counts as neither
    corner = box_iou(dets[-1][3:], truths[4][0, :4])[0, 0]
    assert (r.tp, r.fp) == (2, 7 + (corner <= 0.5))


def test_without_sizes_only_area_all():
    truths = [np.array([[.5, .5, .2, .2, 0]])]
    e = coco_evaluate([[0, 0, .9, .5, .5, .2, .2]], truths, 1)
    assert e.stats[0] == pytest.approx(1.0) and e.stats[3] == -1 and not e.sized


# -- AlexeyAB's AP against the VOC devkit's rules ----------------------------------------------
def voc_reference(dets, truths, c, iou_thresh, use_07, crowd=None):
    """The VOC evaluation (devkit's VOCevalDet, as py-faster-rcnn's voc_eval), one class:
    detections by score, each takes the same-class truth of its image with the largest IoU; >
    the threshold and not yet taken: TP, taken: FP, below: FP; a 'difficult' (here: crowd)
    truth is not counted and a detection taking it is neither. AP all-point or VOC 2007's
    11 points."""
    found = {}
    npos = 0
    for k, t in enumerate(truths):
        for j, row in enumerate(np.asarray(t).reshape(-1, 5)):
            if row[4] == c and not (crowd is not None and crowd[k][j]):
                npos += 1
    d = [row for row in np.asarray(dets, np.float64).reshape(-1, 7) if row[1] == c]
    d.sort(key=lambda r: -r[2])                           # sort is stable: ties keep order
    tp, fp = [], []
    for k, _, s, x, y, w, h in d:
        best, jbest = -np.inf, -1
        for j, (tx, ty, tw, th, tc) in enumerate(np.asarray(truths[int(k)]).reshape(-1, 5)):
            if tc != c:
                continue
            iw = min(x + w / 2, tx + tw / 2) - max(x - w / 2, tx - tw / 2)
            ih = min(y + h / 2, ty + th / 2) - max(y - h / 2, ty - th / 2)
            inter = max(iw, 0) * max(ih, 0)
            iou = inter / (w * h + tw * th - inter)
            if iou > best:
                best, jbest = iou, j
        if best > iou_thresh:
            if crowd is not None and crowd[int(k)][jbest]:
                continue
            if not found.get((int(k), jbest)):
                found[(int(k), jbest)] = True
                tp.append(1), fp.append(0)
            else:
                tp.append(0), fp.append(1)
        else:
            tp.append(0), fp.append(1)
    tp, fp = np.cumsum(tp), np.cumsum(fp)
    rec = tp / npos
    prec = tp / np.maximum(tp + fp, np.finfo(np.float64).eps)
    if use_07:       # the devkit's arange(0, 1.1, .1) puts .3, .6, .7 a hair high: linspace
        return sum((prec[rec >= t].max() if (rec >= t).any() else 0) / 11
                   for t in np.linspace(0, 1, 11))
    mrec = np.concatenate([[0], rec, [1]])
    mpre = np.concatenate([[0], prec, [0]])
    for i in range(len(mpre) - 1, 0, -1):
        mpre[i - 1] = max(mpre[i - 1], mpre[i])
    i = np.where(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1]))


@pytest.mark.parametrize("points,iou", [(0, 0.5), (11, 0.5), (0, 0.75)])
def test_voc_ap_equals_the_devkit_rules(shapes, points, iou):
    ds, _ = shapes
    truths = [np.asarray(b, np.float64) for b in ds.boxes]
    dets = perturbed_detections(truths, 3, np.random.default_rng(1), len(truths))
    crowd = [np.arange(len(t)) % 7 == 3 for t in truths]
    for cr in (None, crowd):
        r = compute_map(dets, truths, 3, iou_thresh=iou, points=points, crowd=cr)
        for c in range(3):
            ref = voc_reference(dets, truths, c, iou, points == 11, cr)
            assert abs(r.ap[c] - ref) < 1e-9, (c, r.ap[c], ref)
