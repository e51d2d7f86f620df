"""The XNOR-net kernels (kernels/xnor.py) against numpy (tests/naive/xnor.py) and a float GEMM on
+-1 values: popcount, binarisation, packing, the XNOR-popcount GEMM with its activation and its
bit-by-bit twin, on odd shapes (c not a multiple of 64, K not a multiple of 64, size 1 and 3,
stride 1 and 2, pad 0, 1 and 2, maps past a packing and a GEMM block); the serial and parallel
twins of the three bit kernels give the same bits."""
import numpy as np
import pytest
from naive.im2col import im2col_cpu, out_size
from naive.xnor import binarize_weights, signs, xnor_conv_bits
from numba import njit

from darknumba.kernels import xnor
from darknumba.kernels.activations import LEAKY, LINEAR, LOGISTIC, MISH, RELU, activate

RNG = np.random.default_rng(32)


def _words(n):
    return RNG.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)


def test_popcount_intrinsic_and_bit_trick_count_the_bits():
    words = np.concatenate([_words(200), np.array([0, 1, 2**63, 2**64 - 1], dtype=np.uint64)])
    expected = [bin(int(v)).count("1") for v in words]
    count = njit(lambda v: xnor.popcount64(v))          # an intrinsic: called from compiled code
    assert [int(count(v)) for v in words] == expected
    assert [int(xnor.popcount64_swar(v)) for v in words] == expected


def test_binarize_weights_and_inputs():
    n, size = 5, 27
    w = RNG.normal(0, 1, n * size).astype(np.float32)
    w[3] = 0.0
    w[4] = -0.0
    out = np.empty_like(w)
    xnor.binarize_weights_cpu(w, n, size, out)
    np.testing.assert_array_equal(out, binarize_weights(w, n))
    mean = np.empty(n, np.float32)
    xnor.mean_arr_cpu(out, n, size, mean)
    np.testing.assert_allclose(mean, np.abs(w.reshape(n, size)).mean(axis=1), rtol=1e-6)
    assert out[3] == -mean[0] and out[4] == -mean[0]          # 0 is not > 0
    x = np.array([1.5, 0.0, -0.0, -2.0, np.nan, 1e-30], np.float32)
    b = np.empty_like(x)
    xnor.binarize_cpu(x, x.size, b)
    np.testing.assert_array_equal(b, [1, -1, -1, -1, -1, 1])


def _packed_conv(x, weights, c, h, w, n, size, stride, pad, gemm=xnor.xnor_gemm_cpu, act=LINEAR,
                 twin="pick"):
    """The bit way's three kernels on one image (`twin`: "serial", "parallel", or the size's
    pick), every buffer filled with stale values first."""
    def k(kernel):
        return kernel if twin == "pick" or not hasattr(kernel, twin) else getattr(kernel, twin)
    nwc = xnor.words_per_pixel(c)
    L = size * size * nwc
    out_h, out_w = out_size(h, size, stride, pad), out_size(w, size, stride, pad)
    bits = np.full(n * L, 7, np.uint64)                   # stale words: must be overwritten
    xnor.pack_weights_cpu(weights, n, c, size, nwc, bits)
    packed = np.full(h * w * nwc, 5, np.uint64)
    k(xnor.pack_input_cpu)(x, c, h, w, nwc, packed)
    cols = np.full(out_h * out_w * L, 3, np.uint64)
    k(xnor.im2col_bits_cpu)(packed, h, w, nwc, size, stride, pad, out_h, out_w, cols)
    binary = np.empty_like(weights)
    xnor.binarize_weights_cpu(weights, n, c * size * size, binary)
    mean = np.empty(n, np.float32)
    xnor.mean_arr_cpu(binary, n, c * size * size, mean)
    out = np.full(n * out_h * out_w, np.nan, np.float32)
    counts = np.full(n * out_h * out_w, 9, np.uint64)        # stale counts: must be reset
    k(gemm)(n, out_h * out_w, L, c * size * size, bits, cols, mean, np.zeros(n, np.float32),
            act, counts, out)
    return out.reshape(n, out_h, out_w)


SHAPES = [  # c, h, w, n, size, stride, pad
    (3, 7, 6, 5, 3, 1, 1), (16, 9, 9, 8, 3, 1, 1), (64, 5, 5, 4, 3, 1, 1),
    (70, 6, 7, 9, 3, 2, 1), (130, 4, 5, 3, 1, 1, 0), (33, 8, 8, 6, 3, 2, 0),
    (1, 5, 5, 2, 3, 1, 2), (2, 4, 3, 3, 5, 1, 2), (65, 3, 2, 2, 3, 2, 2)]


@pytest.mark.parametrize("c,h,w,n,size,stride,pad", SHAPES)
def test_bit_convolution_equals_numpy_signs(c, h, w, n, size, stride, pad):
    """Packing, bit im2col and the popcount GEMM: the integer sums of sign products times the
    filter's mean, padding counting as -1, bit for bit; the serial twin gives the same."""
    x = RNG.normal(0, 1, c * h * w).astype(np.float32)
    x[::7] = 0.0
    weights = RNG.normal(0, 1, n * c * size * size).astype(np.float32)
    expected = xnor_conv_bits(x, weights, c, h, w, n, size, stride, pad)
    np.testing.assert_array_equal(_packed_conv(x, weights, c, h, w, n, size, stride, pad),
                                  expected)
    np.testing.assert_array_equal(
        _packed_conv(x, weights, c, h, w, n, size, stride, pad, xnor.xnor_gemm_naive_cpu),
        expected)


@pytest.mark.parametrize("c,h,w,n,size,stride,pad", SHAPES[:4])
def test_bit_convolution_equals_a_float_gemm_of_signs_inside(c, h, w, n, size, stride, pad):
    """Away from the padding, the bits compute what the float way does: im2col of the +-1
    input, GEMM with the binarised weights (a float GEMM of +-1 values times the mean)."""
    x = RNG.normal(0, 1, c * h * w).astype(np.float32)
    weights = RNG.normal(0, 1, n * c * size * size).astype(np.float32)
    bx = signs(x).astype(np.float64)
    out_h, out_w = out_size(h, size, stride, pad), out_size(w, size, stride, pad)
    col = np.zeros(c * size * size * out_h * out_w)
    im2col_cpu(bx, c, h, w, size, stride, pad, col)
    float_out = (binarize_weights(weights, n).reshape(n, -1).astype(np.float64)
                 @ col.reshape(c * size * size, -1)).reshape(n, out_h, out_w)
    bits = _packed_conv(x, weights, c, h, w, n, size, stride, pad)
    inner = (slice(None), slice(pad, out_h - pad), slice(pad, out_w - pad))
    np.testing.assert_allclose(bits[inner], float_out[inner], rtol=1e-5, atol=1e-5)
    if pad:             # at the border a padded tap counts -1 on the bit path, 0 on the float
        assert not np.allclose(bits, float_out, rtol=1e-5, atol=1e-5)


def test_popcount_gemm_on_random_words_equals_unpacked_bits():
    """The GEMM alone on random rows whose last word holds K % 64 bits, against numpy's
    unpacked bits, with each activation the GEMM's sweep applies (leaky, relu and logistic
    in their own loops, mish through the scalar dispatch) against `activate` value by value."""
    M, N, L = 7, 11, 3
    K = L * 64 - 23
    A, B = _words(M * L), _words(N * L)
    keep = np.uint64((1 << (64 - 23)) - 1)
    A.reshape(M, L)[:, -1] &= keep
    B.reshape(N, L)[:, -1] &= keep
    mean = RNG.uniform(0.1, 2, M).astype(np.float32)
    bits_a = np.unpackbits(A.view(np.uint8), bitorder="little").reshape(M, -1)[:, :K]
    bits_b = np.unpackbits(B.view(np.uint8), bitorder="little").reshape(N, -1)[:, :K]
    s = (2 * bits_a.astype(np.int64) - 1) @ (2 * bits_b.astype(np.int64) - 1).T
    shift = RNG.normal(0, 1, M).astype(np.float32)
    linear = s.astype(np.float32) * mean[:, None] + shift[:, None]
    Bt = np.ascontiguousarray(B.reshape(N, L).T).reshape(-1)      # word t of each pixel
    act_of = njit(lambda v, a: activate(v, a))
    for act in (LINEAR, LEAKY, RELU, LOGISTIC, MISH):
        expected = np.array([act_of(v, act) for v in linear.reshape(-1)], np.float32)
        for gemm in (xnor.xnor_gemm_cpu.serial, xnor.xnor_gemm_cpu.parallel,
                     xnor.xnor_gemm_naive_cpu):
            C = np.full(M * N, np.nan, np.float32)
            gemm(M, N, L, K, A, Bt, mean, shift, act, np.full(M * N, 5, np.uint64), C)
            np.testing.assert_array_equal(C, expected, err_msg=f"act {act}")


def test_packed_planes_equal_numpy_bits():
    """pack_input_cpu's layout: bit j of word (cw, p) is channel cw*64 + j of pixel p, past a
    PACK_BLOCK of pixels and with c not a multiple of 64; the stale words are overwritten."""
    c, h, w = 70, 50, 45                                  # 2250 pixels > PACK_BLOCK
    assert h * w > xnor.PACK_BLOCK
    x = RNG.normal(0, 1, c * h * w).astype(np.float32)
    x[::5] = 0.0
    x[1::11] = np.nan
    bits = np.zeros((2 * 64, h * w), np.uint8)
    bits[:c] = (x.reshape(c, h * w) > 0)
    expected = np.packbits(bits.reshape(2, 64, h * w).transpose(0, 2, 1), axis=-1,
                           bitorder="little").view(np.uint64).reshape(-1)
    for twin in ("serial", "parallel"):
        packed = np.full(2 * h * w, 5, np.uint64)
        getattr(xnor.pack_input_cpu, twin)(x, c, h, w, 2, packed)
        np.testing.assert_array_equal(packed, expected)


@pytest.mark.parametrize("c,h,w,n,size,stride,pad", [(70, 48, 45, 3, 3, 1, 1),
                                                     (9, 50, 47, 2, 3, 2, 1)])
def test_serial_and_parallel_twins_on_a_large_map(c, h, w, n, size, stride, pad):
    """Maps past PACK_BLOCK and GEMM_BLOCK pixels: both twins of the three bit kernels give
    numpy's sums, with the leaky activation in the GEMM's sweep."""
    assert h * w > xnor.PACK_BLOCK
    assert stride == 2 or out_size(h, size, stride, pad) * out_size(w, size, stride, pad) > \
        xnor.GEMM_BLOCK
    x = RNG.normal(0, 1, c * h * w).astype(np.float32)
    weights = RNG.normal(0, 1, n * c * size * size).astype(np.float32)
    linear = xnor_conv_bits(x, weights, c, h, w, n, size, stride, pad)
    expected = np.where(linear > 0, linear, (0.1 * linear.astype(np.float64)).astype(np.float32))
    for twin in ("serial", "parallel"):
        np.testing.assert_array_equal(
            _packed_conv(x, weights, c, h, w, n, size, stride, pad, act=LEAKY, twin=twin),
            expected)


def test_the_bit_kernels_pick_their_twins_by_their_own_thresholds():
    """The packing and the columns run serial below PACK_SERIAL_BELOW elements, the GEMM below
    twins.SERIAL_BELOW popcounts."""
    from darknumba.kernels.twins import SERIAL_BELOW
    for kernel in (xnor.pack_input_cpu, xnor.im2col_bits_cpu):
        assert kernel.pick(xnor.PACK_SERIAL_BELOW - 1) is kernel.serial
        assert kernel.pick(xnor.PACK_SERIAL_BELOW) is kernel.parallel
    assert xnor.xnor_gemm_cpu.pick(SERIAL_BELOW - 1) is xnor.xnor_gemm_cpu.serial
    assert xnor.xnor_gemm_cpu.pick(SERIAL_BELOW) is xnor.xnor_gemm_cpu.parallel
