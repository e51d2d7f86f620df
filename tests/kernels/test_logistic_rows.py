"""kernels/logistic_rows.py: the vectorised logistic rows against the libm formulas they
stand for, bit for bit, on random values, runs of consecutive floats and the edges (|x| past
the polynomial's range, NaN, Inf, signed zeros)."""
import math

import numpy as np
import pytest

from darknumba.kernels.logistic_rows import logistic_f_row, logistic_row


def exp(v):
    """C's exp: inf past the double range (math.exp raises there)."""
    return math.inf if -v > 709 else math.exp(-v)


def darknet_logistic(x):
    """pjreddie's logistic_activate: (float)(1./(1. + exp(-x))) in double."""
    return np.array([np.float32(1.0 / (1.0 + exp(float(v)))) for v in x], np.float32)


def alexeyab_logistic(x):
    """AlexeyAB's: 1.f/(1.f + expf(-x)) in float, expf as exp rounded to float."""
    one = np.float32(1.0)
    with np.errstate(over="ignore"):
        return np.array([one / (one + np.float32(exp(float(v)))) for v in x], np.float32)


def values(rng):
    edges = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 80.0, -80.0, 80.00001, -80.00001, 87.0,
                      -87.5, 89.0, 104.0, -104.0, 1e30, -1e30, 3.4e38, -3.4e38, 1e-45],
                     np.float32)
    runs = [np.arange(a, a + 20000, dtype=np.int32).view(np.float32)
            for a in np.array([1.0, -17.0, 0.001, -3.0e-5], np.float32).view(np.int32)]
    return np.concatenate([edges, (rng.standard_normal(60000) * 6).astype(np.float32),
                           rng.uniform(-90, 90, 20000).astype(np.float32), *runs])


@pytest.mark.parametrize("row,ref", [(logistic_row, darknet_logistic),
                                     (logistic_f_row, alexeyab_logistic)])
def test_logistic_rows_match_libm_bit_for_bit(rng, row, ref):
    x = values(rng)
    want = ref(x)
    got = np.full_like(x, 7.0)
    for k in range(0, x.size, 677):                 # rows as the yolo layers pass them
        row(x[k:k + 677], got[k:k + 677])
    nan = np.isnan(x)
    assert np.isnan(got[nan]).all()
    np.testing.assert_array_equal(got[~nan].view(np.int32), want[~nan].view(np.int32))


def near_midpoints(n_wanted=5):
    """Floats x whose logistic in double lies within 2^-44 of a midpoint between two floats:
    the values whose rows must take the libm path (in pjreddie's logistic)."""
    start = np.array(-8.0, np.float32).view(np.int32)
    x = np.arange(start, start + 4_000_000, dtype=np.int32).view(np.float32)
    y = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    f = y.astype(np.float32).astype(np.float64)
    step = np.spacing(y.astype(np.float32)).astype(np.float64)
    mid = np.where(y > f, f + step / 2, f - step / 2)
    return x[np.abs(y - mid) < y * 2.0 ** -44][:n_wanted]


def test_values_near_a_rounding_midpoint_take_the_libm_path(rng):
    hard = near_midpoints()
    assert hard.size                                  # the search finds some
    for row, ref in ((logistic_row, darknet_logistic), (logistic_f_row, alexeyab_logistic)):
        x = rng.standard_normal(300).astype(np.float32)
        x[::60] = hard
        got = np.empty_like(x)
        row(x, got)
        np.testing.assert_array_equal(got.view(np.int32), ref(x).view(np.int32))
