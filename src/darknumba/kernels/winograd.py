"""Winograd convolution F(4x4, 3x3) for 3x3 stride-1 convolutions at inference (Lavin & Gray,
"Fast Algorithms for Convolutional Neural Networks", 2016, interpolation points 0, 1, -1, 2,
-2, inf). Darknet has no such path: its convolutions are always im2col + GEMM; this one computes
the same sums with 4x fewer multiplications and a different rounding (within ~2e-5 of the
output's scale on yolov3-tiny's layers).

Each 4x4 output tile is A^T [ (G g G^T) * (B^T d B) ] A, with d the 6x6 input tile under it
(its origin 4 * tile - pad), g a 3x3 filter. Summed over the input channels, the elementwise
product becomes, for each of the 36 positions k of the transformed tile, one matrix product:
M[k] = U[k] @ V[k], U[k]: n x c (transformed filters), V[k]: c x tiles (transformed input
tiles). The caller transforms the filters (one float64 GEMM with kron(G, G), made once per
layer: layers/conv_winograd.py) and runs the 36 GEMMs in BLAS; these kernels do the input and
output transforms. B^T and A^T are written out in _bt6 and _at6; tests/test_winograd.py holds
the three matrices as a plain numpy reference.

The kernels are serial over a range of channels (filters), without the GIL: the layer runs
ranges on several threads (layers/conv_winograd.py). Numba's parfor passes took 1.5-3 s more
to compile each of them than the same serial loops.

Layouts: x [batch x c x h x w], out [batch x n x out_h x out_w] (out_h = h + 2*pad - 2),
V [36 x c x tiles], M [36 x n x tiles]; tiles are numbered (b, ty, tx), ty < ceil(out_h / 4),
tx < ceil(out_w / 4). Tiles that run past the output's edge are computed whole and cropped when
written.
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


def tiles_of(out_h, out_w):
    """(tile rows, tile columns) covering an out_h x out_w output with 4x4 tiles."""
    return -(-out_h // 4), -(-out_w // 4)


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


@njit(cache=True, nogil=True)
def winograd_input_cpu(x, batch, c, h, w, pad, th, tw, V, c0, c1):
    """V[k1 * 6 + k2, ic, tile] = (B^T d B)[k1, k2] for every 6x6 input tile d and channel
    c0 <= ic < c1.
    Per channel and tile row, the six input rows under it go, zero-padded, into a strip split
    by column phase (strip[i, q, u] = padded column 4u + q), so that both passes run over
    contiguous memory: B^T down the columns (all tiles at once), then B along each tile's six
    columns (phase q, tile u + q // 4), written for all tiles of the row in contiguous runs."""
    n_u = tw + 1
    strip = np.empty((6, 4, n_u), np.float32)
    col = np.empty((6, 4, n_u), np.float32)
    for ic in range(c0, c1):
        for b in range(batch):
            plane = (b * c + ic) * h * w
            for ty in range(th):
                for i in range(6):
                    iy = ty * 4 - pad + i
                    for q in range(4):
                        for u in range(n_u):
                            strip[i, q, u] = 0.0
                    if 0 <= iy < h:
                        src = plane + iy * w
                        for q in range(4):          # padded column 4u + q is input 4u + q - pad
                            u0 = max(0, (pad - q + 3) // 4)
                            u1 = min(n_u, (w - 1 + pad - q) // 4 + 1)
                            for u in range(u0, u1):
                                strip[i, q, u] = x[src + 4 * u + q - pad]
                for q in range(4):
                    for u in range(n_u):
                        r0, r1, r2, r3, r4, r5 = _bt6(strip[0, q, u], strip[1, q, u],
                                                      strip[2, q, u], strip[3, q, u],
                                                      strip[4, q, u], strip[5, q, u])
                        col[0, q, u] = r0
                        col[1, q, u] = r1
                        col[2, q, u] = r2
                        col[3, q, u] = r3
                        col[4, q, u] = r4
                        col[5, q, u] = r5
                t0 = (b * th + ty) * tw
                for r in range(6):
                    k = r * 6
                    for tx in range(tw):
                        v0, v1, v2, v3, v4, v5 = _bt6(col[r, 0, tx], col[r, 1, tx],
                                                      col[r, 2, tx], col[r, 3, tx],
                                                      col[r, 0, tx + 1], col[r, 1, tx + 1])
                        V[k, ic, t0 + tx] = v0
                        V[k + 1, ic, t0 + tx] = v1
                        V[k + 2, ic, t0 + tx] = v2
                        V[k + 3, ic, t0 + tx] = v3
                        V[k + 4, ic, t0 + tx] = v4
                        V[k + 5, ic, t0 + tx] = v5


@njit(cache=True, nogil=True)
def winograd_output_cpu(M, batch, n, out_h, out_w, th, tw, out, f0, f1, accumulate):
    """out[b, f] for filters f0 <= f < f1 = (or, with `accumulate`, +=) the 4x4 output tiles
    A^T M A, cropped to out_h x out_w (the raw sums: the caller applies the layer's biases or
    batch norm and activation).
    A^T runs first along each tile's rows (contiguous runs of M over the tiles of a row), then
    down the columns."""
    y6 = np.empty((6, 4, tw), np.float32)
    rows = np.empty((4, tw * 4), np.float32)
    for f in range(f0, f1):
        for b in range(batch):
            plane = (b * n + f) * out_h * out_w
            for ty in range(th):
                t0 = (b * th + ty) * tw
                for r in range(6):
                    k = r * 6
                    for tx in range(tw):
                        o0, o1, o2, o3 = _at6(M[k, f, t0 + tx], M[k + 1, f, t0 + tx],
                                              M[k + 2, f, t0 + tx], M[k + 3, f, t0 + tx],
                                              M[k + 4, f, t0 + tx], M[k + 5, f, t0 + tx])
                        y6[r, 0, tx] = o0
                        y6[r, 1, tx] = o1
                        y6[r, 2, tx] = o2
                        y6[r, 3, tx] = o3
                for q in range(4):
                    for tx in range(tw):
                        o0, o1, o2, o3 = _at6(y6[0, q, tx], y6[1, q, tx], y6[2, q, tx],
                                              y6[3, q, tx], y6[4, q, tx], y6[5, q, tx])
                        rows[0, tx * 4 + q] = o0
                        rows[1, tx * 4 + q] = o1
                        rows[2, tx * 4 + q] = o2
                        rows[3, tx * 4 + q] = o3
                for p in range(min(4, out_h - ty * 4)):
                    dst = plane + (ty * 4 + p) * out_w
                    if accumulate:
                        for j in range(out_w):
                            out[dst + j] += rows[p, j]
                    else:
                        for j in range(out_w):
                            out[dst + j] = rows[p, j]
