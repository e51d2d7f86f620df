"""im2col / col2im (Darknet's `im2col.c`, `col2im.c`), for one image or a batch side by side.

data_im:  [batch x] channels x height x width
data_col: (channels*ksize*ksize) x ([batch x] height_col*width_col), row c = (c_im, ky, kx)
"""
from numba import njit, prange


@njit(cache=True, inline="always")
def valid_span(col0, stride, n_out, width):
    """[lo, hi): the outputs j whose input column col0 + j*stride lies in [0, width)."""
    lo = 0
    if col0 < 0:
        lo = (-col0 + stride - 1) // stride
    hi = n_out
    last = col0 + (n_out - 1) * stride
    if last >= width:
        hi = n_out - ((last - width) // stride + 1)
    return lo, max(hi, lo)


@njit(cache=True)
def im2col_cpu(data_im, channels, height, width, ksize, stride, pad, data_col):
    """Darknet's im2col_cpu: one image; the column matrix's row c = (c_im, ky, kx)."""
    im2col_batch_cpu(data_im, 1, channels, height, width, ksize, stride, pad, data_col)


@njit(cache=True)
def col2im_cpu(data_col, channels, height, width, ksize, stride, pad, data_im):
    """Darknet's col2im_cpu, the adjoint of im2col: *adds* each column entry back into its
    pixel of data_im."""
    col2im_batch_cpu(data_col, 1, channels, height, width, ksize, stride, pad, data_im)


@njit(parallel=True, cache=True)
def im2col_batch_cpu(data_im, batch, channels, height, width, ksize, stride, pad, data_col):
    """im2col of `batch` images side by side: data_col is (channels*ksize*ksize) x
    (batch*height_col*width_col), image b in columns [b*N, (b+1)*N). One large GEMM then covers
    the whole batch."""
    height_col = (height + 2 * pad - ksize) // stride + 1
    width_col = (width + 2 * pad - ksize) // stride + 1
    n = height_col * width_col
    ld = batch * n
    channels_col = channels * ksize * ksize
    # one (row of the column matrix, image, output row) per iteration: each owns its writes
    for cbh in prange(channels_col * batch * height_col):
        h = cbh % height_col
        b = (cbh // height_col) % batch
        c = cbh // (height_col * batch)
        w_offset = c % ksize
        h_offset = (c // ksize) % ksize
        c_im = c // ksize // ksize
        im_row = h_offset + h * stride - pad
        base = c * ld + b * n + h * width_col
        dst = data_col[base:base + width_col]
        if im_row < 0 or im_row >= height:
            dst[:] = 0.0
            continue
        # output columns whose input column w_offset + w*stride - pad lies inside the image
        col0 = w_offset - pad
        w_lo, w_hi = valid_span(col0, stride, width_col, width)
        dst[:w_lo] = 0.0
        if w_hi > w_lo:
            first = ((b * channels + c_im) * height + im_row) * width + col0 + w_lo * stride
            # slices, not computed indices: numba then skips its negative-index checks and the
            # copy vectorises
            dst[w_lo:w_hi] = data_im[first:first + (w_hi - w_lo - 1) * stride + 1:stride]
        dst[w_hi:] = 0.0


@njit(parallel=True, cache=True)
def col2im_batch_cpu(data_col, batch, channels, height, width, ksize, stride, pad, data_im):
    """Adjoint of im2col_batch_cpu: adds the columns of image b back into image b of data_im.
    Parallel over (image, channel): each thread owns the pixels it adds into."""
    height_col = (height + 2 * pad - ksize) // stride + 1
    width_col = (width + 2 * pad - ksize) // stride + 1
    n = height_col * width_col
    ld = batch * n
    for bc in prange(batch * channels):
        b = bc // channels
        c_im = bc % channels
        im_base = bc * height * width
        for kk in range(ksize * ksize):
            c = c_im * ksize * ksize + kk
            w_offset = kk % ksize
            h_offset = kk // ksize
            col0 = w_offset - pad
            w_lo, w_hi = valid_span(col0, stride, width_col, width)
            if w_hi <= w_lo:
                continue
            for h in range(height_col):
                im_row = h_offset + h * stride - pad
                if im_row < 0 or im_row >= height:
                    continue
                src = data_col[c * ld + b * n + h * width_col:][w_lo:w_hi]
                first = im_base + im_row * width + col0 + w_lo * stride
                dst = data_im[first:first + (w_hi - w_lo - 1) * stride + 1:stride]
                for w in range(w_hi - w_lo):
                    dst[w] += src[w]
