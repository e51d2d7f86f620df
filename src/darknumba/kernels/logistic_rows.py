"""Logistic over whole rows, bit for bit what the C gets from libm's exp, at vector speed.

Darknet's logistic_activate is (float)(1./(1. + exp(-x))) in double (pjreddie); AlexeyAB's is
1.f/(1.f + expf(-x)) in float (expf: exp rounded to float, as kernels/activations.py has it).
A libm call per value is scalar (~20 cycles); the yolo layers apply it to every x, y,
objectness and class output. Here exp is a branch-free polynomial the compiler vectorises,
accurate to ~2^-49 relative, and its use is checked value by value: the float result is kept
only when every double within 2^-44 (relative) of the computed one rounds to the same float
(rounding is monotone, so libm's value, within 2^-48 of ours, rounds there too). The rare
value that fails the check (about one in 2^19: near a rounding midpoint), |x| > 80, NaN and
Inf send their row through libm.
"""
import math

import numpy as np
from numba import njit

f32 = np.float32
LN2_HI = 6.93147180369123816490e-01       # ln 2 in 21 bits: k * LN2_HI is exact for |k| < 2^32
LN2_LO = 1.90821492927058770002e-10       # ln 2 - LN2_HI
INV_LN2 = 1.44269504088896338700e+00
WIDE = 2.0 ** -44                         # the checked neighbourhood (relative)
LIMIT = 80.0                              # |x| beyond it goes through libm


@njit(cache=True, inline="always")
def _pow2(k):
    """2^k for an integer |k| <= 1022, exactly: the double with exponent field k + 1023."""
    return np.int64((k + 1023) << 52).view(np.float64)


@njit(cache=True, inline="always")
def _exp_poly(z):
    """exp(z) for |z| <= LIMIT, relative error below 2^-49: z = k ln2 + r (Cody-Waite,
    |r| <= ln2/2), exp(r) by its Taylor series to r^13 (remainder < 2^-57), times 2^k."""
    kf = np.floor(z * INV_LN2 + 0.5)
    r = (z - kf * LN2_HI) - kf * LN2_LO
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    return p * _pow2(np.int64(kf))


@njit(cache=True, inline="always")
def _settled(v):
    """v as a float32 when every double within WIDE of v rounds to it, else NaN."""
    lo = f32(v * (1.0 - WIDE))
    hi = f32(v * (1.0 + WIDE))
    return hi if lo == hi else f32(np.nan)


# error_model="numpy": no ZeroDivisionError test on the division (1 + e > 0), a branch that
# would keep the loops scalar; "contract": the polynomial's multiply-adds fused (only more
# accurate; the libm fallbacks hold no multiply-add, so they round exactly as the C does)
@njit(cache=True, error_model="numpy", fastmath={"contract"})
def logistic_row(src, dst):
    """dst[i] = (float)(1./(1. + exp(-(double)src[i]))), Darknet's logistic_activate."""
    n = src.size
    bad = 0
    for i in range(n):
        z = -np.float64(src[i])
        inside = (z >= -LIMIT) & (z <= LIMIT)          # False for NaN (no branches: vectorises)
        e = _exp_poly(z if inside else 0.0)
        y = _settled(1.0 / (1.0 + e))
        bad += 1 - np.int64(inside & np.isfinite(y))
        dst[i] = y
    if bad:
        for i in range(n):
            dst[i] = f32(1.0 / (1.0 + math.exp(-np.float64(src[i]))))


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def logistic_f_row(src, dst):
    """dst[i] = 1.f / (1.f + expf(-src[i])), AlexeyAB's logistic_activate, expf being exp
    rounded to float."""
    n = src.size
    one = f32(1.0)
    bad = 0
    for i in range(n):
        z = -np.float64(src[i])
        inside = (z >= -LIMIT) & (z <= LIMIT)
        e = _settled(_exp_poly(z if inside else 0.0))
        bad += 1 - np.int64(inside & np.isfinite(e))
        dst[i] = one / (one + e)
    if bad:
        for i in range(n):
            dst[i] = one / (one + f32(math.exp(-np.float64(src[i]))))
