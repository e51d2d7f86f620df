"""`dn.Detector`, the library behind `darknumba detect`: its records are the CLI's --json lines,
whatever the images come as (paths, folders, globs, lists, arrays, Pillow images); unreadable
files are reported in the stream and raise from predict."""
import json

import numpy as np
import pytest
from conftest import ROOT, sample_photos, tiny_weights
from PIL import Image
from tiny_nets import NAMES, write_small_detector
from typer.testing import CliRunner

import darknumba as dn
from darknumba.cli import app
from darknumba.errors import DataError
from darknumba.vision.detector import RECORD_KEYS, as_image, class_names, labelled
from darknumba.vision.image import load_image_color

THRESH = 0.4


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A yolo network with Darknet's random initialisation saved as .weights, its names file,
    and four PNGs of different sizes."""
    root = tmp_path_factory.mktemp("small")
    cfg, weights, names = write_small_detector(root)
    rng = np.random.default_rng(1)
    images = []
    for k, (h, w) in enumerate([(40, 56), (32, 32), (25, 61), (48, 30)]):
        p = root / "imgs" / f"im{k}.png"
        p.parent.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(p)
        images.append(p)
    return cfg, weights, names, images


@pytest.fixture(scope="module")
def detector(small):
    cfg, weights, names, _ = small
    return dn.Detector(cfg, weights, batch=2, thresh=THRESH, names=names)


def cli(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    assert r.exit_code == 0, r.output
    return r


def cli_records(*args):
    return [json.loads(line) for line in cli(*args, "--json", "-").stdout.splitlines()]


def test_records_are_the_cli_json_lines(small, detector):
    cfg, weights, names, images = small
    want = cli_records("detect", cfg, weights, *images, "--batch", "2", "--thresh", THRESH,
                       "--names", names)
    got = detector.predict(images)
    assert got == want
    assert sum(len(r["detections"]) for r in got) > 3              # the comparison bites
    for r, p in zip(got, images):
        assert r["image"] == str(p)
        assert (r["width"], r["height"]) == Image.open(p).size
        assert all(tuple(d) == RECORD_KEYS for d in r["detections"])
        assert all(d["name"] == NAMES[d["class_id"]] and d["prob"] > THRESH
                   for d in r["detections"])


def test_official_records_and_drawing_equal_the_cli(tmp_path):
    """yolov3-tiny on the sample photos, batched: predict gives the --json lines, and
    draw(image, record) the PNG the CLI draws."""
    weights = tiny_weights()
    images = sample_photos()[:3]
    cfg = ROOT / "cfg" / "yolov3-tiny.cfg"
    want = cli_records("detect", cfg, weights, *images, "--batch", "2")
    det = dn.Detector(cfg, weights, batch=2)
    assert det.predict(images) == want
    assert [d["name"] for d in want[0]["detections"]] == ["cup"]         # coffee.png, as C
    cli("detect", cfg, weights, images[0], "--out", tmp_path / "cli.png")
    ours = det.draw(images[0], want[0], tmp_path / "ours.png")
    cli_png = np.asarray(Image.open(tmp_path / "cli.png").convert("RGB"))
    np.testing.assert_array_equal(np.asarray(ours), cli_png)
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "ours.png")), cli_png)


def test_arrays_pillow_images_and_paths_give_the_same_detections(small, detector):
    _, _, _, images = small
    by_path = detector.predict(images)
    pil = [Image.open(p).convert("RGB") for p in images]
    inputs = {
        "uint8 hwc": [np.asarray(im) for im in pil],
        "float chw": [load_image_color(p) for p in images],
        "pillow": pil,
    }
    for kind, items in inputs.items():
        got = detector.predict(items)
        assert [r["image"] for r in got] == [None] * len(images), kind
        for g, w in zip(got, by_path):
            assert {**g, "image": w["image"]} == w, kind
    one = detector.predict(np.asarray(pil[1]))                    # one image, not a list
    assert len(one) == 1 and one[0]["detections"] == by_path[1]["detections"]
    stacked = np.stack([load_image_color(images[1])] * 3)        # (n, 3, h, w): n images
    assert [r["detections"] for r in detector.predict(stacked)] == [by_path[1]["detections"]] * 3


def test_folders_globs_and_lists_expand(small, detector, tmp_path):
    _, _, _, images = small
    folder = images[0].parent
    lst = tmp_path / "images.txt"
    lst.write_text(f"# two of them\n{images[3]}\n\n{images[1]}\n")
    got = detector.predict([folder, str(folder / "im[02].png"), lst])
    want = [*images, images[0], images[2], images[3], images[1]]
    assert [r["image"] for r in got] == [str(p) for p in want]
    by_image = {r["image"]: r for r in detector.predict(images)}
    assert all(r == by_image[r["image"]] for r in got)
    assert [r["image"] for r in detector.predict(str(folder))] == [str(p) for p in images]


def test_an_unreadable_file_in_a_list(small, detector, tmp_path):
    """iter_predict reports it in its place and goes on (its batch slot goes to the next
    image); predict raises naming it; a missing path is an error before any work."""
    _, _, _, images = small
    bad = tmp_path / "bad.png"
    bad.write_text("not an image")
    lst = tmp_path / "list.txt"
    lst.write_text("\n".join(map(str, [images[0], bad, images[1], tmp_path / "gone.png",
                                       images[2]])))
    got = list(detector.iter_predict(lst))
    assert [r["image"] for r in got] == [str(images[0]), str(bad), str(images[1]),
                                         str(tmp_path / "gone.png"), str(images[2])]
    assert set(got[1]) == {"image", "error"} and "bad.png" in got[1]["error"]
    assert "image not found" in got[3]["error"]
    want = detector.predict(images[:3])
    assert [got[0], got[2], got[4]] == want
    with pytest.raises(DataError, match="bad.png"):
        detector.predict([images[0], bad])
    with pytest.raises(DataError, match="image not found: .*nowhere.png"):
        list(detector.iter_predict([images[0], tmp_path / "nowhere.png"]))


def test_bad_arrays_are_clear_errors():
    with pytest.raises(DataError, match=r"\(h, w, 3\) uint8 RGB or \(3, h, w\) float"):
        as_image(np.zeros((3, 8, 8), np.uint8))
    with pytest.raises(DataError, match=r"\(h, w, 3\) uint8 RGB or \(3, h, w\) float"):
        as_image(np.zeros((8, 8, 3), np.float32))
    with pytest.raises(DataError, match="NaN"):
        as_image(np.full((3, 4, 4), np.nan, np.float32))
    im = as_image(np.full((2, 3, 3), 255, np.uint8))
    assert im.shape == (3, 2, 3) and im.dtype == np.float32 and np.all(im == 1)


def test_labels_rebuilt_from_a_record_are_the_drawn_ones(small, detector):
    """draw(image, record) needs each box's label (all its classes over thresh) and colour
    class: rebuilt from the record, they are what detection_results gives."""
    _, _, _, images = small
    detector.thresh = 0.05                          # boxes over thresh in both classes
    try:
        preds = list(detector.run(images))
    finally:
        detector.thresh = THRESH
    multi = 0
    for p in preds:
        rebuilt = labelled(p.record["detections"])
        assert [(d["label"], d["label_class"]) for d in rebuilt] == \
            [(d["label"], d["label_class"]) for d in p.results]
        multi += sum(", " in d["label"] for d in rebuilt)
    assert multi > 0
    np.testing.assert_array_equal(np.asarray(detector.draw(images[0], preds[0].record)),
                                  np.asarray(preds[0].draw()))


def test_a_loaded_network_and_the_dialect(small):
    cfg, weights, names, images = small
    net = dn.load_network(cfg, weights, batch=3)
    det = dn.Detector(net, thresh=THRESH, names=NAMES)
    assert det.net is net
    want = dn.Detector(cfg, weights, thresh=THRESH, names=names).predict(images)
    assert det.predict(images) == want
    assert dn.Detector(cfg, weights, dialect="alexeyab", names=NAMES).net.quirks.dialect == \
        "alexeyab"
    with pytest.raises(DataError, match="1 names given, the cfg's detection layers have 2"):
        dn.Detector(net, names=["x"])
    with pytest.raises(ValueError, match="already loaded"):
        dn.Detector(net, weights, names=NAMES)


def test_names_default_to_coco_then_numbers(small):
    """No names: coco.names beside the cfg or in cfg/ (as the CLI finds them) if it has
    enough, else class numbers, said once."""
    cfg, weights, _, _ = small
    notices = []
    assert dn.Detector(cfg, weights, log=notices.append).names[:2] == ["person", "bicycle"]
    assert class_names(None, cfg, 81, notices.append) == [str(i) for i in range(81)]
    assert notices == ["no names file with 81 names found (pass --names): printing class "
                       "numbers"]
