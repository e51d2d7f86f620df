"""xnor=1 convolutions (layers/xnor.py): the float way against the float layer on binarised
weights and +-1 inputs, its backward against the float layer's with the real weights and input
(both Darknets' CPU gradient), AlexeyAB's bit way against numpy (tests/naive/xnor.py), its
bin_output and calculate_binary_weights rules, and its CPU bugs under compat="darknet-cpu"."""
import naive
import numpy as np
import pytest
from naive.xnor import binarize_weights, signs, xnor_conv_bits

from darknumba.errors import CfgError, DarknumbaError
from darknumba.layers.conv_plan import ConvPath
from darknumba.layers.xnor import calculate_binary_weights
from darknumba.parser import parse_network_cfg


def build(tmp_path, body, *, batch=2, w=6, h=5, c=16, compat=None, dialect="alexeyab", seed=0):
    cfg = tmp_path / "x.cfg"
    cfg.write_text(f"[net]\nbatch={batch}\nwidth={w}\nheight={h}\nchannels={c}\n"
                   f"learning_rate=0.1\nmomentum=0.9\ndecay=0.0005\n\n{body}")
    net = parse_network_cfg(cfg, compat=compat, dialect=dialect)
    net.exact = True
    rng = np.random.default_rng(seed)
    for l in net.layers:
        if l.type == "convolutional":
            l.weights[:] = rng.normal(0, 1, l.weights.size)
            l.biases[:] = rng.normal(0, 0.2, l.biases.size)
            if l.batch_normalize:
                l.scales[:] = rng.uniform(0.5, 1.5, l.scales.size)
                l.rolling_mean[:] = rng.normal(0, 2, l.n)
                l.rolling_variance[:] = rng.uniform(0.5, 3, l.n)
            l.weights_changed()
    return net, rng


def conv(filters, size=3, stride=1, xnor=1, bn=1, act="leaky", extra=""):
    return (f"[convolutional]\nxnor={xnor}\nbatch_normalize={bn}\nfilters={filters}\n"
            f"size={size}\nstride={stride}\npad=1\nactivation={act}\n{extra}\n")


def float_twin(tmp_path, net, body, **kw):
    """The same network without xnor, with net's parameters."""
    twin, _ = build(tmp_path, body.replace("xnor=1", "xnor=0"), **kw)
    for a, b in zip(net.layers, twin.layers):
        for name in ("weights", "biases", "scales", "rolling_mean", "rolling_variance"):
            if getattr(a, name, None) is not None and a.type == "convolutional":
                getattr(b, name)[:] = getattr(a, name)
    return twin


@pytest.mark.parametrize("size,stride,train", [(3, 1, False), (3, 2, True), (1, 1, True)])
def test_float_way_is_the_float_layer_on_binarised_weights_and_signs(tmp_path, size, stride,
                                                                      train):
    body = conv(8, size, stride)
    net, rng = build(tmp_path, body)
    l = net.layers[0]
    x = rng.normal(0, 1, net.batch * net.inputs).astype(np.float32)
    real = l.weights.copy()
    out = net.forward(x, train=train).copy()
    np.testing.assert_array_equal(l.weights, real)            # the real weights are back
    twin = float_twin(tmp_path, net, body)
    twin.layers[0].weights[:] = binarize_weights(real, l.n)
    twin.layers[0].weights_changed()
    expected = twin.forward(signs(x).astype(np.float32), train=train)
    np.testing.assert_array_equal(out, expected)
    assert l.forward_path(net) is not ConvPath.XNOR


def test_backward_is_the_float_layers_with_the_real_weights_and_input(tmp_path):
    """Straight through: the weight and input gradients are the float layer's at the real
    weights and input (forward_convolutional_layer binarises copies only)."""
    body = conv(8, act="logistic") + conv(4, xnor=0, bn=0, act="linear")
    net, rng = build(tmp_path, body)
    x = rng.normal(0, 1, net.batch * net.inputs).astype(np.float32)
    g = rng.normal(0, 1, net.batch * net.outputs).astype(np.float32)
    net.forward(x, train=True)
    net.layers[-1].delta[:] = g
    dx = np.zeros_like(x)
    net.backward(dx)

    twin = float_twin(tmp_path, net, body)
    bx = signs(x).astype(np.float32)
    l0, t0 = net.layers[0], twin.layers[0]
    t0.weights[:] = binarize_weights(l0.weights, l0.n)       # the forward the xnor net ran
    t0.weights_changed()
    twin.forward(bx, train=True)
    np.testing.assert_array_equal(twin.layers[-1].output, net.layers[-1].output)
    t0.weights[:] = l0.weights                               # ... and the real backward
    t0.weights_changed()
    twin.layers[-1].delta[:] = g
    twin._input0 = x
    tdx = np.zeros_like(x)
    twin.backward(tdx)
    for l, t in zip(net.layers, twin.layers):
        np.testing.assert_allclose(l.weight_updates, t.weight_updates, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(l.bias_updates, t.bias_updates, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, tdx, rtol=1e-5, atol=1e-6)
    assert np.abs(dx).max() > 0


def _bn(l, v):
    """Test-mode batch norm (AlexeyAB: epsilon inside the root), then the biases."""
    if not l.batch_normalize:
        return v + l.biases[:, None, None]
    s = (l.scales / np.sqrt(l.rolling_variance.astype(np.float64) + 1e-5))[:, None, None]
    return (v - l.rolling_mean[:, None, None]) * s + l.biases[:, None, None]


def _leaky(v):
    return np.where(v > 0, v, 0.1 * v)


@pytest.mark.parametrize("c,size,stride,bin_output", [(16, 3, 1, 0), (64, 3, 2, 1),
                                                      (40, 1, 1, 0)])
def test_bit_way_after_calculate_binary_weights(tmp_path, c, size, stride, bin_output):
    body = conv(12, size, stride, extra=f"bin_output={bin_output}\n")
    net, rng = build(tmp_path, body, c=c)
    l = net.layers[0]
    x = rng.normal(0, 1, net.batch * net.inputs).astype(np.float32)
    float_out = net.forward(x).copy()
    calculate_binary_weights(net)
    assert l.forward_path(net) is ConvPath.XNOR
    out = net.forward(x).reshape(net.batch, l.n, l.out_h, l.out_w)
    for b in range(net.batch):
        v = _bn(l, xnor_conv_bits(x[b * l.inputs:(b + 1) * l.inputs], l.weights, c, l.h, l.w,
                                  l.n, size, stride, l.pad))
        np.testing.assert_allclose(out[b], v if bin_output else _leaky(v), rtol=2e-5, atol=2e-5)
    if l.pad:           # padding is -1 on the bit way, 0 on the float one
        assert not np.allclose(out.reshape(-1), float_out, atol=1e-3)
    net.forward(x, train=True)                  # training takes the float way again
    assert l.forward_path(net) is not ConvPath.XNOR


def test_bits_follow_the_weights(tmp_path):
    """A weight update drops the packed signs: the next inference packs the new ones."""
    net, rng = build(tmp_path, conv(8))
    l = net.layers[0]
    x = rng.normal(0, 1, net.batch * net.inputs).astype(np.float32)
    calculate_binary_weights(net)
    net.forward(x)
    l.weights[:] = -l.weights
    l.weights_changed()
    out = net.forward(x).reshape(net.batch, l.n, l.out_h, l.out_w)
    v = _bn(l, xnor_conv_bits(x[:l.inputs], l.weights, l.c, l.h, l.w, l.n, 3, 1, 1))
    np.testing.assert_allclose(out[0], _leaky(v), rtol=2e-5, atol=2e-5)


def test_bin_output_is_cleared_where_a_route_or_shortcut_reads_the_layer(tmp_path):
    body = (conv(16, extra="bin_output=1\n") + conv(16, extra="bin_output=1\n")
            + conv(16, extra="bin_output=1\n") + "[shortcut]\nfrom=-3\nactivation=linear\n\n"
            + conv(16, extra="bin_output=1\n") + "[route]\nlayers=-1\n\n")
    net, _ = build(tmp_path, body)
    calculate_binary_weights(net)
    assert [l.use_bin_output for l in net.layers if l.type == "convolutional"] == \
        [False, True, False, False]


def test_pjreddie_has_no_bit_way_and_keeps_groups(tmp_path):
    net, rng = build(tmp_path, conv(8, extra="groups=2\n"), dialect="pjreddie")
    l = net.layers[0]
    assert l.groups == 2
    calculate_binary_weights(net)
    assert l.forward_path(net) is not ConvPath.XNOR
    ab, _ = build(tmp_path, conv(8, extra="groups=2\n"))
    assert ab.layers[0].groups == 1                       # AlexeyAB forces groups = 1


def test_alexeyab_cpu_bit_path_bugs_under_compat(tmp_path):
    """Under compat="darknet-cpu": only the first image is computed (the second gets batch
    norm of 0), and a 1x1 layer with c % 32 != 0 reads no input bit (all -1)."""
    net, rng = build(tmp_path, conv(6, size=1), c=16, compat="darknet-cpu")
    l = net.layers[0]
    calculate_binary_weights(net)
    x = rng.normal(0, 1, net.batch * net.inputs).astype(np.float32)
    out = net.forward(x).reshape(net.batch, l.n, l.out_h, l.out_w)
    sw = signs(l.weights.reshape(l.n, -1))
    mean = np.abs(l.weights.reshape(l.n, -1)).mean(axis=1)
    v = _bn(l, np.broadcast_to((-sw.sum(axis=1) * mean)[:, None, None], out[0].shape))
    np.testing.assert_allclose(out[0], _leaky(v), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(out[1], _leaky(_bn(l, np.zeros_like(out[1]))), rtol=2e-5,
                               atol=2e-5)


@pytest.mark.parametrize("extra", ["dilation=2\n", "stride_x=2\n", "antialiasing=1\n"])
def test_xnor_with_keys_alexeyab_computes_inconsistently_is_an_error(tmp_path, extra):
    with pytest.raises(CfgError, match="xnor"):
        build(tmp_path, conv(8, extra=extra))


def test_alexeyab_cpu_float_way_has_no_defined_result_under_compat(tmp_path):
    """AlexeyAB's CPU forward binarises over l.nweights values a filter (past the weights'
    end): under compat="darknet-cpu" its float way is an error naming the layer; its bit way
    runs."""
    net, rng = build(tmp_path, conv(8, xnor=0) + conv(8), compat="darknet-cpu")
    x = rng.normal(0, 1, net.batch * net.inputs).astype(np.float32)
    with pytest.raises(DarknumbaError, match="layer 1: AlexeyAB's CPU build binarises"):
        net.forward(x, train=True)
    calculate_binary_weights(net)
    assert np.isfinite(net.forward(x)).all()


def test_alexeyab_crnn_xnor_binarises_its_convolutions(tmp_path):
    """[crnn] xnor=1 (AlexeyAB's make_crnn_layer passes xnor to its three convolutions, groups
    forced to 1): at one time step from a zero state, its input convolution is the float one of
    the input's signs and the binarised weights; the self convolution reads the zero state as
    all -1, the output convolution the signs of the summed state."""
    body = ("[crnn]\nxnor=1\nbatch_normalize=0\noutput=4\nhidden=6\nsize=3\npad=1\ngroups=2\n"
            "activation=linear\n")
    net, rng = build(tmp_path, body, batch=1, c=4)
    l = net.layers[0]
    parts = (l.input_layer, l.self_layer, l.output_layer)
    assert all(p.xnor and p.groups == 1 for p in parts)
    for p in parts:
        p.weights[:] = rng.normal(0, 1, p.weights.size)
        p.biases[:] = rng.normal(0, 0.2, p.biases.size)
    x = rng.normal(0, 1, net.inputs).astype(np.float32)
    net.forward(x)

    def conv(inp, p):
        return naive.conv_forward(signs(inp).astype(np.float32), binarize_weights(p.weights, p.n),
                                  p.biases, 1, p.c, 5, 6, p.n, 3, 1, 1, 1).reshape(-1)
    a = conv(x, l.input_layer)
    s = conv(np.zeros(l.self_layer.inputs, np.float32), l.self_layer)
    np.testing.assert_allclose(l.input_layer.output, a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(l.output_layer.output, conv(a + s, l.output_layer), rtol=1e-4,
                               atol=1e-4)


def test_the_planner_names_the_bit_kernels(tmp_path):
    """compile_ahead's warm-cache check asks the planner which kernels a layer's forward runs:
    on the xnor path, the packing, the bit columns and the popcount GEMM (biases, batch norm
    and activation fused into it), each the twin its size picks."""
    from darknumba.kernels import xnor as kx
    from darknumba.layers import conv_plan
    net, _ = build(tmp_path, conv(8))
    calculate_binary_weights(net)
    l = net.layers[0]
    cols = l.out_h * l.out_w * 9
    assert conv_plan.forward_kernels(l, l.forward_path(net)) == [
        kx.pack_input_cpu.pick(l.inputs), kx.im2col_bits_cpu.pick(cols),
        kx.xnor_gemm_cpu.pick(cols * l.n)]
    assert l.inputs < kx.PACK_SERIAL_BELOW
    assert kx.pack_input_cpu.pick(l.inputs) is kx.pack_input_cpu.serial
