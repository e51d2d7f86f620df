"""Kernels against slow, independent numpy references on odd shapes."""

import numpy as np
import pytest

from darknumba.kernels import activations as act
from darknumba.kernels.blas import (add_bias, mean_cpu, normalize_cpu, scale_bias, shortcut_cpu,
                                    upsample_cpu, variance_cpu)
from darknumba.kernels.gemm import gemm, gemm_cpu
from darknumba.kernels.im2col import col2im_batch_cpu, col2im_cpu, im2col_batch_cpu, im2col_cpu
from darknumba.kernels.pool import forward_avgpool_cpu, forward_maxpool2_cpu, forward_maxpool_cpu
from darknumba.kernels.softmax import softmax_cpu

rng = np.random.default_rng(7)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def naive_im2col(im, c, h, w, k, stride, pad):
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    padded = np.zeros((c, h + 2 * pad, w + 2 * pad), np.float32)
    padded[:, pad:pad + h, pad:pad + w] = im.reshape(c, h, w)
    col = np.zeros((c, k, k, oh, ow), np.float32)
    for ky in range(k):
        for kx in range(k):
            col[:, ky, kx] = padded[:, ky:ky + stride * oh:stride, kx:kx + stride * ow:stride]
    return col.reshape(c * k * k, oh * ow)


@pytest.mark.parametrize("c,h,w,k,stride,pad", [
    (1, 5, 5, 1, 1, 0), (3, 7, 5, 3, 1, 1), (2, 8, 9, 3, 2, 1), (4, 6, 6, 3, 2, 0),
    (3, 5, 7, 1, 2, 0), (2, 9, 4, 5, 1, 2), (1, 4, 4, 2, 2, 0), (2, 3, 70, 3, 1, 1),
    (1, 4, 150, 3, 2, 1)])
def test_im2col_matches_numpy(c, h, w, k, stride, pad):
    im = rand(c * h * w)
    ref = naive_im2col(im, c, h, w, k, stride, pad)
    col = np.full(ref.size, np.nan, np.float32)
    im2col_cpu(im, c, h, w, k, stride, pad, col)
    np.testing.assert_array_equal(col.reshape(ref.shape), ref)


@pytest.mark.parametrize("c,h,w,k,stride,pad", [(3, 7, 5, 3, 1, 1), (2, 8, 9, 3, 2, 1), (2, 9, 4, 5, 1, 2),
                                                (2, 3, 70, 3, 1, 1), (1, 4, 150, 3, 2, 1)])
def test_col2im_is_the_adjoint_of_im2col(c, h, w, k, stride, pad):
    x = rand(c * h * w)
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    y = rand(c * k * k * oh * ow)
    col = np.zeros_like(y)
    im2col_cpu(x, c, h, w, k, stride, pad, col)
    back = np.ones(c * h * w, np.float32)          # col2im adds into what is there
    col2im_cpu(y, c, h, w, k, stride, pad, back)
    lhs = float(np.dot(col.astype(np.float64), y))
    rhs = float(np.dot(x.astype(np.float64), back - 1))
    assert abs(lhs - rhs) < 1e-4 * (1 + abs(lhs))


@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("beta", [0.0, 1.0, 0.5])
def test_gemm_reference_and_fast_path_agree_with_numpy(ta, tb, beta):
    M, N, K = 7, 5, 11
    A = rand(K, M) if ta else rand(M, K)
    B = rand(N, K) if tb else rand(K, N)
    C0 = rand(M, N)
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


def naive_maxpool(x, b, c, h, w, size, stride, pad):
    oh = (h + pad - size) // stride + 1
    ow = (w + pad - size) // stride + 1
    x = x.reshape(b, c, h, w)
    out = np.empty((b, c, oh, ow), np.float32)
    idx = np.empty((b, c, oh, ow), np.int64)
    off = -(pad // 2)
    for i in range(oh):
        for j in range(ow):
            best = np.full((b, c), np.finfo(np.float32).min, np.float32)   # -FLT_MAX, as C
            bi = np.full((b, c), -1)
            for n in range(size):
                for m in range(size):
                    y0, x0 = off + i * stride + n, off + j * stride + m
                    if 0 <= y0 < h and 0 <= x0 < w:
                        v = x[:, :, y0, x0]
                        better = v > best
                        best = np.where(better, v, best)
                        flat = ((np.arange(b)[:, None] * c + np.arange(c)[None]) * h + y0) * w + x0
                        bi = np.where(better, flat, bi)
            out[:, :, i, j] = best
            idx[:, :, i, j] = bi
    return out.ravel(), idx.ravel()


@pytest.mark.parametrize("size,stride,pad,h,w", [(2, 2, 1, 8, 8), (2, 1, 1, 5, 5), (3, 2, 2, 7, 6),
                                                 (5, 1, 4, 6, 6), (3, 1, 2, 4, 4), (2, 2, 1, 7, 7)])
def test_maxpool_matches_numpy(size, stride, pad, h, w):
    b, c = 2, 3
    x = rand(b * c * h * w)
    x[5] = x[6]                                 # a tie: the first in scan order wins
    ref, ref_idx = naive_maxpool(x, b, c, h, w, size, stride, pad)
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
                                             (1, 2, 9, 8), (2, 1, 4, 90)])
def test_size2_maxpool_matches_numpy(stride, pad, h, w):
    """The small-map size-2 kernel: values, winners' indexes and ties as the naive scan."""
    b, c = 2, 3
    x = rng.integers(0, 3, b * c * h * w).astype(np.float32)       # many ties
    ref, ref_idx = naive_maxpool(x, b, c, h, w, 2, stride, pad)
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


def test_avgpool_matches_numpy():
    x = rand(2 * 3 * 5 * 7)
    out = np.zeros(6, np.float32)
    forward_avgpool_cpu(x, 2, 3, 35, out)
    np.testing.assert_allclose(out, x.reshape(6, 35).mean(1), rtol=1e-6, atol=1e-7)


NAIVE_ACT = {
    "logistic": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "relie": lambda x: np.where(x > 0, x, 0.01 * x),
    "linear": lambda x: x,
    "ramp": lambda x: np.maximum(x, 0) + 0.1 * x,
    "tanh": np.tanh,
    "plse": lambda x: np.where(x < -4, 0.01 * (x + 4), np.where(x > 4, 0.01 * (x - 4) + 1, 0.125 * x + 0.5)),
    "leaky": lambda x: np.where(x > 0, x, 0.1 * x),
    "elu": lambda x: np.where(x >= 0, x, np.expm1(x)),
    "loggy": lambda x: 2 / (1 + np.exp(-x)) - 1,
    "stair": lambda x: np.where(np.floor(x) % 2 == 0, np.floor(x / 2), x - np.floor(x) + np.floor(x / 2)),
    "hardtan": lambda x: np.clip(x, -1, 1),
    "lhtan": lambda x: np.where(x < 0, 0.001 * x, np.where(x > 1, 0.001 * (x - 1) + 1, x)),
    "selu": lambda x: np.where(x >= 0, 1.0507 * x, 1.0507 * 1.6732 * np.expm1(x)),
}


def test_every_activation_has_a_reference():
    """pjreddie's activations here; AlexeyAB's additions in test_ab_layers."""
    ab = {"relu6", "revleaky", "gelu", "swish", "mish", "hard_mish", "normalize_channels",
          "normalize_channels_softmax", "normalize_channels_softmax_maxval"}
    assert set(act.ACTIVATIONS) == set(NAIVE_ACT) | ab


@pytest.mark.parametrize("name", sorted(NAIVE_ACT))
def test_activation_forward_and_gradient(name):
    x = np.concatenate([rand(500) * 5, np.array([0, 1, -1, 4.5, -4.5, 2.5, -2.5], np.float32)])
    y = x.copy()
    act.activate_array(y, y.size, act.ACTIVATIONS[name])
    np.testing.assert_allclose(y, NAIVE_ACT[name](x.astype(np.float64)), rtol=2e-6, atol=2e-6)
    # gradient on the output against a central difference of the forward, away from kinks
    h = 1e-3
    x64 = x.astype(np.float64)
    num = (NAIVE_ACT[name](x64 + h) - NAIVE_ACT[name](x64 - h)) / (2 * h)
    smooth = np.abs(NAIVE_ACT[name](x64 + 2 * h) - 2 * NAIVE_ACT[name](x64) + NAIVE_ACT[name](x64 - 2 * h)) < 1e-6
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


def test_batchnorm_primitives_match_numpy():
    b, f, s = 3, 4, 10
    x = rand(b * f * s) * 3 + 1
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
    scales, biases = rand(f), rand(f)
    scale_bias(y, scales, b, f, s)
    add_bias(y, biases, b, f, s)
    np.testing.assert_allclose(y.reshape(b, f, s), ref * scales[None, :, None] + biases[None, :, None],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("w1,w2,c1,c2", [(4, 4, 3, 3), (8, 4, 3, 5), (4, 8, 5, 3)])
def test_shortcut_matches_numpy(w1, w2, c1, c2):
    b = 2
    add = rand(b * c1 * w1 * w1)
    out = rand(b * c2 * w2 * w2)
    ref = out.reshape(b, c2, w2, w2).astype(np.float64).copy()
    a4 = add.reshape(b, c1, w1, w1)
    stride, sample = max(w1 // w2, 1), max(w2 // w1, 1)
    mc, mw = min(c1, c2), min(w1, w2)
    ref[:, :mc, ::sample, ::sample][:, :, :mw, :mw] = \
        0.5 * ref[:, :mc, ::sample, ::sample][:, :, :mw, :mw] + 2.0 * a4[:, :mc, ::stride, ::stride][:, :, :mw, :mw]
    shortcut_cpu(b, w1, w1, c1, add, w2, w2, c2, 0.5, 2.0, out)
    np.testing.assert_allclose(out.reshape(ref.shape), ref, rtol=1e-6, atol=1e-6)


def test_upsample_and_its_adjoint():
    b, c, h, w, s = 2, 3, 4, 5, 2
    x = rand(b * c * h * w)
    out = np.zeros(b * c * h * w * s * s, np.float32)
    upsample_cpu(x, w, h, c, b, s, 1, 1.5, out)
    ref = 1.5 * x.reshape(b, c, h, w).repeat(s, 2).repeat(s, 3)
    np.testing.assert_array_equal(out.reshape(ref.shape), ref.astype(np.float32))
    back = np.zeros_like(x)
    g = rand(out.size)
    upsample_cpu(back, w, h, c, b, s, 0, 1.5, g)
    refb = 1.5 * g.reshape(b, c, h, s, w, s).sum((3, 5))
    np.testing.assert_allclose(back.reshape(refb.shape), refb, rtol=1e-5, atol=1e-5)


def test_softmax_groups_and_temperature():
    b, n, g = 3, 4, 2
    x = rand(b * n * g) * 4
    out = np.zeros_like(x)
    softmax_cpu(x, n, b, n * g, g, n, 1, 2.0, out)
    z = x.reshape(b, g, n).astype(np.float64) / 2.0
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(out.reshape(b, g, n), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def naive_conv(x, wts, bias, b, c, h, w, n, k, stride, pad, groups):
    cg, ng = c // groups, n // groups
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    xp = np.zeros((b, c, h + 2 * pad, w + 2 * pad))
    xp[:, :, pad:pad + h, pad:pad + w] = x.reshape(b, c, h, w)
    W = wts.reshape(n, cg, k, k).astype(np.float64)
    out = np.zeros((b, n, oh, ow))
    for f in range(n):
        g = f // ng
        for ky in range(k):
            for kx in range(k):
                patch = xp[:, g * cg:(g + 1) * cg, ky:ky + stride * oh:stride, kx:kx + stride * ow:stride]
                out[:, f] += np.einsum("bchw,c->bhw", patch, W[f, :, ky, kx])
    return out + bias[None, :, None, None]


@pytest.mark.parametrize("c,n,k,stride,pad,groups,h,w", [
    (3, 4, 3, 1, 1, 1, 7, 6), (4, 6, 3, 2, 1, 2, 9, 8), (5, 2, 1, 1, 0, 1, 5, 5),
    (4, 4, 1, 2, 0, 1, 8, 8), (2, 3, 5, 1, 2, 1, 6, 7), (6, 6, 3, 1, 0, 3, 5, 5)])
def test_convolutional_layer_forward_matches_direct_convolution(c, n, k, stride, pad, groups, h, w):
    from darknumba.layers.convolutional import ConvolutionalLayer
    from darknumba.network import Network
    b = 2
    l = ConvolutionalLayer(b, h, w, c, n, groups, k, stride, pad, "linear")
    l.weights[:] = rand(l.nweights)
    l.biases[:] = rand(n)
    net = Network()
    net.layers = [l]
    net.batch, net.h, net.w, net.c, net.inputs = b, h, w, c, h * w * c
    net.alloc_workspace()
    x = rand(b * c * h * w)
    net.forward(x)
    ref = naive_conv(x, l.weights, l.biases, b, c, h, w, n, k, stride, pad, groups)
    np.testing.assert_allclose(l.output.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("b,c,h,w,k,stride,pad", [(3, 2, 7, 5, 3, 1, 1), (2, 3, 8, 9, 3, 2, 1),
                                                  (2, 2, 9, 4, 5, 1, 2), (2, 2, 8, 8, 1, 2, 0),
                                                  (2, 2, 3, 70, 3, 1, 1), (2, 1, 4, 150, 3, 2, 1)])
def test_batch_im2col_and_col2im_equal_per_image_ones(b, c, h, w, k, stride, pad):
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    n, K = oh * ow, c * k * k
    x = rand(b * c * h * w)
    col = np.zeros(K * b * n, np.float32)
    im2col_batch_cpu(x, b, c, h, w, k, stride, pad, col)
    y = rand(K * b * n)
    back = np.ones(b * c * h * w, np.float32)
    col2im_batch_cpu(y, b, c, h, w, k, stride, pad, back)
    for i in range(b):
        img = slice(i * c * h * w, (i + 1) * c * h * w)
        np.testing.assert_array_equal(col.reshape(K, b, n)[:, i], naive_im2col(x[img], c, h, w, k, stride, pad))
        ref = np.ones(c * h * w, np.float32)
        col2im_cpu(np.ascontiguousarray(y.reshape(K, b, n)[:, i]).ravel(), c, h, w, k, stride, pad, ref)
        np.testing.assert_allclose(back[img], ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("train", [True, False])
def test_fused_batchnorm_backward_equals_darknets_seven_kernels(train):
    from darknumba.kernels.blas import (backward_bias, backward_scale_cpu, mean_delta_cpu,
                                        normalize_delta_cpu, variance_delta_cpu)
    from darknumba.kernels.fused import batchnorm_backward
    b, f, s = 3, 5, 37
    x = rand(b * f * s) * 2 + 0.5
    delta = rand(b * f * s)
    mean = rand(f)
    var = np.abs(rand(f)) + 0.1
    x_mean, x_var = rand(f), np.abs(rand(f)) + 0.1          # the statistics x_norm came from
    d = (np.sqrt(x_var) + np.float32(1e-6)).astype(np.float32)
    x_norm = ((x.reshape(b, f, s) - x_mean[:, None]) / d[:, None]).astype(np.float32).ravel()
    scales = rand(f)
    bu, su, md, vd = (rand(f) for _ in range(4))
    ref = [delta.copy(), bu.copy(), su.copy(), md.copy(), vd.copy()]
    backward_bias(ref[1], ref[0], b, f, s)
    backward_scale_cpu(x_norm, ref[0], b, f, s, ref[2])
    scale_bias(ref[0], scales, b, f, s)
    mean_delta_cpu(ref[0], var, b, f, s, ref[3])
    variance_delta_cpu(x, ref[0], mean, var, b, f, s, ref[4])
    normalize_delta_cpu(x, mean, var, ref[3], ref[4], b, f, s, ref[0])
    got = [delta.copy(), bu.copy(), su.copy(), md.copy(), vd.copy()]
    batchnorm_backward(got[0], x, mean, var, scales, b, f, s, got[1], got[2], got[3], got[4], x_mean,
                       x_var)
    for name, g, r in zip(["delta", "bias_updates", "scale_updates", "mean_delta", "variance_delta"], got, ref):
        np.testing.assert_allclose(g, r, rtol=2e-5, atol=2e-5 * np.abs(r).max(), err_msg=name)


@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_one_sweep_mean_variance_equals_two_pass_float64(offset):
    from darknumba.kernels.fused import mean_variance_cpu
    b, f, s = 3, 5, 1001
    x = (rand(b * f * s) * 0.01 + offset).astype(np.float32)       # a large mean, small spread
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
def test_add_transposed(m, k):
    from darknumba.kernels.gemm import add_transposed
    dst, src = rand(m, k), rand(k, m)
    ref = dst + src.T
    add_transposed(dst, src)
    np.testing.assert_array_equal(dst, ref)


@pytest.mark.parametrize("c,k,stride", [(3, 3, 1), (40, 3, 1), (4, 3, 2)])   # direct and GEMM paths
def test_x_norm_is_what_the_forward_pass_normalised(c, k, stride):
    """l.x_norm is recomputed from x, not kept: with unit scales, zero biases and a linear
    activation the train-mode output *is* the normalised x, so the two must agree bit for bit."""
    from darknumba.layers.convolutional import ConvolutionalLayer
    from darknumba.network import Network
    b, h, w, n = 2, 7, 6, 5
    l = ConvolutionalLayer(b, h, w, c, n, 1, k, stride, 1, "linear", batch_normalize=True)
    l.weights[:] = rand(l.nweights)
    net = Network()
    net.layers = [l]
    net.batch, net.h, net.w, net.c, net.inputs = b, h, w, c, h * w * c
    net.alloc_workspace()
    net.forward(rand(b * c * h * w) + 3, train=True)
    assert l.x_norm is not None and not np.array_equal(l.x_norm, l.x)
    np.testing.assert_array_equal(l.x_norm, l.output)
    assert ConvolutionalLayer(b, h, w, c, n, 1, k, stride, 1, "linear").x_norm is None


@pytest.mark.parametrize("s1,s2", [(1.0, 1.0), (0.5, -2.0)])
def test_same_shape_shortcut_equals_copy_then_shortcut(s1, s2):
    from darknumba.kernels.blas import shortcut_same_cpu
    b, w, h, c = 2, 5, 4, 3
    x, add = rand(b * c * h * w), rand(b * c * h * w)
    ref = x.copy()
    shortcut_cpu(b, w, h, c, add, w, h, c, s1, s2, ref)
    out = np.full_like(x, np.nan)
    shortcut_same_cpu(x.size, s1, x, s2, add, out)
    np.testing.assert_array_equal(out, ref)
    shortcut_same_cpu(x.size, s1, x, s2, add, x)            # in place
    np.testing.assert_array_equal(x, ref)
