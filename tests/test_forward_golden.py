"""Every layer's output against C darknet's recorded forward passes (../shared/golden)."""
import numpy as np
import pytest

import darknumba as dn
from conftest import load_golden, max_rel, tiny_weights, golden_dir

FIXTURES = [("det-small", "forward_test"), ("cls-small", "forward_test"),
            ("cls-small-fc", "forward_test"), ("act-mix", "forward_test"),
            ("det-small", "forward_train")]


def _check_outputs(net, data, tol_rel):
    worst = ("", 0.0, 0.0)
    for i, l in enumerate(net.layers):
        key = f"L{i:03d}_output"
        assert key in data, f"fixture lacks {key}"
        ref = data[key]
        assert l.output.size == ref.size, f"{key}: {l.output.size} values, C has {ref.size}"
        d, r = max_rel(l.output, ref)
        if r > worst[2]:
            worst = (key, d, r)
        assert r <= tol_rel, f"layer {i} ({l.type}) output: max |diff| {d:.3g}, rel {r:.3g}"
    return worst


@pytest.mark.parametrize("fixture,run", FIXTURES)
def test_layer_outputs_match_darknet(fixture, run):
    data, manifest, cfg, weights = load_golden(fixture, run)
    net = dn.load_network(cfg, weights)
    assert net.batch == manifest["net"]["batch"]
    for l, m in zip(net.layers, manifest["layers"]):
        assert (l.out_c, l.out_h, l.out_w, l.outputs) == (m["out_c"], m["out_h"], m["out_w"], m["outputs"]), \
            f"layer {m['index']} ({m['type']}) shape"
    train = run == "forward_train"       # loss deltas are checked by the training tests
    truth = data["truth"] if train else None
    try:
        net.forward(data["input"], train=train, truth=truth)
    except NotImplementedError as e:       # yolo loss not built yet
        pytest.skip(str(e))
    print(fixture, run, "worst tensor", _check_outputs(net, data, 1e-4))


def test_train_forward_updates_rolling_statistics():
    data, manifest, cfg, weights = load_golden("det-small", "forward_train")
    net = dn.load_network(cfg, weights)
    try:
        net.forward(data["input"], train=True, truth=data["truth"])
    except NotImplementedError as e:
        pytest.skip(str(e))
    checked = 0
    for i, l in enumerate(net.layers):
        if getattr(l, "batch_normalize", False):
            for name in ("mean", "variance", "rolling_mean", "rolling_variance"):
                d, r = max_rel(getattr(l, name), data[f"L{i:03d}_{name}"])
                assert r < 1e-4, f"layer {i} {name}: max |diff| {d:.3g} rel {r:.3g}"
                checked += 1
    assert checked >= 4 * 8


def test_yolov3_tiny_official_weights_on_dog():
    d = golden_dir("yolov3-tiny-detect")
    data = np.load(d / "dog" / "data.npz")
    net = dn.load_network(d / "yolov3-tiny.cfg", tiny_weights(), batch=1)
    assert net.seen == 32013312
    net.forward(data["input"])
    for i, l in enumerate(net.layers):
        diff, _ = max_rel(l.output, data[f"L{i:03d}_output"])
        assert diff < 1e-3, f"layer {i} ({l.type}): max |diff| {diff:.3g}"


def test_predict_returns_shaped_copy():
    data, manifest, cfg, weights = load_golden("cls-small", "forward_test")
    net = dn.load_network(cfg, weights)
    y = net.predict(data["input"].reshape(net.batch, net.c, net.h, net.w))
    assert y.shape == (net.batch, net.output_layer().outputs)
    np.testing.assert_allclose(y.ravel(), data[f"L{net.n - 1:03d}_output"], rtol=1e-4, atol=1e-6)
    y[:] = -1                      # a copy: the network's buffer is untouched
    assert net.output_layer().output.min() >= 0
