"""reorg_cpu and flatten (Darknet's `blas.c`): fixed permutations of an activation buffer.

reorg_cpu treats the same flat buffer two ways: as ``batch x c x h x w`` (the "in" view) and as
``batch x c/s² x h·s x w·s`` (the "out" view), where channel k of the in view lands in channel
k % (c/s²) of the out view at offset (k // (c/s²)) within each s x s block.
forward=1 writes in -> out, forward=0 writes out -> in. `accumulate` adds instead of writing.
"""
from numba import njit, prange


@njit(parallel=True, cache=True)
def reorg_cpu(x, w, h, c, batch, stride, forward, out, accumulate):
    out_c = c // (stride * stride)
    for bk in prange(batch * c):
        b = bk // c
        k = bk % c
        c2 = k % out_c
        offset = k // out_c
        for j in range(h):
            for i in range(w):
                in_index = i + w * (j + h * (k + c * b))
                w2 = i * stride + offset % stride
                h2 = j * stride + offset // stride
                out_index = w2 + w * stride * (h2 + h * stride * (c2 + out_c * b))
                if forward:
                    if accumulate:
                        out[out_index] += x[in_index]
                    else:
                        out[out_index] = x[in_index]
                else:
                    if accumulate:
                        out[in_index] += x[out_index]
                    else:
                        out[in_index] = x[out_index]


@njit(parallel=True, cache=True)
def flatten_cpu(x, size, layers, batch, forward, out, accumulate):
    """flatten: channel-major (layers x size) <-> pixel-major (size x layers), per image.
    Darknet transposes in place through a scratch copy; here x and out are distinct."""
    for b in prange(batch):
        for c in range(layers):
            for i in range(size):
                i1 = b * layers * size + c * size + i
                i2 = b * layers * size + i * layers + c
                if forward:
                    src, dst = i1, i2
                else:
                    src, dst = i2, i1
                if accumulate:
                    out[dst] += x[src]
                else:
                    out[dst] = x[src]
