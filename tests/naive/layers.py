"""Convolution and the other layers' arithmetic, written from Darknet's definitions with plain
loops or numpy indexing, in float64 (the float32 inputs are widened first).

Layouts as in darknumba: activations flat `batch x c x h x w`; conv weights
`n x c/groups x size x size`; local weights `out_h*out_w x n x c x size x size`;
deconvolutional weights `c x n x size x size`.
"""
import numpy as np

from .im2col import im2col_cpu, out_size


def sigmoid(v):
    return 1 / (1 + np.exp(-np.asarray(v, np.float64)))


ACTIVATIONS = {   # Darknet's activate(), by name
    "logistic": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "relie": lambda x: np.where(x > 0, x, 0.01 * x),
    "linear": lambda x: x,
    "ramp": lambda x: np.maximum(x, 0) + 0.1 * x,
    "tanh": np.tanh,
    "plse": lambda x: np.where(x < -4, 0.01 * (x + 4), np.where(x > 4, 0.01 * (x - 4) + 1, 0.125 * x + 0.5)),
    "leaky": lambda x: np.where(x > 0, x, 0.1 * x),
    "elu": lambda x: np.where(x >= 0, x, np.expm1(x)),
    "loggy": lambda x: 2 / (1 + np.exp(-x)) - 1,
    "stair": lambda x: np.where(np.floor(x) % 2 == 0, np.floor(x / 2), x - np.floor(x) + np.floor(x / 2)),
    "hardtan": lambda x: np.clip(x, -1, 1),
    "lhtan": lambda x: np.where(x < 0, 0.001 * x, np.where(x > 1, 0.001 * (x - 1) + 1, x)),
    "selu": lambda x: np.where(x >= 0, 1.0507 * x, 1.0507 * 1.6732 * np.expm1(x)),
}


# -- convolution -------------------------------------------------------------------------------
def conv_forward(x, weights, biases, batch, c, h, w, n, size, stride, pad, groups):
    """forward_convolutional_layer without batch norm or activation: per image and group the
    column matrix (im2col_cpu, Darknet's loops) times the group's filters, plus the biases.
    Returns (batch x n x out_h x out_w) in float64."""
    cg, m = c // groups, n // groups
    oh, ow = out_size(h, size, stride, pad), out_size(w, size, stride, pad)
    x = np.asarray(x, np.float32).reshape(batch, groups, cg * h * w)
    W = np.asarray(weights, np.float64).reshape(groups, m, cg * size * size)
    out = np.zeros((batch, groups, m, oh * ow))
    col = np.zeros(cg * size * size * oh * ow, np.float32)
    for b in range(batch):
        for g in range(groups):
            im2col_cpu(x[b, g], cg, h, w, size, stride, pad, col)
            out[b, g] = W[g] @ col.reshape(-1, oh * ow).astype(np.float64)
    out = out.reshape(batch, n, oh, ow)
    return out + np.asarray(biases, np.float64)[None, :, None, None]


def conv_backward(x, w, delta, batch, c, h, wd, n, size, stride, pad, groups):
    """(weight gradient, input gradient) of out[b, f, oy, ox] = sum w[f, ci, ky, kx] *
    x[b, g*cg + ci, oy*stride + ky - pad, ox*stride + kx - pad], given delta = d/d(out)."""
    cg, m = c // groups, n // groups
    oh = (h + 2 * pad - size) // stride + 1
    ow = (wd + 2 * pad - size) // stride + 1
    x = x.astype(np.float64).reshape(batch, c, h, wd)
    w = w.astype(np.float64).reshape(n, cg, size, size)
    d = delta.astype(np.float64).reshape(batch, n, oh, ow)
    dw = np.zeros_like(w)
    dx = np.zeros_like(x)
    for f in range(n):
        g = f // m
        for ci in range(cg):
            for ky in range(size):
                for kx in range(size):
                    for oy in range(oh):
                        iy = oy * stride + ky - pad
                        if not 0 <= iy < h:
                            continue
                        for ox in range(ow):
                            ix = ox * stride + kx - pad
                            if not 0 <= ix < wd:
                                continue
                            dw[f, ci, ky, kx] += np.dot(d[:, f, oy, ox], x[:, g * cg + ci, iy, ix])
                            dx[:, g * cg + ci, iy, ix] += w[f, ci, ky, kx] * d[:, f, oy, ox]
    return dw.ravel(), dx.ravel()


def local_forward(x, W, B, n, size, stride, pad):
    """forward_local_layer: a convolution with its own filters at every output pixel; pad is
    the cfg's flag (output (h - 1) / stride + 1 with it, (h - size) / stride + 1 without)."""
    b, c, h, w = x.shape
    oh = ((h - 1) if pad else (h - size)) // stride + 1
    ow = ((w - 1) if pad else (w - size)) // stride + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    W = W.reshape(oh * ow, n, c, size, size)
    out = np.zeros((b, n, oh, ow))
    for y in range(oh):
        for xx in range(ow):
            patch = xp[:, :, y * stride:y * stride + size, xx * stride:xx * stride + size]
            out[:, :, y, xx] = np.einsum("bcij,ncij->bn", patch, W[y * ow + xx])
    return out + B.reshape(1, n, oh, ow)


def deconv_forward(x, W, B, n, size, stride, pad):
    """forward_deconvolutional_layer: every input pixel adds its weighted c x n x size x size
    kernel into the output at (y * stride, x * stride), then the border `pad` is cut off."""
    b, c, h, w = x.shape
    oh, ow = (h - 1) * stride + size - 2 * pad, (w - 1) * stride + size - 2 * pad
    full = np.zeros((b, n, (h - 1) * stride + size, (w - 1) * stride + size))
    W = W.reshape(c, n, size, size).astype(np.float64)
    for y in range(h):
        for xx in range(w):
            full[:, :, y * stride:y * stride + size, xx * stride:xx * stride + size] += \
                np.einsum("bc,cnij->bnij", x[:, :, y, xx], W)
    return full[:, :, pad:pad + oh, pad:pad + ow] + B[None, :, None, None]


# -- pooling -----------------------------------------------------------------------------------
def maxpool_forward(x, b, c, h, w, size, stride, pad):
    """(output, winners' flat input indexes) of forward_maxpool_layer: windows start at
    -pad/2, ties go to the first in scan order, an all-padding window keeps -FLT_MAX."""
    oh = (h + pad - size) // stride + 1
    ow = (w + pad - size) // stride + 1
    x = x.reshape(b, c, h, w)
    out = np.empty((b, c, oh, ow), np.float32)
    idx = np.empty((b, c, oh, ow), np.int64)
    off = -(pad // 2)
    for i in range(oh):
        for j in range(ow):
            best = np.full((b, c), np.finfo(np.float32).min, np.float32)   # -FLT_MAX, as C
            bi = np.full((b, c), -1)
            for n in range(size):
                for m in range(size):
                    y0, x0 = off + i * stride + n, off + j * stride + m
                    if 0 <= y0 < h and 0 <= x0 < w:
                        v = x[:, :, y0, x0]
                        better = v > best
                        best = np.where(better, v, best)
                        flat = ((np.arange(b)[:, None] * c + np.arange(c)[None]) * h + y0) * w + x0
                        bi = np.where(better, flat, bi)
            out[:, :, i, j] = best
            idx[:, :, i, j] = bi
    return out.ravel(), idx.ravel()


# -- normalization -----------------------------------------------------------------------------
def batchnorm_backward(delta, x, x_norm, mean, variance, scales, batch, c, spatial):
    """(bias_updates, scale_updates, mean_delta, variance_delta, delta w.r.t. x) of Darknet's
    batch-norm backward formulas (backward epsilon 1e-5 inside the sqrt, N not N - 1)."""
    d = delta.astype(np.float64).reshape(batch, c, spatial)
    x = x.astype(np.float64).reshape(batch, c, spatial)
    xn = x_norm.astype(np.float64).reshape(batch, c, spatial)
    mean = mean.astype(np.float64)
    var = variance.astype(np.float64) + 1e-5
    bias_up = d.sum(axis=(0, 2))
    scale_up = (d * xn).sum(axis=(0, 2))
    d = d * scales.astype(np.float64)[None, :, None]
    mean_delta = -d.sum(axis=(0, 2)) / np.sqrt(var)
    xc = x - mean[None, :, None]
    var_delta = -0.5 * (d * xc).sum(axis=(0, 2)) * var ** -1.5
    N = batch * spatial
    out = d / np.sqrt(var)[None, :, None] + var_delta[None, :, None] * 2 * xc / N \
        + mean_delta[None, :, None] / N
    return bias_up, scale_up, mean_delta, var_delta, out.ravel()


def lrn_forward(x, size, alpha, beta, kappa):
    """(output, norms) of forward_normalization_layer. Darknet's norms: the first window
    covers channels q < size/2 (one short of the textbook q <= size/2), then each step
    subtracts channel k-(size-1)/2-1 and adds channel k+size/2."""
    b, c, h, w = x.shape
    sq = x.astype(np.float64) ** 2
    norms = np.empty_like(sq)
    n = kappa + alpha * sq[:, :size // 2].sum(axis=1)
    for k in range(c):
        if k > 0:
            if k - (size - 1) // 2 - 1 >= 0:
                n = n - alpha * sq[:, k - (size - 1) // 2 - 1]
            if k + size // 2 < c:
                n = n + alpha * sq[:, k + size // 2]
        norms[:, k] = n
    return x * norms ** -beta, norms


# -- reorg -------------------------------------------------------------------------------------
def reorg(x, stride, forward_flag):
    """Darknet's reorg_cpu index formula, written with numpy indices."""
    b, c, h, w = x.shape
    out_c = c // (stride * stride)
    k, j, i = np.meshgrid(np.arange(c), np.arange(h), np.arange(w), indexing="ij")
    c2, off = k % out_c, k // out_c
    w2, h2 = i * stride + off % stride, j * stride + off // stride
    out = np.zeros(x.size, np.float32)
    for bb in range(b):
        in_idx = (i + w * (j + h * (k + c * bb))).ravel()
        out_idx = (w2 + w * stride * (h2 + h * stride * (c2 + out_c * bb))).ravel()
        if forward_flag:
            out[out_idx] = x.ravel()[in_idx]
        else:
            out[in_idx] = x.ravel()[out_idx]
    return out
