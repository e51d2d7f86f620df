"""`darknumba compare --train` live against an AlexeyAB build (DARKNET_AB_DIR: an AlexeyAB
darknet tree built with `make LIBSO=1`; skipped without one): the small AlexeyAB-style networks
of tests/fixtures/ab (every key), a network with AlexeyAB's own activations in [activation]
layers, one yolov4-tiny step with the official weights on dog.jpg with hand-made labels, and
steps of yolov7-tiny and yolov4-csp at 128x128 with seeded weights and hand-made truths.
The same runs recorded without C: test_ab_golden.py, test_ab_train_golden.py."""
import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, darknet_ab_dir, darknet_photo, v4tiny_weights
from typer.testing import CliRunner

import darknumba as dn
from darknumba.cli import app
from darknumba.weights import save_weights

FIX = ROOT / "tests" / "fixtures" / "ab"
runner = CliRunner()


def compare(*args) -> tuple[int, dict]:
    r = runner.invoke(app, ["compare", "--darknet", str(darknet_ab_dir()), *map(str, args),
                            "--json"])
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    assert "{" in r.stdout, r.output
    return r.exit_code, json.loads(r.stdout[r.stdout.index("{"):])


def judged_layers(report) -> set:
    return {row["layer"] for row in report["rows"]
            if row["own_ratio"] is not None and row["layer"] is not None}


def test_label_file_truth_has_alexeyabs_layout(tmp_path):
    """--truth labels.txt for an AlexeyAB [yolo] network: rows of x, y, w, h, class, track id
    (AlexeyAB's truth_size 6), 200 per image, the same for every image of the batch."""
    from darknumba.parity.compare import read_truth
    net = dn.parse_network_cfg(FIX / "ab-small-a" / "ab-small-a.cfg", dialect="alexeyab")
    labels = tmp_path / "l.txt"
    labels.write_text("1 0.5 0.25 0.2 0.1\n0 0.1 0.2 0.3 0.4\n")
    t = read_truth(labels, net).reshape(net.batch, 200, 6)
    np.testing.assert_array_equal(t[:, 0], np.float32([[0.5, 0.25, 0.2, 0.1, 1, 0]] * net.batch))
    np.testing.assert_array_equal(t[:, 1], np.float32([[0.1, 0.2, 0.3, 0.4, 0, 0]] * net.batch))
    assert not t[:, 2:].any()


def test_the_c_side_child_imports_this_darknumba(tmp_path, monkeypatch):
    """compare runs C darknet in a child Python process: it must import the darknumba the
    parent runs (its shim reader and replay fields), not another install found first."""
    from darknumba.parity.darknet_ref import DarknetTree, _child_env
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = _child_env(DarknetTree(tmp_path, tmp_path / "darknet.h", tmp_path / "libdarknet.so"))
    first = env["PYTHONPATH"].split(os.pathsep)
    assert Path(first[0]) == Path(dn.__file__).resolve().parents[1] and first[1] == "/elsewhere"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ab-small-a", "ab-small-b"])
def test_small_network_train_step_passes_every_layer(tmp_path, name):
    d = np.load(FIX / name / "forward_train" / "data.npz")
    np.save(tmp_path / "x.npy", d["input"])
    np.save(tmp_path / "t.npy", d["truth"])
    code, report = compare(FIX / name / f"{name}.cfg", FIX / name / "init.weights",
                           tmp_path / "x.npy", "--train", "--truth", tmp_path / "t.npy")
    assert code == 0 and report["passed"], report["verdict"]
    n = len(json.loads((FIX / name / "forward_train" / "manifest.json").read_text())["layers"])
    assert judged_layers(report) == set(range(n))
    tensors = {row["tensor"] for row in report["rows"]}
    assert {"delta", "weight_updates", "scale_updates", "weights step", "rate"} <= tensors


@pytest.mark.slow
def test_perturbed_antialiased_layer_alone_is_named_in_a_train_step(tmp_path):
    """A weight of ab-small-a's antialiased convolution (layer 19) changed on darknumba's side:
    judged per layer on C's own inputs, only layer 19's tensors fail."""
    d = np.load(FIX / "ab-small-a" / "forward_train" / "data.npz")
    np.save(tmp_path / "x.npy", d["input"])
    np.save(tmp_path / "t.npy", d["truth"])
    code, report = compare(FIX / "ab-small-a" / "ab-small-a.cfg",
                           FIX / "ab-small-a" / "init.weights", tmp_path / "x.npy", "--train",
                           "--truth", tmp_path / "t.npy", "--perturb", "19:3")
    assert code == 1 and report["first_failure"]["layer"] == 19
    assert {row["layer"] for row in report["rows"] if row["judged"] and not row["ok"]} == {19}


@pytest.mark.slow
def test_small_act_forward_passes_every_layer():
    """Every activation AlexeyAB accepts; compare runs darknumba under compat="darknet-cpu", so
    relu6 and [activation]'s swish / mish give AlexeyAB's zeros."""
    d = np.load(FIX / "ab-small-act" / "forward_test" / "data.npz")
    x = Path(os.environ.get("TMPDIR", "/tmp")) / f"ab-small-act-{os.getpid()}.npy"
    np.save(x, d["input"])
    try:
        code, report = compare(FIX / "ab-small-act" / "ab-small-act.cfg",
                               FIX / "ab-small-act" / "init.weights", x)
    finally:
        x.unlink()
    assert code == 0 and report["passed"], report["verdict"]
    assert len(judged_layers(report)) == 109


ACT_NET = """[net]
batch=2
subdivisions=1
width=16
height=16
channels=3
learning_rate=0.01
momentum=0.9
decay=0.0005

[convolutional]
batch_normalize=1
filters=8
size=3
stride=2
pad=1
activation=linear

[activation]
activation={first}

[convolutional]
filters=8
size=3
stride=1
pad=1
activation={conv}

[activation]
activation={second}

[convolutional]
filters=21
size=1
stride=1
pad=1
activation=linear

[yolo]
mask=0,1,2
anchors=4,5, 8,9, 12,10
classes=2
num=3
iou_loss=ciou
scale_x_y=1.05
"""


@pytest.mark.slow
@pytest.mark.parametrize("first,conv,second", [("mish", "leaky", "elu"),
                                               ("swish", "relu6", "hard_mish"),
                                               ("leaky", "mish", "selu")])
def test_activation_layers_train_step(tmp_path, first, conv, second):
    """[activation] with AlexeyAB's activations inside a trained network: AlexeyAB's CPU
    gives 0 and passes a zero delta down (copying it over the layer below's)."""
    cfg = tmp_path / "act.cfg"
    cfg.write_text(ACT_NET.format(first=first, conv=conv, second=second))
    net = dn.parse_network_cfg(cfg, dialect="alexeyab")     # Darknet's random initial weights
    save_weights(net, tmp_path / "act.weights")
    labels = tmp_path / "t.txt"
    labels.write_text("0 0.3 0.4 0.25 0.3\n1 0.7 0.6 0.5 0.45\n")
    code, report = compare(cfg, tmp_path / "act.weights", "--random-input", "--train",
                           "--truth", labels)
    assert code == 0 and report["passed"], report["verdict"]
    assert judged_layers(report) == set(range(6))


@pytest.mark.slow
def test_yolov4_tiny_train_step_on_dog(tmp_path):
    """One training step of the official yolov4-tiny on dog.jpg (resized by AlexeyAB) with
    labels for the dog, the bicycle and the truck, batch 2."""
    darknet_ab_dir()
    weights = v4tiny_weights()
    cfg = tmp_path / "yolov4-tiny.cfg"
    cfg.write_text((ROOT / "cfg" / "yolov4-tiny.cfg").read_text()
                   .replace("\nbatch=64\n", "\nbatch=2\n"))
    code, report = compare(cfg, weights, darknet_photo("dog.jpg"), "--train",
                           "--truth", FIX / "yolov4-tiny-train" / "dog.txt")
    assert code == 0 and report["passed"], report["verdict"]
    assert judged_layers(report) == set(range(38))
    assert report["scalars"]["cost"]["darknumba"] == pytest.approx(
        report["scalars"]["cost"]["darknet"], rel=1e-4)


def seeded_128(tmp_path, name: str, size: int, seed: int, extra=()) -> tuple[Path, Path]:
    """cfg/<name>.cfg at 128x128, batch 2, subdivisions 1 (plus `extra` line edits), and
    darknumba's seeded Darknet initialisation written as .weights for both sides to load."""
    text = (ROOT / "cfg" / f"{name}.cfg").read_text()
    for a, b in (("batch=64", "batch=2"), (f"width={size}", "width=128"),
                 (f"height={size}", "height=128"), ("subdivisions=8", "subdivisions=1"),
                 *extra):
        text = text.replace(f"\n{a}\n", f"\n{b}\n")
    cfg = tmp_path / f"{name}-128.cfg"
    cfg.write_text(text)
    net = dn.parse_network_cfg(cfg, dialect="alexeyab", seed=seed)
    assert (net.w, net.h, net.batch) == (128, 128, 2)
    save_weights(net, tmp_path / f"{name}-128.weights")
    return cfg, tmp_path / f"{name}-128.weights"


@pytest.mark.slow
@pytest.mark.parametrize("max_delta", ["2", "0.05"])
def test_yolov7_tiny_128_train_step(tmp_path, max_delta):
    """yolov7-tiny (logistic heads, [yolo] new_coords=1 scale_x_y=2 ciou iou_thresh=0.2
    objectness_smooth=1) at 128x128 with the recorded fixture's seeded weights, input and
    truths; max_delta=0.05 clips most box deltas (2, the cfg's, clips none here)."""
    fix = FIX / "yolov7-tiny-128-train"
    m = json.loads((fix / "manifest.json").read_text())
    cfg, weights = seeded_128(tmp_path, "yolov7-tiny", 416, m["weights_seed"],
                              [("max_delta=2", f"max_delta={max_delta}")])
    assert cfg.read_text().count(f"\nmax_delta={max_delta}\n") == 3
    code, report = compare(cfg, weights, "--random-input", "--seed", m["input_seed"], "--train",
                           "--truth", fix / "truth.npy")
    assert code == 0 and report["passed"], report["verdict"]
    assert judged_layers(report) == set(range(99))
    cost = report["scalars"]["cost"]
    assert cost["darknumba"] == pytest.approx(cost["darknet"], rel=1e-5)


@pytest.mark.slow
def test_yolov4_csp_128_train_step(tmp_path):
    """yolov4-csp (mish, logistic heads, new_coords, obj_normalizer 4) at 128x128 with the
    recorded fixture's seeded weights, input and truths."""
    fix = FIX / "yolov4-csp-128-train"
    m = json.loads((fix / "manifest.json").read_text())
    cfg, weights = seeded_128(tmp_path, "yolov4-csp", 512, m["weights_seed"])
    code, report = compare(cfg, weights, "--random-input", "--seed", m["input_seed"], "--train",
                           "--truth", fix / "truth.npy")
    assert code == 0 and report["passed"], report["verdict"]
    assert judged_layers(report) == set(range(175))
    cost = report["scalars"]["cost"]
    assert cost["darknumba"] == pytest.approx(cost["darknet"], rel=1e-5)
