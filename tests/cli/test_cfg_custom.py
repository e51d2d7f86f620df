"""`darknumba cfg custom`: AlexeyAB's custom-training edits of a template cfg, checked on a
generated shapes data set: the cfg parses, its heads have the classes, filters and the anchors
calc_anchors computes, and `detector train` runs an iteration on it."""
import numpy as np
import pytest
from typer.testing import CliRunner

from darknumba.cfg import read_cfg
from darknumba.cli import app
from darknumba.data.synthetic import generate_shapes
from darknumba.parser import parse_network_cfg
from darknumba.train.anchors import calc_anchors, training_boxes
from darknumba.train.custom_cfg import max_batches_for


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return generate_shapes(tmp_path_factory.mktemp("shapes") / "shapes", n=30,
                           valid_fraction=0.2, seed=3)


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def heads(sections):
    return [(sections[k - 1], s) for k, s in enumerate(sections) if s.type == "yolo"]


@pytest.mark.parametrize("template,masks", [("yolov4-tiny", [3, 3]), ("yolov3-tiny", [3, 3]),
                                            ("yolov4", [3, 3, 3])])
def test_written_cfg(tmp_path, shapes, template, masks):
    out = tmp_path / "mine.cfg"
    r = run("cfg", "custom", template, "--data", shapes, "--out", out)
    assert r.exit_code == 0, r.output
    sections = read_cfg(out)
    net = sections[0]
    assert net.options["batch"] == "64"
    assert net.options["max_batches"] == "6000" and net.options["steps"] == "4800,5400"
    w, h = int(net.options["width"]), int(net.options["height"])
    _, _, boxes = training_boxes(shapes)
    num = len(masks) * 3
    ref = calc_anchors(boxes[:, 2:4], boxes[:, 4].astype(np.int64), 3, num, w, h, 0)
    want = np.maximum(np.round(ref.anchors), 1)
    assert [len(s.find_list("mask")) for _, s in heads(sections)] == masks
    for conv, yolo in heads(sections):
        assert conv.type == "convolutional"
        assert conv.find_int("filters") == (3 + 5) * len(yolo.find_list("mask"))
        assert yolo.find_int("classes") == 3
        got = np.array(yolo.find_list("anchors", float)).reshape(-1, 2)
        np.testing.assert_array_equal(got, want)
    net = parse_network_cfg(str(out), batch=1)          # builds, heads of 3 classes
    assert [l.classes for l in net.layers if l.type == "yolo"] == [3] * len(masks)
    assert "(classes + 5) * 3 = 24" in out.read_text() or template != "yolov4-tiny"


def test_default_name_force_and_inputs(tmp_path, shapes, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run("cfg", "custom", "yolov3-tiny", "--data", shapes, "--classes", "3")
    assert r.exit_code == 0, r.output
    first = (tmp_path / "shapes-yolov3-tiny.cfg").read_text()
    r = run("cfg", "custom", "yolov3-tiny", "--data", shapes)
    assert r.exit_code == 2 and "--force" in r.output
    r = run("cfg", "custom", "yolov3-tiny", "--data", shapes, "--force", "--width", "320",
            "--height", "256")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "shapes-yolov3-tiny.cfg").read_text() != first
    assert "width=320" in (tmp_path / "shapes-yolov3-tiny.cfg").read_text()
    r = run("cfg", "custom", tmp_path / "shapes-yolov3-tiny.cfg", "--data", shapes, "--out",
            tmp_path / "shapes-yolov3-tiny.cfg", "--force")
    assert r.exit_code == 2 and "is the template" in r.output
    r = run("cfg", "custom", "yolov3-tiny", "--data", shapes, "--classes", "4", "--out",
            tmp_path / "x.cfg")
    assert "classes=3, not 4" in str(r.exception)       # run() makes a DataError exit 1
    r = run("cfg", "custom", "yolov3-tiny", "--data", shapes, "--width", "100", "--out",
            tmp_path / "x.cfg")
    assert "multiple of 32" in str(r.exception)
    assert not (tmp_path / "x.cfg").exists()


def test_max_batches_rule():
    assert max_batches_for(1, 100) == 6000
    assert max_batches_for(5, 100) == 10000
    assert max_batches_for(2, 25000) == 25000


def test_detector_trains_on_it(tmp_path, shapes):
    out = tmp_path / "shapes-tiny.cfg"
    r = run("cfg", "custom", "yolov4-tiny", "--data", shapes, "--out", out, "--width", "96",
            "--height", "96")
    assert r.exit_code == 0, r.output
    small = tmp_path / "small.cfg"        # the written cfg at batch 2, so one iteration is quick
    text = out.read_text().replace("batch=64", "batch=2").replace("subdivisions=16",
                                                                  "subdivisions=1")
    small.write_text(text)
    r = run("detector", "train", shapes, small, "--max-batches", "1", "--no-chart",
            "--no-progress", "--backup", tmp_path / "backup", "--workers", "1")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "backup" / "small_final.weights").exists()
