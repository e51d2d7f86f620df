"""The inference epilogues (kernels/fused.py: batchnorm_bias_activate, bias_activate, whose
leaky and linear rows are one loop since 2026-12-03) against numpy doing Darknet's separate
sweeps in float32, one rounding per operation: normalize (x - mean) / divisor, scale, add the
bias, activate (leaky as C's 0.1 * x in double, rounded to float); with FAST (the non-exact
inference epilogue) against numpy's (x - mean) * factor + bias and leaky in float32, and within
a few float32 roundings of Darknet's sweeps."""
import numpy as np
import pytest

from darknumba.kernels.activations import LEAKY, LINEAR, LOGISTIC, RELU
from darknumba.kernels.fused import CHUNK, FAST, batchnorm_bias_activate, bias_activate


def activate(v, act):
    if act == LEAKY:
        return np.where(v > 0, v, (0.1 * v.astype(np.float64)).astype(np.float32))
    if act == LINEAR:
        return v
    if act == RELU:
        return np.where(v > 0, v, np.float32(0))
    return (1.0 / (1.0 + np.exp(-v.astype(np.float64)))).astype(np.float32)


# spatial sizes: within one chunk, across chunks with a remainder, a vector-length tail
@pytest.mark.parametrize("spatial", [13 * 13, CHUNK + 37, 2 * CHUNK + 5])
@pytest.mark.parametrize("act", [LEAKY, LINEAR, RELU, LOGISTIC])
def test_batchnorm_bias_activate_equals_the_separate_sweeps(rng, spatial, act):
    batch, filters = 2, 3
    x = (rng.standard_normal(batch * filters * spatial) * 3).astype(np.float32)
    mean, scales, biases = (rng.standard_normal(filters).astype(np.float32) for _ in range(3))
    divisor = rng.uniform(0.5, 2, filters).astype(np.float32)
    got = x.copy()
    batchnorm_bias_activate(got, mean, divisor, scales, biases, batch, filters, spatial, act)
    v = x.reshape(batch, filters, spatial)
    v = (v - mean[:, None]) / divisor[:, None]
    v = v * scales[:, None]
    v = v + biases[:, None]
    ref = activate(v, act).ravel()
    assert ref.dtype == np.float32
    if act == LOGISTIC:                     # exp's last bit may differ from numpy's
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)
    else:
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("spatial", [13 * 13, CHUNK + 37])
@pytest.mark.parametrize("act", [LEAKY, LINEAR, RELU])
def test_bias_activate_equals_the_separate_sweeps(rng, spatial, act):
    batch, filters = 2, 3
    x = (rng.standard_normal(batch * filters * spatial) * 3).astype(np.float32)
    biases = rng.standard_normal(filters).astype(np.float32)
    got = x.copy()
    bias_activate(got, biases, batch, filters, spatial, act)
    ref = activate(x.reshape(batch, filters, spatial) + biases[:, None], act).ravel()
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("spatial", [13 * 13, CHUNK + 37])
@pytest.mark.parametrize("act", [LEAKY, LINEAR])
def test_fast_epilogues_multiply_by_the_factor(rng, spatial, act):
    """FAST: the batch norm as (x - mean) * factor + bias (the divisor argument holds the
    factor scales / divisor), leaky as 0.1f * v; the biases-only sweep with leaky in float32.
    Each within 4e-7 of the output's scale of Darknet's sequence."""
    batch, filters = 2, 3
    x = (rng.standard_normal(batch * filters * spatial) * 3).astype(np.float32)
    mean, scales, biases = (rng.standard_normal(filters).astype(np.float32) for _ in range(3))
    divisor = rng.uniform(0.5, 2, filters).astype(np.float32)
    factor = scales / divisor
    got = x.copy()
    batchnorm_bias_activate(got, mean, factor, scales, biases, batch, filters, spatial,
                            act | FAST)
    v = (x.reshape(batch, filters, spatial) - mean[:, None]) * factor[:, None] + biases[:, None]
    if act == LEAKY:
        v = np.where(v > 0, v, np.float32(0.1) * v)
    np.testing.assert_allclose(got, v.ravel(), rtol=2e-7, atol=2e-7 * np.abs(v).max())
    darknet = x.copy()
    batchnorm_bias_activate(darknet, mean, divisor, scales, biases, batch, filters, spatial, act)
    assert np.abs(got - darknet).max() <= 4e-7 * np.abs(darknet).max()
    got = x.copy()
    bias_activate(got, biases, batch, filters, spatial, act | FAST)
    v = x.reshape(batch, filters, spatial) + biases[:, None]
    if act == LEAKY:
        v = np.where(v > 0, v, np.float32(0.1) * v)
    np.testing.assert_array_equal(got, v.ravel())
