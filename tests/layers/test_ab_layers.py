"""AlexeyAB's activations and single-input layers and keys (conv dilation / strides /
antialiasing / share_index, route groups, maxpool_depth, local_avgpool): forward against the
numpy references of naive_ab.py, backward against finite differences (test_gradcheck's
checker) or, where AlexeyAB's backward is not the derivative of its forward, against its
formula; weights round trips. The multi-input layers: test_ab_multi.py."""
import naive_ab
import numpy as np
import pytest
from gradcheck import check_network

from darknumba.errors import CfgError
from darknumba.kernels.activations import ACTIVATIONS
from darknumba.kernels.activations_ab import activate_layer_cpu, gradient_layer_cpu
from darknumba.parser import parse_network_cfg
from darknumba.weights import load_weights, save_weights

RNG = np.random.default_rng(11)


def build(tmp_path, body, *, batch=2, w=7, h=7, c=3, compat=None, seed=0, dialect="alexeyab"):
    """A network from a cfg body, AlexeyAB's dialect, weights scaled as test_gradcheck does."""
    cfg = tmp_path / "ab.cfg"
    cfg.write_text(f"[net]\nbatch={batch}\nwidth={w}\nheight={h}\nchannels={c}\n\n{body}")
    net = parse_network_cfg(cfg, compat=compat, dialect=dialect)
    rng = np.random.default_rng(seed)
    for l in net.layers:
        if getattr(l, "nbiases", 0) and l.type in ("convolutional", "connected"):
            l.weights[:] = rng.normal(0, 1.5 / np.sqrt(l.nweights // l.nbiases), l.weights.size)
            l.biases[:] = rng.normal(0, 0.2, l.biases.size)
            if l.batch_normalize:
                l.scales[:] = rng.uniform(0.5, 1.5, l.scales.size)
                l.rolling_variance[:] = 1       # test mode: not 0, which blows the output up
    return net, rng


def conv(filters, size=3, stride=1, activation="linear", extra=""):
    return (f"[convolutional]\nfilters={filters}\nsize={size}\nstride={stride}\npad=1\n"
            f"{extra}activation={activation}\n\n")


def cfg_error(tmp_path, body, **kw) -> str:
    with pytest.raises(CfgError) as e:
        build(tmp_path, body, **kw)
    return str(e.value)


# -- activations -----------------------------------------------------------------------------

ELEMENTWISE_AB = ("relu6", "revleaky", "gelu", "swish", "mish", "hard_mish")
# AlexeyAB's float32 formulas cancel: gelu's 1 + tanhf(u) for x < -4, mish's
# 2/(1 + expf(-2 sp)) - 1 for small sp: one ulp of expf / tanhf (numpy's float32 functions
# are not libm's) moves the result by up to |x| * 6e-8 absolute
CANCEL_ATOL = 2e-6


@pytest.mark.parametrize("name", ELEMENTWISE_AB)
def test_elementwise_activations_match_alexeyab_formulas(name):
    x = np.concatenate([np.linspace(-25, 25, 501), RNG.normal(0, 3, 500),
                        [-2.0, -1e-3, 0.0, 1e-3, 6.0, 21.0, -21.0]]).astype(np.float32)
    y, keep = x.copy(), np.zeros_like(x)
    a = ACTIVATIONS[name]
    activate_layer_cpu(y, y.size, a, 1, 1, y.size, keep)
    want = naive_ab.activate(name, x)
    np.testing.assert_allclose(y, want, rtol=3e-6, atol=CANCEL_ATOL)
    d = RNG.normal(size=x.size).astype(np.float32)
    got = d.copy()
    gradient_layer_cpu(y, y.size, a, 1, 1, y.size, keep, got)
    np.testing.assert_allclose(got, d * naive_ab.gradient(name, x, y), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["", "softmax", "softmax_maxval"])
def test_normalize_channels_forward_and_alexeyab_backward(kind):
    name = "normalize_channels" + ("_" + kind if kind else "")
    x = RNG.normal(0, 2, (2, 5, 3, 4)).astype(np.float32)
    y = x.copy().ravel()
    activate_layer_cpu(y, y.size, ACTIVATIONS[name], 2, 5, 12, np.empty(0, np.float32))
    want = naive_ab.normalize_channels(x, kind)
    np.testing.assert_allclose(y.reshape(x.shape), want, rtol=2e-6, atol=1e-7)
    d = RNG.normal(size=x.shape).astype(np.float32)
    got = d.copy().ravel()
    gradient_layer_cpu(y, y.size, ACTIVATIONS[name], 2, 5, 12, np.empty(0, np.float32), got)
    np.testing.assert_allclose(got.reshape(x.shape),
                               naive_ab.normalize_channels_delta(want, d, kind),
                               rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["mish", "swish", "hard_mish", "gelu", "normalize_channels"])
@pytest.mark.parametrize("c", [3, 40])     # the direct 3x3 kernel, and im2col + GEMM (K > 288)
def test_conv_activation_same_in_test_and_train_mode(tmp_path, name, c):
    """Test mode fuses the activation into the bias sweep; train mode applies it after, keeping
    the input: the outputs are the same bits, and equal the reference applied to the linear
    output."""
    # one image: at batch > 1 training runs the batch's GEMMs as one, test mode one per image
    # (conv_plan.BATCH_GEMM_MAX_N), and their sums may round differently
    net, rng = build(tmp_path, conv(4, activation=name), c=c, batch=1)
    x = rng.uniform(-2, 2, net.batch * net.inputs).astype(np.float32)
    test = net.forward(x).copy()
    train = net.forward(x, train=True).copy()
    np.testing.assert_array_equal(test, train)
    l = net.layers[0]
    l.activation_id = ACTIVATIONS["linear"]
    lin = net.forward(x).reshape(l.output_shape())
    if name.startswith("normalize"):
        want = naive_ab.normalize_channels(lin, "")
    else:
        want = naive_ab.activate(name, lin)
    np.testing.assert_allclose(test.reshape(want.shape), want, rtol=3e-6, atol=CANCEL_ATOL)


@pytest.mark.parametrize("name", ["mish", "swish", "hard_mish"])
def test_conv_batchnorm_mish_gradients(tmp_path, name):
    body = conv(4, activation=name, extra="batch_normalize=1\n")
    # batch norm: N = batch x spatial >= 1024 keeps Darknet's O(1/N) approximation below 1e-3
    net, rng = build(tmp_path, body, w=16, h=16, batch=4)
    check_network(net, rng, h=1e-2 if name != "hard_mish" else 1e-3).assert_ok(name)


@pytest.mark.parametrize("name", ["mish", "swish", "leaky"])
def test_shortcut_activation_gradients(tmp_path, name):
    body = (conv(4, activation="tanh") + conv(4, activation="logistic")
            + f"[shortcut]\nfrom=-2\nactivation={name}\n")
    net, rng = build(tmp_path, body, w=5, h=5)
    check_network(net, rng, h=1e-2 if name != "leaky" else 1e-4).assert_ok(name)


@pytest.mark.parametrize("name", ["mish", "swish", "hard_mish", "relu6"])
def test_activation_layer_computes_alexeyabs_activations(tmp_path, name):
    """[activation] with AlexeyAB's own activations: the function it names (forward as the
    reference, the same bits in test and train mode), backward by finite differences."""
    net, rng = build(tmp_path, conv(4, activation="linear") + f"[activation]\nactivation={name}\n",
                     w=5, h=5)
    x = rng.uniform(-3, 3, net.batch * net.inputs).astype(np.float32)
    test = net.forward(x).copy()
    np.testing.assert_array_equal(test, net.forward(x, train=True))
    lin = net.layers[0].output
    np.testing.assert_allclose(test, naive_ab.activate(name, lin), rtol=3e-6, atol=CANCEL_ATOL)
    h = {"hard_mish": 1e-3, "relu6": 1e-4}.get(name, 1e-2)    # smaller steps near the kinks
    check_network(net, rng, h=h).assert_ok(name)


@pytest.mark.parametrize("name", ["mish", "swish", "hard_mish", "relu6"])
def test_activation_layer_outputs_zero_as_alexeyabs_cpu_under_compat(tmp_path, name):
    """AlexeyAB's activate() / gradient() have no case for these: its [activation] layer outputs
    0 and passes a zero delta down (copied over the layer below's, as its backward copies)."""
    net, rng = build(tmp_path, conv(4, activation="linear") + f"[activation]\nactivation={name}\n",
                     w=5, h=5, compat="darknet-cpu")
    x = rng.uniform(-3, 3, net.batch * net.inputs).astype(np.float32)
    assert not net.forward(x, train=True).any()
    act, below = net.layers[1], net.layers[0]
    act.delta[:] = 1
    below.delta[:] = 5
    net.index, net.input, net.delta = 1, below.output, below.delta
    act.backward(net)
    assert not act.delta.any() and not below.delta.any()


@pytest.mark.parametrize("section,act,where", [
    ("[connected]\noutput=4\n", "mish", "[convolutional], [shortcut] and [activation]"),
    ("[activation]\n", "normalize_channels", "[convolutional] layers"),
    ("[shortcut]\nfrom=-1\n", "hard_mish", "[convolutional] and [activation] layers"),
])
def test_activation_outside_convolutional_is_an_error(tmp_path, section, act, where):
    msg = cfg_error(tmp_path, conv(3) + section + f"activation={act}\n")
    assert "ab.cfg:" in msg and "activation" in msg and where in msg, msg


# -- [convolutional] dilation, antialiasing, share_index ---------------------------------------

@pytest.mark.parametrize("stride,dilation,groups", [(1, 2, 1), (2, 2, 1), (1, 3, 2), (2, 3, 2)])
def test_dilated_conv_forward_and_gradients(tmp_path, stride, dilation, groups):
    body = conv(4, 3, stride, extra=f"dilation={dilation}\ngroups={groups}\n")
    net, rng = build(tmp_path, body, w=9, h=8, c=4)
    l = net.layers[0]
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    got = net.forward(x).reshape(l.output_shape())
    want = naive_ab.conv_forward(x.reshape(2, 4, 8, 9), l.weights, l.biases, 4, 3, stride, 1,
                                 groups, dilation)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    check_network(net, rng, h=1e-3).assert_ok(f"dilation {dilation}")


@pytest.mark.parametrize("sx,sy,dilation", [(2, 1, 1), (1, 3, 1), (2, 1, 2)])
def test_unequal_strides(tmp_path, sx, sy, dilation):
    body = conv(3, 3, extra=f"stride_x={sx}\nstride_y={sy}\ndilation={dilation}\n")
    net, rng = build(tmp_path, body, w=9, h=8, c=2)
    l = net.layers[0]
    assert (l.out_w, l.out_h) == ((9 - 1) // sx + 1, (8 - 1) // sy + 1)
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    got = net.forward(x).reshape(l.output_shape())
    want = naive_ab.conv_forward(x.reshape(2, 2, 8, 9), l.weights, l.biases, 3, 3, (sy, sx), 1,
                                 dilation=dilation)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    check_network(net, rng, h=1e-3).assert_ok(f"strides {sx}x{sy}")
    assert f"/{sx}x{sy}" in l.describe()


def test_dilation_without_same_padding_is_an_error(tmp_path):
    msg = cfg_error(tmp_path, "[convolutional]\nfilters=2\nsize=3\npadding=0\ndilation=2\n")
    assert "dilation=2" in msg and "pad=1" in msg and "ab.cfg:" in msg, msg


def test_dilation_1x1_is_ignored(tmp_path):
    net, _ = build(tmp_path, conv(2, 1, extra="dilation=4\n"))
    assert net.layers[0].dilation == 1


@pytest.mark.parametrize("kind,stride", [(1, 2), (2, 2), (1, 1)])
def test_antialiased_conv(tmp_path, kind, stride):
    # a smooth activation: the finite differences need no tiny step to stay off a kink
    body = conv(4, 3, stride, "logistic", f"antialiasing={kind}\n") + conv(3, 1)
    net, rng = build(tmp_path, body, w=8, h=8, c=3)
    l = net.layers[0]
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    net.forward(x)
    host = naive_ab.conv_forward(x.reshape(2, 3, 8, 8), l.weights, l.biases, 4, 3, 1, 1)
    host = 1 / (1 + np.exp(-host))
    want = naive_ab.blur(host, kind, stride)
    assert (l.out_w, l.out_h, l.out_c) == (want.shape[3], want.shape[2], 4)
    assert net.layers[1].w == want.shape[3]
    np.testing.assert_allclose(l.output.reshape(want.shape), want, rtol=1e-5, atol=1e-6)
    check_network(net, rng).assert_ok(f"antialiasing={kind}")
    assert [r[0] for r in l.weight_records()] == ["biases", "weights"]     # the blur: none
    assert "AA:" in net.summary()


def test_shared_conv_parameters_gradients_and_weights(tmp_path):
    body = (conv(4, 3, activation="tanh", extra="batch_normalize=1\n")
            + conv(4, 3, activation="logistic", extra="batch_normalize=1\nshare_index=-1\n"))
    net, rng = build(tmp_path, body, w=16, h=16, c=4, batch=4)     # N >= 1024: see above
    a, b = net.layers
    assert b.weights is a.weights and b.rolling_mean is a.rolling_mean and b.x is not a.x
    assert b.weight_records() == []
    check_network(net, rng).assert_ok("share_index")
    path = tmp_path / "s.weights"
    save_weights(net, path)
    assert path.stat().st_size == 20 + 4 * (4 * 4 * 9 + 4 * 4)
    load_weights(net, path)


def test_shared_conv_update_applies_twice_as_alexeyab(tmp_path):
    """Both layers' update_convolutional_layer run on the one set of weights."""
    body = conv(3, 3) + conv(3, 3, extra="share_index=0\n")
    net, rng = build(tmp_path, body, c=3)
    net.learning_rate, net.momentum, net.decay = 0.1, 0.9, 0.01
    l = net.layers[0]
    w0 = l.weights.astype(np.float64).copy()
    u0 = rng.normal(size=w0.size)
    l.weight_updates[:] = u0
    net.update()
    lr, batch = 0.1 / net.batch, net.batch
    w, u = w0, u0.copy()
    for _ in range(2):
        u = u - 0.01 * batch * w
        w = w + lr * u
        u = 0.9 * u
    np.testing.assert_allclose(l.weights, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("body,key", [
    (conv(2, extra="share_index=5\n"), "share_index"),
    (conv(2, extra="assisted_excitation=1\n"), "assisted_excitation"),
    (conv(2, extra="xnor=1\ndilation=2\n"), "xnor"),
    (conv(2, extra="antialiasing=3\n"), "antialiasing"),
])
def test_conv_key_errors(tmp_path, body, key):
    msg = cfg_error(tmp_path, body)
    assert f"[convolutional] {key}" in msg and "ab.cfg:" in msg, msg


def test_alexeyab_cpu_col2im_drops_the_shortcut_gradient(tmp_path):
    """Under compat="darknet-cpu", AlexeyAB's conv backward zeroes its input delta first:
    the shortcut's contribution to layer 0's delta is lost; by default both add up."""
    body = (conv(4, activation="tanh") + conv(4, activation="logistic")
            + "[shortcut]\nfrom=-2\nactivation=linear\n")
    net, rng = build(tmp_path, body, w=5, h=5)
    check_network(net, rng).assert_ok("default")
    net, rng = build(tmp_path, body, w=5, h=5, compat="darknet-cpu")
    errors = check_network(net, rng).errors()
    assert errors["input"] > 0.05 and errors["L0 weights"] > 0.05, errors


# -- [route] groups / group_id -----------------------------------------------------------------

ROUTE_GROUPS = (conv(6, activation="tanh") + conv(4, activation="logistic")
                + "[route]\nlayers=-2,-1\ngroups=2\ngroup_id={gid}\n\n" + conv(3, 1))


@pytest.mark.parametrize("gid", [0, 1])
def test_route_groups_forward_and_gradients(tmp_path, gid):
    net, rng = build(tmp_path, ROUTE_GROUPS.format(gid=gid), w=5, h=4)
    a, b, r = net.layers[:3]
    assert (r.out_c, r.outputs) == (5, 5 * 20) and net.layers[3].c == 5
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    net.forward(x)
    oa, ob = (l.output.reshape(l.output_shape()) for l in (a, b))
    want = np.concatenate([oa[:, 3 * gid:3 * gid + 3], ob[:, 2 * gid:2 * gid + 2]], axis=1)
    np.testing.assert_array_equal(r.output.reshape(r.output_shape()), want)
    check_network(net, rng).assert_ok(f"route groups, group_id={gid}")
    assert f"{gid}/2 ->" in r.describe()
    net.resize(7, 6)
    assert (r.out_w, r.out_h, r.out_c) == (7, 6, 5)
    net.forward(rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32))


@pytest.mark.parametrize("keys,key", [("groups=4\n", "groups"), ("groups=2\ngroup_id=2\n", "group_id")])
def test_route_groups_errors(tmp_path, keys, key):
    msg = cfg_error(tmp_path, conv(6) + f"[route]\nlayers=-1\n{keys}")
    assert f"[route] {key}" in msg and "ab.cfg:" in msg, msg


# -- [maxpool] maxpool_depth, antialiasing; [local_avgpool] -------------------------------------

@pytest.mark.parametrize("out_c", [1, 2, 3])
def test_maxpool_depth(tmp_path, out_c):
    body = (conv(6, activation="tanh") + f"[maxpool]\nmaxpool_depth=1\nout_channels={out_c}\n"
            "size=2\nstride=2\n\n" + conv(2, 1))
    net, rng = build(tmp_path, body, w=5, h=4)
    m = net.layers[1]
    assert (m.out_w, m.out_h, m.out_c) == (5, 4, out_c) and "max-depth" in m.describe()
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    net.forward(x)
    want = naive_ab.maxpool_depth(net.layers[0].output.reshape(2, 6, 4, 5), out_c)
    np.testing.assert_array_equal(m.output.reshape(want.shape), want)
    check_network(net, rng, h=1e-3).assert_ok(f"maxpool_depth out_channels={out_c}")


@pytest.mark.parametrize("kind,size,stride", [(1, 2, 2), (2, 3, 2), (1, 2, 1)])
def test_antialiased_maxpool(tmp_path, kind, size, stride):
    # the pool reads the input itself: a conv before it would move near-ties of the max across
    # each other under the finite differences' steps
    body = f"[maxpool]\nsize={size}\nstride={stride}\nantialiasing={kind}\n\n" + conv(2, 1)
    net, rng = build(tmp_path, body, w=8, h=7)
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    net.forward(x)
    m = net.layers[0]
    # the host: the same maxpool at stride 1 (AlexeyAB's window placement, -pad//2)
    pad = size - 1
    src = np.pad(x.reshape(2, 3, 7, 8).astype(np.float64),
                 ((0, 0), (0, 0), (pad // 2, pad - pad // 2), (pad // 2, pad - pad // 2)),
                 constant_values=-np.inf)
    host = np.max([src[:, :, i:i + 7, j:j + 8] for i in range(size) for j in range(size)], axis=0)
    want = naive_ab.blur(host, kind, stride)
    assert (m.out_c, m.out_h, m.out_w) == want.shape[1:]
    np.testing.assert_allclose(m.output.reshape(want.shape), want, rtol=1e-6, atol=1e-6)
    check_network(net, rng, h=1e-3).assert_ok(f"antialiased maxpool {kind}")
    assert m.weight_records() == []


@pytest.mark.parametrize("size,stride,pad", [(3, 1, 2), (2, 2, 1), (3, 2, 2), (2, 1, 1)])
def test_local_avgpool(tmp_path, size, stride, pad):
    body = (conv(3, activation="tanh")
            + f"[local_avgpool]\nsize={size}\nstride={stride}\npadding={pad}\n")
    net, rng = build(tmp_path, body, w=7, h=6)
    a, p = net.layers
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    net.forward(x)
    want = naive_ab.local_avgpool(a.output.reshape(2, 3, 6, 7), size, stride, pad)
    np.testing.assert_allclose(p.output.reshape(want.shape), want, rtol=1e-6, atol=1e-6)
    # backward: AlexeyAB's delta / (size*size) into every cell inside each window
    g = rng.standard_normal(p.delta.size).astype(np.float32)
    p.delta[:] = g
    a.delta[:] = 0
    net.index, net.input, net.delta = 1, a.output, a.delta
    p.backward(net)
    want_d = np.zeros((2, 3, 6 + size, 7 + size))
    g = g.reshape(want.shape) / (size * size)
    for i in range(want.shape[2]):
        for j in range(want.shape[3]):
            y0, x0 = i * stride - pad // 2 + size, j * stride - pad // 2 + size
            want_d[:, :, y0:y0 + size, x0:x0 + size] += g[:, :, i, j, None, None]
    np.testing.assert_allclose(a.delta.reshape(2, 3, 6, 7), want_d[:, :, size:size + 6, size:size + 7],
                               rtol=1e-5, atol=1e-6)


def test_pool_key_errors(tmp_path):
    msg = cfg_error(tmp_path, conv(3) + "[maxpool]\nsize=2\nstride_x=2\nstride_y=1\n")
    assert "[maxpool] stride_x" in msg
    msg = cfg_error(tmp_path, conv(3) + "[local_avgpool]\nsize=2\npadding=4\n")
    assert "[local_avgpool] padding" in msg
