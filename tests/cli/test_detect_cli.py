"""`darknumba detect` and `darknumba detector test` end to end, against what C darknet
(pjreddie, CPU build) prints for the same images with the official yolov3-tiny weights.

Darknet decodes JPEGs with stb: with `--decoder stb` (our port of it, vision/stb_jpeg.py) every
line, percentage and corner is darknet's. With Pillow (libjpeg-turbo, the default) the
letterboxed inputs differ by up to 3/255, so percentages may move by a point and corners by a
pixel or two; on PNGs, which both decode alike, the test holds the probability itself."""
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, darknet_photo, golden_dir, sample_photos, tiny_weights
from PIL import Image
from typer.testing import CliRunner

from darknumba.cli import app
from darknumba.errors import CfgError, DataError, WeightsError
from darknumba.vision.draw import class_color

CFG = ROOT / "cfg" / "yolov3-tiny.cfg"

# ./darknet detect cfg/yolov3-tiny.cfg yolov3-tiny.weights IMG (thresh .5): the printed lines,
# with each box's corners as draw_detections computes them (left, top, right, bot)
DARKNET = {
    "dog.jpg": [("dog", 57, (129, 186, 369, 517)), ("car", 52, (533, 94, 621, 157)),
                ("truck", 56, (533, 94, 621, 157)), ("car", 62, (465, 71, 679, 169)),
                ("bicycle", 59, (206, 150, 575, 450))],
    "horses.jpg": [("cow", 56, (424, 207, 605, 351)), ("cow", 54, (476, 234, 555, 330)),
                   ("horse", 56, (0, 175, 178, 315))],
    "person.jpg": [("horse", 94, (398, 136, 606, 330)), ("dog", 91, (71, 267, 203, 351)),
                   ("dog", 90, (107, 278, 170, 333)), ("person", 86, (183, 105, 276, 379))],
}
# ./darknet detector test cfg/coco.data ... horses.jpg -thresh 0.25
DARKNET_HORSES_025 = [
    ("cow", 56, (424, 207, 605, 351)), ("cow", 54, (476, 234, 555, 330)),
    ("cow", 33, (301, 204, 379, 338)), ("horse", 27, (430, 224, 597, 353)),
    ("horse", 56, (0, 175, 178, 315)), ("horse", 49, (8, 185, 302, 413)),
    ("horse", 43, (475, 239, 554, 339))]
# scikit-image's coffee.png (the default sample): one box, prob 0.640437961
DARKNET_SAMPLE = ("cup", 0.640437961, (151, 23, 427, 306))

runner = CliRunner()


def invoke(*args):
    r = runner.invoke(app, [str(a) for a in args])
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    assert r.exit_code == 0, r.output
    return r


def printed(stdout):
    """(name, percent) of Darknet's `name: NN%` lines."""
    out = []
    for line in stdout.splitlines():
        name, sep, pct = line.rpartition(": ")
        if sep and pct.endswith("%"):
            out.append((name, int(pct[:-1])))
    return out


def assert_matches_darknet(dets, ref, tol_pct=1, tol_px=2):
    """Same lines as darknet (one to one), percentages within tol_pct, corners within tol_px."""
    assert len(dets) == len(ref), (dets, ref)
    left = list(dets)
    for name, percent, box in ref:
        hit = [d for d in left if d["name"] == name and abs(pct(d) - percent) <= tol_pct
               and max(abs(a - b) for a, b in zip(corners(d), box, strict=True)) <= tol_px]
        assert hit, f"darknet's {name} {percent}% at {box} not found in {left}"
        left.remove(hit[0])


def pct(d):
    """The printed percentage of a JSON detection (%.0f of prob*100 in float32)."""
    return int(f"{np.float32(d['prob']) * np.float32(100):.0f}")


def corners(d):
    return d["left"], d["top"], d["right"], d["bottom"]


def assert_boxes_drawn(png, dets, classes=80):
    """Each box's outline is in its class colour along its bottom and right edges."""
    im = np.asarray(Image.open(png).convert("RGB"))
    boxes = {}
    for d in dets:
        boxes.setdefault(d["box"], d)                   # a box is drawn in its first class
    for d in boxes.values():
        color = np.array(class_color(d["class_id"], classes))
        l, t, r, b = corners(d)
        edge = np.concatenate([im[b, l:r + 1], im[t:b + 1, r]])
        share = np.mean(np.all(edge == color, axis=1))
        assert share > 0.5, f"{d['name']} box {corners(d)}: only {share:.0%} of its edge drawn"


@pytest.fixture(scope="module")
def weights():
    return tiny_weights()


@pytest.mark.parametrize("decoder, tol", [("stb", (0, 0)), ("pillow", (1, 2))])
@pytest.mark.parametrize("image", sorted(DARKNET))
def test_detect_matches_darknet(image, decoder, tol, weights, tmp_path):
    """stb's pixels: darknet's lines to the point and pixel; Pillow's: within tol."""
    out, js = tmp_path / "drawn.png", tmp_path / "dets.jsonl"
    r = invoke("detect", CFG, weights, darknet_photo(image), "--out", out, "--json", js,
               "--decoder", decoder)
    rec = json.loads(js.read_text())
    dets = rec["detections"]
    assert printed(r.stdout) == [(d["name"], pct(d)) for d in dets]
    assert_matches_darknet(dets, DARKNET[image], *tol)
    assert_boxes_drawn(out, dets)
    assert (rec["width"], rec["height"]) == Image.open(darknet_photo(image)).size


def test_default_run_on_the_sample(weights, tmp_path, monkeypatch):
    """No arguments, from another folder: cfg and weights found from the package, the sample
    photo from scikit-image's wheel, predictions.png in the working directory."""
    if weights.resolve() != (ROOT / "weights" / "yolov3-tiny.weights").resolve():
        pytest.skip("the default run uses weights/yolov3-tiny.weights (it would fetch them)")
    monkeypatch.chdir(tmp_path)
    r = invoke("detect", "--json", "dets.jsonl")
    name, prob, box = DARKNET_SAMPLE
    assert printed(r.stdout) == [(name, round(prob * 100))]
    d = json.loads((tmp_path / "dets.jsonl").read_text())["detections"]
    assert d[0]["name"] == name and abs(d[0]["prob"] - prob) < 1e-5     # PNG: same pixels
    assert corners(d[0]) == box
    assert_boxes_drawn(tmp_path / "predictions.png", d)


def test_many_images_batched(weights, tmp_path):
    """A list file and a glob, batched by 2: one JSON line per image, the same detections as
    one at a time, one drawing per image, the rate on stderr."""
    photos = sample_photos()[:3]                    # one folder: coffee, motorcycle, camera
    lst = tmp_path / "images.txt"
    lst.write_text(f"{photos[0]}\n\n{photos[1]}\n")
    r = invoke("detect", CFG, weights, lst, photos[2].parent / "cam*ra.png", "--batch", "2",
               "--thresh", "0.25", "--json", "-", "--out", tmp_path / "drawn")
    lines = [json.loads(s) for s in r.stdout.splitlines()]
    assert [rec["image"] for rec in lines] == [str(p) for p in photos]
    assert sum(len(rec["detections"]) for rec in lines) >= 3
    for p, rec in zip(photos, lines, strict=True):
        alone = json.loads(invoke("detect", CFG, weights, p, "--thresh", "0.25", "--json", "-",
                                  "--out", tmp_path / f"alone-{p.stem}.png").stdout)
        ref = [(d["name"], pct(d), corners(d)) for d in alone["detections"]]
        assert_matches_darknet(rec["detections"], ref, tol_pct=1, tol_px=1)
        assert_boxes_drawn(tmp_path / "drawn" / f"{p.stem}.png", rec["detections"])
    assert "images/s" in r.stderr


def test_detector_test_darknet_grammar(weights, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)                         # coco.data's names = cfg/coco.names
    r = invoke("detector", "test", "cfg/coco.data", CFG, weights, darknet_photo("horses.jpg"),
               "-thresh", "0.25", "-out", tmp_path / "h", "--decoder", "stb")
    assert sorted(printed(r.stdout)) == sorted((n, p) for n, p, _ in DARKNET_HORSES_025)
    assert (tmp_path / "h.png").exists()


def test_errors_a_user_can_act_on(weights, tmp_path):
    r = runner.invoke(app, ["detect", str(CFG), str(weights), str(tmp_path / "missing.jpg")])
    assert isinstance(r.exception, DataError) and "missing.jpg" in str(r.exception)
    d = golden_dir("cls-small")
    r = runner.invoke(app, ["detect", str(d / "cls-small.cfg"), str(d / "init.weights"),
                            str(tmp_path / "x.png")])
    assert isinstance(r.exception, DataError)              # the image is checked first
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "x.png")
    r = runner.invoke(app, ["detect", str(d / "cls-small.cfg"), str(d / "init.weights"),
                            str(tmp_path / "x.png")])
    assert isinstance(r.exception, CfgError)
    assert "no [yolo], [region] or [detection] layer" in str(r.exception)
    r = runner.invoke(app, ["detect", str(CFG), str(golden_dir("det-small") / "init.weights"),
                            str(tmp_path / "x.png")])
    assert isinstance(r.exception, WeightsError)


def test_error_is_one_line_and_status_1(tmp_path):
    p = subprocess.run([sys.executable, "-c", "from darknumba.cli import main; main()", "detect",
                        str(CFG), str(CFG), str(tmp_path / "nope.jpg")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert p.stderr.strip() == f"darknumba: error: image not found: {tmp_path / 'nope.jpg'}"


REGION_TREE_CFG = """[net]
width=32
height=32
channels=3

[convolutional]
filters=20
size=8
stride=8
pad=0
activation=linear

[region]
anchors=1,1, 2,3
classes=5
coords=4
num=2
softmax=1
tree=tiny.tree
"""
# two roots, each with its own group of children: animal > dog, cat; thing > cup
TREE = "animal -1\nthing -1\ndog 0\ncat 0\ncup 1\n"
ROOTS, LEAVES = {"animal", "thing"}, {"dog", "cat", "cup"}


def test_hier_reaches_region_class_trees(tmp_path):
    """--hier is the tree threshold of a [region] layer with tree=: at 0 every box descends to
    a leaf class, at 0.99 it stays at the root group (a root's probability is at most ~0.7);
    without NMS (which works per class) the boxes and their probabilities stay the same.
    `detector test -hier` and `dn.Detector(hier=)` pass it on too."""
    import darknumba as dn
    (tmp_path / "tiny.tree").write_text(TREE)
    cfg = tmp_path / "tree.cfg"
    cfg.write_text(REGION_TREE_CFG)
    names = tmp_path / "tree.names"
    names.write_text("\n".join(line.split()[0] for line in TREE.splitlines()) + "\n")
    weights = tmp_path / "tree.weights"
    dn.save_weights(dn.load_network(cfg), weights)              # Darknet's random init, seed 0
    img = tmp_path / "img.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (24, 40, 3), np.uint8)).save(img)

    def run(hier, nms=0.45):
        r = invoke("detect", cfg, weights, img, "--thresh", "0.3", "--hier", hier, "--nms", nms,
                   "--names", names, "--out", tmp_path / "p.png", "--json", tmp_path / "d.jsonl")
        return printed(r.stdout), json.loads((tmp_path / "d.jsonl").read_text())["detections"]

    leaf_lines, leaf = run(0)
    root_lines, root = run(0.99)
    assert len(leaf) > 3 and {d["name"] for d in leaf} <= LEAVES
    assert len(root) > 3 and {d["name"] for d in root} <= ROOTS
    _, leaf_all = run(0, nms=0)
    _, root_all = run(0.99, nms=0)
    assert [(d["box"], d["prob"]) for d in leaf_all] == [(d["box"], d["prob"]) for d in root_all]
    data = tmp_path / "tree.data"
    data.write_text(f"classes = 5\nnames = {names}\n")
    r = invoke("detector", "test", data, cfg, weights, img, "-thresh", "0.3", "-hier", "0.99",
               "-out", tmp_path / "t")
    assert printed(r.stdout) == root_lines
    det = dn.Detector(cfg, weights, thresh=0.3, hier=0, names=names)
    assert det.predict(img)[0]["detections"] == leaf
