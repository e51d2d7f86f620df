"""Every layer's backward against central finite differences (tests/gradcheck.py: objective,
tolerances, and why a gradient 1% off cannot pass), and against tests/naive.

CASES lists every layer type with a backward, in the configurations that take different code
paths. Each case is checked once per module run (the `checked` fixture) and asserted twice:
its gradients pass, and the same numbers with the analytic gradient scaled by 1.01 fail, for
every tensor it checks.
"""
import naive
import numpy as np
import pytest
from gradcheck import ONE_PERCENT, build_cfg, check_network, reset_states, zero_updates

from darknumba.kernels.activations import ACTIVATIONS

CASES = {}


def case(name, body, *, check=None, **build):
    """Register a network (`body` under a [net] header, build_cfg's keywords) to be checked
    with check_network(**check)."""
    def run(tmp_path):
        net, rng = build_cfg(tmp_path, body, **build)
        return check_network(net, rng, **(check or {}))
    CASES[name] = run


def conv(filters, size, stride, pad, activation, extra=""):
    return (f"[convolutional]\nfilters={filters}\nsize={size}\nstride={stride}\n{pad}\n"
            f"{extra}activation={activation}\n")


CONV_TANH = conv(4, 3, 1, "pad=1", "tanh") + "\n"

# -- convolutional, connected, batch norm ------------------------------------------------------
case("conv 3x3 s1 p1 logistic", conv(4, 3, 1, "pad=1", "logistic"))
case("conv 3x3 s2 p1 groups=3 linear", conv(6, 3, 2, "pad=1", "linear", "groups=3\n"))
case("conv 1x1 s1 direct tanh", conv(5, 1, 1, "pad=1", "tanh"))
case("conv 1x1 s2 logistic", conv(4, 1, 2, "pad=1", "logistic"))
case("conv 4x4 s3 padding=1 linear", conv(3, 4, 3, "padding=1", "linear"))
case("conv 1x1 s2 darknet-cpu", conv(4, 1, 2, "pad=1", "logistic"), compat="darknet-cpu")
# batch norm: N = batch x spatial >= 1024 keeps Darknet's O(1/N) approximation below 1e-3
case("conv+BN", conv(4, 3, 1, "pad=1", "logistic", "batch_normalize=1\n"), batch=4, w=16, h=16)
case("batchnorm", "[batchnorm]\n", batch=4, w=16, h=16, c=3)
case("connected", "[connected]\noutput=5\nactivation=logistic\n", w=2, h=2)
case("connected+BN", "[connected]\noutput=4\nbatch_normalize=1\nactivation=tanh\n",
     batch=1024, w=1, h=2)

# -- activations: gradient_array on the output, for every activation with a derivative -------
# (stair's is 0 almost everywhere, as is Darknet's gradient except on integers.) Activations
# with a kink get a step of 1e-4, so that no output crosses it (a bias moves 50 outputs).
SMOOTH = ("logistic", "tanh", "loggy", "elu", "linear", "plse",     # plse: kinks at +-4
          "swish", "mish")
# AlexeyAB's gradients that are not the derivative of its forward pass (gelu's formula taken
# at the output, the normalize_channels family): checked against its formulas in test_ab_layers
NOT_DERIVATIVES = ("stair", "gelu", "normalize_channels", "normalize_channels_softmax",
                   "normalize_channels_softmax_maxval")
for _act in sorted(a for a in ACTIVATIONS if a not in NOT_DERIVATIVES):
    case(f"activation {_act}", conv(4, 1, 1, "pad=1", _act), w=5, h=5,
         check={"h": 1e-2 if _act in SMOOTH else 1e-4})


def _off_the_kink(net, rng):
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    return x + np.sign(x) * np.float32(0.05)


def _activation_layer(tmp_path, act):
    net, rng = build_cfg(tmp_path, f"[activation]\nactivation={act}\n", batch=2, w=4, h=3, c=5)
    return check_network(net, rng, x=_off_the_kink(net, rng))


CASES["[activation] leaky"] = lambda p: _activation_layer(p, "leaky")
CASES["[activation] tanh"] = lambda p: _activation_layer(p, "tanh")

# -- parameter-free layers -----------------------------------------------------------------------
for _name, _body in {"maxpool 2/2": "[maxpool]\nsize=2\nstride=2\n",
                     "maxpool 2/1": "[maxpool]\nsize=2\nstride=1\n",
                     "maxpool 3/2": "[maxpool]\nsize=3\nstride=2\n",
                     "maxpool 5/1 (two passes)": "[maxpool]\nsize=5\nstride=1\n",
                     "avgpool": "[avgpool]\n",
                     "upsample 2": "[upsample]\nstride=2\n",
                     "upsample 3 scale": "[upsample]\nstride=3\nscale=0.5\n",
                     "downsample 2": "[upsample]\nstride=-2\n"}.items():
    case(_name, _body, w=6, h=6, check={"h": 1e-3})
# reorg's kernel reads c / stride² channels: 4 channels for stride 2
case("reorg 2", "[reorg]\nstride=2\n", w=6, h=6, c=4, check={"h": 1e-3})

case("route", CONV_TANH + "[convolutional]\nfilters=3\nsize=1\nstride=1\npad=1\n"
     "activation=logistic\n\n[route]\nlayers=-1,-2\n", w=5, h=5)
case("shortcut", CONV_TANH + conv(4, 3, 1, "pad=1", "logistic")
     + "\n[shortcut]\nfrom=-2\nalpha=0.7\nbeta=1.3\nactivation=tanh\n", w=5, h=5)
# `from` a map twice as large: Darknet samples it with a stride
case("shortcut sampled", CONV_TANH + conv(4, 3, 2, "pad=1", "logistic")
     + "\n[shortcut]\nfrom=-2\nactivation=linear\n", w=6, h=6)
SHORTCUT_OVER_1X1 = (CONV_TANH + conv(4, 1, 1, "pad=1", "logistic")
                     + "\n[shortcut]\nfrom=-2\nactivation=linear\n")
# the 1x1 conv's input also feeds a shortcut: by default both gradients reach it
case("1x1 + shortcut accumulates", SHORTCUT_OVER_1X1, w=5, h=5)

# -- local and deconvolutional ------------------------------------------------------------------
for _s, _st, _p in [(3, 1, 1), (3, 2, 0), (1, 1, 0), (2, 2, 0)]:
    case(f"local {_s}/{_st} pad {_p}", f"[local]\nfilters=3\nsize={_s}\nstride={_st}\npad={_p}\n"
         "activation=linear\n", batch=2, w=4, h=5, c=2)
for _s, _st, _p in [(2, 2, 0), (3, 1, 1), (4, 2, 1), (3, 2, 0)]:
    case(f"deconv {_s}/{_st} padding {_p}", f"[deconvolutional]\nfilters=3\nsize={_s}\n"
         f"stride={_st}\npadding={_p}\nactivation=linear\n", batch=2, w=4, h=3, c=2)
case("deconv+BN", "[deconv]\nfilters=2\nsize=2\nstride=2\nbatch_normalize=1\n"
     "activation=logistic\n", batch=4, w=8, h=8, c=3)

# -- recurrent: backpropagation through 3 steps, every sub-layer's parameters ----------------
RECURRENT = {"rnn elu": "[rnn]\noutput=4\nactivation=elu\n",
             "rnn tanh shortcut": "[rnn]\noutput=4\nactivation=tanh\nshortcut=1\n",
             "rnn logistic+BN": "[rnn]\noutput=3\nactivation=logistic\nbatch_normalize=1\n",
             "gru": "[gru]\noutput=4\n",
             "gru tanh": "[gru]\noutput=4\ntanh=1\n",
             "lstm": "[lstm]\noutput=4\n"}
for _name, _body in RECURRENT.items():
    case(_name, _body, batch=4096 if "BN" in _name else 2, w=0, c=5, net_extra="time_steps=3\n")
case("crnn leaky", "[crnn]\nhidden_filters=3\noutput_filters=2\nactivation=leaky\n",
     batch=1, w=3, h=4, c=2, net_extra="time_steps=2\n", check={"h": 1e-3})


# -- losses and dropout ---------------------------------------------------------------------------
def _softmax(tmp_path):
    """Softmax passes t - p straight down: the gradient of the cross-entropy (its cost)."""
    net, rng = build_cfg(tmp_path, "[connected]\noutput=5\nactivation=linear\n\n[softmax]\n",
                         w=2, h=2)
    return check_network(net, rng, truth=np.eye(5, dtype=np.float32)[[1, 3]].ravel())


def _logistic(tmp_path):
    """[logistic] passes t - p down: the gradient of its cost, the binary cross-entropy."""
    net, rng = build_cfg(tmp_path, "[connected]\noutput=5\nactivation=linear\n\n[logistic]\n",
                         w=2, h=2)
    return check_network(net, rng, truth=(rng.uniform(size=10) > 0.5).astype(np.float32))


def _cost(tmp_path, cost, scale):
    """sse: delta = t - p, the gradient of half its cost; L1: sign(t - p)."""
    net, rng = build_cfg(tmp_path, f"[connected]\noutput=5\nactivation=logistic\n\n"
                                   f"[cost]\ntype={cost}\n", w=2, h=2)
    truth = rng.uniform(0, 1, 10).astype(np.float32)
    return check_network(net, rng, truth=truth, loss_scale=scale,
                         h=1e-2 if cost == "sse" else 1e-3)


def _dropout(tmp_path):
    """Dropout with its mask held fixed (the layer's generator reset before every forward):
    kept inputs scaled by 1/(1-p), the rest dropped, in the gradient as in the output.
    Darknet's dropout scales the previous layer's output in place, so that layer's act' is
    then taken on the scaled output: exact for piecewise-linear activations (leaky here),
    not for tanh or logistic; that is Darknet's behaviour and kept."""
    net, rng = build_cfg(tmp_path, conv(4, 3, 1, "pad=1", "leaky")
                         + "\n[dropout]\nprobability=0.4\n\n[connected]\noutput=5\n"
                         "activation=linear\n", w=4, h=4)
    drop = net.layers[1]

    def same_mask(n):
        reset_states(n)
        drop.rng = np.random.default_rng(7)
    result = check_network(net, rng, h=1e-3, before_forward=same_mask)
    assert 0 < (drop.rand < 0.4).mean() < 1
    return result


CASES["softmax cross-entropy"] = _softmax
CASES["logistic cross-entropy"] = _logistic
CASES["cost sse"] = lambda p: _cost(p, "sse", 0.5)
CASES["cost L1"] = lambda p: _cost(p, "L1", 1.0)
CASES["dropout"] = _dropout


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """case name -> its GradCheck, computed once per module run."""
    done = {}

    def get(name):
        if name not in done:
            done[name] = CASES[name](tmp_path_factory.mktemp("gradcheck"))
        return done[name]
    return get


@pytest.mark.parametrize("name", list(CASES))
def test_gradients(checked, name):
    checked(name).assert_ok(name)


@pytest.mark.parametrize("name", list(CASES))
def test_one_percent_error_is_caught(checked, name):
    """The same finite differences against the analytic gradient scaled by 1.01: every tensor
    of every case fails."""
    checked(name).assert_catches_one_percent(name)


def test_a_wrong_backward_fails(tmp_path, monkeypatch):
    """End to end through a real backward: a conv whose weight gradient is 1% off fails on
    its weights and only there."""
    net, rng = build_cfg(tmp_path, conv(4, 3, 1, "pad=1", "logistic"))
    l = net.layers[0]
    backward = l.backward

    def off_by_one_percent(n):
        backward(n)
        l.weight_updates *= np.float32(ONE_PERCENT)
    monkeypatch.setattr(l, "backward", off_by_one_percent)
    assert set(check_network(net, rng).failing()) == {"L0 weights"}


def test_1x1_overwrite_under_compat(tmp_path):
    """compat="darknet-cpu" keeps Darknet's CPU overwrite: the shortcut's gradient is lost."""
    net, rng = build_cfg(tmp_path, SHORTCUT_OVER_1X1, w=5, h=5, compat="darknet-cpu")
    errors = check_network(net, rng).errors()
    assert errors["input"] > 0.05 and errors["L0 weights"] > 0.05, errors


def test_1x1_stride2_under_compat_reads_the_first_pixels(tmp_path):
    """Under compat="darknet-cpu" a strided 1x1 conv multiplies the first out_h*out_w*c input
    values (Darknet's CPU forward); its backward is the adjoint of that forward (the case
"conv 1x1 s2 darknet-cpu")."""
    net, _ = build_cfg(tmp_path, conv(4, 1, 2, "pad=1", "logistic"), compat="darknet-cpu")
    x = np.arange(net.batch * net.inputs, dtype=np.float32)
    l = net.layers[0]
    l.weights[:] = 0
    l.weights[0] = 1                          # filter 0 copies input channel 0
    l.biases[:] = 0
    l.activation_id = ACTIVATIONS["linear"]
    net.forward(x)
    n = l.out_h * l.out_w
    np.testing.assert_array_equal(l.output[:n], x[:n])    # not the strided pixels


# -- against the naive references ------------------------------------------------------------
@pytest.mark.parametrize("size,stride,pad,groups", [(3, 1, 1, 1), (3, 2, 1, 2), (1, 1, 0, 1),
                                                    (1, 2, 0, 1), (2, 2, 0, 2), (5, 3, 2, 1)])
def test_conv_backward_vs_naive(tmp_path, size, stride, pad, groups):
    body = (f"[convolutional]\nfilters=4\nsize={size}\nstride={stride}\npadding={pad}\n"
            f"groups={groups}\nactivation=linear\n")
    net, rng = build_cfg(tmp_path, body, c=4, w=7, h=6)
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
    net, rng = build_cfg(tmp_path, body, batch=3, w=4, h=5)
    l = net.layers[0]
    net.forward(rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32), train=True)
    g = rng.standard_normal(l.delta.size).astype(np.float32)
    l.delta[:] = g
    zero_updates(net)
    net.backward()
    ref = naive.batchnorm_backward(g, l.x, l.x_norm, l.mean, l.variance, l.scales, l.batch,
                                   l.out_c, l.out_h * l.out_w)
    names = ("bias_updates", "scale_updates", "mean_delta", "variance_delta", "delta")
    ours = (l.bias_updates, l.scale_updates, l.mean_delta, l.variance_delta, l.delta)
    for name, a, want in zip(names, ours, ref, strict=True):
        np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-5 * np.abs(want).max(),
                                   err_msg=name)
