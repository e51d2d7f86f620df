"""One function per Caffe layer type: what Darknet sections compute it (mapping.py holds the
walk and the bookkeeping). Here the layers with blobs (weights) and the activations; pooling,
joining and reshaping ones: topology.py. Each names the Caffe source it follows (BVLC caffe,
src/caffe/layers/*.cpp) where Darknet computes something else by default.
"""
from __future__ import annotations

import numpy as np

from .mapping import INPUT, Blob, Mapper, err_of, square
from .prototxt import Message
from .topology import concat, dropout, eltwise, flatten, pooling, softmax, split

ACTIVATIONS = {"ReLU": "relu", "Sigmoid": "logistic", "TanH": "tanh"}
TAKES_ACTIVATION = ("convolutional", "connected", "shortcut")


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
    p, err = layer.msg("convolution_param"), err_of(m, layer)
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
    p, err = layer.msg("inner_product_param"), err_of(m, layer)
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
    p, err = layer.msg("batch_norm_param"), err_of(m, layer)
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
    p, err = layer.msg("scale_param"), err_of(m, layer)
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


def prelu(m: Mapper, layer: Message):
    """PReLU (prelu_layer.cpp): a [prelu] section with Caffe's slopes."""
    shared = layer.msg("prelu_param").bool("channel_shared", False)
    b = m.feed(layer, m.bottoms(layer, 1)[0])
    (slopes,) = m.params_of(layer, [(1,) if shared else (b.c,)])
    i = m.emit(layer, "prelu", {"channel_shared": int(shared)}, (b.c, b.h, b.w),
               {"weights": slopes})
    m.set_top(layer, i, flat=b.flat)


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
