"""Backward passes against central finite differences, and against tests/naive.py.

The kernels are float32, so the checks run in float32 with the loss summed in float64, tiny
shapes and a step of 1e-2 (1e-3 for piecewise-linear layers, where the difference quotient is
exact but for rounding); the step actually taken (float32(v + h) - v) is used. Seeding a
layer's delta with g makes `net.delta` and `*_updates` the gradients of sum(g * output)
(Darknet's delta is the negative gradient of the loss; here the "loss" is -sum(g * output)).
Tolerance: max |FD - analytic| / max |analytic| per tensor, 3e-3 (a 1% error fails, see
test_checker_fails_on_wrong_gradient). Batch norm gets 3e-2: Darknet's BN backward is not the
exact gradient of its forward (unbiased variance and eps 1e-6 outside the sqrt forward; N and
1e-5 inside the sqrt backward), which moves the result by O(1/N); its exact Darknet formulas are
checked against naive.py instead.
"""
import naive
import numpy as np
import pytest

import darknumba as dn
from darknumba.kernels.activations import ACTIVATIONS

TOL = 3e-3
TOL_BN = 3e-2
SAMPLES = 24


def build(tmp_path, body, *, batch=2, w=7, h=7, c=3, compat=None, seed=0):
    cfg = tmp_path / "g.cfg"
    cfg.write_text(f"[net]\nbatch={batch}\nwidth={w}\nheight={h}\nchannels={c}\n\n{body}")
    net = dn.load_network(cfg, compat=compat)
    rng = np.random.default_rng(seed)
    for l in net.layers:
        if getattr(l, "weights", None) is not None and l.type in ("convolutional", "connected"):
            fan_in = l.nweights // l.nbiases
            l.weights[:] = rng.normal(0, 1.5 / np.sqrt(fan_in), l.weights.size)
            l.biases[:] = rng.normal(0, 0.2, l.biases.size)
            if l.batch_normalize:
                l.scales[:] = rng.uniform(0.5, 1.5, l.scales.size)
    return net, rng


def zero_updates(net):
    for l in net.layers:
        for a in ("weight_updates", "bias_updates", "scale_updates"):
            if getattr(l, a, None) is not None:
                getattr(l, a)[:] = 0


def fd_errors(net, rng, *, truth=None, loss_scale=1.0, h=1e-2, samples=SAMPLES, x=None):
    """{tensor: relative error} of the analytic input and parameter gradients against central
    differences. Without truth the loss is -sum(g * last output) with random g seeded into
    the last layer's delta; with truth it is loss_scale * the last layer's cost."""
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32) if x is None else x
    last = net.layers[-1]
    zero_updates(net)
    net.forward(x, train=True, truth=truth)
    if truth is None:
        g = rng.standard_normal(last.outputs * last.batch).astype(np.float32)
        last.delta[:] = g

        def objective():
            net.forward(x, train=True)
            return float(np.dot(g.astype(np.float64), last.output.astype(np.float64)))
    else:
        def objective():
            net.forward(x, train=True, truth=truth)
            return -loss_scale * last.cost
    dx = np.zeros_like(x)
    net.backward(dx)
    tensors = {"input": (x, dx.copy())}
    for i, l in enumerate(net.layers):
        for p, u in (("weights", "weight_updates"), ("biases", "bias_updates"),
                     ("scales", "scale_updates")):
            if getattr(l, u, None) is not None:
                tensors[f"L{i} {p}"] = (getattr(l, p), getattr(l, u).copy())
    errors = {}
    for name, (arr, analytic) in tensors.items():
        idx = rng.choice(arr.size, min(samples, arr.size), replace=False)
        numeric = np.empty(idx.size)
        for n, i in enumerate(idx):
            v = arr[i]
            arr[i] = v + np.float32(h)
            up, hp = objective(), float(arr[i]) - float(v)
            arr[i] = v - np.float32(h)
            down, hm = objective(), float(v) - float(arr[i])
            arr[i] = v
            numeric[n] = (up - down) / (hp + hm)
        scale = max(np.abs(analytic).max(), 1e-12)
        errors[name] = float(np.abs(numeric - analytic[idx]).max() / scale)
    return errors


def assert_small(errors, tol, label=""):
    bad = {k: v for k, v in errors.items() if not v <= tol}
    assert not bad, f"{label} gradients off (relative error > {tol}): {bad}"


def conv(filters, size, stride, pad, activation, extra=""):
    return (f"[convolutional]\nfilters={filters}\nsize={size}\nstride={stride}\n{pad}\n"
            f"{extra}activation={activation}\n")


CONV_CASES = {
    "3x3 s1 p1 logistic": conv(4, 3, 1, "pad=1", "logistic"),
    "3x3 s2 p1 groups=3 linear": conv(6, 3, 2, "pad=1", "linear", "groups=3\n"),
    "1x1 s1 direct tanh": conv(5, 1, 1, "pad=1", "tanh"),
    "1x1 s2 logistic": conv(4, 1, 2, "pad=1", "logistic"),
    "4x4 s3 padding=1 linear": conv(3, 4, 3, "padding=1", "linear"),
}


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv(tmp_path, case):
    net, rng = build(tmp_path, CONV_CASES[case])
    assert_small(fd_errors(net, rng), TOL, case)


def test_conv_batchnorm(tmp_path):
    body = ("[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\n"
            "groups=1\nactivation=logistic\n")
    net, rng = build(tmp_path, body, w=8, h=8)
    assert_small(fd_errors(net, rng), TOL_BN, "conv+BN")


def test_connected(tmp_path):
    net, rng = build(tmp_path, "[connected]\noutput=5\nactivation=logistic\n", w=2, h=2)
    assert_small(fd_errors(net, rng), TOL, "connected")


def test_connected_batchnorm(tmp_path):
    body = "[connected]\noutput=4\nbatch_normalize=1\nactivation=tanh\n"
    net, rng = build(tmp_path, body, batch=64, w=1, h=2)
    assert_small(fd_errors(net, rng), TOL_BN, "connected+BN")


# AlexeyAB's gradients that are not the derivative of its forward pass (gelu's formula taken
# at the output, the normalize_channels family): checked against its formulas in test_ab_layers
NOT_DERIVATIVES = ("stair", "gelu", "normalize_channels", "normalize_channels_softmax",
                   "normalize_channels_softmax_maxval")


@pytest.mark.parametrize("act", sorted(a for a in ACTIVATIONS if a not in NOT_DERIVATIVES))
def test_activation_gradients(tmp_path, act):
    """gradient_array (evaluated on the output, or on what the forward pass kept for swish and
    the mishes) for every activation with a derivative; stair's is 0 almost everywhere, as is
    Darknet's gradient except on integers. Activations with a kink near the inputs get a step
    of 1e-4 so that few outputs cross it."""
    body = f"[convolutional]\nfilters=4\nsize=1\nstride=1\npad=1\nactivation={act}\n"
    net, rng = build(tmp_path, body, w=5, h=5)
    smooth = act in ("logistic", "tanh", "loggy", "elu", "linear", "plse",  # plse: kinks at ±4
                     "swish", "mish")
    assert_small(fd_errors(net, rng, h=1e-2 if smooth else 1e-4), TOL, act)


POOL_CASES = {
    "maxpool 2/2": "[maxpool]\nsize=2\nstride=2\n",
    "maxpool 2/1": "[maxpool]\nsize=2\nstride=1\n",
    "maxpool 3/2": "[maxpool]\nsize=3\nstride=2\n",
    "avgpool": "[avgpool]\n",
    "upsample 2": "[upsample]\nstride=2\n",
    "upsample 3 scale": "[upsample]\nstride=3\nscale=0.5\n",
    "downsample 2": "[upsample]\nstride=-2\n",
}


@pytest.mark.parametrize("case", list(POOL_CASES))
def test_parameter_free_layers(tmp_path, case):
    net, rng = build(tmp_path, POOL_CASES[case], w=6, h=6)
    assert_small(fd_errors(net, rng, h=1e-3), TOL, case)


CONV_TANH = "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=tanh\n\n"


def test_route(tmp_path):
    body = (CONV_TANH + "[convolutional]\nfilters=3\nsize=1\nstride=1\npad=1\n"
            "activation=logistic\n\n[route]\nlayers=-1,-2\n")
    net, rng = build(tmp_path, body, w=5, h=5)
    assert_small(fd_errors(net, rng), TOL, "route")


def test_shortcut(tmp_path):
    body = (CONV_TANH + "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\n"
            "activation=logistic\n\n[shortcut]\nfrom=-2\nalpha=0.7\nbeta=1.3\nactivation=tanh\n")
    net, rng = build(tmp_path, body, w=5, h=5)
    assert_small(fd_errors(net, rng), TOL, "shortcut")


def test_shortcut_sampled(tmp_path):
    """`from` a map twice as large: Darknet samples it with a stride."""
    body = (CONV_TANH + "[convolutional]\nfilters=4\nsize=3\nstride=2\npad=1\n"
            "activation=logistic\n\n[shortcut]\nfrom=-2\nactivation=linear\n")
    net, rng = build(tmp_path, body, w=6, h=6)
    assert_small(fd_errors(net, rng), TOL, "shortcut, sampled")


SHORTCUT_OVER_1X1 = (CONV_TANH + "[convolutional]\nfilters=4\nsize=1\nstride=1\npad=1\n"
                     "activation=logistic\n\n[shortcut]\nfrom=-2\nactivation=linear\n")


def test_1x1_accumulates_by_default(tmp_path):
    """The 1x1 conv's input also feeds a shortcut: by default both gradients reach it."""
    net, rng = build(tmp_path, SHORTCUT_OVER_1X1, w=5, h=5)
    assert_small(fd_errors(net, rng), TOL, "1x1 + shortcut")


def test_1x1_overwrite_under_compat(tmp_path):
    """compat="darknet-cpu" keeps Darknet's CPU overwrite: the shortcut's gradient is lost."""
    net, rng = build(tmp_path, SHORTCUT_OVER_1X1, w=5, h=5, compat="darknet-cpu")
    errors = fd_errors(net, rng)
    assert errors["input"] > 0.05 and errors["L0 weights"] > 0.05, errors


def test_dropout(tmp_path, monkeypatch):
    """Dropout with its mask held fixed (the layer's generator reset before every forward):
    kept inputs scaled by 1/(1-p), the rest dropped, in the gradient as in the output.
    Darknet's dropout scales the previous layer's output in place, so that layer's act' is
    then taken on the scaled output: exact for piecewise-linear activations (leaky here),
    not for tanh or logistic; that is Darknet's behaviour and kept."""
    body = ("[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n\n"
            "[dropout]\nprobability=0.4\n\n[connected]\noutput=5\nactivation=linear\n")
    net, rng = build(tmp_path, body, w=4, h=4)
    drop = net.layers[1]
    forward = drop.forward

    def same_mask(n):
        drop.rng = np.random.default_rng(7)
        forward(n)
    monkeypatch.setattr(drop, "forward", same_mask)
    assert_small(fd_errors(net, rng, h=1e-4), TOL, "dropout")
    assert 0 < (drop.rand < 0.4).mean() < 1


def test_1x1_stride2_under_compat_is_consistent(tmp_path):
    """Under compat="darknet-cpu" a strided 1x1 conv multiplies the first out_h*out_w*c input
    values (Darknet's CPU forward); its backward is the exact adjoint of that forward."""
    net, rng = build(tmp_path, CONV_CASES["1x1 s2 logistic"], compat="darknet-cpu")
    assert_small(fd_errors(net, rng), TOL, "1x1 s2, darknet-cpu")
    x = np.arange(net.batch * net.inputs, dtype=np.float32)
    l = net.layers[0]
    l.weights[:] = 0
    l.weights[0] = 1                          # filter 0 copies input channel 0
    l.biases[:] = 0
    l.activation_id = ACTIVATIONS["linear"]
    net.forward(x)
    n = l.out_h * l.out_w
    np.testing.assert_array_equal(l.output[:n], x[:n])    # not the strided pixels


def test_softmax_cross_entropy(tmp_path):
    """Softmax passes t - p straight down: the gradient of the cross-entropy (its cost)."""
    net, rng = build(tmp_path, "[connected]\noutput=5\nactivation=linear\n\n[softmax]\n",
                     w=2, h=2)
    truth = np.eye(5, dtype=np.float32)[[1, 3]].ravel()
    assert_small(fd_errors(net, rng, truth=truth), TOL, "softmax x-ent")


@pytest.mark.parametrize("cost,scale", [("sse", 0.5), ("L1", 1.0)])
def test_cost_layer(tmp_path, cost, scale):
    """sse: delta = t - p, the gradient of half its cost; L1: sign(t - p)."""
    body = f"[connected]\noutput=5\nactivation=logistic\n\n[cost]\ntype={cost}\n"
    net, rng = build(tmp_path, body, w=2, h=2)
    truth = rng.uniform(0, 1, 10).astype(np.float32)
    h = 1e-2 if cost == "sse" else 1e-3
    assert_small(fd_errors(net, rng, truth=truth, loss_scale=scale, h=h), TOL, cost)


def test_checker_fails_on_wrong_gradient(tmp_path, monkeypatch):
    """The check can fail: a conv backward 1% off in its weight gradient is caught."""
    net, rng = build(tmp_path, CONV_CASES["3x3 s1 p1 logistic"])
    l = net.layers[0]
    backward = l.backward

    def off_by_one_percent(n):
        backward(n)
        l.weight_updates *= np.float32(1.01)
    monkeypatch.setattr(l, "backward", off_by_one_percent)
    errors = fd_errors(net, rng)
    assert errors["L0 weights"] > TOL and errors["input"] <= TOL, errors


# -- against the naive references ------------------------------------------------------------
@pytest.mark.parametrize("size,stride,pad,groups", [(3, 1, 1, 1), (3, 2, 1, 2), (1, 1, 0, 1),
                                                    (1, 2, 0, 1), (2, 2, 0, 2), (5, 3, 2, 1)])
def test_conv_backward_vs_naive(tmp_path, size, stride, pad, groups):
    body = (f"[convolutional]\nfilters=4\nsize={size}\nstride={stride}\npadding={pad}\n"
            f"groups={groups}\nactivation=linear\n")
    net, rng = build(tmp_path, body, c=4, w=7, h=6)
    l = net.layers[0]
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    net.forward(x, train=True)
    g = rng.standard_normal(l.delta.size).astype(np.float32)
    l.delta[:] = g
    dx = np.zeros_like(x)
    zero_updates(net)
    net.backward(dx)
    dw, dx_ref = naive.conv_backward(x, l.weights, g, l.batch, l.c, l.h, l.w, l.n, size,
                                     stride, pad, groups)
    np.testing.assert_allclose(l.weight_updates, dw, rtol=1e-4, atol=1e-4 * np.abs(dw).max())
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-4, atol=1e-4 * np.abs(dx_ref).max())
    np.testing.assert_allclose(l.bias_updates, g.reshape(l.batch, l.n, -1).sum(axis=(0, 2)),
                               rtol=1e-4, atol=1e-5)


def test_batchnorm_backward_vs_naive(tmp_path):
    body = ("[convolutional]\nbatch_normalize=1\nfilters=5\nsize=3\nstride=1\npad=1\n"
            "activation=linear\n")
    net, rng = build(tmp_path, body, batch=3, w=4, h=5)
    l = net.layers[0]
    net.forward(rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32), train=True)
    g = rng.standard_normal(l.delta.size).astype(np.float32)
    l.delta[:] = g
    zero_updates(net)
    net.backward()
    ref = naive.batchnorm_backward(g, l.x, l.x_norm, l.mean, l.variance, l.scales, l.batch,
                                   l.out_c, l.out_h * l.out_w)
    for name, ours, want in zip(("bias_updates", "scale_updates", "mean_delta",
                                 "variance_delta", "delta"),
                                (l.bias_updates, l.scale_updates, l.mean_delta,
                                 l.variance_delta, l.delta), ref):
        np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-5 * np.abs(want).max(),
                                   err_msg=name)
