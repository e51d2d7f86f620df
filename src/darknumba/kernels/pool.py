"""Max and average pooling (Darknet's `maxpool_layer.c`, `avgpool_layer.c`).

Maxpool: the window's top-left is at ``-pad//2`` (C integer division of a non-negative pad);
cells outside the image never win (treated as -FLT_MAX); ties go to the first maximum in
(ky, kx) scan order; ``indexes`` records the flat input index of each winner.
"""
import numpy as np
from numba import njit, prange

FLT_MAX = np.float32(3.4028234663852886e38)


@njit(parallel=True, cache=True)
def forward_maxpool_cpu(inp, batch, c, h, w, size, stride, pad, out_h, out_w, output, indexes):
    w_offset = -(pad // 2)
    h_offset = -(pad // 2)
    for bki in prange(batch * c * out_h):
        i = bki % out_h
        bk = bki // out_h
        in_base = bk * h * w
        out_base = bki * out_w
        for j in range(out_w):
            best = -FLT_MAX
            best_i = -1
            for n in range(size):
                cur_h = h_offset + i * stride + n
                if cur_h < 0 or cur_h >= h:
                    continue
                for m in range(size):
                    cur_w = w_offset + j * stride + m
                    if cur_w < 0 or cur_w >= w:
                        continue
                    index = in_base + cur_h * w + cur_w
                    val = inp[index]
                    if val > best:
                        best = val
                        best_i = index
            output[out_base + j] = best
            indexes[out_base + j] = best_i


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
