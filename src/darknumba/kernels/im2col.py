"""im2col / col2im (Darknet's `im2col.c`, `col2im.c`), for one image or a batch side by side.

data_im:  [batch x] channels x height x width
data_col: (channels*ksize*ksize) x ([batch x] height_col*width_col), row c = (c_im, ky, kx)
"""
import numpy as np
from numba import njit, prange

# im2col_batch_cpu splits each plane's blocks between iterations below this many planes
FEW_PLANES = 16


@njit(cache=True, inline="always")
def valid_span(col0, stride, n_out, width):
    """[lo, hi): the outputs j whose input column col0 + j*stride lies in [0, width); always
    0 <= lo <= hi <= n_out, empty when none does."""
    lo = 0
    if col0 < 0:
        lo = min(n_out, (-col0 + stride - 1) // stride)
    hi = n_out
    last = col0 + (n_out - 1) * stride
    if last >= width:
        hi = n_out - ((last - width) // stride + 1)
    return lo, max(hi, lo)


def im2col_cpu(data_im, channels, height, width, ksize, stride, pad, data_col):
    """Darknet's im2col_cpu: one image; the column matrix's row c = (c_im, ky, kx). A Python
    call of the batch kernel with batch 1: the same compiled signature as a batch's (an @njit
    wrapper would compile a second one, specialised on the literal 1, for seconds)."""
    im2col_batch_cpu(data_im, 1, channels, height, width, ksize, stride, pad, data_col)


def col2im_cpu(data_col, channels, height, width, ksize, stride, pad, data_im):
    """Darknet's col2im_cpu, the adjoint of im2col: *adds* each column entry back into its
    pixel of data_im (the batch kernel with batch 1, as im2col_cpu)."""
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
    # one (channel, image) per iteration: it owns its ksize*ksize blocks of n columns, and
    # the index arithmetic (divisions) is paid once per block, not once per output row, which
    # dominated on small maps (13x13: 10 ms for one 512-channel layer at batch 8); with few
    # planes (a 3-channel input at batch 1: 3 iterations for 2 threads) one block per
    # iteration instead, so that the threads share the work evenly
    kk2 = ksize * ksize
    parts = kk2 if channels * batch < FEW_PLANES else 1
    for cbp in prange(channels * batch * parts):
        cb = cbp // parts
        c_im = cb // batch
        b = cb % batch
        im_base = (b * channels + c_im) * height * width
        part = cbp % parts
        for kk in range(part * kk2 // parts, (part + 1) * kk2 // parts):
            w_offset = kk % ksize
            h_offset = kk // ksize
            c = c_im * ksize * ksize + kk
            base = c * ld + b * n
            if stride == 1 and width_col == width:
                _shifted_block(data_col, base, data_im, im_base, height, width, height_col,
                               h_offset - pad, w_offset - pad)
                continue
            # output columns whose input column w_offset + w*stride - pad lies inside the image
            col0 = w_offset - pad
            w_lo, w_hi = valid_span(col0, stride, width_col, width)
            for h in range(height_col):
                row = base + h * width_col
                im_row = h_offset + h * stride - pad
                if im_row < 0 or im_row >= height or w_hi <= w_lo:
                    for w in range(width_col):
                        data_col[row + w] = 0.0
                    continue
                # plain loops: rows are often short (13 columns), where slice objects and
                # their checks cost more than the copy
                for w in range(w_lo):
                    data_col[row + w] = 0.0
                first = im_base + im_row * width + col0
                if stride == 2 and w_hi - w_lo >= 64:   # slices and a constant stride vectorise
                    dst = data_col[row + w_lo:row + w_hi]
                    src = data_im[first + 2 * w_lo:first + 2 * w_hi - 1]
                    for w in range(w_hi - w_lo):
                        dst[w] = src[2 * w]
                elif w_hi - w_lo < 64 or stride != 1:
                    for w in range(w_lo, w_hi):
                        data_col[row + w] = data_im[first + w * stride]
                else:                                # long rows: slices vectorise
                    data_col[row + w_lo:row + w_hi] = data_im[first + w_lo:first + w_hi]
                for w in range(w_hi, width_col):
                    data_col[row + w] = 0.0


@njit(cache=True, inline="always")
def _shifted_span(im_base, height, width, height_col, dy, dx):
    """For a stride-1 same-width block whose entry (h, w) is pixel (h + dy, w + dx) of the
    plane at im_base: the rows [h_lo, h_hi) that fall inside the image, and the contiguous run
    [lo, hi) of block entries with the flat pixel index of its first entry. The run is the
    rows' entries clipped to the plane: the one or two entries clipped at its ends, like those
    that wrap to the neighbouring row, have their column outside the image."""
    h_lo = min(height_col, max(0, -dy))
    h_hi = max(h_lo, min(height_col, height - dy))
    lo = h_lo * width
    hi = h_hi * width
    first = im_base + (h_lo + dy) * width + dx
    if first < im_base:
        lo += im_base - first
        first = im_base
    plane_end = im_base + height * width
    if first + (hi - lo) > plane_end:
        hi = lo + plane_end - first
    return h_lo, h_hi, lo, max(lo, hi), first


@njit(cache=True, inline="always")
def _shifted_block(data_col, base, data_im, im_base, height, width, height_col, dy, dx):
    """One column-matrix block of a stride-1 'same-width' convolution: entry (h, w) is pixel
    (h + dy, w + dx), i.e. the flat image shifted by dy*width + dx. Copied as one contiguous
    run (long vector copies, not one short row at a time), then the entries whose column
    wrapped to the neighbouring row (w + dx outside [0, width)) are zeroed."""
    h_lo, h_hi, lo, hi, src_lo = _shifted_span(im_base, height, width, height_col, dy, dx)
    block = data_col[base:base + height_col * width]
    block[:h_lo * width] = 0.0
    block[h_hi * width:] = 0.0
    if h_hi <= h_lo:
        return
    block[lo:hi] = data_im[src_lo:src_lo + hi - lo]
    if dx < 0:
        for h in range(h_lo, h_hi):
            for w in range(-dx):
                block[h * width + w] = 0.0
    elif dx > 0:
        for h in range(h_lo, h_hi):
            for w in range(width - dx, width):
                block[h * width + w] = 0.0


@njit(parallel=True, cache=True)
def col2im_batch_cpu(data_col, batch, channels, height, width, ksize, stride, pad, data_im):
    """Adjoint of im2col_batch_cpu: adds the columns of image b back into image b of data_im.
    Parallel over (image, channel): each thread owns the pixels it adds into."""
    height_col = (height + 2 * pad - ksize) // stride + 1
    width_col = (width + 2 * pad - ksize) // stride + 1
    n = height_col * width_col
    ld = batch * n
    same = stride == 1 and width_col == width
    # stride-1 'same-width': keep[kx, i] says whether column entry i of a kernel-column-kx
    # block maps to a pixel of its own row (not one wrapped to the neighbouring row)
    keep = np.zeros((ksize if same else 0, n), np.bool_)
    for kx in range(keep.shape[0]):
        for i in range(n):
            keep[kx, i] = 0 <= i % width + kx - pad < width
    for bc in prange(batch * channels):
        b = bc // channels
        c_im = bc % channels
        im_base = bc * height * width
        for kk in range(ksize * ksize):
            c = c_im * ksize * ksize + kk
            w_offset = kk % ksize
            h_offset = kk // ksize
            if same:
                _add_shifted_block(data_im, im_base, data_col, c * ld + b * n, keep[w_offset],
                                   height, width, height_col, h_offset - pad, w_offset - pad)
                continue
            col0 = w_offset - pad
            w_lo, w_hi = valid_span(col0, stride, width_col, width)
            if w_hi <= w_lo:
                continue
            for h in range(height_col):
                im_row = h_offset + h * stride - pad
                if im_row < 0 or im_row >= height:
                    continue
                src = c * ld + b * n + h * width_col
                first = im_base + im_row * width + col0
                if w_hi - w_lo < 64:                 # short rows: a plain loop is cheapest
                    for w in range(w_lo, w_hi):
                        data_im[first + w * stride] += data_col[src + w]
                else:                                # long rows: slices vectorise
                    s_ = data_col[src + w_lo:src + w_hi]
                    d_ = data_im[first + w_lo * stride:first + (w_hi - 1) * stride + 1:stride]
                    for w in range(w_hi - w_lo):
                        d_[w] += s_[w]


@njit(cache=True, inline="always")
def _add_shifted_block(data_im, im_base, data_col, base, keep, height, width, height_col, dy, dx):
    """The adjoint of _shifted_block: adds block entry (h, w) into pixel (h + dy, w + dx) as one
    contiguous run over the flat image, entries wrapped to the neighbouring row (keep False)
    adding nothing. The block is read, never written."""
    h_lo, h_hi, lo, hi, dst_lo = _shifted_span(im_base, height, width, height_col, dy, dx)
    if h_hi <= h_lo:
        return
    src = data_col[base + lo:base + hi]
    k = keep[lo:hi]
    dst = data_im[dst_lo:dst_lo + hi - lo]
    for i in range(hi - lo):
        dst[i] += src[i] if k[i] else np.float32(0.0)



@njit(cache=True, inline="always")
def ext_out_size(size, ksize, stride, pad, dilation):
    """im2col_cpu_ext's output size: (size + 2*pad - (dilation*(ksize-1) + 1)) / stride + 1."""
    return (size + 2 * pad - (dilation * (ksize - 1) + 1)) // stride + 1


@njit(parallel=True, cache=True)
def im2col_cpu_ext(data_im, channels, height, width, ksize, pad, stride_h, stride_w, dilation,
                   data_col):
    """AlexeyAB's im2col_cpu_ext for a square kernel, padding and dilation: row (c_im, ky, kx),
    column (h, w) holds pixel (h*stride_h - pad + ky*dilation, w*stride_w - pad + kx*dilation)
    of channel c_im, 0 outside the image. `pad` counts input pixels (AlexeyAB passes
    pad*dilation)."""
    height_col = ext_out_size(height, ksize, stride_h, pad, dilation)
    width_col = ext_out_size(width, ksize, stride_w, pad, dilation)
    n = height_col * width_col
    for c in prange(channels * ksize * ksize):
        c_im = c // (ksize * ksize)
        ky = (c // ksize) % ksize
        kx = c % ksize
        plane = c_im * height * width
        for h in range(height_col):
            row = c * n + h * width_col
            y = h * stride_h - pad + ky * dilation
            for w in range(width_col):
                x = w * stride_w - pad + kx * dilation
                if 0 <= y < height and 0 <= x < width:
                    data_col[row + w] = data_im[plane + y * width + x]
                else:
                    data_col[row + w] = 0.0


@njit(parallel=True, cache=True)
def col2im_cpu_ext(data_col, channels, height, width, ksize, pad, stride_h, stride_w, dilation,
                   data_im):
    """The adjoint of im2col_cpu_ext: *adds* each column entry into its pixel (AlexeyAB's
    col2im_cpu_ext zeroes data_im first: see quirks.col2im_zeroes_delta). Parallel over
    channels, each owning its plane."""
    height_col = ext_out_size(height, ksize, stride_h, pad, dilation)
    width_col = ext_out_size(width, ksize, stride_w, pad, dilation)
    n = height_col * width_col
    for c_im in prange(channels):
        plane = c_im * height * width
        for kk in range(ksize * ksize):
            ky = kk // ksize
            kx = kk % ksize
            base = (c_im * ksize * ksize + kk) * n
            for h in range(height_col):
                y = h * stride_h - pad + ky * dilation
                if y < 0 or y >= height:
                    continue
                for w in range(width_col):
                    x = w * stride_w - pad + kx * dilation
                    if 0 <= x < width:
                        data_im[plane + y * width + x] += data_col[base + h * width_col + w]
