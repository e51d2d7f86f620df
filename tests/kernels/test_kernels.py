"""Kernels against slow, independent numpy references (tests/naive) on odd shapes."""
import naive
import numpy as np
import pytest

from darknumba.kernels import activations as act
from darknumba.kernels.blas import (add_bias, mean_cpu, normalize_cpu, scale_bias, shortcut_cpu,
                                    upsample_cpu, variance_cpu)
from darknumba.kernels.gemm import gemm, gemm_cpu
from darknumba.kernels.im2col import col2im_batch_cpu, col2im_cpu, im2col_batch_cpu, im2col_cpu
from darknumba.kernels.pool import (backward_maxpool_cpu, forward_avgpool_cpu, forward_maxpool2_cpu,
                                    forward_maxpool2_same_cpu, forward_maxpool_cpu,
                                    forward_maxpool_rows_cpu)
from darknumba.kernels.softmax import softmax_cpu

def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# every size 1/3/5 x stride 1/2/3 x pad 0/1/2 x channels 1/3 on a non-square 7x5 image (the
# stride-1 "same-width" ones, 2 pad = size - 1, take the shifted-run path), and rows long enough
# for the vectorised copies (>= 64 outputs)
IM2COL_SHAPES = [(c, 7, 5, k, s, p) for c in (1, 3) for k in (1, 3, 5) for s in (1, 2, 3)
                 for p in (0, 1, 2)] + [(2, 3, 70, 3, 1, 1), (1, 4, 150, 3, 2, 1),
                                        (2, 5, 66, 5, 1, 2), (3, 2, 200, 1, 3, 0),
                                        (2, 5, 141, 5, 2, 2), (1, 3, 130, 3, 2, 0)]


@pytest.mark.parametrize("c,h,w,k,stride,pad", IM2COL_SHAPES)
def test_im2col_and_col2im_match_darknets_loops(rng, c, h, w, k, stride, pad):
    """im2col_cpu / col2im_cpu and their batch forms (two images side by side) against the
    literal ports of Darknet's loops (naive.im2col_cpu / col2im_cpu), bit for bit: col2im adds
    each pixel's entries in the same order (kernel tap by tap) into what data_im holds."""
    b, chw = 2, c * h * w
    n, K = naive.out_size(h, k, stride, pad) * naive.out_size(w, k, stride, pad), c * k * k
    x = rng.standard_normal(b * chw).astype(np.float32)
    y = rng.standard_normal(K * b * n).astype(np.float32)
    y_img = [np.ascontiguousarray(y.reshape(K, b, n)[:, i]).ravel() for i in range(b)]
    want_col, want_back = [], []
    for i in range(b):
        col = np.full(K * n, np.nan, np.float32)
        naive.im2col_cpu(x[i * chw:(i + 1) * chw], c, h, w, k, stride, pad, col)
        back = np.ones(chw, np.float32)                      # col2im adds into what is there
        naive.col2im_cpu(y_img[i], c, h, w, k, stride, pad, back)
        want_col.append(col)
        want_back.append(back)

    col = np.full(K * n, np.nan, np.float32)
    im2col_cpu(x[:chw], c, h, w, k, stride, pad, col)
    np.testing.assert_array_equal(col, want_col[0])
    back = np.ones(chw, np.float32)
    col2im_cpu(y_img[0], c, h, w, k, stride, pad, back)
    np.testing.assert_array_equal(back, want_back[0])

    col = np.full(K * b * n, np.nan, np.float32)
    im2col_batch_cpu(x, b, c, h, w, k, stride, pad, col)
    back = np.ones(b * chw, np.float32)
    col2im_batch_cpu(y, b, c, h, w, k, stride, pad, back)
    for i in range(b):
        np.testing.assert_array_equal(col.reshape(K, b, n)[:, i].ravel(), want_col[i])
        np.testing.assert_array_equal(back[i * chw:(i + 1) * chw], want_back[i])


@pytest.mark.parametrize("c,h,w,k,stride,pad", [(3, 7, 5, 3, 1, 1), (2, 8, 9, 3, 2, 1), (2, 9, 4, 5, 1, 2),
                                                (2, 3, 70, 3, 1, 1), (1, 4, 150, 3, 2, 1)])
def test_col2im_is_the_adjoint_of_im2col(rng, c, h, w, k, stride, pad):
    x = rand(rng, c * h * w)
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    y = rand(rng, c * k * k * oh * ow)
    col = np.zeros_like(y)
    im2col_cpu(x, c, h, w, k, stride, pad, col)
    back = np.ones(c * h * w, np.float32)          # col2im adds into what is there
    col2im_cpu(y, c, h, w, k, stride, pad, back)
    lhs = float(np.dot(col.astype(np.float64), y))
    rhs = float(np.dot(x.astype(np.float64), back - 1))
    assert abs(lhs - rhs) < 1e-4 * (1 + abs(lhs))


@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("beta", [0.0, 1.0, 0.5])
def test_gemm_reference_and_fast_path_agree_with_numpy(rng, ta, tb, beta):
    M, N, K = 7, 5, 11
    A = rand(rng, K, M) if ta else rand(rng, M, K)
    B = rand(rng, N, K) if tb else rand(rng, K, N)
    C0 = rand(rng, M, N)
    ref = 1.5 * ((A.T if ta else A).astype(np.float64) @ (B.T if tb else B)) + beta * C0
    c1 = C0.ravel().copy()
    gemm_cpu(ta, tb, M, N, K, 1.5, A.ravel(), A.shape[1], B.ravel(), B.shape[1], beta, c1, N)
    np.testing.assert_allclose(c1.reshape(M, N), ref, rtol=1e-5, atol=1e-5)
    c2 = C0.ravel().copy()
    gemm(ta, tb, M, N, K, 1.5, A, B, beta, c2)
    np.testing.assert_allclose(c2.reshape(M, N), ref, rtol=1e-5, atol=1e-5)
    # alpha 1: the paths without a scaling (the weight gradient's C += A @ B^T among them)
    ref1 = ((A.T if ta else A).astype(np.float64) @ (B.T if tb else B)) + beta * C0
    c3 = C0.ravel().copy()
    gemm(ta, tb, M, N, K, 1.0, A, B, beta, c3)
    np.testing.assert_allclose(c3.reshape(M, N), ref1, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size,stride,pad,h,w", [(2, 2, 1, 8, 8), (2, 1, 1, 5, 5), (3, 2, 2, 7, 6),
                                                 (5, 1, 4, 6, 6), (3, 1, 2, 4, 4), (2, 2, 1, 7, 7)])
def test_maxpool_matches_numpy(rng, size, stride, pad, h, w):
    b, c = 2, 3
    x = rand(rng, b * c * h * w)
    x[5] = x[6]                                 # a tie: the first in scan order wins
    ref, ref_idx = naive.maxpool_forward(x, b, c, h, w, size, stride, pad)
    out = np.zeros(ref.size, np.float32)
    idx = np.zeros(ref.size, np.int32)
    oh = (h + pad - size) // stride + 1
    ow = (w + pad - size) // stride + 1
    forward_maxpool_cpu(x, b, c, h, w, size, stride, pad, oh, ow, out, idx)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(idx, ref_idx)
    fast = np.zeros(ref.size, np.float32)
    forward_maxpool_cpu(x, b, c, h, w, size, stride, pad, oh, ow, fast, idx, False)
    np.testing.assert_array_equal(fast, ref)


@pytest.mark.parametrize("stride,pad,h,w", [(2, 1, 8, 8), (2, 1, 7, 9), (1, 1, 13, 13),
                                             (1, 0, 6, 5), (2, 0, 5, 6), (2, 3, 7, 7), (1, 1, 1, 1),
                                             (1, 2, 9, 8), (2, 1, 4, 90), (2, 1, 40, 300),
                                             (1, 1, 70, 70), (3, 1, 11, 12), (1, 1, 5, 1),
                                             (1, 1, 1, 6), (1, 1, 2, 2)])
def test_size2_maxpool_matches_numpy(rng, stride, pad, h, w):
    """The size-2 kernel: values, winners' indexes and ties as the naive scan, also where
    windows hold NaN or -inf only (the output stays -FLT_MAX, the index -1), and on maps
    large enough to be cut into several row blocks per plane."""
    b, c = 2, 3
    x = rng.integers(0, 3, b * c * h * w).astype(np.float32)       # many ties
    x[rng.random(x.size) < 0.2] = np.nan
    x[rng.random(x.size) < 0.2] = -np.inf
    x[:4] = -np.inf
    x[w:w + 4] = np.nan
    ref, ref_idx = naive.maxpool_forward(x, b, c, h, w, 2, stride, pad)
    oh = (h + pad - 2) // stride + 1
    ow = (w + pad - 2) // stride + 1
    out = np.full(ref.size, np.nan, np.float32)
    idx = np.zeros(ref.size, np.int32)
    forward_maxpool2_cpu(x, b, c, h, w, stride, pad, oh, ow, out, idx, True)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(idx, ref_idx)
    fast = np.full(ref.size, np.nan, np.float32)
    forward_maxpool2_cpu(x, b, c, h, w, stride, pad, oh, ow, fast, idx, False)
    np.testing.assert_array_equal(fast, ref)
    fast[:] = np.nan                               # no index array at all (inference)
    forward_maxpool2_cpu(x, b, c, h, w, stride, pad, oh, ow, fast, None, False)
    np.testing.assert_array_equal(fast, ref)
    if stride == 1 and pad == 1:                   # the same-size kernel
        out[:] = np.nan
        idx[:] = 7
        forward_maxpool2_same_cpu(x, b, c, h, w, out, idx, True)
        np.testing.assert_array_equal(out, ref)
        np.testing.assert_array_equal(idx, ref_idx)
        fast[:] = np.nan
        forward_maxpool2_same_cpu(x, b, c, h, w, fast, idx, False)
        np.testing.assert_array_equal(fast, ref)
        fast[:] = np.nan
        forward_maxpool2_same_cpu(x, b, c, h, w, fast, None, False)
        np.testing.assert_array_equal(fast, ref)


@pytest.mark.parametrize("size,stride,pad,h,w", [(5, 1, 4, 13, 13), (9, 1, 8, 13, 11), (13, 1, 12, 7, 9),
                                                 (4, 2, 3, 9, 10), (3, 3, 0, 8, 7), (6, 2, 9, 5, 6),
                                                 (5, 1, 4, 1, 1), (5, 1, 4, 80, 70)])
def test_two_pass_maxpool_matches_numpy(rng, size, stride, pad, h, w):
    """The rows-then-columns kernel (large windows): values, winners' indexes and ties as the
    naive single scan, with NaN and -inf cells and windows holding nothing else."""
    b, c = 2, 3
    x = rng.integers(0, 3, b * c * h * w).astype(np.float32)       # many ties
    x[rng.random(x.size) < 0.2] = np.nan
    x[rng.random(x.size) < 0.1] = -np.inf
    x[:h * w] = -np.inf                                           # a plane with no winner
    ref, ref_idx = naive.maxpool_forward(x, b, c, h, w, size, stride, pad)
    oh = (h + pad - size) // stride + 1
    ow = (w + pad - size) // stride + 1
    for groups in (1, 4, b * c):                   # planes dealt to groups sharing scratch
        rows_max = np.full(groups * h * ow, np.nan, np.float32)
        rows_idx = np.full(rows_max.size, 5, np.int32)
        out = np.full(ref.size, np.nan, np.float32)
        idx = np.zeros(ref.size, np.int32)
        forward_maxpool_rows_cpu(x, b, c, h, w, size, stride, pad, oh, ow, out, idx, groups,
                                 rows_max, rows_idx, True)
        np.testing.assert_array_equal(out, ref)
        np.testing.assert_array_equal(idx, ref_idx)
        fast = np.full(ref.size, np.nan, np.float32)
        forward_maxpool_rows_cpu(x, b, c, h, w, size, stride, pad, oh, ow, fast, idx, groups,
                                 rows_max, rows_idx, False)
        np.testing.assert_array_equal(fast, ref)


@pytest.mark.parametrize("parts", [1, 2, 6])
def test_maxpool_backward_matches_numpy(rng, parts):
    """backward_maxpool_cpu adds each output's delta into its winner (repeated winners of a
    stride-1 pool add up, in output order), whatever the number of parts the outputs are cut
    into; an index -1 (a window with no winner) adds nothing."""
    b, c, h, w = 2, 3, 6, 7
    x = rand(rng, b * c * h * w)
    out, idx = naive.maxpool_forward(x, b, c, h, w, 2, 1, 1)
    idx = idx.astype(np.int32)
    idx[3] = -1
    delta = rand(rng, out.size)
    want = rand(rng, x.size)
    got = want.copy()
    for i in range(out.size):
        if idx[i] >= 0:
            want[idx[i]] += delta[i]
    backward_maxpool_cpu(delta, idx, got, parts, out.size // parts)
    np.testing.assert_array_equal(got, want)


def test_avgpool_matches_numpy(rng):
    x = rand(rng, 2 * 3 * 5 * 7)
    out = np.zeros(6, np.float32)
    forward_avgpool_cpu(x, 2, 3, 35, out)
    np.testing.assert_allclose(out, x.reshape(6, 35).mean(1), rtol=1e-6, atol=1e-7)


AB_ACTIVATIONS = {"relu6", "revleaky", "gelu", "swish", "mish", "hard_mish", "normalize_channels",
                  "normalize_channels_softmax", "normalize_channels_softmax_maxval"}


def test_every_activation_has_a_reference():
    """pjreddie's activations here (tests/naive); AlexeyAB's additions in test_ab_layers."""
    assert set(act.ACTIVATIONS) == set(naive.ACTIVATIONS) | AB_ACTIVATIONS


@pytest.mark.parametrize("name", sorted(naive.ACTIVATIONS))
def test_activation_forward_and_gradient(rng, name):
    x = np.concatenate([rand(rng, 500) * 5, np.array([0, 1, -1, 4.5, -4.5, 2.5, -2.5], np.float32)])
    y = x.copy()
    act.activate_array(y, y.size, act.ACTIVATIONS[name])
    np.testing.assert_allclose(y, naive.ACTIVATIONS[name](x.astype(np.float64)), rtol=2e-6, atol=2e-6)
    # gradient on the output against a central difference of the forward, away from kinks
    h = 1e-3
    x64 = x.astype(np.float64)
    num = (naive.ACTIVATIONS[name](x64 + h) - naive.ACTIVATIONS[name](x64 - h)) / (2 * h)
    smooth = np.abs(naive.ACTIVATIONS[name](x64 + 2 * h) - 2 * naive.ACTIVATIONS[name](x64) + naive.ACTIVATIONS[name](x64 - 2 * h)) < 1e-6
    if name == "stair":
        smooth &= np.floor(x64 - 2 * h) == np.floor(x64 + 2 * h)
    d = np.ones_like(y)
    act.gradient_array(y, y.size, act.ACTIVATIONS[name], d)
    assert smooth.sum() > 300
    if name == "plse":
        # Darknet's plse gradient tests the *output* against [0, 1] (not the input against +-4)
        expect = np.where((y < 0) | (y > 1), 0.01, 0.125)
        np.testing.assert_allclose(d, expect)
    else:
        np.testing.assert_allclose(d[smooth], num[smooth], rtol=2e-3, atol=2e-3)


def test_batchnorm_primitives_match_numpy(rng):
    b, f, s = 3, 4, 10
    x = rand(rng, b * f * s) * 3 + 1
    mean = np.zeros(f, np.float32)
    var = np.zeros(f, np.float32)
    mean_cpu(x, b, f, s, mean)
    variance_cpu(x, mean, b, f, s, var)
    xs = x.reshape(b, f, s).transpose(1, 0, 2).reshape(f, -1).astype(np.float64)
    np.testing.assert_allclose(mean, xs.mean(1), rtol=1e-6)
    np.testing.assert_allclose(var, xs.var(1, ddof=1), rtol=1e-5)     # unbiased, as Darknet
    y = x.copy()
    normalize_cpu(y, mean, var, b, f, s)
    ref = (x.reshape(b, f, s) - mean[None, :, None]) / (np.sqrt(var)[None, :, None] + 1e-6)
    np.testing.assert_allclose(y.reshape(b, f, s), ref, rtol=1e-5, atol=1e-6)
    scales, biases = rand(rng, f), rand(rng, f)
    scale_bias(y, scales, b, f, s)
    add_bias(y, biases, b, f, s)
    np.testing.assert_allclose(y.reshape(b, f, s), ref * scales[None, :, None] + biases[None, :, None],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("w1,w2,c1,c2", [(4, 4, 3, 3), (8, 4, 3, 5), (4, 8, 5, 3)])
def test_shortcut_matches_numpy(rng, w1, w2, c1, c2):
    b = 2
    add = rand(rng, b * c1 * w1 * w1)
    out = rand(rng, b * c2 * w2 * w2)
    ref = out.reshape(b, c2, w2, w2).astype(np.float64).copy()
    a4 = add.reshape(b, c1, w1, w1)
    stride, sample = max(w1 // w2, 1), max(w2 // w1, 1)
    mc, mw = min(c1, c2), min(w1, w2)
    ref[:, :mc, ::sample, ::sample][:, :, :mw, :mw] = \
        0.5 * ref[:, :mc, ::sample, ::sample][:, :, :mw, :mw] + 2.0 * a4[:, :mc, ::stride, ::stride][:, :, :mw, :mw]
    shortcut_cpu(b, w1, w1, c1, add, w2, w2, c2, 0.5, 2.0, out)
    np.testing.assert_allclose(out.reshape(ref.shape), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("s", [1, 2, 3])
def test_upsample_and_its_adjoint(rng, s):
    """Bit for bit: the adjoint adds into each input value in Darknet's order (output rows,
    then columns), each product and sum rounded to float."""
    b, c, h, w = 2, 3, 4, 5
    x = rand(rng, b * c * h * w)
    out = np.zeros(b * c * h * w * s * s, np.float32)
    upsample_cpu(x, w, h, c, b, s, 1, 1.5, out)
    ref = np.float32(1.5) * x.reshape(b, c, h, w).repeat(s, 2).repeat(s, 3)
    np.testing.assert_array_equal(out.reshape(ref.shape), ref)
    back = rand(rng, x.size)
    refb = back.reshape(b, c, h, w).copy()
    g = rand(rng, out.size)
    upsample_cpu(back, w, h, c, b, s, 0, 1.5, g)
    g4 = g.reshape(b, c, h * s, w * s)
    for j in range(h * s):
        for i in range(w * s):
            refb[:, :, j // s, i // s] += np.float32(1.5) * g4[:, :, j, i]
    np.testing.assert_array_equal(back.reshape(refb.shape), refb)


def test_softmax_groups_and_temperature(rng):
    b, n, g = 3, 4, 2
    x = rand(rng, b * n * g) * 4
    out = np.zeros_like(x)
    softmax_cpu(x, n, b, n * g, g, n, 1, 2.0, out)
    z = x.reshape(b, g, n).astype(np.float64) / 2.0
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(out.reshape(b, g, n), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("c,n,k,stride,pad,groups,h,w", [
    (3, 4, 3, 1, 1, 1, 7, 6), (4, 6, 3, 2, 1, 2, 9, 8), (5, 2, 1, 1, 0, 1, 5, 5),
    (4, 4, 1, 2, 0, 1, 8, 8), (2, 3, 5, 1, 2, 1, 6, 7), (6, 6, 3, 1, 0, 3, 5, 5)])
def test_convolutional_layer_forward_matches_direct_convolution(rng, c, n, k, stride, pad, groups, h, w):
    from darknumba.layers.convolutional import ConvolutionalLayer
    from darknumba.network import Network
    b = 2
    l = ConvolutionalLayer(b, h, w, c, n, groups, k, stride, pad, "linear")
    l.weights[:] = rand(rng, l.nweights)
    l.biases[:] = rand(rng, n)
    net = Network()
    net.layers = [l]
    net.batch, net.h, net.w, net.c, net.inputs = b, h, w, c, h * w * c
    net.alloc_workspace()
    x = rand(rng, b * c * h * w)
    net.forward(x)
    ref = naive.conv_forward(x, l.weights, l.biases, b, c, h, w, n, k, stride, pad, groups)
    np.testing.assert_allclose(l.output.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("train", [True, False])
def test_fused_batchnorm_backward_equals_darknets_seven_kernels(rng, train):
    from darknumba.kernels.blas import (backward_bias, backward_scale_cpu, mean_delta_cpu,
                                        normalize_delta_cpu, variance_delta_cpu)
    from darknumba.kernels.fused import batchnorm_backward
    b, f, s = 3, 5, 37
    x = rand(rng, b * f * s) * 2 + 0.5
    delta = rand(rng, b * f * s)
    mean = rand(rng, f)
    var = np.abs(rand(rng, f)) + 0.1
    x_mean, x_var = rand(rng, f), np.abs(rand(rng, f)) + 0.1          # the statistics x_norm came from
    d = (np.sqrt(x_var) + np.float32(1e-6)).astype(np.float32)
    x_norm = ((x.reshape(b, f, s) - x_mean[:, None]) / d[:, None]).astype(np.float32).ravel()
    scales = rand(rng, f)
    bu, su, md, vd = (rand(rng, f) for _ in range(4))
    ref = [delta.copy(), bu.copy(), su.copy(), md.copy(), vd.copy()]
    backward_bias(ref[1], ref[0], b, f, s)
    backward_scale_cpu(x_norm, ref[0], b, f, s, ref[2])
    scale_bias(ref[0], scales, b, f, s)
    mean_delta_cpu(ref[0], var, b, f, s, ref[3])
    variance_delta_cpu(x, ref[0], mean, var, b, f, s, ref[4])
    normalize_delta_cpu(x, mean, var, ref[3], ref[4], b, f, s, ref[0])
    got = [delta.copy(), bu.copy(), su.copy(), md.copy(), vd.copy()]
    batchnorm_backward(got[0], x, mean, var, scales, b, f, s, got[1], got[2], got[3], got[4], x_mean,
                       d, False)
    names = ["delta", "bias_updates", "scale_updates", "mean_delta", "variance_delta"]
    for name, g, r in zip(names, got, ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=2e-5, atol=2e-5 * np.abs(r).max(), err_msg=name)


def test_batchnorm_backward_alexeyab_normalize_delta(rng):
    """AlexeyAB's normalize_delta_cpu divides by sqrt(var) + 1e-5 (its mean and variance
    deltas keep the epsilon inside the root): a float64 reference of its formulas."""
    from darknumba.kernels.fused import batchnorm_backward, bn_divisors
    b, f, s = 2, 4, 29
    # batch statistics of a small spread (var ~ 1e-4), where the two epsilons differ by 5%
    x = (rand(rng, f)[None, :, None] + 0.01 * rand(rng, b, f, s)).astype(np.float32)
    mean = x.mean((0, 2)).astype(np.float32)
    var = x.var((0, 2), ddof=1).astype(np.float32)
    x = x.ravel()
    delta, scales = rand(rng, b * f * s), rand(rng, f)
    d = np.empty(f, np.float32)
    bn_divisors(var, True, d)
    np.testing.assert_allclose(d, np.sqrt(var.astype(np.float64) + 1e-5), rtol=1e-7)
    x3, g3 = x.reshape(b, f, s).astype(np.float64), delta.reshape(b, f, s).astype(np.float64)
    x_norm = (x3 - mean[:, None]) / d[:, None]
    v = var.astype(np.float64)[:, None]
    gs = g3 * scales[:, None]
    md = gs.sum((0, 2)) * (-1 / np.sqrt(var + 1e-5))
    vd = (gs * (x3 - mean[:, None])).sum((0, 2)) * (-0.5 * (var + 1e-5) ** -1.5)
    n = b * s
    ref = gs / (np.sqrt(v) + 1e-5) + vd[:, None] * 2 * (x3 - mean[:, None]) / n + md[:, None] / n
    got = delta.copy()
    bu, su, gmd, gvd = (np.zeros(f, np.float32) for _ in range(4))
    batchnorm_backward(got, x, mean, var, scales, b, f, s, bu, su, gmd, gvd, mean, d, True)
    np.testing.assert_allclose(bu, g3.sum((0, 2)), rtol=1e-5)
    np.testing.assert_allclose(su, (g3 * x_norm).sum((0, 2)), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gmd, md, rtol=1e-5)
    np.testing.assert_allclose(gvd, vd, rtol=1e-5)
    np.testing.assert_allclose(got, ref.ravel(), rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    # pjreddie's formula fails the same comparison: the check can fail
    pj = delta.copy()
    batchnorm_backward(pj, x, mean, var, scales, b, f, s, *(np.zeros(f, np.float32) for _ in range(4)),
                       mean, d, False)
    assert not np.allclose(pj, ref.ravel(), rtol=1e-4, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_one_sweep_mean_variance_equals_two_pass_float64(rng, offset):
    from darknumba.kernels.fused import mean_variance_cpu
    b, f, s = 3, 5, 1001
    x = (rand(rng, b * f * s) * 0.01 + offset).astype(np.float32)       # a large mean, small spread
    mean, var = np.zeros(f, np.float32), np.zeros(f, np.float32)
    mean_variance_cpu(x, b, f, s, mean, var)
    x64 = x.astype(np.float64).reshape(b, f, s).transpose(1, 0, 2).reshape(f, -1)
    np.testing.assert_allclose(mean, x64.mean(1), rtol=1e-7)
    np.testing.assert_allclose(var, x64.var(1, ddof=1), rtol=1e-5)     # unbiased, as Darknet
    if offset == 0:
        # Darknet's two passes subtract the float32 mean in float32: the same unless the mean
        # dwarfs the spread (then the one sweep is the more accurate)
        ref_m, ref_v = np.zeros(f, np.float32), np.zeros(f, np.float32)
        mean_cpu(x, b, f, s, ref_m)
        variance_cpu(x, ref_m, b, f, s, ref_v)
        np.testing.assert_allclose(var, ref_v, rtol=1e-6)


@pytest.mark.parametrize("m,k", [(1, 1), (5, 7), (130, 67), (64, 200)])
def test_add_transposed(rng, m, k):
    from darknumba.kernels.gemm import add_transposed
    dst, src = rand(rng, m, k), rand(rng, k, m)
    ref = dst + src.T
    add_transposed(dst, src)
    np.testing.assert_array_equal(dst, ref)


@pytest.mark.parametrize("c,k,stride", [(3, 3, 1), (40, 3, 1), (4, 3, 2)])   # direct and GEMM paths
def test_x_norm_is_what_the_forward_pass_normalised(rng, c, k, stride):
    """l.x_norm is recomputed from x, not kept: with unit scales, zero biases and a linear
    activation the train-mode output *is* the normalised x, so the two must agree bit for bit."""
    from darknumba.layers.convolutional import ConvolutionalLayer
    from darknumba.network import Network
    b, h, w, n = 2, 7, 6, 5
    l = ConvolutionalLayer(b, h, w, c, n, 1, k, stride, 1, "linear", batch_normalize=True)
    l.weights[:] = rand(rng, l.nweights)
    net = Network()
    net.layers = [l]
    net.batch, net.h, net.w, net.c, net.inputs = b, h, w, c, h * w * c
    net.alloc_workspace()
    net.forward(rand(rng, b * c * h * w) + 3, train=True)
    assert l.x_norm is not None and not np.array_equal(l.x_norm, l.x)
    np.testing.assert_array_equal(l.x_norm, l.output)
    assert ConvolutionalLayer(b, h, w, c, n, 1, k, stride, 1, "linear").x_norm is None


@pytest.mark.parametrize("s1,s2", [(1.0, 1.0), (0.5, -2.0)])
def test_same_shape_shortcut_equals_copy_then_shortcut(rng, s1, s2):
    from darknumba.kernels.blas import shortcut_same_cpu
    b, w, h, c = 2, 5, 4, 3
    x, add = rand(rng, b * c * h * w), rand(rng, b * c * h * w)
    ref = x.copy()
    shortcut_cpu(b, w, h, c, add, w, h, c, s1, s2, ref)
    out = np.full_like(x, np.nan)
    shortcut_same_cpu(x.size, s1, x, s2, add, out)
    np.testing.assert_array_equal(out, ref)
    shortcut_same_cpu(x.size, s1, x, s2, add, x)            # in place
    np.testing.assert_array_equal(x, ref)
