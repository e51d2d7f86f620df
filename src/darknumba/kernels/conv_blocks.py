"""A convolution's forward as im2col + GEMM in blocks of output rows, each block's steps run by
one thread while its data is in that core's cache: the block's column matrix (k x rows*out_w),
one single-threaded OpenBLAS sgemm writing the block's part of every output plane, then the
layer's epilogue (biases or test-mode batch norm, activation) on those rows.

The sums are BLAS's, over k in the same blocks as one GEMM over the whole image computes them
(OpenBLAS splits a GEMM across threads and blocks over the output's columns, never over k), so
the output is the one im2col + GEMM gives, bit for bit, as long as neither GEMM is small enough
for OpenBLAS's small-matrix kernels (layers/conv_blocks.py keeps blocks above that size). What it saves:
the whole column matrix written to memory and read back (9x the input for a 3x3 layer: 25 MB
for yolov4-tiny's third convolution), a separate sweep for the epilogue, and waking OpenBLAS's
threads for every GEMM.

Layouts (Darknet's): x [batch x c x h x w], weights [n x k] with k = c*size*size in (c, ky, kx)
order, out [batch x n x out_h x out_w]; `cols` holds one column block per thread.
"""
import numpy as np
from numba import njit, prange

from .activations import activate_row
from .fused import add_bias_row, normalize_scale_bias_row
from .im2col import valid_span
from .sgemm import NO_TRANS, ROW_MAJOR, TRANS, sgemm


@njit(cache=True)
def im2col_rows(x, base, c, h, w, size, stride, pad, out_w, y0, y1, col):
    """The column matrix of output rows y0..y1-1 of the image at x[base:], in col
    (c*size*size x (y1-y0)*out_w, row r = (channel, ky, kx))."""
    cn = (y1 - y0) * out_w
    for ch in range(c):
        plane = base + ch * h * w
        for ky in range(size):
            for kx in range(size):
                r = ((ch * size + ky) * size + kx) * cn
                col0 = kx - pad
                lo, hi = valid_span(col0, stride, out_w, w)
                for y in range(y0, y1):
                    dst = r + (y - y0) * out_w
                    iy = y * stride - pad + ky
                    if iy < 0 or iy >= h or hi <= lo:
                        for j in range(out_w):
                            col[dst + j] = 0.0
                        continue
                    for j in range(lo):
                        col[dst + j] = 0.0
                    src = plane + iy * w + col0
                    if stride == 1:
                        for j in range(lo, hi):
                            col[dst + j] = x[src + j]
                    elif stride == 2:                   # a constant stride: loads vectorise
                        for j in range(lo, hi):
                            col[dst + j] = x[src + 2 * j]
                    else:
                        for j in range(lo, hi):
                            col[dst + j] = x[src + j * stride]
                    for j in range(hi, out_w):
                        col[dst + j] = 0.0


@njit(parallel=True, cache=True)
def conv_blocks_cpu(x, batch, c, h, w, size, stride, pad, weights, n, out, rows_per_block, cols,
                    bn_mean, bn_divisor, scales, biases, act):
    """out = conv(x, weights) by blocks of `rows_per_block` output rows (see the module); with
    `biases` non-empty each block's rows then get act(((v - bn_mean) / bn_divisor) * scales +
    biases) (batch norm: bn_mean non-empty) or act(v + biases), the operations of
    batchnorm_bias_activate / bias_activate in their order. cols: threads x (k * block
    columns) floats, unused by a 1x1 stride-1 convolution (its columns are the input's rows);
    the caller has checked every size (no bounds checks here) and set OpenBLAS
    to one thread (sgemm.single_threaded)."""
    out_h = (h + 2 * pad - size) // stride + 1
    out_w = (w + 2 * pad - size) // stride + 1
    k = c * size * size
    spatial = out_h * out_w
    per_image = (out_h + rows_per_block - 1) // rows_per_block
    blocks = batch * per_image
    threads = cols.shape[0]
    epilogue = biases.size > 0
    bn = bn_mean.size > 0
    pointwise = size == 1 and stride == 1 and pad == 0
    for t in prange(threads):
        col = cols[t]
        for blk in range(t, blocks, threads):
            b = blk // per_image
            y0 = (blk % per_image) * rows_per_block
            y1 = min(out_h, y0 + rows_per_block)
            cn = (y1 - y0) * out_w
            first = b * n * spatial + y0 * out_w
            if pointwise:       # the input rows are the columns: c x cn, rows h*w apart
                sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, n, cn, k, np.float32(1.0),
                      weights.ctypes.data, k, x.ctypes.data + 4 * (b * c * h * w + y0 * w),
                      h * w, np.float32(0.0), out.ctypes.data + 4 * first, spatial)
            else:
                im2col_rows(x, b * c * h * w, c, h, w, size, stride, pad, out_w, y0, y1, col)
                sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, n, cn, k, np.float32(1.0),
                      weights.ctypes.data, k, col.ctypes.data, cn, np.float32(0.0),
                      out.ctypes.data + 4 * first, spatial)
            if epilogue:
                for f in range(n):
                    row = out[first + f * spatial:first + f * spatial + cn]
                    if bn:
                        normalize_scale_bias_row(row, bn_mean[f], bn_divisor[f], scales[f],
                                                 biases[f])
                    else:
                        add_bias_row(row, biases[f])
                    activate_row(row, act)


@njit(cache=True)
def col2im_rows(col, c, h, w, size, stride, pad, out_w, y0, y1, x, base):
    """Adds the column matrix of output rows y0..y1-1 (as im2col_rows lays it out) back into
    the pixels of the image at x[base:] they were taken from (col2im of a row range)."""
    cn = (y1 - y0) * out_w
    for ch in range(c):
        plane = base + ch * h * w
        for ky in range(size):
            for kx in range(size):
                r = ((ch * size + ky) * size + kx) * cn
                col0 = kx - pad
                lo, hi = valid_span(col0, stride, out_w, w)
                if hi <= lo:
                    continue
                for y in range(y0, y1):
                    iy = y * stride - pad + ky
                    if iy < 0 or iy >= h:
                        continue
                    src = r + (y - y0) * out_w
                    dst = plane + iy * w + col0
                    if stride == 1:
                        for j in range(lo, hi):
                            x[dst + j] += col[src + j]
                    else:
                        for j in range(lo, hi):
                            x[dst + j * stride] += col[src + j]


@njit(cache=True)
def _backward_block(x, blk, per_image, c, h, w, size, stride, pad, weights, n, delta,
                    rows_per_block, out_h, out_w, col, colgrad, dw_t, dx):
    """One block's share of the backward (see conv_blocks_backward_cpu)."""
    k = c * size * size
    spatial = out_h * out_w
    b = blk // per_image
    y0 = (blk % per_image) * rows_per_block
    y1 = min(out_h, y0 + rows_per_block)
    cn = (y1 - y0) * out_w
    im2col_rows(x, b * c * h * w, c, h, w, size, stride, pad, out_w, y0, y1, col)
    d = delta.ctypes.data + 4 * (b * n * spatial + y0 * out_w)       # n x cn, rows spatial apart
    # dw_t (k x n) += col (k x cn) @ delta_block^T
    sgemm(ROW_MAJOR, NO_TRANS, TRANS, k, n, cn, np.float32(1.0), col.ctypes.data, cn, d, spatial,
          np.float32(1.0), dw_t.ctypes.data, n)
    if dx.size > 0:
        # the block's column gradient (k x cn) = weights^T @ delta_block, added back into dx
        sgemm(ROW_MAJOR, TRANS, NO_TRANS, k, cn, n, np.float32(1.0), weights.ctypes.data, k, d,
              spatial, np.float32(0.0), colgrad.ctypes.data, cn)
        col2im_rows(colgrad, c, h, w, size, stride, pad, out_w, y0, y1, dx, b * c * h * w)


@njit(parallel=True, cache=True)
def conv_blocks_backward_cpu(x, batch, c, h, w, size, stride, pad, weights, n, delta,
                             rows_per_block, cols, colgrads, dw_parts, dx):
    """The convolution's gradients by blocks of output rows: dw_parts[t] (k x n, zeroed here)
    += each block's columns times its delta rows (thread t's blocks); with dx non-empty, the
    input gradient W^T @ delta of each block added into dx through col2im_rows.

    Each thread takes a run of consecutive blocks. The input rows a block's gradient touches
    overlap only its neighbours' (the caller ensures (rows_per_block + 1) * stride >= size), so
    the threads first do all but the last block of their runs, then, after the others are
    done, their last blocks, which are at least one block apart."""
    out_h = (h + 2 * pad - size) // stride + 1
    out_w = (w + 2 * pad - size) // stride + 1
    per_image = (out_h + rows_per_block - 1) // rows_per_block
    blocks = batch * per_image
    threads = cols.shape[0]
    for t in prange(threads):
        dw_parts[t] = 0.0
        lo = blocks * t // threads
        hi = blocks * (t + 1) // threads
        for blk in range(lo, hi - 1):
            _backward_block(x, blk, per_image, c, h, w, size, stride, pad, weights, n, delta,
                            rows_per_block, out_h, out_w, cols[t], colgrads[t], dw_parts[t], dx)
    for t in prange(threads):
        lo = blocks * t // threads
        hi = blocks * (t + 1) // threads
        if hi > lo:
            _backward_block(x, hi - 1, per_image, c, h, w, size, stride, pad, weights, n, delta,
                            rows_per_block, out_h, out_w, cols[t], colgrads[t], dw_parts[t], dx)
