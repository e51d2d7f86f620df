"""Direct 3x3 stride-1 convolution for thin layers (few input channels, e.g. a network's first
convolution over RGB), where im2col + GEMM is bound by memory: the column matrix is 9x the
image and the GEMM's K (c*9) is too short for BLAS to reach its peak.

Each parallel iteration takes a block of output rows. The forward copies the input rows a few
output rows need, every channel's, zero-padded and laid end to end, into a strip (small, in
L1/L2), then, for four filters at a time, adds each kernel row's three taps
``w * strip[ic, ky * wp + kx:...]`` into four accumulator runs in one statement, all rows of
the block in one loop (_taps4_flat); the weight gradient fills a block of three input rows for
each output row. With `contract` the multiply-adds are fused, in the k order (ic, ky, kx) of the
weights' row, as a BLAS kernel sums them, so results match the GEMM path up to the rounding of
that order.

The same kernel computes the input gradient: it is the convolution of the output delta with
the weights transposed (filters <-> channels) and rotated 180 degrees, with padding 2 - pad
(`flip_weights`). The weight gradient sums dot products of delta rows with the strip.

Layouts (Darknet's): x [batch x c x h x w], weights [n x c x 3 x 3],
out [batch x n x out_h x out_w], out_h = h + 2*pad - 2.
"""
import numpy as np
from numba import njit, prange

from .activations import activate_row
from .im2col import valid_span
from .fused import (add_bias_activate_store_row, add_bias_row, normalize_activate_store_row,
                    normalize_scale_bias_row)

ROWS_PER_TASK = 8   # output rows per parallel iteration (strip and accumulators allocated once)
# output positions the forward computes per loop (rows of width w + 2 * pad laid end to end,
# _taps4_flat): on 104-wide maps a loop of 13 vectors per kernel row became one of 104, and
# 32 -> 32 and 64 -> 64 layers there took 0.69-0.87x the time of row by row (batch 8: 0.73x);
# the accumulators (4 x 1024 floats) stay in L1. 512 and 2048 measured no better
FLAT_POSITIONS = 1024


@njit(cache=True, inline="always")
def _fill_block(strip, x, b, c, h, w, y0, rows_in, pad, wp):
    """strip[ic, r * wp + pad:r * wp + pad + w] = input row y0 + r - pad of channel ic for
    r < rows_in: a block of zero-padded rows of width wp = w + 2 * pad laid end to end (rows
    above or below the image, the padding columns and the rest stay zero)."""
    strip[...] = 0.0
    for ic in range(c):
        for r in range(rows_in):
            iy = y0 + r - pad
            if 0 <= iy < h:
                base = ((b * c + ic) * h + iy) * w
                s = r * wp + pad
                strip[ic, s:s + w] = x[base:base + w]


@njit(cache=True, inline="always")
def _taps4_flat(a0, a1, a2, a3, strip, weights, K, oc0, c, L, wp):
    """a_q += the 3x3 convolution of the strip with filter oc0 + q, for q = 0..3, over a block
    of output rows laid end to end (_fill_block): output position p = r * wp + x reads
    strip[ic, p + ky * wp + kx], so one loop of L = rows * wp positions takes every row of the
    block; the 2 * pad positions past each row's end (x >= out_w) are computed and never
    written. One statement takes a whole kernel row (three taps), so each accumulator is loaded
    and stored once per three multiply-adds and each strip value feeds twelve."""
    for ic in range(c):
        srow = strip[ic]
        for ky in range(3):
            o = ky * wp
            _kernel_row4(a0, a1, a2, a3, srow[o:o + L], srow[o + 1:o + 1 + L],
                         srow[o + 2:o + 2 + L], weights, oc0 * K + (ic * 3 + ky) * 3, K, L)


@njit(cache=True, inline="always")
def _kernel_row4(a0, a1, a2, a3, s0, s1, s2, weights, p, K, L):
    """a_q[j] += the three taps of one kernel row of filter q (weights[p + q * K:][:3]) times
    s0[j], s1[j], s2[j] (the inputs under taps kx = 0, 1, 2 of output position j), q = 0..3,
    in the order kx = 0, 1, 2."""
    w00, w01, w02 = weights[p], weights[p + 1], weights[p + 2]
    p += K
    w10, w11, w12 = weights[p], weights[p + 1], weights[p + 2]
    p += K
    w20, w21, w22 = weights[p], weights[p + 1], weights[p + 2]
    p += K
    w30, w31, w32 = weights[p], weights[p + 1], weights[p + 2]
    for j in range(L):
        v0 = s0[j]
        v1 = s1[j]
        v2 = s2[j]
        a0[j] = ((a0[j] + w00 * v0) + w01 * v1) + w02 * v2
        a1[j] = ((a1[j] + w10 * v0) + w11 * v1) + w12 * v2
        a2[j] = ((a2[j] + w20 * v0) + w21 * v1) + w22 * v2
        a3[j] = ((a3[j] + w30 * v0) + w31 * v1) + w32 * v2


@njit(cache=True, inline="always")
def _tail_filters(weights, n, K):
    """The last n % 4 filters, padded with zero filters to four (their pass's weights)."""
    tail = np.zeros(4 * K, np.float32)
    tail[:(n % 4) * K] = weights[(n - n % 4) * K:n * K]
    return tail


@njit(cache=True, inline="always")
def _next_block(by, end, out_h, block):
    """The block of output rows from batch row `by` (image b, row y): at most `block` rows,
    within the task's rows (< end) and image b: (b, y, rows)."""
    b = by // out_h
    y = by % out_h
    return b, y, min(block, end - by, out_h - y)


@njit(cache=True, inline="always")
def _store_row(row, dst, f, bn, bn_mean, bn_divisor, scales, biases, act):
    """dst = act(((row - bn_mean) / bn_divisor) * scales + biases) of filter f with batch norm,
    act(row + biases) without: the inference epilogue, in one loop."""
    if bn:
        normalize_activate_store_row(row, dst, bn_mean[f], bn_divisor[f], scales[f], biases[f],
                                     act)
    else:
        add_bias_activate_store_row(row, dst, biases[f], act)


@njit(cache=True, fastmath={"reassoc"})
def _row_moments(row):
    """(mean, sum of squared deviations) of one row in float64, two passes while it is in L1."""
    s = 0.0
    for k in range(row.size):
        s += np.float64(row[k])
    m = s / row.size
    m2 = 0.0
    for k in range(row.size):
        d = np.float64(row[k]) - m
        m2 += d * d
    return m, m2


@njit(cache=True, inline="always")
def _chan(n_a, m_a, m2_a, n_b, m_b, m2_b):
    """(count, mean, sum of squared deviations) of two sets from theirs (Chan et al.)."""
    n_t = n_a + n_b
    delta = m_b - m_a
    return n_t, m_a + delta * n_b / n_t, m2_a + m2_b + delta * delta * n_a * n_b / n_t


@njit(parallel=True, cache=True, fastmath={"contract"})
def conv3x3_direct_cpu(x, batch, c, h, w, weights, n, pad, out, accumulate, bn_mean, bn_divisor,
                       scales, biases, act, stats_mean, stats_variance):
    """out = conv(x, weights) (or out += with accumulate): 3x3, stride 1, zero padding `pad`.

    The layer's next sweep is done on each row while it is in cache (empty arrays switch a
    part off):
    - biases non-empty: the epilogue, act(((v - bn_mean) / bn_divisor) *
      scales + biases) with batch norm (bn_mean non-empty) or act(v + biases) without: the
      operations of batchnorm_bias_activate / bias_activate, contracted into multiply-adds
      (within one float32 rounding of the separate sweep);
    - stats_mean non-empty: the per-filter batch mean and unbiased variance of the raw sums,
      two passes over each row in float64, rows combined with Chan's formula (as
      mean_variance_cpu computes them): the training batch norm's statistics."""
    out_h = h + 2 * pad - 2
    out_w = w + 2 * pad - 2
    K = c * 9
    rows = batch * out_h
    tasks = (rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    tail = _tail_filters(weights, n, K)
    epilogue = biases.size > 0
    bn = bn_mean.size > 0
    # per task and filter: (count, mean, M2) of the rows it produced. `is not None` tests on
    # the arguments themselves: numba drops their branches when compiling for None (the
    # lean signature, seconds less to compile)
    with_stats = 0
    if stats_mean is not None:
        if stats_mean.size > 0:
            with_stats = tasks
    moments = np.zeros((with_stats, n, 3))
    wp = w + 2 * pad
    block = max(1, min(ROWS_PER_TASK, FLAT_POSITIONS // wp))
    for task in prange(tasks):
        # + 2: the dropped positions past the block's last row read two floats beyond it
        strip = np.empty((c, (block + 2) * wp + 2), np.float32)
        acc = np.empty((4, block * wp), np.float32)
        by = task * ROWS_PER_TASK
        end = min(rows, by + ROWS_PER_TASK)
        while by < end:
            b, y, nr = _next_block(by, end, out_h, block)
            L = nr * wp
            _fill_block(strip, x, b, c, h, w, y, nr + 2, pad, wp)
            for oc0 in range(0, n, 4):
                q_n = min(4, n - oc0)
                acc[...] = 0.0
                # the last n % 4 filters come from `tail`, padded with zero filters to four;
                # one call site (each inlined copy of the taps costs seconds of compile)
                full = q_n == 4
                _taps4_flat(acc[0, :L], acc[1, :L], acc[2, :L], acc[3, :L], strip,
                            weights if full else tail, K, oc0 if full else 0, c, L, wp)
                for q in range(q_n):
                    f = oc0 + q
                    for r in range(nr):
                        row = acc[q, r * wp:r * wp + out_w]
                        ob = ((b * n + f) * out_h + y + r) * out_w
                        if epilogue and not accumulate and with_stats == 0:
                            # inference: the epilogue writes the output row in one loop
                            _store_row(row, out[ob:ob + out_w], f, bn, bn_mean, bn_divisor,
                                       scales, biases, act)
                            continue
                        if epilogue:
                            if bn:
                                normalize_scale_bias_row(row, bn_mean[f], bn_divisor[f],
                                                         scales[f], biases[f])
                            else:
                                add_bias_row(row, biases[f])
                            activate_row(row, act)
                        if stats_mean is not None and with_stats > 0:
                            m_r, m2_r = _row_moments(row)
                            mo = moments[task, f]
                            mo[0], mo[1], mo[2] = _chan(mo[0], mo[1], mo[2], out_w, m_r, m2_r)
                        dst = out[ob:ob + out_w]
                        if accumulate:
                            dst += row
                        else:
                            dst[:] = row
            by += nr
    if stats_mean is not None and stats_variance is not None and with_stats > 0:
        for f in range(n):
            n_a = 0.0
            m_a = 0.0
            m2_a = 0.0
            for task in range(tasks):
                if moments[task, f, 0] > 0:
                    n_a, m_a, m2_a = _chan(n_a, m_a, m2_a, moments[task, f, 0],
                                           moments[task, f, 1], moments[task, f, 2])
            stats_mean[f] = np.float32(m_a)
            # one value per channel: Darknet's 1/(n-1) is inf, times 0
            stats_variance[f] = np.float32(m2_a / (n_a - 1)) if n_a > 1 else np.nan


@njit(cache=True, inline="always")
def _fill_phases(planes, x, b, c, h, w, y0, rows, pad, wq):
    """The input under a block of a stride-2 convolution's output rows, split by the parity
    of its padded rows and columns: planes[ic, 2 * py + px, r * wq + j] = pixel
    (2 * (y0 + r) + py - pad, 2 * j + px - pad) of channel ic of image b for r < rows, 0
    outside the image. Tap (ky, kx) of output (y0 + r, j) is then entry r * wq + j +
    (ky // 2) * wq + kx // 2 of plane (ky % 2, kx % 2): every tap reads a contiguous run."""
    planes[...] = 0.0
    for ic in range(c):
        for py in range(2):
            for r in range(rows):
                iy = 2 * (y0 + r) + py - pad
                if iy < 0 or iy >= h:
                    continue
                base = ((b * c + ic) * h + iy) * w
                for px in range(2):
                    col0 = px - pad
                    lo, hi = valid_span(col0, 2, wq, w)
                    if hi <= lo:
                        continue
                    s = base + col0 + 2 * lo
                    src = x[s:s + 2 * (hi - lo) - 1]
                    dst = planes[ic, 2 * py + px, r * wq + lo:r * wq + hi]
                    for j in range(hi - lo):
                        dst[j] = src[2 * j]


@njit(cache=True, inline="always")
def _taps4_s2(a0, a1, a2, a3, planes, weights, K, oc0, c, L, wq):
    """_taps4_flat for stride 2 over _fill_phases' planes: kernel row ky reads the planes of
    row parity ky % 2, one row further down for ky = 2; its taps kx = 0, 1, 2 the even
    column plane, the odd one, and the even one a column further on."""
    for ic in range(c):
        for ky in range(3):
            py = ky % 2
            o = (ky // 2) * wq
            even = planes[ic, 2 * py]
            odd = planes[ic, 2 * py + 1]
            _kernel_row4(a0, a1, a2, a3, even[o:o + L], odd[o:o + L], even[o + 1:o + 1 + L],
                         weights, oc0 * K + (ic * 3 + ky) * 3, K, L)


@njit(parallel=True, cache=True, fastmath={"contract"})
def conv3x3s2_direct_cpu(x, batch, c, h, w, weights, n, pad, out, bn_mean, bn_divisor, scales,
                         biases, act):
    """out = act(conv(x, weights) with the biases, or the test-mode batch norm when bn_mean is
    non-empty): 3x3, stride 2, zero padding `pad`; the inference forward of a thin strided
    convolution (an image's first layer in AlexeyAB's networks), as conv3x3_direct_cpu's
    epilogue. Each block of output rows reads its input split into four parity planes
    (_fill_phases), so that the taps are contiguous runs as at stride 1."""
    out_h = (h + 2 * pad - 3) // 2 + 1
    out_w = (w + 2 * pad - 3) // 2 + 1
    K = c * 9
    rows = batch * out_h
    tasks = (rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    tail = _tail_filters(weights, n, K)
    bn = bn_mean.size > 0
    wq = out_w + 1                  # a plane row: out_w outputs and the column kx = 2 reads last
    block = max(1, min(ROWS_PER_TASK, FLAT_POSITIONS // wq))
    for task in prange(tasks):
        # + 1 row: kernel row 2 reads one plane row below the block; + 1: the dropped
        # position past the block's last row reads one float beyond it
        planes = np.empty((c, 4, (block + 1) * wq + 1), np.float32)
        acc = np.empty((4, block * wq), np.float32)
        by = task * ROWS_PER_TASK
        end = min(rows, by + ROWS_PER_TASK)
        while by < end:
            b, y, nr = _next_block(by, end, out_h, block)
            L = nr * wq
            _fill_phases(planes, x, b, c, h, w, y, nr + 1, pad, wq)
            for oc0 in range(0, n, 4):
                q_n = min(4, n - oc0)
                acc[...] = 0.0
                full = q_n == 4
                _taps4_s2(acc[0, :L], acc[1, :L], acc[2, :L], acc[3, :L], planes,
                          weights if full else tail, K, oc0 if full else 0, c, L, wq)
                for q in range(q_n):
                    f = oc0 + q
                    for r in range(nr):
                        row = acc[q, r * wq:r * wq + out_w]
                        ob = ((b * n + f) * out_h + y + r) * out_w
                        _store_row(row, out[ob:ob + out_w], f, bn, bn_mean, bn_divisor, scales,
                                   biases, act)
            by += nr


@njit(cache=True, inline="always")
def _dots4x3(dw, oc0, q_n, t, d0, d1, d2, d3, srow, out_w):
    """dw[oc0 + q, t + kx] += dot(d_q, srow[kx:kx + out_w]) for four delta rows and the three
    taps of one kernel row: twelve float32 sums in vector registers, seven loads per twelve
    multiply-adds. With q_n = 1 the four delta rows are the same and only the first is kept."""
    s0 = srow[0:out_w]
    s1 = srow[1:out_w + 1]
    s2 = srow[2:out_w + 2]
    r00 = r01 = r02 = r10 = r11 = r12 = np.float32(0.0)
    r20 = r21 = r22 = r30 = r31 = r32 = np.float32(0.0)
    for j in range(out_w):
        v0 = s0[j]
        v1 = s1[j]
        v2 = s2[j]
        e0 = d0[j]
        e1 = d1[j]
        e2 = d2[j]
        e3 = d3[j]
        r00 += e0 * v0
        r01 += e0 * v1
        r02 += e0 * v2
        r10 += e1 * v0
        r11 += e1 * v1
        r12 += e1 * v2
        r20 += e2 * v0
        r21 += e2 * v1
        r22 += e2 * v2
        r30 += e3 * v0
        r31 += e3 * v1
        r32 += e3 * v2
    dw[oc0, t] += r00
    dw[oc0, t + 1] += r01
    dw[oc0, t + 2] += r02
    if q_n == 4:
        dw[oc0 + 1, t] += r10
        dw[oc0 + 1, t + 1] += r11
        dw[oc0 + 1, t + 2] += r12
        dw[oc0 + 2, t] += r20
        dw[oc0 + 2, t + 1] += r21
        dw[oc0 + 2, t + 2] += r22
        dw[oc0 + 3, t] += r30
        dw[oc0 + 3, t + 1] += r31
        dw[oc0 + 3, t + 2] += r32


@njit(parallel=True, cache=True, fastmath={"reassoc", "contract"})
def conv3x3_direct_weight_grad_cpu(x, batch, c, h, w, delta, n, pad, weight_updates):
    """weight_updates[oc, ic, ky, kx] += sum over images and output pixels of
    delta[b, oc, y, x] * x[b, ic, y + ky - pad, x + kx - pad] (3x3, stride 1): the product
    delta @ col^T without building col. Each row's dot products run in float32 vector lanes
    and are summed across rows and tasks in float64."""
    out_h = h + 2 * pad - 2
    out_w = w + 2 * pad - 2
    K = c * 9
    rows = batch * out_h
    tasks = (rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    partial = np.zeros((tasks, n, K))
    wp = w + 2 * pad
    for task in prange(tasks):
        strip = np.empty((c, 3 * wp), np.float32)
        dw = partial[task]
        for by in range(task * ROWS_PER_TASK, min(rows, (task + 1) * ROWS_PER_TASK)):
            b = by // out_h
            y = by % out_h
            _fill_block(strip, x, b, c, h, w, y, 3, pad, wp)
            oc0 = 0
            while oc0 < n:
                q_n = 4 if n - oc0 >= 4 else 1
                base = ((b * n + oc0) * out_h + y) * out_w
                step = out_h * out_w if q_n == 4 else 0     # one filter: four copies of it
                d0 = delta[base:base + out_w]
                d1 = delta[base + step:base + step + out_w]
                d2 = delta[base + 2 * step:base + 2 * step + out_w]
                d3 = delta[base + 3 * step:base + 3 * step + out_w]
                for ic in range(c):
                    for ky in range(3):
                        _dots4x3(dw, oc0, q_n, (ic * 3 + ky) * 3, d0, d1, d2, d3,
                                 strip[ic, ky * wp:(ky + 1) * wp], out_w)
                oc0 += q_n
    for i in range(n * K):
        acc = 0.0
        for task in range(tasks):
            acc += partial[task, i // K, i % K]
        weight_updates[i] += np.float32(acc)


@njit(cache=True)
def flip_weights(weights, n, c, size, flipped):
    """flipped[ic, oc, ky, kx] = weights[oc, ic, size-1-ky, size-1-kx]: the filters of the
    convolution that maps an output delta back to the input gradient."""
    for oc in range(n):
        for ic in range(c):
            for ky in range(size):
                for kx in range(size):
                    flipped[((ic * n + oc) * size + size - 1 - ky) * size + size - 1 - kx] = \
                        weights[((oc * c + ic) * size + ky) * size + kx]


_NONE = np.empty(0, np.float32)


def _arr(a):
    """An optional array for the kernels: empty ("off") when not given."""
    return _NONE if a is None else a


def conv3x3_direct(x, batch, c, h, w, weights, n, pad, out, *, accumulate=False, bn_mean=None,
                   bn_divisor=None, scales=None, biases=None, act=0, stats_mean=None,
                   stats_variance=None):
    """conv3x3_direct_cpu with its optional parts named: `biases` (with `bn_mean`,
    `bn_divisor`, `scales` for test-mode batch norm) and `act` switch on the fused epilogue;
    `stats_mean` / `stats_variance` receive the training batch statistics of the raw sums;
    what is not given is off (the kernel reads an empty array as "off"; without statistics
    or accumulation, as at inference, they are passed as None: the lean signature, compiled
    without their code)."""
    lean = stats_mean is None and not accumulate
    conv3x3_direct_cpu(x, batch, c, h, w, weights, n, pad, out, accumulate, _arr(bn_mean),
                       _arr(bn_divisor), _arr(scales), _arr(biases), act,
                       None if lean else _arr(stats_mean), None if lean else _arr(stats_variance))


def conv3x3s2_direct(x, batch, c, h, w, weights, n, pad, out, *, bn_mean=None, bn_divisor=None,
                     scales=None, biases, act=0):
    """conv3x3s2_direct_cpu with batch norm optional (`bn_mean`, `bn_divisor`, `scales`)."""
    conv3x3s2_direct_cpu(x, batch, c, h, w, weights, n, pad, out, _arr(bn_mean),
                         _arr(bn_divisor), _arr(scales), biases, act)
