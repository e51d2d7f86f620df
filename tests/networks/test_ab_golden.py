"""darknumba under the alexeyab dialect against tensors recorded from AlexeyAB's C darknet
(tests/fixtures/ab, see its README): every layer of the small AlexeyAB-style networks in test
and train mode, one training step (deltas, gradients, the update) under compat="darknet-cpu",
and the official yolov4-tiny on dog.jpg down to the detections after its greedy NMS.

Judged as max |ours - C| / max |C| per tensor (tensordiff.diff); a gradient that is a sum of
cancelling terms (a bias gradient: the sum of its delta) per entry against its sum of |terms|."""
import json
from pathlib import Path

import numpy as np
import pytest

import darknumba as dn
from darknumba.parity.tensordiff import diff
from darknumba.vision.box import get_network_boxes
from darknumba.vision.box_ab import network_nms

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "ab"
TOL = 1e-4
SMALL = ("ab-small-a", "ab-small-b")
FIELDS = ("output", "mean", "variance", "rolling_mean", "rolling_variance")


def small_network(name, compat=None):
    return dn.load_network(FIX / name / f"{name}.cfg", FIX / name / "init.weights",
                           dialect="alexeyab", compat=compat, exact=True)


def check(rows, label):
    """rows: (name, ours, C, terms or None); every one within TOL, all named on failure."""
    bad, judged = [], 0
    for key, ours, ref, terms in rows:
        a, r = diff(ours, ref, terms)
        judged += 1
        if not r <= TOL:
            bad.append(f"{key}: max abs {a:.3g}, max rel {r:.3g}")
    assert judged, f"{label}: nothing compared"
    assert not bad, f"{label}: {len(bad)} of {judged} tensors off:\n" + "\n".join(bad)


@pytest.mark.parametrize("mode", ["forward_test", "forward_train"])
@pytest.mark.parametrize("name", SMALL + ("ab-small-act",))
def test_small_networks_forward(name, mode):
    """ab-small-act (every activation AlexeyAB accepts, in convolutions with and without batch
    norm, [activation] and [shortcut] layers) as AlexeyAB's CPU build computes it: relu6 and
    [activation]'s swish / mish output 0 there (compat="darknet-cpu")."""
    d = np.load(FIX / name / mode / "data.npz")
    net = small_network(name, compat="darknet-cpu" if name == "ab-small-act" else None)
    train = mode == "forward_train"
    net.forward(d["input"], train=train, truth=d["truth"] if train and "truth" in d else None)
    rows = [(k, getattr(l, f), d[k], None) for i, l in enumerate(net.layers) for f in FIELDS
            if (k := f"L{i:03d}_{f}") in d.files]
    if train and "truth" in d:                  # the yolo layers' deltas and costs
        rows += [(f"L{i:03d}_delta", l.delta, d[f"L{i:03d}_delta"], None)
                 for i, l in enumerate(net.layers) if l.type == "yolo"]
        rows.append(("cost", np.float32(net.cost), d["cost"], None))
    omitted = json.loads((FIX / name / mode / "manifest.json").read_text()).get(
        "omitted_identical_outputs", {})          # one-input routes: a copy of their input
    rows += [(k, net.layers[int(k[1:4])].output, d[src], None) for k, src in omitted.items()]
    assert sum(k.endswith("_output") for k, *_ in rows) >= len(net.layers) - 4
    check(rows, f"{name} {mode}")


def test_small_act_by_default_computes_what_alexeyabs_cpu_zeroes():
    """Without compat the same network computes relu6, and swish / mish in [activation]: the
    layers that differ from the recording are exactly those AlexeyAB outputs 0 for."""
    d = np.load(FIX / "ab-small-act" / "forward_test" / "data.npz")
    net = small_network("ab-small-act")
    net.forward(d["input"])
    differ = {i: l.activation for i, l in enumerate(net.layers)
              if (k := f"L{i:03d}_output") in d.files and diff(l.output, d[k])[1] > TOL}
    assert set(differ.values()) == {"relu6", "mish", "swish"}
    assert all(not d[f"L{i:03d}_output"].any() and net.layers[i].output.any() for i in differ)
    assert {net.layers[i].type for i, a in differ.items() if a != "relu6"} == {"activation"}


def bias_terms(layer, delta):
    """Per output channel, the sum of |delta| a bias gradient adds up."""
    n = layer.n if layer.type == "convolutional" else layer.outputs
    return np.abs(delta.astype(np.float64)).reshape(layer.batch, n, -1).sum(axis=(0, 2))


@pytest.mark.parametrize("name", SMALL)
def test_small_networks_train_step_as_alexeyabs_cpu(name):
    """train_network on one batch: every layer's delta after backward, the gradients, and the
    parameters after update_network, with AlexeyAB's CPU quirks (compat="darknet-cpu": batch-
    norm biases get no gradient, antialiased layers no blur backward, a conv backward zeroes
    the delta it writes, [sam] overwrites, [implicit] is not updated)."""
    ft = np.load(FIX / name / "forward_train" / "data.npz")
    d = np.load(FIX / name / "trainstep" / "data.npz")
    run = json.loads((FIX / name / "trainstep" / "run.json").read_text())
    net = small_network(name, compat="darknet-cpu")
    err = net.train_datum(ft["input"], ft["truth"])
    assert err == pytest.approx(run["cost"], rel=1e-6)
    assert net.current_rate() == pytest.approx(run["rate"], rel=1e-7)
    rows = []
    for i, l in enumerate(net.layers):
        key = f"L{i:03d}_delta"
        if key in d.files:            # an antialiased layer's delta is its host's (stride 1)
            ours = l.delta if l.delta.size == d[key].size else l.host.delta
            rows.append((key, ours, d[key], None))
        for f in ("weights", "biases", "scales", "rolling_mean", "rolling_variance"):
            key = f"after_L{i:03d}_{f}"
            if key in d.files:
                rows.append((key, getattr(l, f), d[key], None))
        for f in ("weight_updates", "bias_updates", "scale_updates"):
            key = f"after_L{i:03d}_{f}"
            if key not in d.files:
                continue
            terms = None
            if f == "bias_updates" and f"L{i:03d}_delta" in d.files and \
                    l.type in ("convolutional", "connected"):
                terms = bias_terms(l, d[f"L{i:03d}_delta"]) * net.momentum
            rows.append((key, getattr(l, f), d[key], terms))
    assert sum(k.startswith("after_") for k, *_ in rows) > 20
    check(rows, f"{name} train step")


def test_alexeyab_default_trains_batch_norm_biases():
    """Without compat the biases of batch-norm layers learn (AlexeyAB's GPU build and the
    gradient), where its CPU build leaves them: the same step, only that differs."""
    ft = np.load(FIX / "ab-small-b" / "forward_train" / "data.npz")
    nets = [small_network("ab-small-b", compat) for compat in (None, "darknet-cpu")]
    for net in nets:
        net.seen += net.batch
        net.forward(ft["input"], train=True, truth=ft["truth"])
        net.backward()
    bn = [(f, c) for f, c in zip(nets[0].layers, nets[1].layers, strict=True)
          if getattr(f, "batch_normalize", 0)]
    assert bn and not any(c.bias_updates.any() for _, c in bn)
    assert sum(np.abs(f.bias_updates).max() > 1e-6 for f, _ in bn) >= len(bn) - 1


# -- yolov4-tiny on dog.jpg ---------------------------------------------------------------------
DOG = FIX / "yolov4-tiny-detect" / "dog"


@pytest.fixture(scope="module")
def yolov4_tiny_dog():
    from conftest import v4tiny_weights
    weights = v4tiny_weights()
    d = np.load(DOG / "data.npz")
    manifest = json.loads((DOG / "manifest.json").read_text())
    net = dn.load_network(ROOT / "cfg" / "yolov4-tiny.cfg", weights, batch=1,
                          exact=True)
    assert net.dialect == "alexeyab"
    net.forward(d["input"], train=False)
    return net, d, manifest


def test_yolov4_tiny_every_layer(yolov4_tiny_dog):
    net, d, manifest = yolov4_tiny_dog
    rows = []
    for st in manifest["layer_stats"]:
        i = st["index"]
        out = net.layers[i].output
        assert out.size == st["size"], f"layer {i}: {out.size} values, AlexeyAB {st['size']}"
        key = f"L{i:03d}_output"
        if key in d.files:
            rows.append((key, out, d[key], None))
        rows.append((f"L{i:03d}_sub", out[::st["sub_step"]], d[f"L{i:03d}_sub"], None))
    assert len(rows) == len(net.layers) + len(manifest["full_layers"])
    check(rows, "yolov4-tiny dog")


def test_yolov4_tiny_detections_after_greedy_nms(yolov4_tiny_dog):
    net, _, _ = yolov4_tiny_dog
    ref = json.loads((DOG / "detections.json").read_text())
    dets = get_network_boxes(net, ref["image_w"], ref["image_h"], ref["thresh"],
                             ref["hier_thresh"], True, 0, bool(ref["letter_box"]))
    dets = network_nms(net, dets, ref["nms"])
    kept = [k for k in range(len(dets)) if dets.prob[k].max() > 0]
    want = [d for d in ref["detections"] if d["prob"]]
    assert len(kept) == len(want)
    got = sorted((tuple(np.round(dets.bbox[k], 4)), int(dets.prob[k].argmax()),
                  float(dets.prob[k].max())) for k in kept)
    exp = sorted((tuple(np.round([d["x"], d["y"], d["w"], d["h"]], 4)),
                  max((int(c) for c in d["prob"]), key=lambda c: d["prob"][str(c)]),
                  max(d["prob"].values())) for d in want)
    for (gb, gc, gp), (eb, ec, ep) in zip(got, exp, strict=True):
        assert gc == ec
        np.testing.assert_allclose(gb, eb, atol=2e-4)
        assert gp == pytest.approx(ep, abs=1e-4)
