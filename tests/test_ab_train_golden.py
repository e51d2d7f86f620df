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
every one passed)."""
import json
from pathlib import Path

import numpy as np
import pytest

import darknumba as dn
from darknumba.parity.compare import read_truth, run_darknumba
from darknumba.parity.tensordiff import diff
from darknumba.vision.image import resize_image

ROOT = Path(__file__).resolve().parents[1]
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
    net, ours, d, manifest, _ = step
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
