"""AlexeyAB's layers that combine several inputs or carry new parameters: weighted [shortcut],
[sam], [scale_channels], [implicit], [empty], [reorg3d], the sections not supported yet, and
one network through all the new layers (helpers and the single-input layers: test_ab_layers)."""
import naive_ab
import numpy as np
import pytest
from test_ab_layers import build, cfg_error, conv
from gradcheck import check_network

from darknumba.weights import load_weights, save_weights

# -- weighted [shortcut] ----------------------------------------------------------------------

SHORTCUT_NET = (conv(4, activation="tanh") + conv(3, activation="tanh") + conv(4, activation="tanh")
                + "[shortcut]\nfrom=-2,-3\nweights_type={wt}\nweights_normalization={wn}\n"
                  "activation=linear\n\n" + conv(2, 1, activation="logistic"))
WT = {"none": 0, "per_feature": 1, "per_channel": 2}
WN = {"none": 0, "relu": 1, "softmax": 2}


@pytest.mark.parametrize("wt,wn", [("none", "none"), ("per_feature", "none"),
                                   ("per_channel", "none"), ("per_feature", "relu"),
                                   ("per_channel", "softmax")])
def test_weighted_shortcut_forward_and_input_gradients(tmp_path, wt, wn):
    net, rng = build(tmp_path, SHORTCUT_NET.format(wt=wt, wn=wn), w=5, h=4)
    s = net.layers[3]
    assert s.nweights == {"none": 0, "per_feature": 3, "per_channel": 12}[wt]
    weights = rng.uniform(-0.5, 1.5, s.nweights).astype(np.float32)
    if s.nweights:
        s.weights[:] = weights
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    net.forward(x)
    prev, f1, f0 = (net.layers[i].output.reshape(2, -1).astype(np.float64) for i in (2, 1, 0))
    want, _ = naive_ab.shortcut(prev, [f1, f0], weights, WT[wt], WN[wn])
    np.testing.assert_allclose(s.output.reshape(2, -1), want, rtol=1e-5, atol=1e-6)
    check = check_network(net, rng)
    if wn != "none":           # AlexeyAB's weight gradient skips the normalisation: see below
        del check["L3 weights"]
    check.assert_ok(f"shortcut {wt} {wn}")


@pytest.mark.parametrize("wt,wn", [("per_feature", "relu"), ("per_channel", "softmax")])
def test_weighted_shortcut_weight_updates_are_alexeyabs(tmp_path, wt, wn):
    """weight_updates[i, k] += sum of delta * input_i over channel k: the gradient w.r.t. the
    normalised weight."""
    net, rng = build(tmp_path, SHORTCUT_NET.format(wt=wt, wn=wn), w=5, h=4)
    s = net.layers[3]
    s.weights[:] = rng.uniform(-0.5, 1.5, s.nweights)
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    net.forward(x, train=True)
    g = rng.standard_normal(s.delta.size).astype(np.float32)
    s.delta[:] = g
    s.weight_updates[:] = 0
    net.index, net.input, net.delta = 3, net.layers[2].output, net.layers[2].delta
    s.backward(net)
    c = s.nweights // 3
    chan = np.arange(s.outputs) // (s.outputs // c)
    g = g.reshape(2, -1).astype(np.float64)
    want = np.zeros((3, c))
    for i, idx in enumerate((2, 1, 0)):
        v = net.layers[idx].output.reshape(2, -1).astype(np.float64)
        m = min(v.shape[1], s.outputs)
        np.add.at(want[i], chan[:m], (g[:, :m] * v[:, :m]).sum(axis=0))
    np.testing.assert_allclose(s.weight_updates, want.ravel(), rtol=1e-5, atol=1e-6)


def test_weighted_shortcut_weights_round_trip_and_update(tmp_path):
    net, rng = build(tmp_path, SHORTCUT_NET.format(wt="per_channel", wn="softmax"), w=5, h=4)
    s = net.layers[3]
    s.weights[:] = rng.uniform(-0.5, 1.5, s.nweights)
    path = tmp_path / "w.weights"
    save_weights(net, path)
    convs = sum(l.nweights + l.nbiases for l in net.layers if l.type == "convolutional")
    assert path.stat().st_size == 20 + 4 * (convs + 12)
    want = s.weights.copy()
    s.weights[:] = 0
    load_weights(net, path)
    np.testing.assert_array_equal(s.weights, want)
    assert path.read_bytes() == (save_weights(net, tmp_path / "again.weights") or
                                 (tmp_path / "again.weights").read_bytes())
    s.weight_updates[:] = u = rng.normal(size=12).astype(np.float32)
    net.learning_rate, net.momentum, net.decay = 0.1, 0.9, 0.01
    net.update()
    step = np.float32(0.1) / np.float32(net.batch)
    uu = u + np.float32(-0.01 * net.batch) * want
    np.testing.assert_allclose(s.weights, want + step * uu, rtol=1e-6)
    np.testing.assert_allclose(s.weight_updates, 0.9 * uu, rtol=1e-6)


def test_shortcut_key_errors(tmp_path):
    msg = cfg_error(tmp_path, conv(3) + conv(3) + "[shortcut]\nfrom=-2\nweights_type=per_pixel\n")
    assert "[shortcut] weights_type" in msg and "per_channel" in msg
    msg = cfg_error(tmp_path, conv(3) + conv(3, stride=2) + "[shortcut]\nfrom=-2,-1\n")
    assert "[shortcut] from" in msg and "differ in size" in msg


# -- [sam], [scale_channels], [implicit], [empty] ----------------------------------------------

SAM_NET = (conv(4, activation="tanh") + conv(4, activation="logistic")
           + "[sam]\nfrom=-2\n\n" + conv(3, 1, activation="tanh"))


def test_sam_forward_and_gradients(tmp_path):
    net, rng = build(tmp_path, SAM_NET, w=5, h=4)
    a, b, s = net.layers[:3]
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    net.forward(x)
    np.testing.assert_array_equal(s.output, a.output * b.output)
    check_network(net, rng).assert_ok("sam")


def test_sam_cpu_overwrite_under_compat(tmp_path):
    """AlexeyAB's CPU [sam] writes the from layer's delta: layer 0's other gradient is lost."""
    body = (conv(4, activation="tanh") + conv(4, activation="logistic") + "[sam]\nfrom=-2\n\n"
            + "[shortcut]\nfrom=0\n")
    net, rng = build(tmp_path, body, w=5, h=4)
    check_network(net, rng).assert_ok("sam + shortcut")
    net, rng = build(tmp_path, body, w=5, h=4, compat="darknet-cpu")
    assert check_network(net, rng).errors()["L0 weights"] > 0.05


@pytest.mark.parametrize("scale_wh", [0, 1])
def test_scale_channels_forward_and_gradients(tmp_path, scale_wh):
    if scale_wh:
        body = (conv(4, activation="tanh") + conv(1, 1, activation="logistic")
                + "[scale_channels]\nfrom=-2\nscale_wh=1\n\n" + conv(2, 1, activation="tanh"))
    else:
        body = (conv(4, activation="tanh") + "[avgpool]\n\n" + conv(4, 1, activation="logistic")
                + "[scale_channels]\nfrom=-3\n\n" + conv(2, 1, activation="tanh"))
    net, rng = build(tmp_path, body, w=5, h=4)
    sc = next(l for l in net.layers if l.type == "scale_channels")
    src, scales = net.layers[0], net.layers[net.layers.index(sc) - 1]
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    net.forward(x)
    f = src.output.reshape(2, 4, 4, 5)
    s = scales.output.reshape(2, 1, 4, 5) if scale_wh else scales.output.reshape(2, 4, 1, 1)
    np.testing.assert_array_equal(sc.output.reshape(f.shape), f * s)
    assert (sc.out_w, sc.out_h, sc.out_c) == (5, 4, 4)
    check_network(net, rng).assert_ok(f"scale_channels scale_wh={scale_wh}")


def test_scale_channels_shape_errors(tmp_path):
    msg = cfg_error(tmp_path, conv(4) + conv(4) + "[scale_channels]\nfrom=-2\n")
    assert "[scale_channels] from" in msg and "needs 1x1x4" in msg
    msg = cfg_error(tmp_path, conv(4) + conv(3) + "[sam]\nfrom=-2\n")
    assert "[sam] from" in msg


def test_implicit_forward_gradients_weights_and_update(tmp_path):
    body = (conv(3, activation="tanh") + "[avgpool]\n\n"
            + "[implicit]\nfilters=3\nmean=1.0\nstd=0.1\n\n"
            + "[scale_channels]\nfrom=0\n\n" + conv(2, 1, activation="tanh"))
    net, rng = build(tmp_path, body, w=4, h=4)
    imp = net.layers[2]
    assert (imp.out_w, imp.out_h, imp.out_c) == (1, 1, 3)
    assert np.all(np.abs(imp.weights - 1.0) <= 0.1)            # mean + U(-std, std)
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    net.forward(x)
    np.testing.assert_array_equal(imp.output.reshape(2, 3), np.tile(imp.weights, (2, 1)))
    check_network(net, rng).assert_ok("implicit")
    path = tmp_path / "i.weights"
    save_weights(net, path)
    want = imp.weights.copy()
    imp.weights[:] = 0
    load_weights(net, path)
    np.testing.assert_array_equal(imp.weights, want)
    convs = sum(l.nweights + l.nbiases for l in net.layers if l.type == "convolutional")
    assert path.stat().st_size == 20 + 4 * (convs + 3)
    imp.weight_updates[:] = u = np.float32([1, -2, 3])
    net.learning_rate, net.momentum, net.decay = 0.5, 0.9, 0.0
    net.update()
    np.testing.assert_allclose(imp.weights, want + np.float32(0.5) / net.batch * u, rtol=1e-6)


def test_empty_passes_through(tmp_path):
    body = conv(3, activation="tanh") + "[empty]\n\n[silence]\n\n" + conv(2, 1, activation="tanh")
    net, rng = build(tmp_path, body, w=4, h=3)
    assert net.layers[1].output is net.layers[0].output and net.layers[3].c == 3
    check_network(net, rng).assert_ok("empty")
    net.resize(6, 5)
    assert net.layers[2].output is net.layers[0].output and net.layers[2].out_w == 6


# -- [reorg3d]; sections not supported yet ----------------------------------------------------

def test_reorg3d_is_space_to_depth(tmp_path):
    body = conv(3, activation="tanh") + "[reorg3d]\nstride=2\n\n" + conv(2, 1, activation="tanh")
    net, rng = build(tmp_path, body, w=6, h=4)
    a, r = net.layers[:2]
    assert (r.out_w, r.out_h, r.out_c) == (3, 2, 12)
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    net.forward(x)
    src = a.output.reshape(2, 3, 4, 6)
    want = np.concatenate([src[:, :, dy::2, dx::2] for dy in range(2) for dx in range(2)], axis=1)
    np.testing.assert_array_equal(r.output.reshape(want.shape), want)
    check_network(net, rng).assert_ok("reorg3d")


@pytest.mark.parametrize("section", ["conv_lstm", "history"])
def test_sections_not_supported_yet(tmp_path, section):
    msg = cfg_error(tmp_path, conv(3) + f"[{section}]\n")
    assert "ab.cfg:" in msg and f"[{section.lower()}]" in msg and "not support" in msg, msg


# -- all of them in one network ---------------------------------------------------------------

ALL_LAYERS = (conv(8, activation="mish", extra="batch_normalize=1\n")
              + conv(8, activation="swish", extra="dilation=2\n")
              + "[route]\nlayers=-1,-2\ngroups=2\ngroup_id=1\n\n"                  # 2: 8 ch
              + "[maxpool]\nmaxpool_depth=1\nout_channels=4\n\n"                   # 3: 4 ch
              + conv(8, 1, activation="hard_mish")                                 # 4
              + "[shortcut]\nfrom=-3,-4\nweights_type=per_channel\n"
                "weights_normalization={norm}\nactivation=mish\n\n"                # 5
              + conv(8, 1, activation="logistic") + "[sam]\nfrom=-2\n\n"           # 6, 7
              + "[avgpool]\n\n" + "[scale_channels]\nfrom=-2\n\n"                  # 8, 9
              + "[implicit]\nfilters=8\n\n" + "[scale_channels]\nfrom=-2\n\n"      # 10, 11
              + conv(6, 3, 2, "gelu", "antialiasing=1\n")                          # 12
              + "[maxpool]\nsize=2\nstride=2\nantialiasing=2\n\n"                  # 13
              + "[local_avgpool]\nsize=2\nstride=1\npadding=0\n\n"               # 14
              + "[reorg3d]\nstride=2\n\n"
              + conv(3, 1, activation="{act}"))


def test_all_new_layers_train_resize_and_weights(tmp_path):
    """The new layers together (their gradients are checked one by one above): a training step
    changes the output, .weights round trip, resize and forward again."""
    body = ALL_LAYERS.format(norm="softmax", act="normalize_channels_softmax")
    net, rng = build(tmp_path, body, w=20, h=20)
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    before = net.forward(x).copy()
    net.layers[-1].delta[:] = 0.1
    net.backward()
    net.update()
    assert not np.array_equal(net.forward(x), before)
    path = tmp_path / "all.weights"
    save_weights(net, path)
    other, _ = build(tmp_path, body, w=20, h=20, seed=5)
    load_weights(other, path)
    np.testing.assert_array_equal(other.forward(x), net.forward(x))
    net.resize(28, 36)
    out = net.forward(rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32))
    last = net.layers[-1]
    assert out.size == net.batch * last.outputs and (last.out_w, last.out_h) == (3, 4)
    assert np.isfinite(out).all()
