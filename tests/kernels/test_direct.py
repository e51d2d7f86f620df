"""The direct 3x3 convolution (kernels/direct.py) against tests/naive (the convolution as
Darknet's im2col loops + a float64 GEMM, and the naive backward), and the convolutional layer's
direct path against its im2col + GEMM path."""
import naive
import numpy as np
import pytest

from darknumba.kernels.direct import (conv3x3_direct, conv3x3_direct_cpu,
                                      conv3x3_direct_weight_grad_cpu, conv3x3s2_direct,
                                      flip_weights)
from tiny_nets import cfg_text, conv, section

EMPTY = np.empty(0, np.float32)
NO_EPI = (EMPTY, EMPTY, EMPTY, EMPTY, 0, EMPTY, EMPTY)          # raw sums only

# (batch, c, h, w, n, pad): channels 1 to 5, filter counts with and without a remainder of 4,
# pads 0..2 on non-square maps, maps narrower than the kernel's padding, and rows long enough
# to vectorise
SHAPES = [(2, 3, 7, 5, 4, 1), (1, 5, 6, 9, 7, 1), (3, 2, 5, 4, 9, 0), (2, 1, 3, 3, 1, 2),
          (1, 4, 1, 2, 5, 1), (2, 3, 4, 70, 8, 1), (1, 2, 9, 33, 6, 2), (2, 1, 6, 5, 5, 0),
          (1, 3, 5, 8, 4, 2), (2, 3, 9, 4, 6, 0), (1, 1, 4, 7, 3, 1),
          # blocks of rows laid end to end (FLAT_POSITIONS): 3 rows of 302, tasks of 8 rows
          # crossing from one image to the next; blocks of the whole task
          (2, 2, 13, 300, 5, 1), (2, 2, 11, 20, 5, 1)]


@pytest.mark.parametrize("b,c,h,w,n,pad", SHAPES)
def test_direct_forward_matches_float64_convolution(rng, b, c, h, w, n, pad):
    x = rng.standard_normal(b * c * h * w).astype(np.float32)
    wts = rng.standard_normal(n * c * 9).astype(np.float32)
    out = np.full(b * n * (h + 2 * pad - 2) * (w + 2 * pad - 2), np.nan, np.float32)
    conv3x3_direct_cpu(x, b, c, h, w, wts, n, pad, out, False, *NO_EPI)
    ref = naive.conv_forward(x, wts, np.zeros(n), b, c, h, w, n, 3, 1, pad, 1).ravel()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    lean = np.full_like(out, np.nan)               # the signature compiled without statistics
    conv3x3_direct(x, b, c, h, w, wts, n, pad, lean)
    np.testing.assert_array_equal(lean, out)
    before = rng.standard_normal(out.size).astype(np.float32)
    acc = before.copy()
    conv3x3_direct_cpu(x, b, c, h, w, wts, n, pad, acc, True, *NO_EPI)   # adds into what is there
    np.testing.assert_allclose(acc, before + ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("b,c,h,w,n,pad", SHAPES)
def test_direct_gradients_match_naive_backward(rng, b, c, h, w, n, pad):
    x = rng.standard_normal(b * c * h * w).astype(np.float32)
    wts = rng.standard_normal(n * c * 9).astype(np.float32)
    oh, ow = h + 2 * pad - 2, w + 2 * pad - 2
    delta = rng.standard_normal(b * n * oh * ow).astype(np.float32)
    dw_ref, dx_ref = naive.conv_backward(x, wts, delta, b, c, h, w, n, 3, 1, pad, 1)
    dw = np.ones(n * c * 9, np.float32)                                 # adds, as Darknet
    conv3x3_direct_weight_grad_cpu(x, b, c, h, w, delta, n, pad, dw)
    np.testing.assert_allclose(dw - 1, dw_ref, rtol=1e-4, atol=1e-5 * np.abs(dw_ref).max())
    flipped = np.empty_like(wts)
    flip_weights(wts, n, c, 3, flipped)
    dx = np.zeros(x.size, np.float32)
    conv3x3_direct_cpu(delta, b, n, oh, ow, flipped, c, 2 - pad, dx, True, *NO_EPI)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-5, atol=1e-5 * np.abs(dx_ref).max())


def test_direct_batch_statistics_equal_a_separate_sweep(rng):
    from darknumba.kernels.fused import mean_variance_cpu
    b, c, h, w, n, pad = 3, 3, 9, 11, 6, 1
    x = (rng.standard_normal(b * c * h * w) + 3).astype(np.float32)     # a mean to subtract
    wts = rng.standard_normal(n * c * 9).astype(np.float32)
    raw = np.empty(b * n * h * w, np.float32)
    conv3x3_direct_cpu(x, b, c, h, w, wts, n, pad, raw, False, *NO_EPI)
    got = np.empty_like(raw)
    m, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    conv3x3_direct_cpu(x, b, c, h, w, wts, n, pad, got, False, EMPTY, EMPTY, EMPTY, EMPTY, 0, m, v)
    np.testing.assert_array_equal(got, raw)                  # the raw sums are kept
    ref = raw.astype(np.float64).reshape(b, n, -1).transpose(1, 0, 2).reshape(n, -1)
    np.testing.assert_allclose(m, ref.mean(1), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(v, ref.var(1, ddof=1), rtol=1e-6)
    rm, rv = np.zeros(n, np.float32), np.zeros(n, np.float32)
    mean_variance_cpu(raw, b, n, h * w, rm, rv)
    np.testing.assert_allclose(m, rm, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(v, rv, rtol=1e-6)


# logistic, linear, leaky; linear and leaky with FAST (kernels/fused.py: d is then the factor)
@pytest.mark.parametrize("act", [0, 3, 7, 3 | 64, 7 | 64])
def test_direct_fused_epilogues_equal_the_separate_sweeps(rng, act):
    from darknumba.kernels.fused import batchnorm_bias_activate, bias_activate
    b, c, h, w, n, pad = 2, 3, 9, 11, 6, 1
    x = rng.standard_normal(b * c * h * w).astype(np.float32)
    wts = rng.standard_normal(n * c * 9).astype(np.float32)
    raw = np.empty(b * n * h * w, np.float32)
    conv3x3_direct_cpu(x, b, c, h, w, wts, n, pad, raw, False, *NO_EPI)
    mean, scales, biases = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2, n).astype(np.float32)
    got = np.empty_like(raw)
    conv3x3_direct_cpu(x, b, c, h, w, wts, n, pad, got, False, mean, var, scales, biases, act,
                       EMPTY, EMPTY)
    ref = raw.copy()
    batchnorm_bias_activate(ref, mean, var, scales, biases, b, n, h * w, act)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    lean = np.full_like(got, np.nan)               # inference's signature: statistics None
    conv3x3_direct(x, b, c, h, w, wts, n, pad, lean, bn_mean=mean, bn_divisor=var, scales=scales,
                   biases=biases, act=act)
    np.testing.assert_array_equal(lean, got)
    conv3x3_direct_cpu(x, b, c, h, w, wts, n, pad, got, False, EMPTY, EMPTY, EMPTY, biases, act,
                       EMPTY, EMPTY)
    ref = raw.copy()
    bias_activate(ref, biases, b, n, h * w, act)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_direct_check_can_fail(rng):
    """A one-tap error is caught by the same comparison."""
    b, c, h, w, n, pad = 1, 2, 5, 6, 4, 1
    x = rng.standard_normal(b * c * h * w).astype(np.float32)
    wts = rng.standard_normal(n * c * 9).astype(np.float32)
    out = np.empty(b * n * h * w, np.float32)
    conv3x3_direct_cpu(x, b, c, h, w, wts, n, pad, out, False, *NO_EPI)
    wrong = wts.copy()
    wrong[5] += 0.01
    ref = naive.conv_forward(x, wrong, np.zeros(n), b, c, h, w, n, 3, 1, pad, 1).ravel()
    assert not np.allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("bn", [0, 1])
def test_layer_direct_path_equals_gemm_path(rng, monkeypatch, tmp_path, bn):
    """The same network trained one step with the direct kernels and with im2col + GEMM."""
    import darknumba as dn
    from darknumba.layers import conv_plan
    cfg = tmp_path / "n.cfg"
    cfg.write_text("[net]\nbatch=2\nwidth=12\nheight=10\nchannels=3\nlearning_rate=0.01\n"
                   "momentum=0.9\ndecay=0.0005\n"
                   f"[convolutional]\nbatch_normalize={bn}\nfilters=6\nsize=3\nstride=1\npad=1\n"
                   "activation=leaky\n"
                   f"[convolutional]\nbatch_normalize={bn}\nfilters=5\nsize=3\nstride=1\npad=1\n"
                   "activation=leaky\n[cost]\ntype=sse\n")
    x = rng.uniform(0, 1, (2, 3, 10, 12)).astype(np.float32)
    truth = rng.uniform(0, 1, (2, 5 * 10 * 12)).astype(np.float32)
    runs = []
    for limit in (True, False):
        for name in ("DIRECT_MAX_K", "DIRECT_S2_MAX_K_NARROW"):
            monkeypatch.setattr(conv_plan, name, getattr(conv_plan, name) if limit else 0)
        monkeypatch.setattr(conv_plan, "DIRECT_MAX_K_FEW_FILTERS", limit)
        net = dn.parse_network_cfg(str(cfg), seed=3)
        assert net.layers[1]._direct_thin() == (limit > 0)
        cost = net.train_datum(x, truth)
        state = [(l.output.copy(), l.delta.copy(), l.weights.copy()) for l in net.layers[:2]]
        runs.append((cost, state, net.predict(x).copy()))       # then test mode (rolling stats)
    (cost_d, state_d, pred_d), (cost_g, state_g, pred_g) = runs
    assert cost_d == pytest.approx(cost_g, rel=1e-5)
    for (out_d, delta_d, w_d), (out_g, delta_g, w_g) in zip(state_d, state_g, strict=True):
        np.testing.assert_allclose(out_d, out_g, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(delta_d, delta_g, rtol=1e-4,
                                   atol=1e-5 * np.abs(delta_g).max())
        np.testing.assert_allclose(w_d, w_g, rtol=1e-5, atol=1e-7)
    # rolling variance after one step is 1% of the batch's: normalising by it magnifies the
    # float32 rounding of the two paths' sums tenfold
    np.testing.assert_allclose(pred_d, pred_g, rtol=2e-4, atol=1e-5 * np.abs(pred_g).max())


def test_few_filters_take_the_direct_kernel_up_to_k_288(rng, monkeypatch, tmp_path):
    """32 input channels (K = 288), in training and at inference: direct with 32 filters,
    im2col + GEMM with 64 (and under compat=); the direct layer's training step and test-mode
    output as the GEMM path's."""
    import darknumba as dn
    from darknumba.layers import conv_plan
    cfg = tmp_path / "few.cfg"
    conv = "[convolutional]\nbatch_normalize=1\nfilters={}\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    cfg.write_text("[net]\nbatch=2\nwidth=9\nheight=8\nchannels=32\nlearning_rate=0.01\n"
                   + conv.format(32) + conv.format(64) + "[cost]\ntype=sse\n")
    net = dn.parse_network_cfg(str(cfg), seed=1)
    assert [l._direct_thin() for l in net.layers[:2]] == [True, False]   # training, inference
    compat = dn.parse_network_cfg(str(cfg), seed=1, compat="darknet-cpu")   # C's sums' order
    assert [l._direct_thin() for l in compat.layers[:2]] == [False, False]
    x = rng.uniform(0, 1, (2, 32, 8, 9)).astype(np.float32)
    truth = rng.uniform(0, 1, (2, 64 * 8 * 9)).astype(np.float32)
    runs = []
    for few in (conv_plan.DIRECT_MAX_K_FEW_FILTERS, 0):
        monkeypatch.setattr(conv_plan, "DIRECT_MAX_K_FEW_FILTERS", few)
        net = dn.parse_network_cfg(str(cfg), seed=1)
        assert net.layers[0]._direct_thin() == (few > 0)
        net.train_datum(x, truth)
        runs.append([a.copy() for a in (net.layers[0].output, net.layers[0].delta,
                                        net.layers[0].weights, net.predict(x))])
    for d, g in zip(*runs, strict=True):
        np.testing.assert_allclose(d, g, rtol=1e-4, atol=1e-5 * np.abs(g).max())


# stride 2 (batch, c, h, w, n, pad): odd and even sizes (the last column or row under the
# kernel's edge or not), pads 0..2, filter counts with a remainder of 4, one-pixel maps, and
# rows of 151 outputs (blocks of 6 rows, tasks crossing from one image to the next)
SHAPES_S2 = [(2, 3, 7, 5, 4, 1), (1, 5, 6, 9, 7, 1), (3, 2, 8, 6, 9, 0), (2, 1, 3, 3, 1, 2),
             (1, 4, 1, 2, 5, 1), (2, 3, 5, 70, 8, 1), (1, 2, 9, 33, 6, 2), (2, 1, 6, 5, 5, 0),
             (2, 2, 13, 300, 5, 1), (3, 3, 11, 301, 6, 0)]


@pytest.mark.parametrize("b,c,h,w,n,pad", SHAPES_S2)
def test_direct_s2_matches_float64_convolution(rng, b, c, h, w, n, pad):
    """The stride-2 kernel with biases (linear) against the float64 convolution, and with the
    batch norm and each activation against the raw sums and the separate sweep."""
    from darknumba.kernels.fused import batchnorm_bias_activate
    x = rng.standard_normal(b * c * h * w).astype(np.float32)
    wts = rng.standard_normal(n * c * 9).astype(np.float32)
    biases = rng.standard_normal(n).astype(np.float32)
    oh, ow = (h + 2 * pad - 3) // 2 + 1, (w + 2 * pad - 3) // 2 + 1
    out = np.full(b * n * oh * ow, np.nan, np.float32)
    conv3x3s2_direct(x, b, c, h, w, wts, n, pad, out, biases=biases, act=3)     # linear
    ref = naive.conv_forward(x, wts, biases, b, c, h, w, n, 3, 2, pad, 1).ravel()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    raw = np.empty_like(out)
    conv3x3s2_direct(x, b, c, h, w, wts, n, pad, raw, biases=np.zeros(n, np.float32), act=3)
    mean, scales = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    var = rng.uniform(0.5, 2, n).astype(np.float32)
    for act in (0, 7):                                   # logistic, leaky
        got = np.full_like(out, np.nan)
        conv3x3s2_direct(x, b, c, h, w, wts, n, pad, got, bn_mean=mean, bn_divisor=var,
                         scales=scales, biases=biases, act=act)
        sweep = raw.copy()
        batchnorm_bias_activate(sweep, mean, var, scales, biases, b, n, oh * ow, act)
        np.testing.assert_allclose(got, sweep, rtol=1e-6, atol=1e-6)


def test_direct_s2_check_can_fail(rng):
    """A one-tap error is caught by the same comparison."""
    b, c, h, w, n, pad = 1, 2, 9, 10, 4, 1
    x = rng.standard_normal(b * c * h * w).astype(np.float32)
    wts = rng.standard_normal(n * c * 9).astype(np.float32)
    out = np.empty(b * n * 5 * 5, np.float32)
    conv3x3s2_direct(x, b, c, h, w, wts, n, pad, out, biases=np.zeros(n, np.float32), act=3)
    wrong = wts.copy()
    wrong[8] += 0.01                     # the last tap (ky = kx = 2), read from a plane's next row
    ref = naive.conv_forward(x, wrong, np.zeros(n), b, c, h, w, n, 3, 2, pad, 1).ravel()
    assert not np.allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("bn", [False, True])
def test_layer_direct_s2_at_inference_equals_gemm_path(rng, monkeypatch, tmp_path, bn):
    """A thin stride-2 layer takes the stride-2 kernel at inference and im2col + GEMM in
    training; its test-mode output is the GEMM path's, and a training step is unchanged."""
    import darknumba as dn
    from darknumba.layers import conv_plan
    cfg = tmp_path / "s2.cfg"
    cfg.write_text(cfg_text(dict(batch=2, width=23, height=14, channels=3),
                            conv(6, stride=2, bn=bn), conv(5, stride=2, bn=bn),
                            section("cost", type="sse")))
    x = rng.uniform(0, 1, (2, 3, 14, 23)).astype(np.float32)
    truth = rng.uniform(0, 1, (2, 5 * 4 * 6)).astype(np.float32)
    runs = []
    for limit in (True, False):
        for name in ("DIRECT_MAX_K", "DIRECT_S2_MAX_K_NARROW"):
            monkeypatch.setattr(conv_plan, name, getattr(conv_plan, name) if limit else 0)
        net = dn.parse_network_cfg(str(cfg), seed=4)
        want = conv_plan.ConvPath.DIRECT_S2 if limit else conv_plan.ConvPath.IM2COL
        assert [conv_plan.plan(l, False) for l in net.layers[:2]] == [want, want]
        assert conv_plan.plan(net.layers[0], True) is conv_plan.ConvPath.IM2COL
        net.train_datum(x, truth)
        runs.append([a.copy() for a in (net.layers[0].weights, net.layers[1].weights,
                                        net.predict(x), net.layers[0].output)])
    for d, g in zip(*runs, strict=True):
        np.testing.assert_allclose(d, g, rtol=2e-4, atol=1e-5 * np.abs(g).max())
