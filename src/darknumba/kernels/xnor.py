"""XNOR-net convolutions (Darknet's `binarize_weights`, `binarize_cpu` in convolutional_layer.c;
AlexeyAB's bit-packed GEMM `gemm_nn_custom_bin_mean_transposed` in gemm.c).

A binary convolution multiplies signs: weight w counts as +mean(|w| of its filter) when w > 0,
else -mean; input x as +1 when x > 0, else -1. Two ways to compute it:

* float: binarize_weights_cpu + binarize_cpu, then the layer's ordinary im2col + GEMM. Padding
  is im2col's 0, which adds nothing. What both Darknets compute in training, pjreddie's always,
  AlexeyAB's at inference until calculate_binary_weights packed the layer's bits.
* bits: the signs packed 64 to a uint64 word, one XNOR and one popcount per 64 products.
  AlexeyAB's inference after calculate_binary_weights. A padded pixel is bit 0, i.e. -1, not 0:
  at the borders the two ways differ (AlexeyAB's own quirk, kept: see layers/xnor.py).

Bit layout (ours; any order of the K products gives the same integer sums): the input is
packed into ceil(c / 64) planes of h*w words, bit j of word (cw, p) being channel cw*64 + j of
pixel p (pack_input_cpu); word t = (ky, kx, cw) of every output pixel's taps, pixels side by
side, is row t of the columns (im2col_bits_cpu); a weight row is its filter's words in the same
order t (pack_weights_cpu). The channels past c in a tap's last word are 0 in both, so they
never differ: with diff = popcount(a ^ b) summed over a filter's words and a pixel's,

    output = (K - 2*diff) * mean + bias (K = size*size*c; AlexeyAB's (2*count - K) * mean_val
                                         with count = K - diff, the same integer)

then the activation, in the same sweep (xnor_gemm_cpu). The three kernels of the bit way are
twins (kernels/twins.py): the GEMM serial below SERIAL_BELOW popcounts (the layer asks it
with .pick), the packing and the columns below PACK_SERIAL_BELOW elements.

     M: filters (n)      N: output pixels (out_h*out_w)      L: words a filter (size*size*nwc)
"""
import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

from .activations import LEAKY, activate, activate_row
from .twins import twins

WORD = 64
# pixels a packing step keeps in L1 (its destination words), and a GEMM step (its popcounts)
PACK_BLOCK = 2048
GEMM_BLOCK = 1024
# Values (packing) or words (columns) below which those run serial: both cost ~0.15 ns an
# element serial (173k values packed in 27 us, 2-core EPYC), so below 2**18 a second thread
# saves at most ~20 us on an idle machine, while on a busy one each parallel region start cost
# 80-170 us here (2026-12-03, load 2-3): the layer's one region is then its GEMM's
PACK_SERIAL_BELOW = 1 << 18


@intrinsic
def popcount64(typingctx, x):
    """The number of 1 bits of a uint64 (LLVM's ctpop: one POPCNT instruction on x86-64)."""
    if x != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return types.uint64(types.uint64), codegen


@njit(cache=True)
def popcount64_swar(x):
    """popcount by the SWAR bit trick (Hacker's Delight 5-1): the check on popcount64."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


def words_per_pixel(c: int) -> int:
    """uint64 words that hold one pixel's c channel signs."""
    return (c + WORD - 1) // WORD


# -- the float way ------------------------------------------------------------------------------
@njit(parallel=True, cache=True)
def binarize_weights_cpu(weights, n, size, binary):
    """binarize_weights: per filter f of `size` weights, mean = sum |w| / size (summed in order,
    float32), binary = +mean where w > 0, else -mean."""
    for f in prange(n):
        mean = np.float32(0.0)
        for i in range(size):
            mean += abs(weights[f * size + i])
        mean = mean / np.float32(size)
        for i in range(size):
            binary[f * size + i] = mean if weights[f * size + i] > 0 else -mean


@njit(parallel=True, cache=True)
def binarize_cpu(x, n, binary):
    """binarize_cpu: +1 where x > 0, else -1 (NaN too: it is not > 0)."""
    for i in prange(n):
        binary[i] = np.float32(1.0) if x[i] > 0 else np.float32(-1.0)


@njit(cache=True)
def mean_arr_cpu(binary, n, size, mean_arr):
    """get_mean_array: each filter's |binarized weight|, i.e. its mean |w|."""
    for f in range(n):
        mean_arr[f] = abs(binary[f * size])


# -- the bit way --------------------------------------------------------------------------------
@njit(parallel=True, cache=True)
def pack_weights_cpu(weights, n, c, size, nwc, bits):
    """Filter f's signs (w > 0: 1) as rows of L = size*size*nwc words, tap (ky, kx) then
    channel word: bit j of word (f, ky, kx, cw) is weight (f, cw*64 + j, ky, kx); channels
    past c are 0. weights: n x c x size x size float32; bits: n*L uint64."""
    ss = size * size
    for f in prange(n):
        for t in range(ss):
            for cw in range(nwc):
                v = np.uint64(0)
                for j in range(min(WORD, c - cw * WORD)):
                    if weights[(f * c + cw * WORD + j) * ss + t] > 0:
                        v |= np.uint64(1) << np.uint64(j)
                bits[(f * ss + t) * nwc + cw] = v


@twins(size=0, below=PACK_SERIAL_BELOW)
def pack_input_cpu(im, c, h, w, nwc, packed):
    """One image's signs (x > 0: 1), a plane of h*w words for each 64 channels: bit j of word
    (cw, p) is channel cw*64 + j of pixel p. im: c x h x w float32; packed: nwc*h*w uint64
    (written whole). Each step ORs one bit into a block of PACK_BLOCK words, reading a channel's
    row contiguously (LLVM vectorises it: compare, select, or); parallel over (plane, block)."""
    hw = h * w
    nblk = (hw + PACK_BLOCK - 1) // PACK_BLOCK
    for q in prange(nwc * nblk):
        cw = q // nblk
        p0 = (q % nblk) * PACK_BLOCK
        nb = min(PACK_BLOCK, hw - p0)
        dst = packed[cw * hw + p0:cw * hw + p0 + nb]
        dst[:] = 0
        for j in range(min(WORD, c - cw * WORD)):
            src = im[(cw * WORD + j) * hw + p0:(cw * WORD + j) * hw + p0 + nb]
            bit = np.uint64(1) << np.uint64(j)
            for p in range(nb):
                dst[p] |= bit if src[p] > 0 else np.uint64(0)


@twins(size=9, below=PACK_SERIAL_BELOW)
def im2col_bits_cpu(packed, h, w, nwc, size, stride, pad, out_h, out_w, cols):
    """The columns of packed signs, L = size*size*nwc rows of N = out_h*out_w words: word
    t = (ky, kx, cw) of pixel p = (oy, ox) is word (cw, iy*w + ix) of the packed input, (iy, ix)
    = (oy*stride - pad + ky, ox*stride - pad + kx), or 0 (all -1) for a tap in the padding.
    cols: L*N uint64 (written whole); parallel over the rows t, each written along its pixels."""
    N = out_h * out_w
    hw = h * w
    for t in prange(size * size * nwc):
        cw = t % nwc
        kx = (t // nwc) % size
        ky = t // (nwc * size)
        # the output columns whose tap kx lands inside the image: lo <= ox < hi
        lo = min(out_w, max(0, (pad - kx + stride - 1) // stride))
        hi = max(lo, min(out_w, (w - 1 + pad - kx) // stride + 1))
        for oy in range(out_h):
            row = cols[t * N + oy * out_w:t * N + (oy + 1) * out_w]
            iy = oy * stride - pad + ky
            if iy < 0 or iy >= h:
                row[:] = 0
                continue
            row[:lo] = 0
            row[hi:] = 0
            if hi > lo:
                src = packed[cw * hw + iy * w + lo * stride - pad + kx:]
                for ox in range(hi - lo):
                    row[lo + ox] = src[ox * stride]


@twins(size=10)
def xnor_gemm_cpu(M, N, L, K, A, B, alpha, beta, act, counts, C):
    """C (M x N) = act((K - 2 * popcount(A_i ^ B_j)) * alpha[i] + beta[i]) for filter rows A
    (M x L words) and pixel columns B (L x N words: word t of every pixel side by side):
    AlexeyAB's gemm_nn_custom_bin_mean_transposed (alpha: the filter's mean |w|), its add_bias
    (beta; batch norm folded into both where the layer has it) and activate_array (`act`, an
    elementwise activation id, LINEAR for none), in one sweep. Parallel over filters, each
    owning its row of C and of `counts` (M x N uint64 the caller owns, where the popcounts are
    summed), a block of GEMM_BLOCK pixels at a time (its counts stay in L1 over the L words).

    The pixel loop runs over contiguous words, which LLVM vectorises (AVX2's byte-table
    popcount, 4 words a step), four rows of words a pass (one load and store of the counts
    for four words: 10 % faster than a row a pass). Measured no faster on AVX2: scalar
    POPCNT, one a word (30-40 % slower); a Harley-Seal carry-save sum over 8 rows, vectorised
    (no faster at L = 18 and 36 words, 10 % faster at 72). The twins are chosen by the
    caller: xnor_gemm_cpu.pick(M * N * L), the popcounts' count."""
    for i in prange(M):
        scale, shift = alpha[i], beta[i]
        w = A[i * L:(i + 1) * L]
        for jb in range(0, N, GEMM_BLOCK):
            nb = min(GEMM_BLOCK, N - jb)
            acc = counts[i * N + jb:i * N + jb + nb]
            acc[:] = 0
            t = 0
            while t + 4 <= L:
                a0, a1, a2, a3 = w[t], w[t + 1], w[t + 2], w[t + 3]
                r0 = B[t * N + jb:t * N + jb + nb]
                r1 = B[(t + 1) * N + jb:(t + 1) * N + jb + nb]
                r2 = B[(t + 2) * N + jb:(t + 2) * N + jb + nb]
                r3 = B[(t + 3) * N + jb:(t + 3) * N + jb + nb]
                for j in range(nb):
                    acc[j] += ((popcount64(a0 ^ r0[j]) + popcount64(a1 ^ r1[j]))
                               + (popcount64(a2 ^ r2[j]) + popcount64(a3 ^ r3[j])))
                t += 4
            while t < L:
                a = w[t]
                row = B[t * N + jb:t * N + jb + nb]
                for j in range(nb):
                    acc[j] += popcount64(a ^ row[j])
                t += 1
            # the sums through int32 (|K| < 2**31): AVX2 converts those to float32 4 at a time,
            # int64 one by one; the same float32 either way
            out = C[i * N + jb:i * N + jb + nb]
            if act == LEAKY:            # the common one in the sweep itself, as activate_row's
                for j in range(nb):
                    v = np.float32(np.int32(K - 2 * np.int64(acc[j]))) * scale + shift
                    out[j] = v if v > 0 else np.float32(0.1 * np.float64(v))
            else:
                for j in range(nb):
                    out[j] = np.float32(np.int32(K - 2 * np.int64(acc[j]))) * scale + shift
                activate_row(out, act)


@njit(cache=True)
def xnor_gemm_naive_cpu(M, N, L, K, A, B, alpha, beta, act, counts, C):
    """The slow twin of xnor_gemm_cpu, its spec: bit by bit, +1 for equal bits, -1 for
    different ones, the 0 bits past a row's last channel counted as equal and taken out, then
    the activation value by value (`counts` unused: the fast kernel's signature)."""
    for i in range(M):
        for j in range(N):
            s = 0
            for t in range(L * WORD):
                a = (A[i * L + t // WORD] >> np.uint64(t % WORD)) & np.uint64(1)
                b = (B[(t // WORD) * N + j] >> np.uint64(t % WORD)) & np.uint64(1)
                s += 1 if a == b else -1
            s -= L * WORD - K
            C[i * N + j] = activate(np.float32(s) * alpha[i] + beta[i], act)
