"""Plain numpy references for AlexeyAB's layers and activations, written from its C
(`activations.h/.c`, `route_layer.c`, `im2col.c`, `maxpool_layer.c`, `blas.c`,
`shortcut_layer.c`, `sam_layer.c`, `scale_channels_layer.c`, `representation_layer.c`):
slow, loop-per-definition, float32 where AlexeyAB computes in float (its `.1f` literals)."""
import numpy as np

F = np.float32


def logistic(x):
    return F(1) / (F(1) + np.exp(-x))


def tanh_ab(x):
    return F(2) / (F(1) + np.exp(F(-2) * x)) - F(1)


def softplus(x, t=F(20)):
    return np.where(x > t, x, np.where(x < -t, np.exp(x), np.log(np.exp(x) + F(1))))


def activate(name, x):
    """Elementwise forward of AlexeyAB's additions (x float32)."""
    x = x.astype(F)
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "relu6":
            return np.minimum(np.maximum(x, F(0)), F(6))
        if name == "revleaky":
            return np.where(x > 0, x, F(0.1) * x)
        if name == "gelu":
            arg = (0.797885 * x.astype(np.float64) + 0.035677 * (x ** 3).astype(np.float64))
            return (0.5 * x.astype(np.float64) * (F(1) + np.tanh(arg.astype(F)))).astype(F)
        if name == "swish":
            return x * logistic(x)
        if name == "mish":
            return x * tanh_ab(softplus(x))
        if name == "hard_mish":
            return np.where(x > 0, x, np.where(x > -2, x * x / F(2) + x, F(0)))
    raise KeyError(name)


def gradient(name, x, y):
    """AlexeyAB's d/dx, given the input x and the output y as its code uses them."""
    x, y = x.astype(F), y.astype(F)
    if name == "relu6":
        return ((y > 0) & (y < 6)).astype(F)
    if name == "revleaky":
        return np.where(y > 0, F(1), F(0.1))
    if name == "gelu":                       # evaluated on the output, as gradient_array does
        v3 = (y ** 3).astype(np.float64)
        u = (0.0356774 * v3 + 0.797885 * y.astype(np.float64)).astype(F)
        with np.errstate(over="ignore"):
            sech = F(2) / (np.exp(u) + np.exp(-u))
        g = (0.5 * np.tanh(u).astype(np.float64) + (0.0535161 * v3 + 0.398942 * y.astype(np.float64))
             * (sech * sech).astype(np.float64) + 0.5)
        return g.astype(F)
    if name == "swish":
        return y + logistic(x) * (F(1) - y)
    if name == "mish":
        sp = softplus(x)
        gsp = (1 - np.exp(-sp.astype(np.float64))).astype(F)
        tsp = np.tanh(sp.astype(np.float64)).astype(F)
        return x * ((F(1) - tsp * tsp) * gsp) + tsp
    if name == "hard_mish":
        return np.where(x > 0, F(1), np.where(x > -2, x + F(1), F(0)))
    raise KeyError(name)


def normalize_channels(x, kind):
    """x: (batch, c, h, w). kind: "" | "softmax" | "softmax_maxval"."""
    x = x.astype(np.float64)
    if kind == "":
        pos = np.where(x > 0, x, 0.0)
        return (pos / (1e-4 + pos.sum(axis=1, keepdims=True))).astype(F)
    m = x.max(axis=1, keepdims=True) if kind == "softmax_maxval" else 0.0
    e = np.exp(x - m)
    return (e / (1e-4 + e.sum(axis=1, keepdims=True))).astype(F)


def normalize_channels_delta(y, d, kind):
    """AlexeyAB's gradient_array_normalize_channels(_softmax): d * sum_c(y * d) per pixel (for
    normalize_channels only where y > 0)."""
    g = (y.astype(np.float64) * d).sum(axis=1, keepdims=True)
    out = d * g
    if kind == "":
        out = np.where(y > 0, out, d)
    return out.astype(F)


def conv_forward(x, w, b, n, size, stride, pad, groups=1, dilation=1):
    """out[b, f, oy, ox] = bias[f] + sum w[f, ci, ky, kx] * x[b, g*cg + ci, iy, ix] with
    iy = oy*stride_y - pad*dilation + ky*dilation (im2col_cpu_ext); the output size is
    AlexeyAB's convolutional_out_height, (h + 2*pad - size) / stride_y + 1. x: (B, C, H, W);
    stride: one int, or (stride_y, stride_x)."""
    bsz, c, h, wd = x.shape
    cg, m = c // groups, n // groups
    sy, sx = stride if isinstance(stride, tuple) else (stride, stride)
    oh, ow = (h + 2 * pad - size) // sy + 1, (wd + 2 * pad - size) // sx + 1
    w = w.astype(np.float64).reshape(n, cg, size, size)
    out = np.zeros((bsz, n, oh, ow))
    for f in range(n):
        g = f // m
        out[:, f] = b[f]
        for ci in range(cg):
            for ky in range(size):
                for kx in range(size):
                    for oy in range(oh):
                        iy = oy * sy - pad * dilation + ky * dilation
                        if not 0 <= iy < h:
                            continue
                        for ox in range(ow):
                            ix = ox * sx - pad * dilation + kx * dilation
                            if 0 <= ix < wd:
                                out[:, f, oy, ox] += w[f, ci, ky, kx] * x[:, g * cg + ci, iy, ix]
    return out


def blur(x, kind, stride):
    """AlexeyAB's antialiasing blur: depthwise 3x3 [1 2 1]^2/16 pad 1 (kind 1) or 2x2 /4
    pad 0 (kind 2)."""
    c = x.shape[1]
    if kind == 1:
        k, size, pad = np.outer([1, 2, 1], [1, 2, 1]) / 16.0, 3, 1
    else:
        k, size, pad = np.full((2, 2), 0.25), 2, 0
    return conv_forward(x, np.tile(k.ravel(), c), np.zeros(c), c, size, stride, pad, groups=c)


def maxpool_depth(x, out_c):
    """Channel g of the output: the max over input channels g, g + out_c, ... (x: B, C, H, W)."""
    return np.stack([x[:, g::out_c].max(axis=1) for g in range(out_c)], axis=1)


def local_avgpool(x, size, stride, pad):
    """Mean over each window's cells inside the image; top-left at -pad//2."""
    bsz, c, h, w = x.shape
    oh, ow = (h + pad - size) // stride + 1, (w + pad - size) // stride + 1
    out = np.zeros((bsz, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * stride - pad // 2, j * stride - pad // 2
            win = x[:, :, max(y0, 0):max(y0 + size, 0), max(x0, 0):max(x0 + size, 0)]
            out[:, :, i, j] = win.astype(np.float64).mean(axis=(2, 3))
    return out


def shortcut(prev, froms, weights, wtype, norm):
    """AlexeyAB's weighted shortcut: w_0*prev + sum w_i*from_i, inputs flat per image (B, N_i),
    from_i adding to its first N_i values. wtype 0/1/2 (none/per_feature/per_channel), norm
    0/1/2 (none/relu/softmax). Returns (out, normalised weights (n+1, c or 1))."""
    b, n_out = prev.shape
    n = len(froms)
    c = weights.size // (n + 1) if wtype == 2 else 1
    w = np.ones((n + 1, c)) if not wtype else weights.astype(np.float64).reshape(n + 1, c)
    if norm == 1:
        r = np.maximum(w, 0)
        w = r / (1e-4 + r.sum(axis=0))
    elif norm == 2:
        e = np.exp(w - w.max(axis=0))
        w = e / (1e-4 + e.sum(axis=0))
    chan = np.arange(n_out) // (n_out // c)
    out = prev * w[0, chan]
    for i, f in enumerate(froms, start=1):
        m = min(f.shape[1], n_out)
        out[:, :m] += f[:, :m] * w[i, chan[:m]]
    return out, w
