"""Winograd F(4x4, 3x3) for a [convolutional] layer (kernels/winograd.py): its forward
(input transform, 36 GEMMs, output transform; the layer then applies its biases or batch norm
and activation as on the exact path) and, in training, its input gradient (the same
convolution of the delta with the rotated, transposed filters); the weight gradient stays
im2col + GEMM.

Darknet has no such path: the results differ from im2col + GEMM by rounding (within ~1e-4 of
the output's scale). It is the default, for inference and training; the exact path stays
under compat= (darknet-cpu), in `compare`, and when asked for (load_network(..., exact=True),
`--exact`, DARKNUMBA_EXACT=1).

The transformed filters (36 x n x c, four times the weights; in training also the rotated
ones) are made at the first forward (backward) that needs them and kept; whatever changes the
weights in place calls `weights_changed()` on the layer or the network (update, load_weights,
random_init and a train-mode forward do).

The transforms run on numba's number of threads as Python threads calling GIL-free serial
kernels over ranges of channels (filters), not as numba prange kernels, whose parfor passes
cost 1.5-3 s more of first-run compile each; the 36 GEMMs of a layer too when they are large,
each thread running BLAS single-threaded, else in one stacked matmul (winograd_gemms).
"""
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from ..kernels.winograd import G, tiles_of, winograd_input_cpu, winograd_output_cpu
from ..thread_policy import blas_single_threaded, blas_thread_counts
from .base import scratch_of

# U[a * 6 + b] = sum over i, j of G[a, i] G[b, j] g[i, j]: the filter transform G g G^T of a
# 3x3 filter g (row-major, 9 values) as one 36 x 9 matrix
G_KRON = np.kron(G, G)

# output tiles per image (4x4 pixels each) from which Winograd beats im2col + GEMM, measured here
# on yolov3-tiny's, yolov4-tiny's and yolov3's layers: from 26x26 outputs on (7x7 tiles) it
# takes 1.3-2.2x less CPU time per layer; at 13x13 (4x4 tiles, the output padded to 16x16) and
# 19x19 its 36 thin GEMMs over filters four times the size of the weights do not beat the one
# GEMM
WINOGRAD_MIN_TILES = 49
# input channels from which it pays: over RGB (c = 3) the transforms cost more than the GEMMs
# save (2x slower than im2col + GEMM). Thin layers the direct kernel takes (c*9 <= DIRECT_MAX_K,
# convolutional.py) stay with it: at c = 16 it is as fast in CPU time and faster with 2 threads
WINOGRAD_MIN_C = 16
# multiply-adds (as BFLOPs, Darknet's count) from which it pays. Measured per layer in a
# network's sequence (idle machine, medians of 30 forwards, Winograd / exact time): 0.8-1.2
# BFLOPs 0.58-0.96 (yolov4-tiny layers 2, 10, 18, 35; yolov3-tiny 21), 3.4 BFLOPs 0.54-0.64
# (yolov3 at 608), but 0.2-0.4 BFLOPs 0.86-1.42 (yolov3-tiny 4, 6, 8: 1.14-1.42; yolov4-tiny's
# 26x26 and 52x52 ones with 64-128 channels: 0.99-1.27): the transforms' sweeps over the input
# and output outweigh the multiply-adds saved
WINOGRAD_MIN_BFLOPS = 0.6
# n * c * tiles of a layer's GEMMs from which winograd_gemms deals them out to threads (below
# it OpenBLAS runs each one on one thread anyway)
SPLIT_GEMMS_FROM = 1 << 21
# ranges of channels, filters or GEMMs per thread in on_threads
TASKS_PER_THREAD = 4


def winograd_eligible(l) -> bool:
    """A 3x3 stride-1 convolution (no dilation, no groups, weights of its own) large enough
    to pay (WINOGRAD_MIN_TILES, WINOGRAD_MIN_C, WINOGRAD_MIN_BFLOPS)."""
    if l.size != 3 or l.stride_x != 1 or l.stride_y != 1 or l.ext or l.groups != 1 \
            or l.share_layer is not None or l.c < WINOGRAD_MIN_C \
            or l.bflops < WINOGRAD_MIN_BFLOPS:
        return False
    th, tw = tiles_of(l.out_h, l.out_w)
    return th * tw >= WINOGRAD_MIN_TILES


def use_winograd(l, net) -> bool:
    """Winograd for this layer's forward and, in training, its input gradient: not exact, not
    under a compat mode, eligible."""
    return (not getattr(net, "exact", False) and l.quirks.compat is None
            and winograd_eligible(l))


def transformed_weights(l) -> np.ndarray:
    """U = G g G^T for every filter and channel (36 x n x c), in float64 rounded once to
    float32 (one BLAS GEMM over all filters: no kernel to compile for a transform made once per
    layer), made once and kept on the layer."""
    U = getattr(l, "winograd_weights", None)
    if U is None:
        g = l.weights[:l.n * l.c * 9].reshape(l.n * l.c, 9).astype(np.float64)
        U = (G_KRON @ g.T).astype(np.float32).reshape(36, l.n, l.c)
        l.winograd_weights = U
    return U


def transformed_flipped_weights(l) -> np.ndarray:
    """The filters of the input gradient's convolution (each 3x3 filter rotated by 180 degrees,
    input and output channels swapped), transformed as in transformed_weights: 36 x c x n."""
    U = getattr(l, "winograd_weights_flipped", None)
    if U is None:
        # rot180 of a row-major 3x3 filter is its nine values reversed
        g = l.weights[:l.n * l.c * 9].reshape(l.n * l.c, 9)[:, ::-1].astype(np.float64)
        U = np.ascontiguousarray(
            (G_KRON @ g.T).astype(np.float32).reshape(36, l.n, l.c).transpose(0, 2, 1))
        l.winograd_weights_flipped = U
    return U


def forward_winograd(l, net):
    """l.output = conv(net.input) through F(4x4, 3x3), before the biases or batch norm."""
    _winograd_conv(net, net.input, l.batch, l.c, l.h, l.w, l.pad, transformed_weights(l),
                   l.output, l.out_h, l.out_w, accumulate=False, per_image=not net.train)


def backward_input_winograd(l, net):
    """net.delta += the input gradient of l: l.delta convolved with the rotated, transposed
    filters (transformed_flipped_weights) at padding 2 - pad, through F(4x4, 3x3). Darknet
    computes it as W^T @ delta folded back with col2im: the same sums in another order."""
    _winograd_conv(net, l.delta, l.batch, l.n, l.out_h, l.out_w, 2 - l.pad,
                   transformed_flipped_weights(l), net.delta, l.h, l.w, accumulate=True,
                   per_image=False)


def _winograd_conv(net, x, batch, c, h, w, pad, U, out, out_h, out_w, accumulate, per_image):
    """out (+)= the 3x3 convolution of x (batch x c x h x w) at padding `pad` with the filters
    transformed into U (36 x n x c): input transform, the 36 GEMMs, output transform. With
    `per_image` (inference) one image's tiles at a time: its outputs must not depend on its
    slot in the batch (BATCH_GEMM_MAX_N in convolutional.py)."""
    n = U.shape[1]
    th, tw = tiles_of(out_h, out_w)
    tiles = batch * th * tw
    scratch = scratch_of(net)
    V = scratch("winograd_V", 36 * c * tiles).reshape(36, c, tiles)
    M = scratch("winograd_M", 36 * n * tiles).reshape(36, n, tiles)
    on_threads(lambda c0, c1: winograd_input_cpu(x, batch, c, h, w, pad, th, tw, V, c0, c1), c)
    if per_image:
        per = th * tw
        for b in range(batch):
            winograd_gemms(U, V[:, :, b * per:(b + 1) * per], M[:, :, b * per:(b + 1) * per])
    else:
        winograd_gemms(U, V, M)
    on_threads(lambda f0, f1: winograd_output_cpu(M, batch, n, out_h, out_w, th, tw, out, f0,
                                                  f1, accumulate), n)


def on_threads(work, n):
    """work(i0, i1) over [0, n) in TASKS_PER_THREAD ranges per thread, taken by this thread and
    the helper threads from one shared iterator (a helper that does not get a core leaves its
    ranges to the others); the ranges are disjoint, so each range's writes are its own."""
    helpers = _helpers()
    if helpers is None or n < 2:
        work(0, n)
        return
    pool, n_helpers = helpers
    step = -(-n // min(n, (n_helpers + 1) * TASKS_PER_THREAD))
    tasks = iter(range(0, n, step))

    def run():
        for i in tasks:
            work(i, min(n, i + step))
    started = [pool.submit(run) for _ in range(n_helpers)]
    run()
    for f in started:
        if not f.cancel():              # a helper that never started has nothing to finish
            f.result()


def winograd_gemms(U, V, M):
    """M[k] = U[k] @ V[k] for the 36 k. numpy's stacked matmul makes 36 BLAS calls, each of
    which wakes OpenBLAS's worker threads and waits for them: cheap on idle cores, but when
    other processes compete for the cores every one of those waits is long (measured on 2
    shared cores, medians per layer: 1.6-70x the time of what follows). Large GEMMs are
    instead dealt out, GEMMS_PER_TASK at a time, on_threads, each thread running BLAS
    single-threaded (blas_single_threaded): one wake-up per layer. Each product is
    the same BLAS routine on the same operands either way."""
    if (not blas_thread_counts() or _helpers() is None
            or U.shape[1] * U.shape[2] * V.shape[2] < SPLIT_GEMMS_FROM):
        np.matmul(U, V, out=M)
        return
    with blas_single_threaded():
        on_threads(lambda k0, k1: np.matmul(U[k0:k1], V[k0:k1], out=M[k0:k1]), U.shape[0])


def _helpers():
    """(pool, its size): numba's thread count - 1 helper threads, made at the first call;
    None with one thread."""
    global _HELPERS
    if _HELPERS is None:
        n = numba.get_num_threads() - 1
        _HELPERS = (ThreadPoolExecutor(n, thread_name_prefix="darknumba-winograd"), n) \
            if n > 0 else ()
    return _HELPERS or None


_HELPERS = None
