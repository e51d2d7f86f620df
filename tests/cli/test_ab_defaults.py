"""Each dialect's defaults (dialect.Defaults, docs/alexeyab-defaults.md), checked by what the
commands do: the threshold `detect` and `detector test` apply, resize or letterbox (the input
tensor the Detector builds), nms and hier, -ext_output off, the checkpoint and -map cadences,
EMA, valid/map/recall; and `detector test` on yolov4-tiny against AlexeyAB's recorded print-outs
(tests/fixtures/ab/yolov4-tiny-detect/detector_test_stdout*/): with `--decoder stb` (the JPEG
decoder AlexeyAB builds, ported: vision/stb_jpeg.py) or on AB's own decoded pixels, the very
lines AlexeyAB printed; with Pillow's decoder (libjpeg-turbo) within its tolerance: the same
class lines in the same order, percentages within 1 point, -ext_output coordinates within 2
pixels.

The dog photo runs in a bare clone: tests/fixtures/ab/yolov4-tiny-train holds AB's decoded
pixels of dog.jpg (stb), fed here as a lossless PNG. The other photos are read in place
(conftest.darknet_photo: $DARKNUMBA_DATA, ../shared/data or a Darknet tree's data/), skipped
when absent."""
import os
import re
from pathlib import Path

import numpy as np
import pytest
from ab_tiny import ab_tiny_cfg
from conftest import ROOT, darknet_photo, tiny_weights, v4tiny_weights
from PIL import Image
from typer.testing import CliRunner

import darknumba as dn
from darknumba.cli import app
from darknumba.data.datasets import DataConfig
from darknumba.dialect import DEFAULTS, defaults_for
from darknumba.parser import parse_network_cfg
from darknumba.train.alexeyab import AbSchedule, Ema, MapSchedule
from darknumba.train.detector import Schedule, TrainOptions
from darknumba.weights import read_header

FIX = ROOT / "tests" / "fixtures" / "ab"
STDOUT = FIX / "yolov4-tiny-detect"
V4TINY = ROOT / "cfg" / "yolov4-tiny.cfg"
V3TINY = ROOT / "cfg" / "yolov3-tiny.cfg"
PHOTOS = ["dog", "eagle", "giraffe", "horses", "kite", "person"]
VARIANTS = {"detector_test_stdout": [], "detector_test_stdout_letterbox": ["-letter_box"]}
PCT_TOL, PX_TOL = 1, 2          # Pillow's JPEG pixels: percentage points; pixels of -ext_output

# `name: NN%`, with -ext_output `\t(left_x: L   top_y: T   width: W   height: H)`
LINE = re.compile(r"^(?P<name>[^:\t]+): (?P<pct>\d+)%(?:\t\(left_x:\s*(?P<l>-?\d+)\s+"
                  r"top_y:\s*(?P<t>-?\d+)\s+width:\s*(?P<w>-?\d+)\s+height:\s*(?P<h>-?\d+)\))?$")
runner = CliRunner()


def box_lines(text: str) -> list[tuple[str, int, tuple | None]]:
    """(name, percent, (left, top, width, height) or None) of every box line printed."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line.rstrip("\r"))
        if m:
            xywh = tuple(int(m[k]) for k in "ltwh") if m["l"] is not None else None
            out.append((m["name"], int(m["pct"]), xywh))
    return out


def assert_same_printout(ours: str, recorded: str, what: str, pct_tol: int = 0,
                         px_tol: int = 0):
    """The same class lines in the same order (AB's, by left edge), percentages within
    pct_tol, coordinates within px_tol (default: AlexeyAB's lines exactly)."""
    a, b = box_lines(ours), box_lines(recorded)
    assert b, f"{what}: no box lines in the recorded print-out"
    assert [x[0] for x in a] == [x[0] for x in b], f"{what}: class lines differ\n{a}\n{b}"
    for (name, p, xy), (_, q, xy_ref) in zip(a, b):
        assert abs(p - q) <= pct_tol, f"{what}: {name} {p}% against AlexeyAB's {q}%"
        assert (xy is None) == (xy_ref is None), f"{what}: -ext_output coordinates differ"
        if xy is not None:
            assert max(abs(u - v) for u, v in zip(xy, xy_ref)) <= px_tol, \
                f"{what}: {name} at {xy}, AlexeyAB's {xy_ref}"


@pytest.fixture(scope="module")
def dog_pixels():
    """AB's decoded dog.jpg, (3, 576, 768) uint8 (stb's pixels, recorded)."""
    return np.load(FIX / "yolov4-tiny-train" / "data.npz")["image_u8"]


@pytest.fixture(scope="module")
def dog_png(dog_pixels, tmp_path_factory):
    """dog.jpg as AB decoded it, as a PNG (decoded alike by every reader)."""
    p = tmp_path_factory.mktemp("dog") / "dog.png"
    Image.fromarray(np.ascontiguousarray(dog_pixels.transpose(1, 2, 0))).save(p)
    return p


def invoke(monkeypatch, args: list[str], module: str):
    """Run the CLI in the repository (cfg/coco.data's relative names), keeping the Detector the
    command built: (result, detector)."""
    import importlib
    mod = importlib.import_module(f"darknumba.cli.{module}")
    real, seen = mod.run_detection, []

    def spy(detector, *a, **kw):
        seen.append(detector)
        return real(detector, *a, **kw)
    monkeypatch.setattr(mod, "run_detection", spy)
    monkeypatch.chdir(ROOT)
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    assert len(seen) == 1
    return r, seen[0]


def detector_test_args(image, out: Path, *extra):
    return ["detector", "test", "cfg/coco.data", V4TINY, v4tiny_weights(), image, "-dont_show",
            "-out", out / "predictions", *extra]


# -- the values, once: every other test checks what they do -----------------------------------
def test_defaults_are_each_darknets_c_values():
    pj, ab = DEFAULTS["pjreddie"], DEFAULTS["alexeyab"]
    assert (pj.detect_thresh, pj.test_thresh, pj.letterbox) == (0.5, 0.5, True)
    assert (ab.detect_thresh, ab.test_thresh, ab.letterbox) == (0.24, 0.25, False)
    for d in (pj, ab):
        assert (d.hier_thresh, d.nms) == (0.5, 0.45)
    assert (pj.valid_thresh, pj.valid_nms) == (0.005, 0.45)
    assert (ab.valid_thresh, ab.valid_nms) == (0.001, 0.6)
    assert (ab.save_last, ab.save_weights, ab.save_weights_large,
            ab.save_weights_large_from) == (100, 1000, 10000, 10000)
    assert (pj.backup_every, pj.weights_every, pj.weights_until,
            pj.weights_every_after) == (100, 100, 1000, 10000)
    assert (ab.map_epochs, ab.map_min_every, ab.map_thresh, ab.map_iou_thresh,
            ab.map_points) == (4, 100, 0.25, 0.5, 0)
    assert (ab.ema_start_divisor, ab.ema_apply_before_end) == (2, 1000)
    assert parse_network_cfg(V4TINY, allocate=False).quirks.defaults is ab
    with pytest.raises(ValueError, match="pjreddie, alexeyab"):
        defaults_for("darknet")


# -- thresholds --------------------------------------------------------------------------------
def test_detect_under_alexeyab_applies_024_and_prints_the_car(dog_png, tmp_path, monkeypatch):
    """AlexeyAB's `./darknet detect` (darknet.c: -thresh .24) prints the car at 46% on dog.jpg;
    pjreddie's 0.5 would drop it. An explicit -thresh wins."""
    v4tiny_weights()
    r, det = invoke(monkeypatch, ["detect", V4TINY, v4tiny_weights(), dog_png,
                                  "--out", tmp_path / "p.png"], "detect")
    assert det.thresh == 0.24 and det.alexeyab and not det.letterbox
    lines = box_lines(r.stdout)
    assert [n for n, _, _ in lines] == ["bicycle", "dog", "truck", "car"]
    assert all(p > 24 for _, p, _ in lines) and any(24 < p < 50 for _, p, _ in lines)
    r, det = invoke(monkeypatch, ["detect", V4TINY, v4tiny_weights(), dog_png, "-thresh", "0.5",
                                  "--out", tmp_path / "p.png"], "detect")
    assert det.thresh == 0.5 and "car" not in [n for n, _, _ in box_lines(r.stdout)]


def test_detect_under_pjreddie_applies_05(dog_png, tmp_path, monkeypatch):
    """pjreddie's `./darknet detect` (darknet.c: -thresh .5), letterboxed."""
    r, det = invoke(monkeypatch, ["detect", V3TINY, tiny_weights(), dog_png,
                                  "--out", tmp_path / "p.png"], "detect")
    assert (det.thresh, det.letterbox, det.alexeyab) == (0.5, True, False)
    assert box_lines(r.stdout) and all(p > 50 for _, p, _ in box_lines(r.stdout))


def test_detector_test_thresholds_per_dialect(dog_png, tmp_path, monkeypatch):
    """run_detector's -thresh: AlexeyAB .25, pjreddie .5; -hier .5 and nms .45 in both; an
    explicit -thresh / -nms / -hier wins."""
    _, det = invoke(monkeypatch, detector_test_args(dog_png, tmp_path), "detector_test")
    assert (det.thresh, det.hier, det.nms, det.letterbox) == (0.25, 0.5, 0.45, False)
    _, det = invoke(monkeypatch, ["detector", "test", "cfg/coco.data", V3TINY, tiny_weights(),
                                  dog_png, "-out", tmp_path / "p"], "detector_test")
    assert (det.thresh, det.hier, det.nms, det.letterbox) == (0.5, 0.5, 0.45, True)
    _, det = invoke(monkeypatch, detector_test_args(dog_png, tmp_path, "-thresh", "0.6",
                                                    "-nms", "0.3", "-hier", "0.2"),
                    "detector_test")
    assert (det.thresh, det.hier, det.nms) == (0.6, 0.2, 0.3)


def test_nms_045_suppresses_the_second_bicycle_alexeyab_did_not_print(dog_pixels):
    """AB's test_detector: nms = .45 (greedy DIoU NMS for yolov4-tiny). On the dog a second
    bicycle box (27%) overlaps the first by a DIoU between 0.5 and 0.55: suppressed at the
    default, as AlexeyAB's print-out shows; an nms of 0.6 (AB's validate_detector) keeps it."""
    det = dn.Detector(V4TINY, v4tiny_weights(), thresh=None, nms=None, hier=None,
                      log=lambda m: None)
    im = dog_pixels.transpose(1, 2, 0)
    names = [d["name"] for d in det.predict([im])[0]["detections"]]
    assert det.nms == 0.45 and names == ["bicycle", "dog", "truck", "car"]
    det.nms = 0.6
    names = [d["name"] for d in det.predict([im])[0]["detections"]]
    assert names == ["bicycle", "dog", "bicycle", "truck", "car"]


def test_ext_output_is_off_unless_asked(dog_png, tmp_path, monkeypatch):
    r, _ = invoke(monkeypatch, detector_test_args(dog_png, tmp_path), "detector_test")
    lines = box_lines(r.stdout)
    assert lines and all(xy is None for _, _, xy in lines) and "left_x" not in r.stdout
    r, _ = invoke(monkeypatch, detector_test_args(dog_png, tmp_path, "-ext_output"),
                  "detector_test")
    assert all(xy is not None for _, _, xy in box_lines(r.stdout))


# -- resize, not letterbox ---------------------------------------------------------------------
def test_alexeyab_networks_are_resized_to_the_network(dog_pixels, monkeypatch, tmp_path):
    """The input tensor an AlexeyAB Detector builds for dog.jpg is AB's own resize_image input
    (recorded); -letter_box (or [net] letter_box=1) letterboxes; pjreddie letterboxes."""
    from darknumba.vision import box
    real, fed = box.network_input, []

    def spy(net, images, letterbox=True):
        fed.append((letterbox, real(net, images, letterbox)))
        return fed[-1][1]
    monkeypatch.setattr(box, "network_input", spy)
    im = dog_pixels.transpose(1, 2, 0)
    det = dn.Detector(V4TINY, v4tiny_weights(), thresh=None, log=lambda m: None)
    det.predict([im])
    letterbox, x = fed[-1]
    ab_input = np.load(STDOUT / "dog" / "data.npz")["input"]
    assert letterbox is False and np.abs(x.ravel() - ab_input).max() <= 1e-6
    fed.clear()
    dn.Detector(V4TINY, v4tiny_weights(), letterbox=True, log=lambda m: None).predict([im])
    x = fed[-1][1][0]                   # 768x576 into 416x416: grey bars above and below
    assert fed[-1][0] is True and np.all(x[:, :20] == 0.5) and np.all(x[:, -20:] == 0.5)
    cfg = tmp_path / "lb.cfg"
    cfg.write_text(V4TINY.read_text().replace("[net]\n", "[net]\nletter_box=1\n", 1))
    assert dn.Detector(cfg, v4tiny_weights(), log=lambda m: None).letterbox is True
    assert dn.Detector(V3TINY, tiny_weights(), log=lambda m: None).letterbox is True


# -- AlexeyAB's print-outs ---------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
def test_detector_test_prints_what_alexeyab_printed_on_its_own_pixels(variant, dog_png,
                                                                      tmp_path, monkeypatch):
    """dog.jpg as AB decoded it (bare clone): resize and -letter_box."""
    r, _ = invoke(monkeypatch, detector_test_args(dog_png, tmp_path, "-ext_output",
                                                  *VARIANTS[variant]), "detector_test")
    assert_same_printout(r.stdout, (STDOUT / variant / "dog.txt").read_text(), f"{variant} dog")


@pytest.mark.parametrize("photo", PHOTOS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_detector_test_prints_what_alexeyab_printed(variant, photo, tmp_path, monkeypatch):
    """The recorded photos decoded as AB decodes them (--decoder stb): AB's lines, every
    percentage and coordinate. The photos are read in place, never copied into the project."""
    path = darknet_photo(f"{photo}.jpg")       # read in place, never copied into the tree
    r, _ = invoke(monkeypatch, detector_test_args(path, tmp_path, "-ext_output", "--decoder",
                                                  "stb", *VARIANTS[variant]), "detector_test")
    assert_same_printout(r.stdout, (STDOUT / variant / f"{photo}.txt").read_text(),
                         f"{variant} {photo}")


@pytest.mark.parametrize("flags, tol", [([], (PCT_TOL, PX_TOL)),
                                        (["--compat", "darknet-cpu"], (0, 0))])
def test_detect_on_dog_jpg_prints_alexeyabs_boxes(flags, tol, tmp_path, monkeypatch):
    """`darknumba detect` on dog.jpg: every box AlexeyAB's detector test printed (at .25;
    `detect`'s .24 adds none here), the car included; decoded by Pillow, within its
    tolerance; under --compat darknet-cpu (stb's pixels by default), exactly."""
    path = darknet_photo("dog.jpg")
    r, det = invoke(monkeypatch, ["detect", V4TINY, v4tiny_weights(), path, "-ext_output",
                                  "--out", tmp_path / "p.png", *flags], "detect")
    assert det.decoder == ("stb" if flags else "pillow")
    assert_same_printout(r.stdout, (STDOUT / "detector_test_stdout" / "dog.txt").read_text(),
                         "detect dog", *tol)


# -- training ----------------------------------------------------------------------------------
def test_alexeyab_checkpoint_cadence_without_data_keys():
    """train_detector: _last every savelast=100, _<i> every saveweights=1000 (10000 when
    max_batches >= 10000), when the .data file says neither."""
    d = DataConfig.__new__(DataConfig)
    d.options = {}
    s = AbSchedule.from_data(d, 6000, 0)
    due = {i: s.due(i) for i in range(1, 2101)}
    assert [i for i, n in due.items() if "_last.weights" in n] == list(range(100, 2101, 100))
    assert [i for i, n in due.items() if n and n != ["_last.weights"]] == [1000, 2000]
    s = AbSchedule.from_data(d, 10000, 0)
    assert [i for i in range(1, 20001) if any(n != "_last.weights" for n in s.due(i))] == \
        [10000, 20000]


def test_pjreddie_checkpoint_cadence():
    """pjreddie's train_detector: .backup every 100; _<i> every 100 below 1000, then 10000."""
    s = Schedule()
    due = {i: s.due(i) for i in range(1, 30001)}
    assert [i for i, n in due.items() if ".backup" in n] == list(range(100, 30001, 100))
    assert [i for i, n in due.items() if f"_{i}.weights" in n] == \
        list(range(100, 1000, 100)) + [10000, 20000, 30000]
    assert TrainOptions().schedule == Schedule()


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    from tiny_data import shapes_set
    root = tmp_path_factory.mktemp("abdefaults")
    data = shapes_set(root, n=16, seed=3, size=(48, 64))
    cfg = root / "ab-tiny.cfg"
    cfg.write_text(ab_tiny_cfg(max_batches=101, mosaic=0, blur=None, gaussian_noise=None,
                               ema_alpha=None, burn_in=0))
    return data, cfg


@pytest.mark.slow
def test_training_writes_last_weights_at_iteration_100(shapes, tmp_path):
    """Resumed at iteration 98 with a .data file without savelast: _last.weights is written at
    100 (seen 100 x batch), not at 99 or 101; _final at 101."""
    from darknumba.train.detector import train_detector
    data, cfg = shapes
    net = parse_network_cfg(cfg, seed=1)
    imgs = net.batch * net.subdivisions
    net.seen = 98 * imgs
    start = tmp_path / "start.weights"
    dn.save_weights(net, start)
    backup = tmp_path / "backup"
    lines = []
    r = train_detector(data, cfg, TrainOptions(weights=str(start), backup=str(backup),
                                               progress=False, chart=False),
                       log=lambda m, file=None: lines.append(m))
    assert r["final_iteration"] == 101
    assert sorted(p for p in os.listdir(backup) if p.endswith(".weights")) == \
        ["ab-tiny_final.weights", "ab-tiny_last.weights"]
    with open(backup / "ab-tiny_last.weights", "rb") as f:
        assert read_header(f.read(20), "last")[1] == 100 * imgs
    saved = [i for i, m in enumerate(lines) if m.startswith("Saving weights to")]
    assert lines[saved[0] - 1].startswith("100: ")


def test_map_cadence_and_thresholds(shapes, monkeypatch):
    """-map: every max(4 x train images / batch, 100) iterations, not before burn_in; `map`
    at -thresh .25, -iou_thresh .5, -points 0."""
    s = MapSchedule(-1, train_images=1000, imgs=8, burn_in=0, max_batches=6000, start=0)
    assert s.next == 500 and not s.due(499) and s.due(500)
    assert MapSchedule(-1, 40, 8, burn_in=0, max_batches=6000, start=0).next == 100
    assert MapSchedule(-1, 40, 8, burn_in=1000, max_batches=6000, start=0).next == 1000
    assert TrainOptions().map_epochs == 4 and TrainOptions().map_thresh == 0.25
    from darknumba.train import evaluate
    seen = {}

    def fake_map(net, paths, truths, classes, names=None, thresh=None, iou_thresh=None,
                 progress=None, points=None, decoder=None):
        seen.update(thresh=thresh, iou_thresh=iou_thresh, points=points)
        return type("Result", (), {"report": lambda self: ""})()
    monkeypatch.setattr(evaluate, "evaluate_map", fake_map)
    data, cfg = shapes
    w = cfg.with_suffix(".weights")
    dn.save_weights(parse_network_cfg(cfg, seed=1), w)
    r = runner.invoke(app, ["detector", "map", str(data), str(cfg), str(w)])
    assert r.exit_code == 0, r.output
    assert seen == {"thresh": 0.25, "iou_thresh": 0.5, "points": 0}


def test_map_keeps_candidates_over_0005_after_nms_045(monkeypatch):
    """validate_detector_map: thresh = .005 and nms = .45 for the detections it ranks."""
    from darknumba.train import evaluate
    seen = []

    def fake_detect_list(net, paths, thresh, nms=None, progress=None, decoder=None):
        seen.append((thresh, nms))
        return iter(())
    monkeypatch.setattr(evaluate, "detect_list", fake_detect_list)
    evaluate.evaluate_map(None, [], [], 3, names=["a", "b", "c"])
    assert seen == [(0.005, 0.45)]


def test_valid_thresh_and_nms_per_dialect(shapes, tmp_path, monkeypatch):
    """validate_detector: AlexeyAB thresh .001, nms .6; pjreddie .005, .45."""
    from darknumba.train import evaluate
    seen = []

    def fake_valid(net, paths, names, out, prefix, thresh, nms, coco, progress, decoder=None):
        seen.append((net.dialect, thresh, nms))
        return 0
    monkeypatch.setattr(evaluate, "validate_detector", fake_valid)
    data, cfg = shapes
    w = tmp_path / "w.weights"
    dn.save_weights(parse_network_cfg(cfg, seed=1), w)
    r = runner.invoke(app, ["detector", "valid", str(data), str(cfg), str(w),
                            "--out", str(tmp_path / "res")])
    assert r.exit_code == 0, r.output
    pj_cfg = ROOT / "cfg" / "shapes-yolov3-tiny.cfg"
    pj_w = tmp_path / "pj.weights"
    dn.save_weights(parse_network_cfg(pj_cfg, seed=1), pj_w)
    r = runner.invoke(app, ["detector", "valid", str(data), str(pj_cfg), str(pj_w),
                            "--out", str(tmp_path / "res")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["detector", "valid", str(data), str(cfg), str(w), "--thresh",
                            "0.2", "--nms", "0.3", "--out", str(tmp_path / "res")])
    assert seen == [("alexeyab", 0.001, 0.6), ("pjreddie", 0.005, 0.45),
                    ("alexeyab", 0.2, 0.3)]


def test_ema_starts_half_way_and_is_applied_1000_before_the_end(shapes):
    """train_network_waitkey: ema from max_batches / 2, ema_apply at max_batches - 1000."""
    net = parse_network_cfg(shapes[1], seed=1)
    net.max_batches, net.ema_alpha = 6000, 0.9998
    e = Ema(net)
    assert (e.start, e.apply_at) == (3000, 5000)
    notes = []
    e.step(2999, log=notes.append)
    assert not e.initialized and notes == []
    e.step(3000, log=notes.append)
    assert e.initialized and notes == [" EMA initialization"]
    e.step(5000, log=notes.append)
    assert notes[-1] == " ema_apply()"


def test_burn_in_and_power_cfg_defaults_in_both_dialects(tmp_path):
    """parse_net_options: burn_in 0, power 4 (both Darknets): without burn_in= the rate is the
    cfg's from the first iteration; with burn_in=10 it is lr x (1/10)^4 at iteration 1."""
    cfg = tmp_path / "n.cfg"
    cfg.write_text(ab_tiny_cfg(burn_in=None, policy="constant", steps=None, scales=None))
    net = parse_network_cfg(cfg, seed=1)
    net.seen = net.batch * net.subdivisions
    assert (net.burn_in, net.power) == (0, 4) and net.current_rate() == pytest.approx(0.01)
    cfg.write_text(ab_tiny_cfg(burn_in=10, policy="constant", steps=None, scales=None))
    net = parse_network_cfg(cfg, seed=1)
    net.seen = net.batch * net.subdivisions
    assert net.current_rate() == pytest.approx(0.01 * 0.1 ** 4, rel=1e-5)
