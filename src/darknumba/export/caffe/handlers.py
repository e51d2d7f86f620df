"""One function per Caffe layer type: what Darknet sections compute it (mapping.py holds the
walk and the bookkeeping). Each names the Caffe source it follows (BVLC caffe, src/caffe/
layers/*.cpp) where Darknet computes something else by default.
"""
from __future__ import annotations

import math

import numpy as np

from .mapping import INPUT, Blob, Mapper, square
from .prototxt import Message

ACTIVATIONS = {"ReLU": "relu", "Sigmoid": "logistic", "TanH": "tanh"}
TAKES_ACTIVATION = ("convolutional", "connected", "shortcut")
POOL_METHODS = {"MAX": "MAX", "0": "MAX", "AVE": "AVE", "1": "AVE"}
ELTWISE_OPS = {"PROD": "prod", "0": "prod", "SUM": "sum", "1": "sum", "MAX": "max", "2": "max"}


def _err(m: Mapper, layer: Message):
    return lambda msg: m.error(layer, msg)


def input_layer(m: Mapper, layer: Message):
    """Input: the network's shape (N, C, H, W)."""
    dims = layer.msg("input_param").msg("shape").ints("dim")
    set_input(m, layer, m.top(layer), dims)


def set_input(m: Mapper, where: Message, name: str, dims: list[int]):
    if m.plan.c:
        raise m.error(where, "a second network input: Darknet networks have one")
    if len(dims) == 2:
        dims = dims + [1, 1]
    if len(dims) != 4 or min(dims[1:]) < 1:
        raise m.error(where, f"input shape {dims}: expected N, C, H, W")
    m.plan.c, m.plan.h, m.plan.w = dims[1:]
    m.plan.blobs[name] = Blob(INPUT, *dims[1:], flat=dims[2:] == [1, 1])


def convolution(m: Mapper, layer: Message):
    """Convolution (conv_layer.cpp): output size (h + 2 pad - (dilation (k-1) + 1)) / stride
    + 1, floored, as Darknet's; weights n x c/group x k x k, Darknet's layout."""
    p, err = layer.msg("convolution_param"), _err(m, layer)
    n = p.int("num_output")
    if n is None or n < 1:
        raise err("convolution_param.num_output must be at least 1")
    k = square(err, p, "kernel_size", None, "kernel_h", "kernel_w")
    s = square(err, p, "stride", 1, "stride_h", "stride_w")
    pad = square(err, p, "pad", 0, "pad_h", "pad_w")
    d = square(err, p, "dilation", 1)
    g = p.int("group", 1)
    if p.int("axis", 1) != 1:
        raise err("convolution_param.axis other than 1 is not supported")
    bias = p.bool("bias_term", True)
    b = m.feed(layer, m.bottoms(layer, 1)[0])
    if k < 1 or s < 1 or d < 1 or g < 1 or b.c % g or n % g:
        raise err(f"kernel {k}, stride {s}, dilation {d}, group {g} with {b.c} input channels "
                  f"and {n} outputs: expected positive sizes, channels divisible by group")
    if k == 1:
        d = 1
    out_h = (b.h + 2 * pad - (d * (k - 1) + 1)) // s + 1
    out_w = (b.w + 2 * pad - (d * (k - 1) + 1)) // s + 1
    if out_h < 1 or out_w < 1:
        raise err(f"a {k}x{k} kernel leaves no output on a {b.w}x{b.h} input")
    keys = {"filters": n, "size": k, "stride": s, "padding": pad, "groups": g,
            "activation": "linear"}
    if d > 1:
        # AlexeyAB sizes a dilated convolution without the dilation and pads it
        # padding * dilation on each side: only a pad that is a multiple of the dilation and
        # gives Caffe's size can be written
        dn_pad = pad // d
        if pad % d or (b.h + 2 * dn_pad - k) // s + 1 != out_h \
                or (b.w + 2 * dn_pad - k) // s + 1 != out_w:
            raise err(f"dilation {d} with pad {pad}: Darknet's dilated convolution needs a pad "
                      f"that is a multiple of the dilation and keeps Caffe's output size")
        keys.update(padding=dn_pad, dilation=d)
    shapes = [(n, b.c // g, k, k)] + ([(n,)] if bias else [])
    blobs = m.params_of(layer, shapes)
    params = {"weights": blobs[0], "biases": blobs[1] if bias else np.zeros(n)}
    i = m.emit(layer, "convolutional", keys, (n, out_h, out_w), params, "linear")
    m.set_top(layer, i)


def inner_product(m: Mapper, layer: Message):
    """InnerProduct (inner_product_layer.cpp): y = W x + b over the flattened C x H x W input,
    W num_output x inputs (transpose: stored inputs x num_output); Darknet's [connected] keeps
    the same row-major layout."""
    p, err = layer.msg("inner_product_param"), _err(m, layer)
    n = p.int("num_output")
    if n is None or n < 1:
        raise err("inner_product_param.num_output must be at least 1")
    if p.int("axis", 1) != 1:
        raise err("inner_product_param.axis other than 1 is not supported")
    bias = p.bool("bias_term", True)
    b = m.feed(layer, m.bottoms(layer, 1)[0])
    inputs = b.c * b.h * b.w
    transpose = p.bool("transpose", False)
    shapes = [(inputs, n) if transpose else (n, inputs)] + ([(n,)] if bias else [])
    blobs = m.params_of(layer, shapes)
    weights = blobs[0].T if transpose else blobs[0]
    params = {"biases": blobs[1] if bias else np.zeros(n), "weights": weights}
    i = m.emit(layer, "connected", {"output": n, "activation": "linear"}, (n, 1, 1), params,
               "linear")
    m.set_top(layer, i, flat=True)


def _affine(m: Mapper, layer: Message, name: str, scale, shift):
    """y = scale * x + shift per channel, folded into the layer that made `name` when it has
    weights rows per channel and may be changed, else a depthwise 1x1 [convolutional]."""
    target = m.foldable(layer, name)
    if target is not None and target.section in ("convolutional", "connected") \
            and target.activation == "linear":
        w = target.params["weights"]
        target.params["weights"] = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
        target.params["biases"] = target.params["biases"] * scale + shift
        m.alias(layer, m.blob(layer, name))
        return
    if target is not None and target.section == "caffe_batchnorm":
        target.params["scales"] = target.params["scales"] * scale
        target.params["biases"] = target.params["biases"] * scale + shift
        m.alias(layer, m.blob(layer, name))
        return
    b = m.feed(layer, name)
    keys = {"filters": b.c, "size": 1, "stride": 1, "padding": 0, "groups": b.c,
            "activation": "linear"}
    params = {"weights": scale.reshape(b.c, 1, 1, 1), "biases": shift}
    i = m.emit(layer, "convolutional", keys, (b.c, b.h, b.w), params, "linear")
    m.set_top(layer, i, flat=b.flat)


def batch_norm(m: Mapper, layer: Message):
    """BatchNorm (batch_norm_layer.cpp) at inference: y = (x - mean) / sqrt(var + eps), where
    mean = blobs[0] / blobs[2] and var = blobs[1] / blobs[2] (blobs[2], the moving-average
    scale factor; 0 makes both 0). Folded into the previous layer or a depthwise 1x1
    convolution; with keep_bn a [caffe_batchnorm] section that also trains as Caffe does."""
    p, err = layer.msg("batch_norm_param"), _err(m, layer)
    eps = p.float("eps", 1e-5)
    name = m.bottoms(layer, 1)[0]
    c = m.blob(layer, name).c
    mean_sum, var_sum, factor = m.params_of(layer, [(c,), (c,), (1,)])
    if eps <= 0:
        raise err(f"batch_norm_param.eps {eps} must be positive")
    if m.keep_bn:
        b = m.feed(layer, name)
        keys = {"eps": repr(eps),
                "moving_average_fraction": repr(p.float("moving_average_fraction", 0.999))}
        if p.bool("use_global_stats", False):
            keys["use_global_stats"] = 1
        params = {"biases": np.zeros(c), "scales": np.ones(c), "mean_sum": mean_sum,
                  "variance_sum": var_sum, "scale_factor": factor.reshape(1)}
        i = m.emit(layer, "caffe_batchnorm", keys, (b.c, b.h, b.w), params)
        m.set_top(layer, i, flat=b.flat)
        return
    f = 0.0 if factor.item() == 0 else 1.0 / factor.item()
    mean, var = mean_sum * f, var_sum * f
    if np.any(var < 0):
        raise err("the caffemodel's variance is negative")
    inv = 1.0 / np.sqrt(var + eps)
    _affine(m, layer, name, inv, -mean * inv)


def scale(m: Mapper, layer: Message):
    """Scale (scale_layer.cpp) with its own per-channel blobs: y = gamma x (+ beta)."""
    p, err = layer.msg("scale_param"), _err(m, layer)
    names = m.bottoms(layer)
    if len(names) != 1:
        raise err("a Scale taking its factors from a second bottom is not supported")
    if p.int("axis", 1) != 1 or p.int("num_axes", 1) != 1:
        raise err("only a per-channel Scale (axis 1, num_axes 1) is supported")
    c = m.blob(layer, names[0]).c
    bias = p.bool("bias_term", False)
    blobs = m.params_of(layer, [(c,)] + ([(c,)] if bias else []))
    _affine(m, layer, names[0], blobs[0], blobs[1] if bias else np.zeros(c))


def activation(m: Mapper, layer: Message):
    """ReLU (negative_slope 0, or 0.1: Darknet's leaky), Sigmoid, TanH: the previous layer's
    activation= when it may be changed, else an [activation] section."""
    kind = layer.str("type")
    act = ACTIVATIONS[kind]
    if kind == "ReLU":
        slope = layer.msg("relu_param").float("negative_slope", 0.0)
        if slope == 0.1:
            act = "leaky"
        elif slope != 0:
            raise m.error(layer, f"negative_slope {slope}: Darknet's activations have 0 "
                                 f"(relu) and 0.1 (leaky)")
    name = m.bottoms(layer, 1)[0]
    target = m.foldable(layer, name)
    if target is not None and target.activation == "linear" \
            and target.section in TAKES_ACTIVATION:
        target.keys["activation"] = target.activation = act
        m.alias(layer, m.blob(layer, name))
        return
    b = m.feed(layer, name)
    i = m.emit(layer, "activation", {"activation": act}, (b.c, b.h, b.w))
    m.set_top(layer, i, flat=b.flat)


def _caffe_pooled(size, k, s, pad, ceil):
    """PoolingLayer::Reshape's output size: ceil (or floor) of (size + 2 pad - k) / s, plus 1,
    less one when the last window would start inside the padding."""
    n = (math.ceil if ceil else math.floor)((size + 2 * pad - k) / s) + 1
    if pad and (n - 1) * s >= size + pad:
        n -= 1
    return n


def pooling(m: Mapper, layer: Message):
    """Pooling (pooling_layer.cpp). Caffe starts the windows at -pad and rounds the output
    size up; Darknet's [maxpool] starts them at -padding/2 and rounds down: padding = 2 pad
    or 2 pad + 1 gives both the same windows wherever one of them gives Caffe's size. AVE
    without padding is AlexeyAB's [local_avgpool] (both divide by the cells inside the map),
    a window over the whole map [avgpool]."""
    p, err = layer.msg("pooling_param"), _err(m, layer)
    method = POOL_METHODS.get(p.str("pool", "MAX"))
    if method is None:
        raise err(f"pool: {p.str('pool')} is not supported (MAX and AVE are)")
    b = m.feed(layer, m.bottoms(layer, 1)[0])
    ceil = p.str("round_mode", "CEIL") in ("CEIL", "0")
    if p.bool("global_pooling", False):
        k, s, pad = None, 1, 0
        if p.has("pad") and p.int("pad"):
            raise err("global pooling with a pad is not supported")
    else:
        k = square(err, p, "kernel_size", None, "kernel_h", "kernel_w")
        s = square(err, p, "stride", 1, "stride_h", "stride_w")
        pad = square(err, p, "pad", 0, "pad_h", "pad_w")
        if k < 1 or s < 1 or pad >= k:
            raise err(f"kernel {k}, stride {s}, pad {pad}: expected pad < kernel")
    whole = k is None or (pad == 0 and k >= b.h and k >= b.w
                          and _caffe_pooled(b.h, k, s, 0, ceil) == 1
                          and _caffe_pooled(b.w, k, s, 0, ceil) == 1)
    if whole and method == "AVE":
        i = m.emit(layer, "avgpool", {}, (b.c, 1, 1))
        m.set_top(layer, i)
        return
    if whole:
        if b.h != b.w:
            raise err(f"global MAX pooling of a {b.w}x{b.h} map: Darknet's windows are square")
        k, s = b.h, b.h
    out_h, out_w = (_caffe_pooled(b.h, k, s, pad, ceil), _caffe_pooled(b.w, k, s, pad, ceil))
    padding = next((q for q in (2 * pad, 2 * pad + 1)
                    if ((b.h + q - k) // s + 1, (b.w + q - k) // s + 1) == (out_h, out_w)), None)
    if padding is None:
        raise err(f"kernel {k} stride {s} pad {pad} on a {b.w}x{b.h} map gives Caffe "
                  f"{out_w}x{out_h}, which no Darknet padding gives with Caffe's windows")
    if method == "AVE" and pad:
        raise err("AVE pooling with a pad divides by windows that include the padding, which "
                  "no Darknet layer does")
    section = "maxpool" if method == "MAX" else "local_avgpool"
    i = m.emit(layer, section, {"size": k, "stride": s, "padding": padding}, (b.c, out_h, out_w))
    m.set_top(layer, i)


def eltwise(m: Mapper, layer: Message):
    """Eltwise (eltwise_layer.cpp) SUM: top = sum of coeff_i * bottom_i, in bottom order;
    [shortcut]s (out = alpha prev + beta from), the first bottom as prev. PROD, MAX:
    [eltwise]."""
    p, err = layer.msg("eltwise_param"), _err(m, layer)
    op = ELTWISE_OPS.get(p.str("operation", "SUM"))
    names = m.bottoms(layer)
    if len(names) < 2:
        raise err("Eltwise needs at least two bottoms")
    coeffs = p.floats("coeff") or [1.0] * len(names)
    if len(coeffs) != len(names):
        raise err(f"{len(coeffs)} coeff for {len(names)} bottoms")
    if op != "sum" and p.has("coeff"):
        raise err("coeff is for operation SUM only")
    blobs = [m.blob(layer, n) for n in names]
    if any((b.c, b.h, b.w) != (blobs[0].c, blobs[0].h, blobs[0].w) for b in blobs):
        raise err("bottoms of different shapes")
    if op != "sum":
        _eltwise_layer(m, layer, names, blobs, op)
        return
    order = list(range(len(names)))
    last = len(m.plan.layers) - 1
    if len(names) == 2 and blobs[1].layer == last and blobs[0].layer != last:
        order = [1, 0]              # a + b == b + a in floating point: no [route] needed
    if any(blobs[j].layer == INPUT for j in order[1:]):
        raise err("a [shortcut] cannot add the network input")
    first = m.feed(layer, names[order[0]])
    alpha = coeffs[order[0]]
    for j in order[1:]:
        keys = {"from": str(blobs[j].layer), "activation": "linear"}
        if alpha != 1.0:
            keys["alpha"] = repr(alpha)
        if coeffs[j] != 1.0:
            keys["beta"] = repr(coeffs[j])
        i = m.emit(layer, "shortcut", keys, (first.c, first.h, first.w), activation="linear")
        if j != order[-1]:
            m.readers[i] += 1
        alpha = 1.0
    m.set_top(layer, i, flat=first.flat)


def _eltwise_layer(m: Mapper, layer: Message, names, blobs, op):
    """PROD and MAX: an [eltwise] section, the first bottom as its previous layer."""
    if any(b.layer == INPUT for b in blobs[1:]):
        raise m.error(layer, "an [eltwise] cannot read the network input but as its first "
                             "bottom")
    first = m.feed(layer, names[0])
    froms = [str(b.layer) for b in blobs[1:]]
    for b in blobs[1:]:
        m.readers[b.layer] += 1
    i = m.emit(layer, "eltwise", {"from": ",".join(froms), "operation": op},
               (first.c, first.h, first.w))
    m.set_top(layer, i, flat=first.flat)


def prelu(m: Mapper, layer: Message):
    """PReLU (prelu_layer.cpp): a [prelu] section with Caffe's slopes."""
    shared = layer.msg("prelu_param").bool("channel_shared", False)
    b = m.feed(layer, m.bottoms(layer, 1)[0])
    (slopes,) = m.params_of(layer, [(1,) if shared else (b.c,)])
    i = m.emit(layer, "prelu", {"channel_shared": int(shared)}, (b.c, b.h, b.w),
               {"weights": slopes})
    m.set_top(layer, i, flat=b.flat)


def concat(m: Mapper, layer: Message):
    """Concat (concat_layer.cpp) along channels: [route] of its bottoms' layers."""
    p, err = layer.msg("concat_param"), _err(m, layer)
    axis = p.int("axis", p.int("concat_dim", 1))
    if axis != 1:
        raise err(f"concatenation along axis {axis}: only channels (axis 1) is supported")
    blobs = [m.blob(layer, n) for n in m.bottoms(layer)]
    if any(b.layer == INPUT for b in blobs):
        raise err("a [route] cannot read the network input")
    if any((b.h, b.w) != (blobs[0].h, blobs[0].w) for b in blobs):
        raise err("bottoms of different heights and widths")
    c = sum(b.c for b in blobs)
    i = m.emit(layer, "route", {"layers": ",".join(str(b.layer) for b in blobs)},
               (c, blobs[0].h, blobs[0].w))
    m.set_top(layer, i, flat=all(b.flat for b in blobs))


def softmax(m: Mapper, layer: Message):
    """Softmax (softmax_layer.cpp) over channels: Darknet's [softmax] over the whole input,
    the same where each image's blob is one vector."""
    err = _err(m, layer)
    if layer.msg("softmax_param").int("axis", 1) != 1:
        raise err("softmax along an axis other than 1 is not supported")
    b = m.feed(layer, m.bottoms(layer, 1)[0])
    if not (b.flat or (b.h, b.w) == (1, 1)):
        raise err(f"softmax over the channels of each pixel of a {b.w}x{b.h} map is not "
                  f"supported (Darknet's [softmax] takes the whole input)")
    i = m.emit(layer, "softmax", {}, (b.c, b.h, b.w))
    m.set_top(layer, i, flat=True)


def dropout(m: Mapper, layer: Message):
    """Dropout (dropout_layer.cpp): Darknet's [dropout] scales the kept values by 1/(1-p) in
    training and passes the input at inference, as Caffe with scale_train (its default)."""
    p, err = layer.msg("dropout_param"), _err(m, layer)
    if not p.bool("scale_train", True):
        raise err("scale_train: false (scaling at inference) is not supported")
    ratio = p.float("dropout_ratio", 0.5)
    if not 0 <= ratio < 1:
        raise err(f"dropout_ratio {ratio}: expected 0 <= ratio < 1")
    b = m.feed(layer, m.bottoms(layer, 1)[0])
    i = m.emit(layer, "dropout", {"probability": repr(ratio)}, (b.c, b.h, b.w))
    m.set_top(layer, i, flat=b.flat)


def flatten(m: Mapper, layer: Message):
    """Flatten (flatten_layer.cpp) from axis 1: Darknet's outputs are flat already."""
    p = layer.msg("flatten_param")
    if p.int("axis", 1) != 1 or p.int("end_axis", -1) != -1:
        raise m.error(layer, "only Flatten from axis 1 to the end is supported")
    b = m.blob(layer, m.bottoms(layer, 1)[0])
    _pin(m, b)
    m.alias(layer, b, flat=True)


def _pin(m: Mapper, b: Blob):
    """A blob now known by a second name: what is folded into its layer later would change
    both, so nothing is (it counts as read)."""
    if b.layer != INPUT:
        m.readers[b.layer] += 1


def split(m: Mapper, layer: Message):
    """Split: every top is the bottom."""
    b = m.blob(layer, m.bottoms(layer, 1)[0])
    _pin(m, b)
    for name in layer.strs("top"):
        m.alias(layer, b, name)


HANDLERS = {
    "Input": input_layer, "Convolution": convolution, "InnerProduct": inner_product,
    "BatchNorm": batch_norm, "Scale": scale, "ReLU": activation, "Sigmoid": activation,
    "TanH": activation, "Pooling": pooling, "Eltwise": eltwise, "Concat": concat,
    "Softmax": softmax, "Dropout": dropout, "Flatten": flatten, "Split": split,
    "PReLU": prelu,
}
# the V1 (pre-2015) prototxt's enum names of the same types
V1_TYPES = {"CONVOLUTION": "Convolution", "INNER_PRODUCT": "InnerProduct", "RELU": "ReLU",
            "SIGMOID": "Sigmoid", "TANH": "TanH", "POOLING": "Pooling", "ELTWISE": "Eltwise",
            "CONCAT": "Concat", "SOFTMAX": "Softmax", "DROPOUT": "Dropout",
            "FLATTEN": "Flatten", "SPLIT": "Split"}
