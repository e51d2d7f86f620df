"""kernels/caffe.py against plain numpy on odd shapes (batch 3, 5 channels, 7 x 1 maps; one
channel; one pixel): Caffe's BatchNorm statistics, running sums, forward and backward, Eltwise
PROD / MAX and their backward, PReLU and its slopes' gradient."""
import numpy as np
import pytest

from darknumba.kernels.caffe import (caffe_bn_backward_cpu, caffe_bn_forward_cpu,
                                     caffe_bn_global_stats_cpu, caffe_bn_moving_average_cpu,
                                     caffe_bn_stats_cpu, eltwise_max_backward_cpu,
                                     eltwise_max_cpu, eltwise_prod_backward_cpu,
                                     eltwise_prod_cpu, prelu_backward_cpu, prelu_forward_cpu,
                                     prelu_slope_updates_cpu)

SHAPES = [(3, 5, 7), (1, 1, 1), (2, 1, 9), (4, 6, 1)]        # batch, channels, spatial
f32 = np.float32


@pytest.mark.parametrize("batch, c, spatial", SHAPES)
def test_batch_norm(batch, c, spatial, rng):
    x = rng.normal(1.5, 2.0, (batch, c, spatial)).astype(f32)
    mean, var = np.zeros(c, f32), np.zeros(c, f32)
    caffe_bn_stats_cpu(x.ravel(), batch, c, spatial, mean, var)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean, x64.mean(axis=(0, 2)), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(var, x64.var(axis=(0, 2)), rtol=1e-5, atol=1e-7)
    sums = [rng.uniform(0, 2, c).astype(f32), rng.uniform(0, 2, c).astype(f32),
            np.array([3.0], f32)]
    m = batch * spatial
    want = (0.9 * sums[0] + mean, 0.9 * sums[1] + (m / (m - 1) if m > 1 else 1) * var,
            0.9 * 3.0 + 1)
    caffe_bn_moving_average_cpu(mean, var, m, 0.9, *sums)
    for got, ref in zip(sums, want):
        np.testing.assert_allclose(got, ref, rtol=1e-6)
    gm, gv = np.zeros(c, f32), np.zeros(c, f32)
    caffe_bn_global_stats_cpu(sums[0], sums[1], sums[2], gm, gv)
    np.testing.assert_allclose(gm, sums[0] / sums[2][0], rtol=1e-6)
    caffe_bn_global_stats_cpu(sums[0], sums[1], np.zeros(1, f32), gm, gv)
    assert not gm.any() and not gv.any()                   # a factor of 0: statistics 0
    gamma, beta = rng.uniform(0.5, 1.5, c).astype(f32), rng.normal(0, 1, c).astype(f32)
    xn, out = np.zeros(x.size, f32), np.zeros(x.size, f32)
    caffe_bn_forward_cpu(x.ravel(), batch, c, spatial, mean, var, 1e-3, gamma, beta, xn, out)
    ref_xn = (x64 - mean.reshape(1, -1, 1)) / np.sqrt(var.reshape(1, -1, 1) + 1e-3)
    np.testing.assert_allclose(xn, ref_xn.ravel(), rtol=1e-5, atol=1e-5)
    ref = gamma.reshape(1, -1, 1) * ref_xn + beta.reshape(1, -1, 1)
    np.testing.assert_allclose(out, ref.ravel(), rtol=1e-5, atol=1e-5)
    for train in (True, False):
        d = rng.normal(0, 1, x.shape).astype(f32)
        bu, su = np.ones(c, f32), np.zeros(c, f32)
        delta = d.ravel().copy()
        caffe_bn_backward_cpu(delta, xn, batch, c, spatial, var, 1e-3, gamma, train, bu, su)
        d64, xn64 = d.astype(np.float64), xn.reshape(x.shape).astype(np.float64)
        np.testing.assert_allclose(bu, 1 + d64.sum(axis=(0, 2)), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(su, (d64 * xn64).sum(axis=(0, 2)), rtol=1e-5, atol=1e-5)
        g = gamma.reshape(1, -1, 1) * d64
        if train:
            g = g - g.mean(axis=(0, 2), keepdims=True) \
                - (g * xn64).mean(axis=(0, 2), keepdims=True) * xn64
        ref = g / np.sqrt(var.reshape(1, -1, 1) + 1e-3)
        np.testing.assert_allclose(delta, ref.ravel(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("k, n", [(2, 1), (3, 37), (4, 1000)])
def test_eltwise(k, n, rng):
    rows = rng.normal(0, 1, (k, n)).astype(f32)
    rows[1, ::5] = rows[0, ::5]                  # ties: the first of equal rows wins
    out, mask = np.zeros(n, f32), np.zeros(n, np.int32)
    eltwise_prod_cpu(rows, n, out)
    np.testing.assert_allclose(out, np.prod(rows.astype(np.float64), axis=0), rtol=1e-6)
    eltwise_max_cpu(rows, n, out, mask)
    assert np.array_equal(out, rows.max(axis=0)) and np.array_equal(mask, rows.argmax(axis=0))
    delta = rng.normal(0, 1, n).astype(f32)
    for j in range(k):
        got = np.ones(n, f32)
        eltwise_prod_backward_cpu(delta, rows, n, j, got)
        others = np.prod(np.delete(rows, j, axis=0).astype(np.float64), axis=0)
        np.testing.assert_allclose(got, 1 + delta * others, rtol=1e-5, atol=1e-6)
        got = np.zeros(n, f32)
        eltwise_max_backward_cpu(delta, mask, n, j, got)
        assert np.array_equal(got, np.where(mask == j, delta, f32(0)))


@pytest.mark.parametrize("batch, c, spatial", SHAPES)
@pytest.mark.parametrize("shared", [False, True])
def test_prelu(batch, c, spatial, shared, rng):
    x = rng.normal(0, 1, (batch, c, spatial)).astype(f32)
    x.ravel()[::4] = 0                            # x = 0 takes the slope side, as Caffe's <= 0
    slopes = rng.uniform(-0.5, 0.5, 1 if shared else c).astype(f32)
    a = np.broadcast_to(slopes[0] if shared else slopes.reshape(1, -1, 1), x.shape)
    out = np.zeros(x.size, f32)
    prelu_forward_cpu(x.ravel(), batch, c, spatial, slopes, shared, out)
    assert np.array_equal(out, np.where(x > 0, x, a * x).ravel())
    d = rng.normal(0, 1, x.shape).astype(f32)
    upd = np.zeros(slopes.size, f32)
    prelu_slope_updates_cpu(x.ravel(), d.ravel(), batch, c, spatial, shared, upd)
    per = np.where(x <= 0, d.astype(np.float64) * x, 0).sum(axis=(0, 2))
    np.testing.assert_allclose(upd, [per.sum()] if shared else per, rtol=1e-5, atol=1e-6)
    prev = np.ones(x.size, f32)
    prelu_backward_cpu(x.ravel(), d.ravel(), batch, c, spatial, slopes, shared, prev)
    np.testing.assert_allclose(prev, 1 + np.where(x > 0, d, a * d).ravel(), rtol=1e-6)
