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
packed channels-innermost, ceil(c / 64) words a pixel (pack_input_cpu); word t = (ky, kx, cw)
of every output pixel's taps, pixels side by side, is row t of the columns (im2col_bits_cpu);
a weight row is its filter's words in the same order t (pack_weights_cpu). The channels past
c in a tap's last word are 0 in both, so they never differ: with diff = popcount(a ^ b) summed
over a filter's words and a pixel's,

    output = (K - 2*diff) * mean + bias (K = size*size*c; AlexeyAB's (2*count - K) * mean_val
                                         with count = K - diff, the same integer)

     M: filters (n)      N: output pixels (out_h*out_w)      L: words a filter (size*size*nwc)
"""
import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

WORD = 64


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


@njit(parallel=True, cache=True)
def pack_input_cpu(im, c, h, w, nwc, packed):
    """One image's signs (x > 0: 1), channels innermost: bit j of word (p, cw) is channel
    cw*64 + j of pixel p. im: c x h x w float32; packed: h*w*nwc uint64 (written whole).
    Parallel over pixels, each word built in a register (faster here than OR-ing bits into
    memory along the rows, though that reads the image contiguously)."""
    hw = h * w
    for p in prange(hw):
        for cw in range(nwc):
            v = np.uint64(0)
            base = cw * WORD
            for j in range(min(WORD, c - base)):
                if im[(base + j) * hw + p] > 0:
                    v |= np.uint64(1) << np.uint64(j)
            packed[p * nwc + cw] = v


@njit(parallel=True, cache=True)
def im2col_bits_cpu(packed, h, w, nwc, size, stride, pad, out_h, out_w, cols):
    """The columns of packed signs, L = size*size*nwc rows of N = out_h*out_w words: word
    t = (ky, kx, cw) of pixel p = (oy, ox) is word cw of input pixel (oy*stride - pad + ky,
    ox*stride - pad + kx), or 0 (all -1) for a tap in the padding. cols: L*N uint64 (written
    whole); parallel over the rows t, each written along its pixels."""
    N = out_h * out_w
    for t in prange(size * size * nwc):
        cw = t % nwc
        kx = (t // nwc) % size
        ky = t // (nwc * size)
        dst = t * N
        for oy in range(out_h):
            iy = oy * stride - pad + ky
            for ox in range(out_w):
                ix = ox * stride - pad + kx
                v = np.uint64(0)
                if 0 <= iy < h and 0 <= ix < w:
                    v = packed[(iy * w + ix) * nwc + cw]
                cols[dst + oy * out_w + ox] = v


@njit(parallel=True, cache=True)
def xnor_gemm_cpu(M, N, L, K, A, B, alpha, beta, counts, C):
    """C (M x N) = (K - 2 * popcount(A_i ^ B_j)) * alpha[i] + beta[i] for filter rows A (M x L
    words) and pixel columns B (L x N words: word t of every pixel side by side): AlexeyAB's
    gemm_nn_custom_bin_mean_transposed (alpha: the filter's mean |w|) and its add_bias (beta),
    batch norm folded into both where the layer has it. Parallel over filters, each owning its
    row of C and of `counts` (M x N uint64 the caller owns, where the popcounts are summed).
    The pixel loop runs over contiguous words, which LLVM vectorises (AVX2's byte-table
    popcount, 4 words a step): 1.5 ms for 256 filters x 2304 taps x 676 pixels here against
    2.2 ms with one POPCNT a word and four pixels sharing each filter word."""
    for i in prange(M):
        acc = counts[i * N:(i + 1) * N]
        acc[:] = 0
        for t in range(L):
            a = A[i * L + t]
            row = B[t * N:(t + 1) * N]
            for j in range(N):
                acc[j] += popcount64(a ^ row[j])
        scale, shift = alpha[i], beta[i]
        for j in range(N):
            C[i * N + j] = np.float32(K - 2 * np.int64(acc[j])) * scale + shift


@njit(cache=True)
def xnor_gemm_naive_cpu(M, N, L, K, A, B, alpha, beta, counts, C):
    """The serial twin of xnor_gemm_cpu, its spec: bit by bit, +1 for equal bits, -1 for
    different ones, the 0 bits past a row's last channel counted as equal and taken out
    (`counts` unused: the fast kernel's signature)."""
    for i in range(M):
        for j in range(N):
            s = 0
            for t in range(L * WORD):
                a = (A[i * L + t // WORD] >> np.uint64(t % WORD)) & np.uint64(1)
                b = (B[(t // WORD) * N + j] >> np.uint64(t % WORD)) & np.uint64(1)
                s += 1 if a == b else -1
            s -= L * WORD - K
            C[i * N + j] = np.float32(s) * alpha[i] + beta[i]
