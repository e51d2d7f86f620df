"""Winograd F(4x4, 3x3) for a [convolutional] layer (kernels/winograd.py): its forward
(input transform, 36 GEMMs, output transform; the layer then applies its biases or batch norm
and activation as on the exact path) and, in training, its input gradient (the same
convolution of the delta with the rotated, transposed filters); the weight gradient stays
im2col + GEMM.

Darknet has no such path: the results differ from im2col + GEMM by rounding (within ~1e-4 of
the output's scale). It is the default, for inference and training, on the layers where it
pays (the thresholds: conv_plan.py); the exact path stays
under compat= (darknet-cpu), in `compare`, and when asked for (load_network(..., exact=True),
`--exact`, DARKNUMBA_EXACT=1).

At inference the transformed filters (36 x c x n, four times the weights) of the layers the
network keeps within its budget (conv_plan.winograd_cached: winograd_keep) are made at the
first forward that needs them and kept; whatever changes the weights in place calls
`weights_changed()` on the layer or the network (update, load_weights, random_init and a
train-mode forward do); the layers outside the budget take im2col + GEMM at inference
(conv_plan.plan). In training every layer's (and the rotated ones of the input gradient) are
made at each pass into the network's scratch arena, the shared workspace: the same transform,
the same values, held one layer at a time.

The transforms run on numba's number of threads as Python threads calling GIL-free serial
kernels over ranges of tile rows, not as numba prange kernels, whose parfor passes
cost 1.5-3 s more of first-run compile each; the 36 GEMMs of a layer too when they are large,
each thread running BLAS single-threaded, else in one stacked matmul (winograd_gemms). On
large maps with few filters (pipelined), at inference and in training (the forward and the
input gradient), the three phases instead run chunk by chunk of tile rows, each chunk on one
thread from start to end (_pipelined): one hand-over to the helper threads per layer.
"""
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

import numba
import numpy as np

from ..kernels.winograd import (G, G2, tiles_of, winograd2_input_cpu, winograd2_output_cpu,
                                winograd_filters_cpu, winograd_input_cpu, winograd_output_cpu)
from ..blas_threads import blas_single_threaded, blas_thread_counts
from .base import scratch_of
from .conv_plan import pipelined, winograd_tile

# U[a * 6 + b] = sum over i, j of G[a, i] G[b, j] g[i, j]: the filter transform G g G^T of a
# 3x3 filter g (row-major, 9 values) as one 36 x 9 matrix
G_KRON = np.kron(G, G)
# F(2x2, 3x3)'s: 16 x 9
G2_KRON = np.kron(G2, G2)
# the transforms of F(m x m, 3x3) by output tile size m: (filter transform, input kernel,
# output kernel)
VARIANTS = {4: (G_KRON, winograd_input_cpu, winograd_output_cpu),
            2: (G2_KRON, winograd2_input_cpu, winograd2_output_cpu)}

# n * c * tiles of a layer's GEMMs from which winograd_gemms deals them out to threads: on
# yolov4-tiny's 26x26 and 52x52 layers (0.7-0.8 M) one OpenBLAS call per GEMM over two threads
# took 1.2-1.3x the time of the GEMMs dealt out, each on one thread
SPLIT_GEMMS_FROM = 1 << 16
# ranges of tile rows or GEMMs per thread in on_threads
TASKS_PER_THREAD = 4
# each image's tile rows are cut into this many chunks in a pipelined pass (_pipelined;
# conv_plan.pipelined says which; fewer when it has fewer rows)
PIPELINE_CHUNKS = 8


def transformed_weights(l, m=4, net=None) -> np.ndarray:
    """U = G g G^T for every channel and filter ((m + 2)^2 x c x n; G of F(m x m, 3x3)), made
    once and kept on the layer (transform_filters). In training (`net` training) it is made
    at each forward into the network's scratch instead (at inference a layer the network
    does not keep them for, winograd_keep, takes im2col: conv_plan.plan): the weights change
    every update,
    and kept on every layer, with the input gradient's, they held 8x the Winograd layers'
    weights (yolov3's training peak 1.3 GB above the exact path's); at inference kept on
    every layer, 4x (yolov4's resident memory 1742 MiB at 608 instead of 1040 exact)."""
    if net is not None and net.train:
        return transform_filters(l, VARIANTS[m][0], out=_scratch_U(l, net, (m + 2) ** 2))
    U = getattr(l, "winograd_weights", None)
    if U is None or U.shape[0] != (m + 2) ** 2:
        U = transform_filters(l, VARIANTS[m][0])
        l.winograd_weights = U
    return U


def transformed_flipped_weights(l, net) -> np.ndarray:
    """The filters of the input gradient's convolution (each 3x3 filter rotated by 180 degrees,
    input and output channels swapped), transformed as in transformed_weights: 36 x n x c,
    made at each backward pass into the network's scratch (the same buffer as the training
    forward's: a backward pass needs no forward filters)."""
    return transform_filters(l, G_KRON, flip=True, out=_scratch_U(l, net, 36))


def _scratch_U(l, net, k2):
    """U at the start of the network's scratch arena (Scratch.parts), where _winograd_conv
    finds it and puts V and M after it."""
    return scratch_of(net).parts(k2 * l.c * l.n)[0]


def _grow_arena(net, l, m, c, n, out_h, out_w):
    """The scratch arena grown at once to U, V and M of one Winograd pass (c input and n
    output channels, out_h x out_w outputs): U written first is not left in a smaller one."""
    th, tw = tiles_of(out_h, out_w, m)
    k2, tiles = (m + 2) ** 2, l.batch * th * tw
    scratch_of(net).parts(k2 * c * n, k2 * tiles * c, k2 * tiles * n)


def transform_filters(l, kron, flip=False, out=None) -> np.ndarray:
    """kron(G, G) applied to every 3x3 filter of layer l: U (kron's rows x c x n), or flipped
    (the filters rotated by 180 degrees, the gradient's from delta channel f to input channel ic
    being rot180(W[f, ic])) kron's rows x n x c; winograd_filters_cpu on_threads over U's rows,
    into `out` (as many floats) when given. A warm start makes them all (yolov3-tiny's seven
    took 0.20-0.28 s as float64 BLAS GEMMs, ~0.05 s so), and training every step."""
    n, c = l.n, l.c
    w = np.ascontiguousarray(l.weights[:n * c * 9], np.float32)
    if w.size != n * c * 9:
        raise ValueError(f"{n} filters of {c} x 3 x 3 need {n * c * 9} weights, "
                         f"the layer has {w.size}")
    shape = (kron.shape[0], n if flip else c, c if flip else n)
    U = np.empty(shape, np.float32) if out is None else out.reshape(shape)
    on_threads(lambda o0, o1: winograd_filters_cpu(w, c, kron, flip, U, o0, o1), U.shape[1])
    return U


def forward_winograd(l, net):
    """l.output = conv(net.input) through F(4x4, 3x3) (at inference on small maps F(2x2, 3x3),
    winograd_tile), before the biases or batch norm."""
    m = winograd_tile(l, net.train)
    if net.train:                       # the filters made into the arena: grow it first
        _grow_arena(net, l, m, l.c, l.n, l.out_h, l.out_w)
    U = transformed_weights(l, m, net)
    _winograd_conv(net, net.input, l.batch, l.c, l.h, l.w, l.pad, U, l.output, l.out_h, l.out_w,
                   accumulate=False, per_image=not net.train, m=m)


def backward_input_winograd(l, net):
    """net.delta += the input gradient of l: l.delta convolved with the rotated, transposed
    filters (transformed_flipped_weights) at padding 2 - pad, through F(4x4, 3x3). Darknet
    computes it as W^T @ delta folded back with col2im: the same sums in another order."""
    _grow_arena(net, l, 4, l.n, l.c, l.h, l.w)
    _winograd_conv(net, l.delta, l.batch, l.n, l.out_h, l.out_w, 2 - l.pad,
                   transformed_flipped_weights(l, net), net.delta, l.h, l.w, accumulate=True,
                   per_image=False)


def _winograd_conv(net, x, batch, c, h, w, pad, U, out, out_h, out_w, accumulate, per_image,
                   m=4):
    """out (+)= the 3x3 convolution of x (batch x c x h x w) at padding `pad` with the filters
    transformed into U ((m + 2)^2 x c x n) through F(m x m, 3x3): input transform, the GEMMs,
    output transform. With `per_image` (inference) one image's tiles at a time: its outputs
    must not depend on its slot in the batch (BATCH_GEMM_MAX_N in conv_plan.py); the pipelined
    layers take each image's chunks on their own at inference and in training alike."""
    _, input_kernel, output_kernel = VARIANTS[m]
    k2, n = U.shape[0], U.shape[2]
    th, tw = tiles_of(out_h, out_w, m)
    tiles = batch * th * tw
    scratch = scratch_of(net)
    first = U.size if scratch.in_arena(U) else 0
    if pipelined(th * tw, n):
        # a V and an M of one chunk's tiles for each thread (_pipelined)
        slots, chunk_tiles = _threads(), -(-th // PIPELINE_CHUNKS) * tw
        _, V, M = scratch.parts(first, slots * chunk_tiles * k2 * c,
                                slots * chunk_tiles * k2 * n)
        _pipelined(x, c, h, w, pad, th, tw, U, V.reshape(slots, chunk_tiles, k2, c),
                   M.reshape(slots, chunk_tiles, k2, n), out, out_h, out_w, batch, accumulate,
                   input_kernel, output_kernel)
        return
    # V and M after U when U is the arena's first part (training), else from its start
    _, V, M = scratch.parts(first, k2 * tiles * c, k2 * tiles * n)
    V, M = V.reshape(tiles, k2, c), M.reshape(tiles, k2, n)
    on_threads(lambda r0, r1: input_kernel(x, c, h, w, pad, th, tw, V, r0, r1, 0),
               batch * th)
    if per_image:
        per = th * tw
        for b in range(batch):
            winograd_gemms(V[b * per:(b + 1) * per], U, M[b * per:(b + 1) * per])
    else:
        winograd_gemms(V, U, M)
    on_threads(lambda r0, r1: output_kernel(M, n, out_h, out_w, th, tw, out, r0, r1,
                                            accumulate, 0), batch * th)


def _pipelined(x, c, h, w, pad, th, tw, U, Vs, Ms, out, out_h, out_w, batch, accumulate,
               input_kernel, output_kernel):
    """The three phases of _winograd_conv chunk by chunk: each image's tile rows cut into
    ceil(th / PIPELINE_CHUNKS) rows a chunk, each chunk transformed in, multiplied (its own
    k2 GEMMs, OpenBLAS single-threaded) and transformed out by one thread, the chunks taken
    from one shared iterator: one hand-over to the helper threads per layer instead of three.
    Each thread keeps its chunks' tiles in a V and an M of its own (Vs[slot], Ms[slot], one
    chunk large), so they stay in that core's cache from one chunk to the next: writing each
    chunk into fresh memory of whole-layer buffers cost a read of that memory from RAM first
    (yolov4-tiny's layer 2 took 4.6 ms instead of 3.9 when the layer before had not just
    touched it). The chunks depend on the layer's shape only, not on the thread count or the
    image's slot in the batch, so neither changes an output (each GEMM's operands are the
    same either way)."""
    n, rows = U.shape[2], -(-th // PIPELINE_CHUNKS)
    slot_of, slots = threading.local(), itertools.count()

    def chunk(r0, r1):
        if not hasattr(slot_of, "i"):
            slot_of.i = next(slots)           # atomic under the GIL: one slot per thread
        V, M = Vs[slot_of.i], Ms[slot_of.i]
        t0, tiles = r0 * tw, (r1 - r0) * tw
        input_kernel(x, c, h, w, pad, th, tw, V, r0, r1, t0)
        np.matmul(V[:tiles].transpose(1, 0, 2), U, out=M[:tiles].transpose(1, 0, 2))
        output_kernel(M, n, out_h, out_w, th, tw, out, r0, r1, accumulate, t0)
    ranges = [(b * th + r, b * th + min(th, r + rows)) for b in range(batch)
              for r in range(0, th, rows)]
    with blas_single_threaded() if _helpers() else nullcontext():
        on_helpers(chunk, ranges)


def on_threads(work, n):
    """work(i0, i1) over [0, n) in TASKS_PER_THREAD ranges per thread (on_helpers); the ranges
    are disjoint, so each range's writes are its own."""
    threads = _threads()
    if threads == 1 or n < 2:
        work(0, n)
        return
    step = -(-n // min(n, threads * TASKS_PER_THREAD))
    on_helpers(work, [(i, min(n, i + step)) for i in range(0, n, step)])


def on_helpers(work, ranges):
    """work(a, b) for each (a, b) of `ranges`, taken by this thread and the helper threads
    from one shared iterator (a helper that does not get a core leaves its ranges to the
    others); on this thread alone without helpers."""
    tasks = iter(ranges)

    def run():
        for a, b in tasks:
            work(a, b)
    helpers = _helpers()
    if helpers is None:
        run()
        return
    pool, n_helpers = helpers
    started = [pool.submit(run) for _ in range(n_helpers)]
    run()
    for f in started:
        if not f.cancel():              # a helper that never started has nothing to finish
            f.result()


def winograd_gemms(V, U, M):
    """M[:, k] = V[:, k] @ U[k] for the 36 (16) k (V, M: tiles x k x channels). numpy's
    stacked matmul makes 36 BLAS calls, each of which wakes OpenBLAS's worker threads and
    waits for them: cheap on idle cores, but when
    other processes compete for the cores every one of those waits is long (measured on 2
    shared cores, medians per layer: 1.6-70x the time of what follows). Large GEMMs are
    instead dealt out, GEMMS_PER_TASK at a time, on_threads, each thread running BLAS
    single-threaded (blas_single_threaded): one wake-up per layer. Each product is
    the same BLAS routine on the same operands either way."""
    if (not blas_thread_counts() or _helpers() is None
            or U.shape[1] * U.shape[2] * V.shape[0] < SPLIT_GEMMS_FROM):
        np.matmul(V.transpose(1, 0, 2), U, out=M.transpose(1, 0, 2))
        return
    with blas_single_threaded():
        on_threads(lambda k0, k1: np.matmul(V[:, k0:k1].transpose(1, 0, 2), U[k0:k1],
                                              out=M[:, k0:k1].transpose(1, 0, 2)), U.shape[0])


def _threads() -> int:
    """The threads on_helpers runs work on: this one and the helpers."""
    helpers = _helpers()
    return 1 + (helpers[1] if helpers else 0)


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
