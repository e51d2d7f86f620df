"""`export onnx --nms`: the graph decodes the heads and runs NonMaxSuppression, and its
`detections` rows (batch, class, score, x1, y1, x2, y2 in input pixels) are darknumba's
detections on a photo: the same (box, class) pairs, scores within 1e-4, corners within 0.05
input pixels (onnxruntime's float32 forward against ours). Compared with do_nms_sort's IoU rule;
AlexeyAB's greedynms (DIoU) keeps what IoU keeps and at most a few overlapping boxes more."""
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, tiny_weights, v4tiny_weights

import darknumba as dn
from darknumba.detections import letterbox_size
from darknumba.export.nms import match_detections, nms_reference
from darknumba.export.onnx import build_onnx, run_onnxruntime
from darknumba.vision.box import network_input
from darknumba.vision.detector import Detector
from darknumba.vision.image import load_image

pytest.importorskip("onnxruntime")
skimage = pytest.importorskip("skimage")
PHOTOS = [Path(skimage.__file__).parent / "data" / n
          for n in ("coffee.png", "motorcycle_left.png", "astronaut.png")]
BOX_TOL, SCORE_TOL = 0.05, 1e-4


def to_image(rows, net, im_w, im_h, letterbox):
    """Corners in input pixels -> relative to the image (correct_yolo_boxes' inverse map)."""
    new_w, new_h = letterbox_size(im_w, im_h, net.w, net.h) if letterbox else (net.w, net.h)
    out = rows.astype(np.float64).copy()
    out[:, [3, 5]] = (out[:, [3, 5]] - (net.w - new_w) / 2) / new_w
    out[:, [4, 6]] = (out[:, [4, 6]] - (net.h - new_h) / 2) / new_h
    return out


def record_rows(record):
    """A Detector record's detections as rows: 0, class, prob, corners relative to the image."""
    return np.array([[0, d["class_id"], d["prob"], d["x"] - d["w"] / 2, d["y"] - d["h"] / 2,
                      d["x"] + d["w"] / 2, d["y"] + d["h"] / 2]
                     for d in record["detections"]], np.float64).reshape(-1, 7)


@pytest.mark.parametrize("cfg,weights,thresh", [
    ("yolov3-tiny", tiny_weights, 0.25), ("yolov3-tiny", tiny_weights, 0.05),
    ("yolov4-tiny", v4tiny_weights, 0.25), ("yolov4-tiny", v4tiny_weights, 0.05)])
def test_nms_graph_gives_darknumbas_detections(cfg, weights, thresh):
    det = Detector(ROOT / "cfg" / f"{cfg}.cfg", weights(), thresh=thresh, nms=0.45)
    net = det.net
    model = build_onnx(net, nms=(0.45, thresh))
    kept = 0
    for photo in PHOTOS:
        im = load_image(photo, c=3)
        x = network_input(net, [im], det.letterbox)
        got = run_onnxruntime(model, x)["detections"]
        assert got.shape[1] == 7
        kept += len(got)
        # against the same IoU rule on our forward pass: the same boxes and classes
        net.forward(x, train=False)
        want = nms_reference(net, 0, 0.45, thresh)
        matched, unmatched, ds, db = match_detections(got.astype(np.float64), want)
        assert (matched, unmatched) == (len(want), 0), (photo.name, len(got), len(want))
        assert ds < SCORE_TOL and db < BOX_TOL
        # against Detector.predict, boxes mapped back to the image
        ours = record_rows(det.predict(photo)[0])
        mapped = to_image(got, net, im.shape[2], im.shape[1], det.letterbox)
        matched, unmatched, ds, db = match_detections(ours, mapped)
        assert matched == len(mapped), photo.name            # every ONNX box is one of ours
        assert ds < SCORE_TOL and db < BOX_TOL / net.w
        if not det.alexeyab:                                 # do_nms_sort: exactly ours
            assert unmatched == 0
        else:                                                # greedynms: DIoU <= IoU keeps more
            assert len(ours) - matched <= max(2, len(ours) // 10), (len(ours), matched)
    assert kept >= 2


def test_batch_index_and_dynamic_shapes():
    net = dn.load_network(ROOT / "cfg" / "yolov3-tiny.cfg", tiny_weights(), batch=2)
    ims = [load_image(p, c=3) for p in PHOTOS[:2]]
    x = network_input(net, ims, True)
    net.forward(x, train=False)
    for dynamic in (False, True):
        got = run_onnxruntime(build_onnx(net, dynamic=dynamic, nms=(0.45, 0.1)), x)["detections"]
        assert set(got[:, 0]) == {0.0, 1.0}
        for b in (0, 1):
            want = nms_reference(net, b, 0.45, 0.1)
            rows = got[got[:, 0] == b].astype(np.float64)
            assert match_detections(rows, want)[:2] == (len(want), 0)
            # ONNX's order: class by class, the highest score first
            assert np.all(np.diff(rows[:, 1]) >= 0)
            for c in set(rows[:, 1]):
                assert np.all(np.diff(rows[rows[:, 1] == c, 2]) <= 0)


def test_cli_nms_and_decode_checks(tmp_path):
    from typer.testing import CliRunner
    from darknumba.cli import app
    args = ["export", "onnx", str(ROOT / "cfg" / "yolov4-tiny.cfg"), str(v4tiny_weights())]
    r = CliRunner().invoke(app, args + [str(tmp_path / "n.onnx"), "--nms", "--thresh", "0.3",
                                        "--nms-thresh", "0.5"])
    assert r.exit_code == 0, r.output
    m = re.search(r"detections (\d+) kept, darknumba (\d+): (\d+) matched .* (\d+) unmatched",
                  r.output)
    assert m and m.group(1) == m.group(2) == m.group(3) and m.group(4) == "0", r.output
    import onnx
    meta = {p.key: p.value for p in onnx.load(str(tmp_path / "n.onnx")).metadata_props}
    assert meta["outputs"] == "nms" and meta["score_threshold"] == "0.3"
    assert meta["iou_threshold"] == "0.5"
    assert meta["detections"] == "batch,class,score,x1,y1,x2,y2"
    r = CliRunner().invoke(app, args + [str(tmp_path / "d.onnx"), "--decode"])
    assert r.exit_code == 0, r.output
    diff = float(re.search(r"detections 1x2535 rows, max \|difference\| ([0-9.e+-]+)",
                           r.output).group(1))
    assert diff < 1e-4
