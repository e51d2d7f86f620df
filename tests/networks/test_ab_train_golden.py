"""One yolov4-tiny training step as AlexeyAB's CPU build takes it (compat="darknet-cpu"), against
tensors recorded from it through `darknumba compare --train` (tests/fixtures/ab/yolov4-tiny-train,
see its README): the official weights, dog.jpg resized as AlexeyAB resizes it, the hand-made
labels in dog.txt, batch 1.

The fixture keeps stb's decoded pixels (our JPEG decoder differs by a few levels), from which
resize_image gives AlexeyAB's input bit for bit, and a subsample of every layer's tensors.
Here both networks run end to end, so a layer inherits the rounding of the layers before it:
forward, the loss and backward down to the last maxpool (layer 25) agree within 1e-4 of the
tensor's largest value. Below a maxpool the end-to-end deltas are not compared: rounding in
the forward pass flips the argmax of a few windows, which sends a whole delta value to
another pixel (the per-layer verdict `compare` recorded judges those layers on C's own inputs;
every one passed).

Further down, the same harness's recordings of one step of yolov4, yolov7-tiny and yolov4-csp at
128x128 with darknumba's seeded initial weights (rebuilt here, not stored)."""
import json
from pathlib import Path

import numpy as np
import pytest

import darknumba as dn
from darknumba.parity.compare import read_truth, run_darknumba
from darknumba.parity.tensordiff import diff
from darknumba.vision.image import resize_image

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "ab" / "yolov4-tiny-train"
TOL = 1e-4
LAST_MAXPOOL = 25


@pytest.fixture(scope="module")
def step():
    from conftest import v4tiny_weights
    weights = v4tiny_weights()
    d = np.load(FIX / "data.npz")
    manifest = json.loads((FIX / "manifest.json").read_text())
    net = dn.load_network(ROOT / "cfg" / "yolov4-tiny.cfg", weights, batch=1,
                          compat="darknet-cpu")
    im = d["image_u8"].astype(np.float32) / np.float32(255)
    x = resize_image(im, net.w, net.h).reshape(-1)
    truth = read_truth(FIX / "dog.txt", net)
    ours = run_darknumba(net, "trainstep", x, truth)
    return net, ours, d, manifest, x


def test_input_is_alexeyabs_bit_for_bit(step):
    _, _, d, manifest, x = step
    assert np.array_equal(x[::manifest["sub_steps"]["input"]], d["input_sub"])


def test_truth_holds_the_three_labels_as_alexeyab_lays_them_out(step):
    _, ours, d, _, _ = step
    np.testing.assert_array_equal(ours["truth"], d["truth"])
    rows = d["truth"].reshape(-1, 6)
    assert [int(c) for c in rows[:3, 4]] == [16, 1, 7] and not rows[3:].any()


def test_cost_rate_and_seen(step):
    _, ours, d, manifest, _ = step
    run = manifest["run"]
    assert ours["meta"]["run"]["cost"] == pytest.approx(run["cost"], rel=1e-5)
    assert ours["meta"]["run"]["rate"] == pytest.approx(run["rate"], rel=1e-6)
    assert ours["meta"]["run"]["seen_after"] == run["seen_after"] == 1
    for i in (30, 37):
        assert ours[f"L{i:03d}_cost"][0] == pytest.approx(float(d[f"L{i:03d}_cost"][0]), rel=1e-5)


def _rows(ours, d, steps):
    """(key, ours, C) for every recorded tensor this test judges end to end."""
    for key in sorted(d.files):
        if key in ("image_u8", "truth", "input_sub", "cost") or key.endswith("_cost"):
            continue
        base = key.removesuffix("_sub")
        i, field = int(base[1:4]), base[5:]
        if field in ("delta", "weight_updates", "bias_updates", "scale_updates") \
                and i < LAST_MAXPOOL:
            continue
        a = ours[base]
        yield key, (a[::steps[base]] if key.endswith("_sub") else a), d[key]


def test_forward_loss_and_backward_to_the_last_maxpool(step):
    net, ours, d, manifest, _ = step
    bad, judged = [], set()
    for key, a, ref in _rows(ours, d, manifest["sub_steps"]):
        _, r = diff(a, ref)
        judged.add(key)
        if not r <= TOL:
            bad.append(f"{key}: max rel {r:.3g}")
    assert not bad, "\n".join(bad)
    assert {"L030_delta", "L037_delta", "L036_weight_updates_sub", "L026_delta_sub",
            "L000_output_sub", "L000_variance", "L037_output_sub"} <= judged
    assert sum(k.endswith("_output_sub") for k in judged) == net.n


def test_recorded_per_layer_verdict_covers_every_layer():
    """The live comparison this fixture was cut from judged every layer on C's own inputs."""
    m = json.loads((FIX / "manifest.json").read_text())
    assert m["passed"] and m["verdict"].startswith("PASS")
    own = [r for r in m["rows"] if r["own_ratio"] is not None and r["layer"] is not None]
    assert {r["layer"] for r in own} == set(range(len(m["layers"])))
    assert max(r["own_ratio"] for r in own) < 1


# -- yolov4 (full) at 128x128, batch 2, seeded weights -----------------------------------------
V4 = ROOT / "tests" / "fixtures" / "ab" / "yolov4-128-train"
V4_TOL = 5e-3


def yolov4_128_cfg(tmp_path) -> Path:
    text = (ROOT / "cfg" / "yolov4.cfg").read_text()
    for a, b in (("batch=64", "batch=2"), ("subdivisions=8", "subdivisions=1"),
                 ("width=608", "width=128"), ("height=608", "height=128")):
        text = text.replace(f"\n{a}\n", f"\n{b}\n")
    cfg = tmp_path / "yolov4-128.cfg"
    cfg.write_text(text)
    return cfg


@pytest.mark.slow
def test_yolov4_128_train_step_end_to_end(tmp_path):
    """yolov4's 162 layers with darknumba's seeded initial weights (as the recording's C side
    loaded them), compare's seeded random input and hand-made truths for two images: the cost,
    every layer's output and the three yolo layers' deltas. End to end over 162 layers of
    random weights C's float32 sums drift to ~2e-3 of the largest value (the per-layer verdict
    recorded with them judged every layer on C's own inputs: PASS, the worst at 0.097 x its
    rounding tolerance)."""
    m = json.loads((V4 / "manifest.json").read_text())
    d = np.load(V4 / "data.npz")
    net = dn.parse_network_cfg(yolov4_128_cfg(tmp_path), dialect="alexeyab",
                               seed=m["weights_seed"], compat="darknet-cpu")
    assert net.n == len(m["layers"]) == 162
    x = np.random.default_rng(m["input_seed"]).random(net.batch * net.inputs, dtype=np.float32)
    ours = run_darknumba(net, "trainstep", x, np.load(V4 / "truth.npy"))
    assert ours["meta"]["run"]["cost"] == pytest.approx(m["run"]["cost"], rel=1e-4)
    assert ours["meta"]["run"]["rate"] == pytest.approx(m["run"]["rate"], rel=1e-6)
    bad = []
    for key, step in m["sub_steps"].items():
        _, r = diff(ours[key][::step], d[f"{key}_sub"])
        if not r <= V4_TOL:
            bad.append(f"{key}: max rel {r:.3g}")
    for i in (139, 150, 161):
        assert ours[f"L{i:03d}_cost"][0] == pytest.approx(float(d[f"L{i:03d}_cost"][0]),
                                                          rel=1e-4)
    assert not bad, "\n".join(bad)
    assert len(m["sub_steps"]) == 162 + 3
    assert m["passed"] and max(r["own_ratio"] for r in m["rows"]
                               if r["own_ratio"] is not None) < 1


# -- yolov7-tiny at 128x128, batch 2, seeded weights: new_coords, logistic heads ---------------
V7 = ROOT / "tests" / "fixtures" / "ab" / "yolov7-tiny-128-train"
V7_TOL = 1e-3


def yolov7_tiny_128_cfg(tmp_path) -> Path:
    text = (ROOT / "cfg" / "yolov7-tiny.cfg").read_text()
    for a, b in (("batch=64", "batch=2"), ("width=416", "width=128"),
                 ("height=416", "height=128")):
        assert f"\n{a}\n" in text
        text = text.replace(f"\n{a}\n", f"\n{b}\n")
    cfg = tmp_path / "yolov7-tiny-128.cfg"
    cfg.write_text(text)
    return cfg


@pytest.fixture(scope="module")
def v7_step(tmp_path_factory):
    m = json.loads((V7 / "manifest.json").read_text())
    net = dn.parse_network_cfg(yolov7_tiny_128_cfg(tmp_path_factory.mktemp("v7")),
                               dialect="alexeyab", seed=m["weights_seed"],
                               compat="darknet-cpu")
    x = np.random.default_rng(m["input_seed"]).random(net.batch * net.inputs, dtype=np.float32)
    ours = run_darknumba(net, "trainstep", x, np.load(V7 / "truth.npy"))
    return net, ours, np.load(V7 / "data.npz"), m


V7_YOLO = (90, 94, 98)


def _subsampled_failures(ours, d, m) -> list:
    """Every subsampled tensor of a fixture, judged against the largest |value| of C's whole
    tensor (manifest "absmax"): a subsample's own maximum can be far smaller."""
    bad = []
    for key, step in m["sub_steps"].items():
        err, _ = diff(ours[key][::step], d[f"{key}_sub"])
        r = err / max(m["absmax"][key], 1e-6)
        if not r <= V7_TOL:
            bad.append(f"{key}: max rel {r:.3g}")
    return bad


def test_yolov7_tiny_128_cost_outputs_and_head_gradients(v7_step):
    """yolov7-tiny's 99 layers with darknumba's seeded weights (as the recording's C side loaded
    them), compare's seeded input and hand-made truths: the cost, every layer's output, the
    yolo deltas, and the deltas and gradients of the head convolutions (logistic, no batch
    norm) agree end to end within 1e-3 of each tensor's largest value. Deeper deltas drift
    further end to end (batch norm over 32 values in the 4x4 head; maxpool argmax flips); the
    per-layer verdict the fixture records judged those on C's own inputs."""
    net, ours, d, m = v7_step
    assert net.n == len(m["layers"]) == 99
    assert ours["meta"]["run"]["cost"] == pytest.approx(m["run"]["cost"], rel=1e-5)
    assert ours["meta"]["run"]["rate"] == pytest.approx(m["run"]["rate"], rel=1e-6)
    bad = _subsampled_failures(ours, d, m)
    for i in (88, 89, 93, 97):
        _, r = diff(ours[f"L{i:03d}_bias_updates"], d[f"L{i:03d}_bias_updates"])
        if not r <= V7_TOL:
            bad.append(f"L{i:03d}_bias_updates: max rel {r:.3g}")
    for i in V7_YOLO:
        assert ours[f"L{i:03d}_cost"][0] == pytest.approx(float(d[f"L{i:03d}_cost"][0]),
                                                          rel=1e-5)
    assert not bad, "\n".join(bad)
    assert sum(k.endswith("_output") for k in m["sub_steps"]) == 99


def test_yolov7_tiny_128_new_coords_box_and_objectness_deltas(v7_step):
    """The x, y, w, h and objectness deltas of every anchor of the three [yolo] layers, whole:
    new_coords' box gradients (no exp factor, no logistic), CIoU times iou_normalizer 0.05,
    the extra anchors over iou_thresh 0.2 with averages_yolo_deltas' division, and
    objectness_smooth raising the "no object" delta toward the IoU for the predictions the
    truths were cut from (two per image copy a seeded prediction, so their IoU is over
    ignore_thresh). Each kind of entry is judged against its own largest value."""
    net, ours, d, _ = v7_step
    trained = raised = 0
    for i in V7_YOLO:
        l = net.layers[i]
        shape = (net.batch, l.n, 5, l.out_h * l.out_w)
        ref = d[f"L{i:03d}_delta_box_obj"].reshape(shape)
        a = ours[f"L{i:03d}_delta"].reshape(net.batch, l.n, -1, l.out_h * l.out_w)[:, :, :5]
        out = ours[f"L{i:03d}_output"].reshape(net.batch, l.n, -1, l.out_h * l.out_w)[:, :, 4]
        np.testing.assert_array_equal(a[:, :, :4] != 0, ref[:, :, :4] != 0)
        for c in range(5):
            _, r = diff(a[:, :, c], ref[:, :, c])
            assert r <= V7_TOL, f"layer {i} entry {c}: max rel {r:.3g}"
        box = ref[:, :, 0] != 0
        trained += int(box.sum())
        raised += int((~box & (ref[:, :, 4] > -out + 1e-4)).sum())
    assert trained >= 30 and raised >= 2


# -- yolov4-csp at 128x128, batch 2, seeded weights: mish, logistic heads, new_coords ----------
CSP = ROOT / "tests" / "fixtures" / "ab" / "yolov4-csp-128-train"


def test_yolov4_csp_128_train_step_end_to_end(tmp_path):
    """yolov4-csp's 175 layers (mish, SPP, logistic heads before new_coords [yolo] layers with
    obj_normalizer 4 and no objectness_smooth), seeded weights, seeded input, hand-made
    truths: every layer's output, delta and weight gradient and the yolo box + objectness
    deltas whole agree end to end within 1e-3 of each tensor's largest value."""
    m = json.loads((CSP / "manifest.json").read_text())
    d = np.load(CSP / "data.npz")
    text = (ROOT / "cfg" / "yolov4-csp.cfg").read_text()
    for a, b in (("batch=64", "batch=2"), ("subdivisions=8", "subdivisions=1"),
                 ("width=512", "width=128"), ("height=512", "height=128")):
        assert f"\n{a}\n" in text
        text = text.replace(f"\n{a}\n", f"\n{b}\n")
    (tmp_path / "csp.cfg").write_text(text)
    net = dn.parse_network_cfg(tmp_path / "csp.cfg", dialect="alexeyab",
                               seed=m["weights_seed"], compat="darknet-cpu")
    assert net.n == len(m["layers"]) == 175
    x = np.random.default_rng(m["input_seed"]).random(net.batch * net.inputs, dtype=np.float32)
    ours = run_darknumba(net, "trainstep", x, np.load(CSP / "truth.npy"))
    assert ours["meta"]["run"]["cost"] == pytest.approx(m["run"]["cost"], rel=1e-5)
    bad = _subsampled_failures(ours, d, m)
    yolo = [i for i, l in enumerate(net.layers) if l.type == "yolo"]
    for i in yolo:
        l = net.layers[i]
        a = ours[f"L{i:03d}_delta"].reshape(net.batch, l.n, -1, l.out_h * l.out_w)[:, :, :5]
        _, r = diff(a, d[f"L{i:03d}_delta_box_obj"])
        if not r <= V7_TOL:
            bad.append(f"L{i:03d}_delta_box_obj: max rel {r:.3g}")
    for key in (k for k in d.files if k.endswith("_bias_updates")):
        _, r = diff(ours[key], d[key])
        if not r <= V7_TOL:
            bad.append(f"{key}: max rel {r:.3g}")
    assert not bad, "\n".join(bad)
    for i in yolo:
        assert ours[f"L{i:03d}_cost"][0] == pytest.approx(float(d[f"L{i:03d}_cost"][0]),
                                                          rel=1e-4)
    convs = sum(l.type == "convolutional" for l in net.layers)
    kinds = [k[5:] for k in d.files if k.startswith("L")]
    assert kinds.count("output_sub") == kinds.count("delta_sub") == 175
    assert kinds.count("weight_updates_sub") == kinds.count("bias_updates") == convs
    assert kinds.count("delta_box_obj") == len(yolo) == 3
    assert m["passed"] and max(r["own_ratio"] for r in m["rows"]
                               if r["own_ratio"] is not None) < 1
