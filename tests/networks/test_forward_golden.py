"""Every layer's output against C darknet's recorded forward passes (tests/fixtures/golden)."""
import numpy as np
import pytest
from conftest import ROOT, golden_dir, load_golden, tiny_weights

import darknumba as dn
from darknumba.parity.tensordiff import named_rows, rows_report

FIXTURES = [("det-small", "forward_test"), ("cls-small", "forward_test"),
            ("cls-small-fc", "forward_test"), ("act-mix", "forward_test"),
            ("det-small", "forward_train")]


def check_tensors(ours: dict, data, tol: float, label: str):
    """Every tensor of `ours` against the fixture's tensor of the same name (tensordiff's
    model); on failure each is named with its max abs / rel difference."""
    missing = [k for k in ours if k not in data]
    assert not missing, f"fixture lacks {missing}"
    rows = named_rows(ours, {k: data[k] for k in ours}, tol=tol)
    report = rows_report(rows, tol, label)
    assert all(r.ok for r in rows), report
    print(report)


def outputs(net) -> dict:
    return {f"L{i:03d}_output": l.output for i, l in enumerate(net.layers)}


@pytest.mark.parametrize("fixture,run", FIXTURES)
def test_layer_outputs_match_darknet(fixture, run):
    data, manifest, cfg, weights = load_golden(fixture, run)
    net = dn.load_network(cfg, weights, exact=True)
    assert net.batch == manifest["net"]["batch"]
    for l, m in zip(net.layers, manifest["layers"], strict=True):
        assert (l.out_c, l.out_h, l.out_w, l.outputs) == (m["out_c"], m["out_h"], m["out_w"], m["outputs"]), \
            f"layer {m['index']} ({m['type']}) shape"
    train = run == "forward_train"       # loss deltas are checked by the training tests
    truth = data["truth"] if train else None
    net.forward(data["input"], train=train, truth=truth)
    check_tensors(outputs(net), data, 1e-4, f"{fixture} {run}")


def test_train_forward_updates_rolling_statistics():
    data, manifest, cfg, weights = load_golden("det-small", "forward_train")
    net = dn.load_network(cfg, weights)
    net.forward(data["input"], train=True, truth=data["truth"])
    stats = {f"L{i:03d}_{name}": getattr(l, name) for i, l in enumerate(net.layers)
             if getattr(l, "batch_normalize", False)
             for name in ("mean", "variance", "rolling_mean", "rolling_variance")}
    assert len(stats) >= 4 * 8
    check_tensors(stats, data, 1e-4, "det-small batch-norm statistics")


def test_yolov3_tiny_official_weights_on_dog():
    """From C's letterboxed dog.jpg; the fixture keeps ten of the 24 outputs (the deeper ones,
    both yolo heads among them: a difference anywhere earlier reaches them)."""
    data = np.load(golden_dir("yolov3-tiny-detect") / "dog" / "data.npz")
    net = dn.load_network(ROOT / "cfg" / "yolov3-tiny.cfg", tiny_weights(), batch=1, exact=True)
    assert net.seen == 32013312
    net.forward(data["input"])
    kept = {k: v for k, v in outputs(net).items() if k in data}
    assert len(kept) == 10 and {"L016_output", "L023_output"} <= kept.keys()
    check_tensors(kept, data, 1e-4, "yolov3-tiny on dog.jpg")


def test_predict_returns_shaped_copy():
    data, manifest, cfg, weights = load_golden("cls-small", "forward_test")
    net = dn.load_network(cfg, weights, exact=True)
    y = net.predict(data["input"].reshape(net.batch, net.c, net.h, net.w))
    assert y.shape == (net.batch, net.output_layer().outputs)
    np.testing.assert_allclose(y.ravel(), data[f"L{net.n - 1:03d}_output"], rtol=1e-4, atol=1e-6)
    y[:] = -1                      # a copy: the network's buffer is untouched
    assert net.output_layer().output.min() >= 0
