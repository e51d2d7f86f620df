"""Max and average pooling (Darknet's `maxpool_layer.c`, `avgpool_layer.c`).

Maxpool: the window's top-left is at ``-pad//2`` (C integer division of a non-negative pad);
cells outside the image never win (treated as -FLT_MAX); ties go to the first maximum in
(ky, kx) scan order; ``indexes`` records the flat input index of each winner.
"""
import numpy as np
from numba import njit, prange

from .im2col import valid_span

FLT_MAX = np.float32(3.4028234663852886e38)


@njit(parallel=True, cache=True)
def forward_maxpool_cpu(inp, batch, c, h, w, size, stride, pad, out_h, out_w, output, indexes,
                        want_indexes=True):
    """One output row per iteration. The window offsets (n, m) are visited in Darknet's scan
    order and each sweeps the whole row with a strict `>`, so ties resolve exactly as in C;
    each offset's in-bounds columns form one interval, so the inner loop has no bounds test.
    With want_indexes False (inference) the winners' positions are not recorded."""
    w_offset = -(pad // 2)
    h_offset = -(pad // 2)
    for bki in prange(batch * c * out_h):
        i = bki % out_h
        in_base = (bki // out_h) * h * w
        out_base = bki * out_w
        out_row = output[out_base:out_base + out_w]
        idx_row = indexes[out_base:out_base + out_w]
        out_row[:] = -FLT_MAX
        idx_row[:] = -1
        for n in range(size):
            cur_h = h_offset + i * stride + n
            if cur_h < 0 or cur_h >= h:
                continue
            row = in_base + cur_h * w
            for m in range(size):
                col0 = w_offset + m                    # input column of output column 0
                j_lo, j_hi = valid_span(col0, stride, out_w, w)
                if j_hi <= j_lo:
                    continue
                first = row + col0 + j_lo * stride
                # slices (not computed indices) let the loop vectorise; selects, not branches
                src = inp[first:first + (j_hi - j_lo - 1) * stride + 1:stride]
                o = out_row[j_lo:j_hi]
                ix = idx_row[j_lo:j_hi]
                if want_indexes:
                    for j in range(j_hi - j_lo):
                        val = src[j]
                        better = val > o[j]
                        o[j] = val if better else o[j]
                        ix[j] = np.int32(first + j * stride) if better else ix[j]
                else:
                    for j in range(j_hi - j_lo):
                        o[j] = max(o[j], src[j])


@njit(parallel=True, cache=True)
def backward_maxpool_cpu(delta, indexes, n, prev_delta, batch, in_per_image, out_per_image):
    """prev_delta[indexes[i]] += delta[i]. Winners of image b lie in image b's input, so
    threads split over images own their writes."""
    for b in prange(batch):
        for k in range(out_per_image):
            i = b * out_per_image + k
            idx = indexes[i]
            if idx >= 0:
                prev_delta[idx] += delta[i]


@njit(parallel=True, cache=True)
def forward_avgpool_cpu(inp, batch, c, spatial, output):
    """Global average pool: output[b, k] = mean of input[b, k, :, :]."""
    for bk in prange(batch * c):
        acc = 0.0
        base = bk * spatial
        for i in range(spatial):
            acc += inp[base + i]
        output[bk] = np.float32(acc / spatial)


@njit(parallel=True, cache=True)
def backward_avgpool_cpu(delta, batch, c, spatial, prev_delta):
    for bk in prange(batch * c):
        d = delta[bk] / np.float32(spatial)
        base = bk * spatial
        for i in range(spatial):
            prev_delta[base + i] += d
