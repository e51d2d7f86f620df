"""Winograd convolution F(4x4, 3x3) for 3x3 stride-1 convolutions (Lavin & Gray, "Fast
Algorithms for Convolutional Neural Networks", 2016, interpolation points 0, 1, -1, 2, -2, inf),
and F(2x2, 3x3) (points 0, 1, -1, inf) for small maps at inference. Darknet has no such path: its convolutions are always im2col + GEMM; this one computes
the same sums with 4x fewer multiplications and a different rounding (within ~2e-5 of the
output's scale on yolov3-tiny's layers).

Each 4x4 output tile is A^T [ (G g G^T) * (B^T d B) ] A, with d the 6x6 input tile under it
(its origin 4 * tile - pad), g a 3x3 filter. Summed over the input channels, the elementwise
product becomes, for each of the 36 positions k of the transformed tile, one matrix product:
M[:, k] = V[:, k] @ U[k], V[:, k]: tiles x c (transformed input tiles), U[k]: c x n
(transformed filters). The caller transforms the filters (winograd_filters_cpu, once per layer
or at each forward: layers/conv_winograd.py) and runs the 36 GEMMs in BLAS; the other kernels
do the input and output transforms. B^T and A^T are written out in _bt6 and _at6;
tests/kernels/test_winograd.py holds the three matrices as a plain numpy reference.

The kernels are serial over a range of tile rows, without the GIL: the layer runs ranges on
several threads (layers/conv_winograd.py). Numba's parfor passes took 1.5-3 s more to compile
each of them than the same serial loops.

Layouts: x [batch x c x h x w], out [batch x n x out_h x out_w] (out_h = h + 2*pad - 2),
V [tiles x 36 x c], M [tiles x 36 x n] (channels, filters last: each transform's arithmetic
runs as one vector loop over them; tile by tile, so a transform reads or writes one stream, not
36: 0.8-0.9x the transforms' time of 36 x tiles x c, and the GEMMs M[:, k] = V[:, k] @ U[k] with
U [36 x c x n] take their rows 36 * c apart, no slower in BLAS);
tiles are numbered (b, ty, tx), ty < ceil(out_h / 4), tx < ceil(out_w / 4), a tile row being
(b, ty), the kernels' ranges r0 <= b * th + ty < r1 (the caller keeps r1 <= batch * th); tile t
is entry t - t0 of V or M (t0 = 0 for a whole layer's buffers; a chunk's own small buffer has its
first tile's number, so that a pipelined chunk reuses a buffer that stays in cache). Tiles
that run past the output's edge are computed whole and cropped when written.
An earlier layout (channels first, the transforms vectorised along the tiles of a row) ran the
transforms 1.5-4x slower: at 26x26 a row holds 7 tiles, too few for the vector loops.

F(2x2, 3x3) is the same with 4x4 input tiles at stride 2, 2x2 output tiles, 16 GEMMs (the
winograd2_* kernels, G2, _bt4, _at4): 2.25x fewer multiplications than im2col + GEMM instead
of 4x, but its transformed filters are 16/9 of the weights instead of 4x. On a 13x13 map at
batch 1 F(4x4)'s 36 GEMMs have 16 rows each and stream filters four times the weights' size
(36 MB for a 512 -> 512 layer, more than the cache), and F(2x2) is the faster of the two.
"""
import numpy as np
from numba import njit

# the filter transform: 6 x 3
G = np.array([[1 / 4, 0, 0],
              [-1 / 6, -1 / 6, -1 / 6],
              [-1 / 6, 1 / 6, -1 / 6],
              [1 / 24, 1 / 12, 1 / 6],
              [1 / 24, -1 / 12, 1 / 6],
              [0, 0, 1]], np.float64)


# F(2x2, 3x3)'s filter transform: 4 x 3
G2 = np.array([[1, 0, 0],
               [1 / 2, 1 / 2, 1 / 2],
               [1 / 2, -1 / 2, 1 / 2],
               [0, 0, 1]], np.float64)


@njit(cache=True, nogil=True)
def kron_terms(kron):
    """Each row k of kron(G, G) as its nonzero entries in column order: their columns
    tj[k, :nt[k]] and values tv[k, :nt[k]]. A row of kron(G, G) or kron(G2, G2) has 1, 3 or 9
    (a row of G or G2 has 1 or 3), all winograd_filters_cpu computes."""
    K = kron.shape[0]
    tj = np.zeros((K, 9), np.int64)
    tv = np.zeros((K, 9))
    nt = np.zeros(K, np.int64)
    for k in range(K):
        for j in range(9):
            if kron[k, j] != 0.0:
                tj[k, nt[k]] = j
                tv[k, nt[k]] = kron[k, j]
                nt[k] += 1
        if nt[k] != 1 and nt[k] != 3 and nt[k] != 9:
            raise ValueError("a row of the filter transform has not 1, 3 or 9 nonzero entries")
    return tj, tv, nt


@njit(cache=True, nogil=True)
def winograd_filters_cpu(weights, c, kron, flip, U, o0, o1):
    """The filter transform kron(G, G) g of every 3x3 filter g of weights (filters x c x 9, in
    Darknet's order) into U[:, o0:o1] (kron's rows x o x p), in float64 rounded once to float32.
    Unflipped, U[k, ic, f] transforms filter f's channel ic (the forward's filters); flipped,
    U[k, f, ic] transforms it rotated by 180 degrees (its nine taps reversed: the input
    gradient's filters). Each U[k, o, p] = 0 + kron[k, j] g[j] + ... over kron's nonzero
    entries (kron_terms: a third of its 324 products are zeros) in the order of j, summed left
    to right: one vector loop over p per row k, its 1, 3 or 9 terms written out (1.75-1.85x
    the speed of an accumulator loop per term, the same sums bit for bit)."""
    inner = U.shape[2]
    tj, tv, nt = kron_terms(kron)
    g = np.empty((9, inner))            # the taps of channel (flipped: filter) o, by p
    for o in range(o0, o1):
        for p in range(inner):
            if flip:
                base = (o * c + p) * 9
                for j in range(9):
                    g[j, p] = weights[base + 8 - j]
            else:
                base = (p * c + o) * 9
                for j in range(9):
                    g[j, p] = weights[base + j]
        for k in range(tj.shape[0]):
            if nt[k] == 1:
                a0, v0 = g[tj[k, 0]], tv[k, 0]
                for p in range(inner):
                    U[k, o, p] = 0.0 + v0 * a0[p]
            elif nt[k] == 3:
                a0, a1, a2 = g[tj[k, 0]], g[tj[k, 1]], g[tj[k, 2]]
                v0, v1, v2 = tv[k, 0], tv[k, 1], tv[k, 2]
                for p in range(inner):
                    U[k, o, p] = ((0.0 + v0 * a0[p]) + v1 * a1[p]) + v2 * a2[p]
            else:
                a0, a1, a2, a3 = g[tj[k, 0]], g[tj[k, 1]], g[tj[k, 2]], g[tj[k, 3]]
                a4, a5, a6 = g[tj[k, 4]], g[tj[k, 5]], g[tj[k, 6]]
                a7, a8 = g[tj[k, 7]], g[tj[k, 8]]
                v0, v1, v2, v3, v4 = tv[k, 0], tv[k, 1], tv[k, 2], tv[k, 3], tv[k, 4]
                v5, v6, v7, v8 = tv[k, 5], tv[k, 6], tv[k, 7], tv[k, 8]
                for p in range(inner):
                    U[k, o, p] = ((((((((0.0 + v0 * a0[p]) + v1 * a1[p]) + v2 * a2[p])
                                      + v3 * a3[p]) + v4 * a4[p]) + v5 * a5[p])
                                   + v6 * a6[p]) + v7 * a7[p]) + v8 * a8[p]


def tiles_of(out_h, out_w, m=4):
    """(tile rows, tile columns) covering an out_h x out_w output with m x m tiles."""
    return -(-out_h // m), -(-out_w // m)


@njit(cache=True)
def _bt6(d0, d1, d2, d3, d4, d5):
    """B^T d for one column d of six values (F(4x4, 3x3)'s input transform)."""
    return (np.float32(4.0) * d0 - np.float32(5.0) * d2 + d4,
            d4 + d3 - np.float32(4.0) * (d1 + d2),
            d4 - d3 + np.float32(4.0) * (d1 - d2),
            d4 - d2 + np.float32(2.0) * (d3 - d1),
            d4 - d2 - np.float32(2.0) * (d3 - d1),
            np.float32(4.0) * d1 - np.float32(5.0) * d3 + d5)


@njit(cache=True)
def _at6(m0, m1, m2, m3, m4, m5):
    """A^T m for one column m of six values (F(4x4, 3x3)'s output transform)."""
    a = m1 + m2
    b = m1 - m2
    c = m3 + m4
    d = m3 - m4
    return (m0 + a + c, b + np.float32(2.0) * d, a + np.float32(4.0) * c,
            b + np.float32(8.0) * d + m5)


@njit(cache=True)
def _bt4(d0, d1, d2, d3):
    """B^T d for one column d of four values (F(2x2, 3x3)'s input transform)."""
    return d0 - d2, d1 + d2, d2 - d1, d1 - d3


@njit(cache=True)
def _at4(m0, m1, m2, m3):
    """A^T m for one column m of four values (F(2x2, 3x3)'s output transform)."""
    return m0 + m1 + m2, m1 - m2 - m3


@njit(cache=True, inline="always")
def _check_tiles(T, tw, r0, r1, t0):
    """The tiles of rows r0 <= row < r1 are T[row * tw + tx - t0]: all inside T, or an error
    before anything is written."""
    if r1 > r0 and (r0 * tw - t0 < 0 or r1 * tw - t0 > T.shape[0]):
        raise ValueError("winograd: tile rows outside the tile buffer")


@njit(cache=True, inline="always")
def _rows_channels_last(x, rows, b, c, h, w, y0, pad):
    """rows[i, j, ic] = x[b, ic, y0 + i, j - pad], zero outside the image: the input rows
    under a row of tiles, transposed to channels last."""
    for i in range(rows.shape[0]):
        iy = y0 + i
        if 0 <= iy < h:
            for ic in range(c):
                src = ((b * c + ic) * h + iy) * w - pad
                for j in range(rows.shape[1]):
                    rows[i, j, ic] = x[src + j] if 0 <= j - pad < w else np.float32(0.0)
        else:
            for j in range(rows.shape[1]):
                for ic in range(c):
                    rows[i, j, ic] = 0.0


@njit(cache=True, inline="always")
def _write_rows(out, rows, b, n, out_h, out_w, y0, accumulate):
    """out[b, f, y0 + p, :] = (or +=) rows[p, :out_w, f] for the rows p inside the output."""
    for p in range(min(rows.shape[0], out_h - y0)):
        for f in range(n):
            dst = ((b * n + f) * out_h + y0 + p) * out_w
            if accumulate:
                for j in range(out_w):
                    out[dst + j] += rows[p, j, f]
            else:
                for j in range(out_w):
                    out[dst + j] = rows[p, j, f]


@njit(cache=True, nogil=True)
def winograd_input_cpu(x, c, h, w, pad, th, tw, V, r0, r1, t0):
    """V[tile, k1 * 6 + k2, ic] = (B^T d B)[k1, k2] for every 6x6 input tile d and channel ic,
    over the tile rows r0 <= b * th + ty < r1.
    Per tile row, the six input rows under it go, zero-padded, into rows[i, column, channel]
    (a transpose of those rows to channels last); then for each tile, B^T down its six columns
    and B along its six rows, each as a loop over the channels."""
    _check_tiles(V, tw, r0, r1, t0)
    rows = np.empty((6, 4 * tw + 2, c), np.float32)
    half = np.empty((6, 6, c), np.float32)          # half[r, j, ic] = (B^T d)[r, j]
    for row in range(r0, r1):
        b = row // th
        ty = row - b * th
        _rows_channels_last(x, rows, b, c, h, w, ty * 4 - pad, pad)
        for tx in range(tw):
            t = row * tw + tx - t0
            x0 = 4 * tx
            for j in range(6):
                for ic in range(c):
                    a0, a1, a2, a3, a4, a5 = _bt6(rows[0, x0 + j, ic], rows[1, x0 + j, ic],
                                                  rows[2, x0 + j, ic], rows[3, x0 + j, ic],
                                                  rows[4, x0 + j, ic], rows[5, x0 + j, ic])
                    half[0, j, ic] = a0
                    half[1, j, ic] = a1
                    half[2, j, ic] = a2
                    half[3, j, ic] = a3
                    half[4, j, ic] = a4
                    half[5, j, ic] = a5
            for r in range(6):
                k = r * 6
                for ic in range(c):
                    v0, v1, v2, v3, v4, v5 = _bt6(half[r, 0, ic], half[r, 1, ic], half[r, 2, ic],
                                                  half[r, 3, ic], half[r, 4, ic], half[r, 5, ic])
                    V[t, k, ic] = v0
                    V[t, k + 1, ic] = v1
                    V[t, k + 2, ic] = v2
                    V[t, k + 3, ic] = v3
                    V[t, k + 4, ic] = v4
                    V[t, k + 5, ic] = v5


@njit(cache=True, nogil=True)
def winograd_output_cpu(M, n, out_h, out_w, th, tw, out, r0, r1, accumulate, t0):
    """out[b, f] = (or, with `accumulate`, +=) the 4x4 output tiles A^T M A of the tile rows
    r0 <= b * th + ty < r1, cropped to out_h x out_w (the raw sums: the caller applies the
    layer's biases or batch norm and activation).
    Per tile, A^T along its rows then down its columns, each as a loop over the filters, into
    rows[p, column, f]; then each filter's output rows are written from it."""
    _check_tiles(M, tw, r0, r1, t0)
    half = np.empty((6, 4, n), np.float32)          # half[r, q, f] = (M A)[r, q]
    rows = np.empty((4, 4 * tw, n), np.float32)
    for row in range(r0, r1):
        b = row // th
        ty = row - b * th
        for tx in range(tw):
            t = row * tw + tx - t0
            for r in range(6):
                k = r * 6
                for f in range(n):
                    o0, o1, o2, o3 = _at6(M[t, k, f], M[t, k + 1, f], M[t, k + 2, f],
                                          M[t, k + 3, f], M[t, k + 4, f], M[t, k + 5, f])
                    half[r, 0, f] = o0
                    half[r, 1, f] = o1
                    half[r, 2, f] = o2
                    half[r, 3, f] = o3
            for q in range(4):
                x = 4 * tx + q
                for f in range(n):
                    p0, p1, p2, p3 = _at6(half[0, q, f], half[1, q, f], half[2, q, f],
                                          half[3, q, f], half[4, q, f], half[5, q, f])
                    rows[0, x, f] = p0
                    rows[1, x, f] = p1
                    rows[2, x, f] = p2
                    rows[3, x, f] = p3
        _write_rows(out, rows, b, n, out_h, out_w, ty * 4, accumulate)


@njit(cache=True, nogil=True)
def winograd2_input_cpu(x, c, h, w, pad, th, tw, V, r0, r1, t0):
    """F(2x2, 3x3)'s input transform, as winograd_input_cpu: V[tile, k1 * 4 + k2, ic] =
    (B^T d B)[k1, k2] for every 4x4 input tile d (origin 2 * tile - pad)."""
    _check_tiles(V, tw, r0, r1, t0)
    rows = np.empty((4, 2 * tw + 2, c), np.float32)
    half = np.empty((4, 4, c), np.float32)
    for row in range(r0, r1):
        b = row // th
        ty = row - b * th
        _rows_channels_last(x, rows, b, c, h, w, ty * 2 - pad, pad)
        for tx in range(tw):
            t = row * tw + tx - t0
            x0 = 2 * tx
            for j in range(4):
                for ic in range(c):
                    a0, a1, a2, a3 = _bt4(rows[0, x0 + j, ic], rows[1, x0 + j, ic],
                                          rows[2, x0 + j, ic], rows[3, x0 + j, ic])
                    half[0, j, ic] = a0
                    half[1, j, ic] = a1
                    half[2, j, ic] = a2
                    half[3, j, ic] = a3
            for r in range(4):
                k = r * 4
                for ic in range(c):
                    v0, v1, v2, v3 = _bt4(half[r, 0, ic], half[r, 1, ic], half[r, 2, ic],
                                          half[r, 3, ic])
                    V[t, k, ic] = v0
                    V[t, k + 1, ic] = v1
                    V[t, k + 2, ic] = v2
                    V[t, k + 3, ic] = v3


@njit(cache=True, nogil=True)
def winograd2_output_cpu(M, n, out_h, out_w, th, tw, out, r0, r1, accumulate, t0):
    """F(2x2, 3x3)'s output transform, as winograd_output_cpu: the 2x2 output tiles A^T M A
    of the tile rows r0 <= b * th + ty < r1, cropped."""
    _check_tiles(M, tw, r0, r1, t0)
    half = np.empty((4, 2, n), np.float32)
    rows = np.empty((2, 2 * tw, n), np.float32)
    for row in range(r0, r1):
        b = row // th
        ty = row - b * th
        for tx in range(tw):
            t = row * tw + tx - t0
            for r in range(4):
                k = r * 4
                for f in range(n):
                    o0, o1 = _at4(M[t, k, f], M[t, k + 1, f], M[t, k + 2, f], M[t, k + 3, f])
                    half[r, 0, f] = o0
                    half[r, 1, f] = o1
            for q in range(2):
                x = 2 * tx + q
                for f in range(n):
                    p0, p1 = _at4(half[0, q, f], half[1, q, f], half[2, q, f], half[3, q, f])
                    rows[0, x, f] = p0
                    rows[1, x, f] = p1
        _write_rows(out, rows, b, n, out_h, out_w, ty * 2, accumulate)

