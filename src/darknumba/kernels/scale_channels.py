"""AlexeyAB's [sam] (`sam_layer.c`) and [scale_channels] (`scale_channels_layer.c`): the
output is the `from` layer's output multiplied elementwise (sam), per channel (scale_channels:
the input is 1 x 1 x c), or per pixel (scale_channels scale_wh=1: the input is w x h x 1).
Layout: batch x c x spatial, the `from` layer's shape."""
from numba import njit, prange


@njit(parallel=True, cache=True)
def forward_sam_cpu(n, inp, from_output, output):
    for i in prange(n):
        output[i] = inp[i] * from_output[i]


@njit(parallel=True, cache=True)
def backward_sam_cpu(n, delta, inp, from_output, prev_delta, from_delta, overwrite):
    """prev_delta += delta * from; from_delta += input * delta (= with `overwrite`, AlexeyAB's
    CPU code). prev_delta may be empty (layer 0)."""
    for i in prange(n):
        if prev_delta.size:
            prev_delta[i] += delta[i] * from_output[i]
        if overwrite:
            from_delta[i] = inp[i] * delta[i]
        else:
            from_delta[i] += inp[i] * delta[i]


@njit(parallel=True, cache=True)
def forward_scale_channels_cpu(batch, c, spatial, scale_wh, inp, from_output, output):
    """output[b, k, p] = from[b, k, p] * input[b, k] (or input[b, p] with scale_wh)."""
    for bk in prange(batch * c):
        b = bk // c
        base = bk * spatial
        if scale_wh:
            s = inp[b * spatial:(b + 1) * spatial]
            for p in range(spatial):
                output[base + p] = s[p] * from_output[base + p]
        else:
            v = inp[bk]
            for p in range(spatial):
                output[base + p] = v * from_output[base + p]


@njit(parallel=True, cache=True)
def backward_scale_channels_cpu(batch, c, spatial, scale_wh, delta, inp, from_output,
                                prev_delta, from_delta):
    """from_delta += input * delta; prev_delta (the scales' gradient) += sum of delta * from
    over each scale's values, added in AlexeyAB's order (the map's flat order). prev_delta may
    be empty (layer 0)."""
    has_prev = prev_delta.size > 0
    if scale_wh:
        for bp in prange(batch * spatial):
            b = bp // spatial
            p = bp % spatial
            s = inp[bp]
            for k in range(c):
                i = (b * c + k) * spatial + p
                if has_prev:
                    prev_delta[bp] += delta[i] * from_output[i]
                from_delta[i] += s * delta[i]
    else:
        for bk in prange(batch * c):
            base = bk * spatial
            s = inp[bk]
            for p in range(spatial):
                if has_prev:
                    prev_delta[bk] += delta[base + p] * from_output[base + p]
                from_delta[base + p] += s * delta[base + p]


@njit(cache=True)
def backward_implicit_cpu(batch, nweights, delta, weight_updates):
    """weight_updates[k] += delta[b, k] for each image in turn (backward_implicit_layer)."""
    for b in range(batch):
        for k in range(nweights):
            weight_updates[k] += delta[b * nweights + k]

