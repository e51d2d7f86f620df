"""Batch norm folded into .weights (`export weights --fuse-bn`, `reset`) and Darknet's small
tools (`average`, `rescale`, `ops`, `speed`), each against an independent reference."""
import numpy as np
import pytest
from typer.testing import CliRunner

import darknumba as dn
from darknumba.cli import app
from darknumba.export.fold import fold_batchnorm, folded_cfg_text
from darknumba.export.tools import average_weights, numops, rescale_weights, reset_batchnorm, speed

from conftest import ROOT, tiny_weights
from tiny_nets import cfg_text, conv, maxpool, section

NET = """[net]
batch=2
width=20
height=16
channels=3
# a comment that stays
[convolutional]
batch_normalize=1
filters=12
size=3
stride=1
pad=1
activation=leaky
[maxpool]
size=2
stride=2
[convolutional]
batch_normalize = 1
filters=8
groups=2
size=3
stride=1
pad=1
activation=linear
[convolutional]
filters=6
size=1
stride=1
activation=linear
[connected]
output=7
batch_normalize=1
activation=linear
"""


def random_net(path, dialect, seed=0, text=NET):
    """The test network with random weights, biases and batch-norm statistics, 1e-4 in every
    5th channel's variance (where the dialects' normalisers differ by 5 %)."""
    path.write_text(text)
    net = dn.parse_network_cfg(path, dialect=dialect, seed=seed)
    rng = np.random.default_rng(seed)
    for l in net.layers:
        if l.type in ("convolutional", "connected"):
            l.biases[:] = rng.normal(0, 0.1, l.biases.size)
            if l.batch_normalize:
                n = l.scales.size
                l.scales[:] = rng.uniform(0.5, 1.5, n)
                l.rolling_mean[:] = rng.normal(0, 0.2, n)
                l.rolling_variance[:] = rng.uniform(0.5, 2.0, n)
                l.rolling_variance[::5] = 1e-4
    net.seen = 1234
    return net


def images(net, seed=1):
    return np.random.default_rng(seed).random((net.batch, net.c, net.h, net.w), np.float32)


def assert_same_outputs(a, b, x, tol=1e-5):
    ya, yb = a.predict(x), b.predict(x)
    scale = max(1.0, float(np.abs(ya).max()))
    assert np.max(np.abs(ya - yb)) < tol * scale


def denormalize_as_darknet(l):
    """Darknet's denormalize_convolutional_layer (both forks): scale / sqrt(v + 1e-5)."""
    r = l.scales / np.sqrt(l.rolling_variance + np.float32(1e-5))
    return (l.weights.reshape(l.n, -1) * r[:, None]).reshape(-1), l.biases - l.rolling_mean * r


@pytest.mark.parametrize("dialect", ["pjreddie", "alexeyab"])
def test_fused_weights_compute_the_same_outputs(tmp_path, dialect):
    """export weights --fuse-bn: the folded .weights with its cfg (batch_normalize=0) give the
    original outputs within 1e-5; Darknet's sqrt(v + 1e-5) folding would not, for pjreddie."""
    net = random_net(tmp_path / "a.cfg", dialect)
    x = images(net)
    ref = net.predict(x)
    w_darknet, b_darknet = denormalize_as_darknet(net.layers[0])
    folded = fold_batchnorm(net)
    assert folded == [0, 2, 4]
    (tmp_path / "f.cfg").write_text(folded_cfg_text(tmp_path / "a.cfg", folded))
    dn.save_weights(net, tmp_path / "f.weights")
    again = dn.load_network(tmp_path / "f.cfg", tmp_path / "f.weights", dialect=dialect)
    assert again.seen == 1234 and not any(getattr(l, "batch_normalize", 0) for l in again.layers)
    got = again.predict(x)
    assert np.max(np.abs(got - ref)) < 1e-5 * max(1.0, np.abs(ref).max())
    darknet_differs = np.max(np.abs(w_darknet - again.layers[0].weights))
    if dialect == "pjreddie":
        assert darknet_differs > 1e-2 * np.abs(w_darknet).max()
    else:
        assert darknet_differs < 1e-6 * np.abs(w_darknet).max()
        np.testing.assert_allclose(b_darknet, again.layers[0].biases, atol=1e-6)


def test_folded_cfg_changes_only_batch_normalize(tmp_path):
    (tmp_path / "a.cfg").write_text(NET)
    text = folded_cfg_text(tmp_path / "a.cfg", [0, 2])
    before, after = NET.splitlines(), text.splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after)
    assert changed == [("batch_normalize=1", "batch_normalize=0"),
                       ("batch_normalize = 1", "batch_normalize=0")]


def test_fused_official_yolov3_tiny(tmp_path):
    net = dn.load_network(ROOT / "cfg/yolov3-tiny.cfg", tiny_weights(), batch=1)
    x = images(net)
    before = net.forward(x).copy()
    layers = fold_batchnorm(net)
    assert len(layers) == 11
    (tmp_path / "f.cfg").write_text(folded_cfg_text(ROOT / "cfg/yolov3-tiny.cfg", layers))
    dn.save_weights(net, tmp_path / "f.weights")
    again = dn.load_network(tmp_path / "f.cfg", tmp_path / "f.weights", batch=1)
    again.forward(x)
    for i in (16, 23):
        a, b = again.layers[i].output, net.layers[i].output
        assert np.max(np.abs(a - b)) < 1e-5 * max(1.0, np.abs(b).max())
    assert np.max(np.abs(net.forward(x) - before)) < 1e-5 * max(1.0, np.abs(before).max())


@pytest.mark.parametrize("dialect", ["pjreddie", "alexeyab"])
def test_reset_keeps_outputs_and_identity_records(tmp_path, dialect):
    net = random_net(tmp_path / "a.cfg", dialect)
    x = images(net)
    ref = net.predict(x)
    assert reset_batchnorm(net) == [0, 2, 4]
    dn.save_weights(net, tmp_path / "r.weights")
    again = dn.load_network(tmp_path / "a.cfg", tmp_path / "r.weights", dialect=dialect)
    for i in (0, 2, 4):
        l = again.layers[i]
        assert (l.scales == 1).all() and (l.rolling_mean == 0).all() and (l.rolling_variance == 1).all()
    got = again.predict(x)
    assert np.max(np.abs(got - ref)) < 1e-5 * max(1.0, np.abs(ref).max())


def test_average_is_the_float32_mean(tmp_path):
    paths, nets = [], []
    for k in range(3):
        net = random_net(tmp_path / "a.cfg", "pjreddie", seed=k)
        net.seen = 100 * (k + 1)
        dn.save_weights(net, tmp_path / f"{k}.weights")
        paths.append(tmp_path / f"{k}.weights")
        nets.append(net)
    avg = average_weights(tmp_path / "a.cfg", paths)
    assert avg.seen == 100
    for i, l in enumerate(avg.layers):
        for (name, got), *parts in zip(l.weight_records(), *(n.layers[i].weight_records() for n in nets)):
            arrays = [a for _, a in parts]
            np.testing.assert_allclose(got, np.mean(np.array(arrays, np.float64), axis=0),
                                       rtol=1e-6, atol=1e-7, err_msg=f"layer {i} {name}")
            # Darknet's float32 order: ((w0 + w1) + w2) * (float)(1/3)
            want = ((arrays[0] + arrays[1]) + arrays[2]) * np.float32(1 / 3)
            assert np.array_equal(got, want), (i, name)


def rescale_cfg(bn: bool, channels: int = 3) -> str:
    """A 1x1 first convolution (no zero padding) with or without batch norm, then a 3x3."""
    return cfg_text(dict(batch=1, width=9, height=7, channels=channels),
                    conv(5, size=1, bn=bn), conv(4, bn=False, activation="linear"))


@pytest.mark.parametrize("bn", [False, True])
def test_rescale_takes_unit_images(tmp_path, bn):
    """After rescale, the network on x' in [0, 1] computes what it computed on 2 x' - 1 (a 1x1
    first layer has no zero padding, where the two differ)."""
    net = random_net(tmp_path / "a.cfg", "pjreddie", text=rescale_cfg(bn))
    x = images(net)
    ref = net.predict(2 * x - 1)
    assert rescale_weights(net) == 0
    got = net.predict(x)
    assert np.max(np.abs(got - ref)) < 1e-5 * max(1.0, np.abs(ref).max())


def test_rescale_leaves_a_first_layer_without_3_channels(tmp_path):
    net = random_net(tmp_path / "a.cfg", "pjreddie", text=rescale_cfg(False, channels=2))
    before = net.layers[0].weights.copy()
    assert rescale_weights(net) == 0
    assert np.array_equal(before, net.layers[0].weights)


OPS = cfg_text(dict(batch=1, width=16, height=16, channels=4), conv(8, bn=False, groups=2),
               maxpool(), section("connected", output=10, activation="linear"),
               section("rnn", output=6, activation="leaky"))


def test_ops_counts_as_darknet(tmp_path):
    (tmp_path / "o.cfg").write_text(OPS)
    net = dn.parse_network_cfg(tmp_path / "o.cfg", allocate=False)
    conv = 2 * 8 * 3 * 3 * (4 // 2) * 16 * 16          # 2 n size^2 c/groups out_h out_w
    fc = 2 * (8 * 8 * 8) * 10
    rnn = 2 * (10 * 6 + 6 * 6 + 6 * 6)                  # input, self, output layers
    assert numops(net) == conv + fc + rnn
    r = CliRunner().invoke(app, ["ops", str(tmp_path / "o.cfg")])
    assert r.exit_code == 0, r.output
    assert f"Floating Point Operations: {conv + fc + rnn}\n" in r.output


def test_speed_report(tmp_path):
    (tmp_path / "o.cfg").write_text(OPS)
    s = speed(tmp_path / "o.cfg", tics=3)
    assert s.evals == 3 and s.seconds > 0
    lines = s.report().splitlines()
    assert lines[1].startswith("3 evals, ") and lines[-1].endswith(" Hz")
    r = CliRunner().invoke(app, ["speed", str(tmp_path / "o.cfg"), "--tics", "2"])
    assert r.exit_code == 0 and "2 evals" in r.output


def test_cli_reset_average_rescale_export_weights(tmp_path):
    net = random_net(tmp_path / "a.cfg", "pjreddie")
    dn.save_weights(net, tmp_path / "a.weights")
    run = lambda *a: CliRunner().invoke(app, [str(v) for v in a])      # noqa: E731
    r = run("reset", tmp_path / "a.cfg", tmp_path / "a.weights", tmp_path / "r.weights", "--clear")
    assert r.exit_code == 0 and "seen 0" in r.output, r.output
    assert dn.load_network(tmp_path / "a.cfg", tmp_path / "r.weights").seen == 0
    r = run("average", tmp_path / "a.cfg", tmp_path / "m.weights", tmp_path / "a.weights",
            tmp_path / "r.weights")
    assert r.exit_code == 0 and "averaged 2 files" in r.output, r.output
    r = run("rescale", tmp_path / "a.cfg", tmp_path / "a.weights", tmp_path / "s.weights")
    assert r.exit_code == 0 and "rescaled layer 0" in r.output, r.output
    r = run("export", "weights", tmp_path / "a.cfg", tmp_path / "a.weights", tmp_path / "f.weights",
            "--fuse-bn")
    assert r.exit_code == 0 and "into 3 layers" in r.output, r.output
    x = images(net)
    assert_same_outputs(net, dn.load_network(tmp_path / "f.cfg", tmp_path / "f.weights"), x)
    r = run("export", "weights", tmp_path / "a.cfg", tmp_path / "a.weights", tmp_path / "g.weights")
    assert r.exit_code != 0 and "--fuse-bn" in r.output
