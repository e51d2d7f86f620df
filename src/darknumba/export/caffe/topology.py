"""The Caffe layers without blobs that pool, join or reshape (handlers.py: the rest): Pooling,
Eltwise, Concat, Softmax, Dropout, Flatten, Split, each as the Darknet sections that compute
it, naming the Caffe source it follows (BVLC caffe, src/caffe/layers/*.cpp)."""
from __future__ import annotations

import math

from .mapping import INPUT, Blob, Mapper, err_of, square
from .prototxt import Message

POOL_METHODS = {"MAX": "MAX", "0": "MAX", "AVE": "AVE", "1": "AVE"}
ELTWISE_OPS = {"PROD": "prod", "0": "prod", "SUM": "sum", "1": "sum", "MAX": "max", "2": "max"}


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
    p, err = layer.msg("pooling_param"), err_of(m, layer)
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
    p, err = layer.msg("eltwise_param"), err_of(m, layer)
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


def concat(m: Mapper, layer: Message):
    """Concat (concat_layer.cpp) along channels: [route] of its bottoms' layers."""
    p, err = layer.msg("concat_param"), err_of(m, layer)
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
    err = err_of(m, layer)
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
    p, err = layer.msg("dropout_param"), err_of(m, layer)
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
