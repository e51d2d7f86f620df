"""A network as an ONNX graph, written with the `onnx` package alone.

Each layer type has one builder in LAYER_BUILDERS, ``(graph, layer, context) -> tensor``; the
tensors are NCHW float32, as Darknet's per-image c x h x w buffers. What Darknet computes and
ONNX writes differently:

- [convolutional] batch norm is folded into the weights with the dialect's normaliser
  (fold.py), or kept as a BatchNormalization node (fuse_bn=False). ONNX normalises by
  sqrt(var + epsilon): AlexeyAB's sqrt(v + 1e-5) is that with epsilon = 1e-5; pjreddie's
  sqrt(v) + 1e-6 is written exactly as epsilon = 0 with var = (sqrt(v) + 1e-6)^2.
- a dilated [convolutional] pads padding x dilation on each side, as AlexeyAB's
  im2col_cpu_ext samples it (its output sized without the dilation: conv_ab.py).
- [maxpool] pads Darknet's way: the window starts at -padding/2 (padding = size - 1 unless
  set), so the padding is split [padding // 2 before, padding - padding // 2 after]; cells
  outside never win, as ONNX's MaxPool treats its padding.
- [upsample] is Resize (nearest, asymmetric, floor) times `scale`; a negative stride
  (downsample) sums stride x stride blocks: AveragePool times stride^2.
- [route] is Concat of its inputs, each cut to its group_id-th of `groups` channel slices;
  [shortcut] is alpha * previous + beta * from, then the activation.
- [yolo] and [region] heads: see yolo.py; NonMaxSuppression after them (nms=): nms.py.
- [connected] is Flatten + Gemm, its output (batch, outputs, 1, 1); [avgpool] is
  GlobalAveragePool; [local_avgpool] AveragePool without the padding's cells; [softmax] (groups, temperature) a Softmax per group; [dropout] and [cost]
  pass their input on.
- pjreddie's tanh is (e^2x - 1) / (e^2x + 1), NaN past |x| ~ 355 where ONNX's Tanh gives +-1.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..outputs import atomic_write
from . import ExportError
from .activations import activation
from .fold import bn_normaliser, folded
from .graph import Graph, onnx_module
from .nms import DETECTION_COLUMNS, nms_detections
from .yolo import Grid, region_raw, yolo_decoded, yolo_raw

INPUT = "input"


@dataclass
class Context:
    """What the builders share: the network, the options, each layer's output tensor."""
    net: object
    fuse_bn: bool
    dynamic: bool = False
    tensors: list = field(default_factory=list)

    def x(self, i: int) -> str:
        """The input tensor of layer i (the previous layer's output)."""
        return self.tensors[i - 1] if i else INPUT

    def where(self, i: int) -> str:
        l = self.net.layers[i]
        return f"{os.path.basename(self.net.cfg_path or 'network')}: layer {i} [{l.type}]"


def _refuse(ctx, i, what):
    raise ExportError(f"{ctx.where(i)}: {what} is not exportable to ONNX")


def _batchnorm_node(g, l, y, quirks):
    """BatchNormalization computing the dialect's (y - mean) / d(var) * scales + biases."""
    if quirks.bn_epsilon_inside_sqrt:
        var, eps = np.asarray(l.rolling_variance, np.float32), 1e-5
    else:       # pjreddie's sqrt(v) + 1e-6, written as sqrt(var' + 0)
        var, eps = (bn_normaliser(l.rolling_variance, quirks) ** 2).astype(np.float32), 0.0
    return g.op("BatchNormalization", [y, g.const(l.scales, "scales"), g.const(l.biases, "biases"),
                                       g.const(l.rolling_mean, "mean"), g.const(var, "var")],
                epsilon=eps)


def convolutional(g, l, i, ctx):
    if getattr(l, "antialiasing", 0):
        _refuse(ctx, i, "antialiasing=1")
    if getattr(l, "share_layer", None) is not None:
        _refuse(ctx, i, "share_index (weights shared with another layer)")
    stride_x, stride_y = getattr(l, "stride_x", l.stride), getattr(l, "stride_y", l.stride)
    dilation = getattr(l, "dilation", 1)
    shape = (l.n, l.c // l.groups, l.size, l.size)
    bn = l.batch_normalize
    if bn and ctx.fuse_bn:
        weights, biases = folded(l, ctx.net.quirks)
    else:
        weights, biases = l.weights, (None if bn else l.biases)
    inputs = [ctx.x(i), g.const(np.asarray(weights).reshape(shape), "weights")]
    if biases is not None:
        inputs.append(g.const(biases, "biases"))
    y = g.op("Conv", inputs, kernel_shape=[l.size, l.size], strides=[stride_y, stride_x],
             pads=[l.pad * dilation] * 4, dilations=[dilation, dilation], group=l.groups)
    if bn and not ctx.fuse_bn:
        y = _batchnorm_node(g, l, y, ctx.net.quirks)
    return activation(g, y, l.activation, ctx.where(i))


def connected(g, l, i, ctx):
    x = g.op("Flatten", [ctx.x(i)], axis=1)
    bn = l.batch_normalize
    if bn and ctx.fuse_bn:
        weights, biases = folded(l, ctx.net.quirks)
    else:
        weights, biases = l.weights, (np.zeros(l.outputs, np.float32) if bn else l.biases)
    y = g.op("Gemm", [x, g.const(np.asarray(weights).reshape(l.outputs, l.inputs), "weights"),
                      g.const(biases, "biases")], transB=1)
    y = g.reshape(y, [0, l.outputs, 1, 1])
    if bn and not ctx.fuse_bn:
        y = _batchnorm_node(g, l, y, ctx.net.quirks)
    return activation(g, y, l.activation, ctx.where(i))


def maxpool(g, l, i, ctx):
    for key in ("maxpool_depth", "antialiasing"):
        if getattr(l, key, 0):
            _refuse(ctx, i, f"{key}=1")
    p = l.pad
    return g.op("MaxPool", [ctx.x(i)], kernel_shape=[l.size, l.size],
                strides=[getattr(l, "stride_y", l.stride), getattr(l, "stride_x", l.stride)],
                pads=[p // 2, p // 2, p - p // 2, p - p // 2])


def avgpool(g, l, i, ctx):
    return g.op("GlobalAveragePool", [ctx.x(i)])


def upsample(g, l, i, ctx):
    s = l.stride
    if l.reverse:
        y = g.op("AveragePool", [ctx.x(i)], kernel_shape=[s, s], strides=[s, s])
        return g.scale_shift(y, float(np.float32(s * s * l.scale)))
    y = g.op("Resize", [ctx.x(i), "", g.const([1.0, 1.0, s, s])], mode="nearest",
             coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    return g.scale_shift(y, float(np.float32(l.scale)))


def route(g, l, i, ctx):
    groups, group_id = getattr(l, "groups", 1), getattr(l, "group_id", 0)
    parts = []
    for k in l.input_layers:
        t = ctx.tensors[k]
        if groups > 1:
            c = ctx.net.layers[k].out_c // groups
            t = g.slice(t, group_id * c, (group_id + 1) * c, 1)
        parts.append(t)
    return parts[0] if len(parts) == 1 else g.op("Concat", parts, axis=1)


def shortcut(g, l, i, ctx):
    if getattr(l, "multilayer", False):
        _refuse(ctx, i, "a [shortcut] with several `from` layers or weights_type")
    if (l.w, l.h, l.c) != (l.out_w, l.out_h, l.out_c):
        _refuse(ctx, i, f"a [shortcut] from a {l.w}x{l.h}x{l.c} map onto a "
                        f"{l.out_w}x{l.out_h}x{l.out_c} one")
    y = g.op("Add", [g.scale_shift(ctx.x(i), float(np.float32(l.alpha))),
                     g.scale_shift(ctx.tensors[l.index], float(np.float32(l.beta)))])
    return activation(g, y, l.activation, ctx.where(i))


def softmax(g, l, i, ctx):
    if l.softmax_tree is not None:
        _refuse(ctx, i, "a [softmax] with tree=")
    x = g.reshape(ctx.x(i), [0, l.groups, -1])
    if l.temperature != 1.0:
        x = g.op("Div", [x, g.const(np.float32(l.temperature))])
    y = g.op("Softmax", [x], axis=2)
    return g.reshape(y, [0, l.outputs, 1, 1])


def batchnorm(g, l, i, ctx):
    """[batchnorm] alone: always a BatchNormalization node (nothing to fold it into)."""
    return _batchnorm_node(g, l, ctx.x(i), ctx.net.quirks)


def activation_layer(g, l, i, ctx):
    return activation(g, ctx.x(i), l.activation, ctx.where(i))


def logistic(g, l, i, ctx):
    return g.op("Sigmoid", [ctx.x(i)])


def passthrough(g, l, i, ctx):
    """[dropout] at inference and [cost]: the input unchanged."""
    return ctx.x(i)


def local_avgpool(g, l, i, ctx):
    """AlexeyAB's [local_avgpool]: the mean of the cells inside the map, padded as [maxpool]."""
    p = l.pad
    return g.op("AveragePool", [ctx.x(i)], kernel_shape=[l.size, l.size],
                strides=[l.stride, l.stride], pads=[p // 2, p // 2, p - p // 2, p - p // 2],
                count_include_pad=0)


def caffe_batchnorm(g, l, i, ctx):
    """[caffe_batchnorm] at inference: Caffe's running sums over its scale factor, its eps."""
    f = float(l.scale_factor[0])
    inv = 0.0 if f == 0 else 1.0 / f
    mean, var = ((np.asarray(a, np.float64) * inv).astype(np.float32)
                 for a in (l.mean_sum, l.variance_sum))
    return g.op("BatchNormalization", [ctx.x(i), g.const(l.scales, "scales"),
                                       g.const(l.biases, "biases"), g.const(mean, "mean"),
                                       g.const(var, "var")], epsilon=l.eps)


def eltwise(g, l, i, ctx):
    """[eltwise]: Mul or Max of the previous layer's output and the `from` layers', in order."""
    y = ctx.x(i)
    for k in l.input_layers:
        y = g.op("Mul" if l.operation == "prod" else "Max", [y, ctx.tensors[k]])
    return y


def prelu(g, l, i, ctx):
    slopes = np.asarray(l.weights, np.float32)
    return g.op("PRelu", [ctx.x(i), g.const(slopes if l.channel_shared else
                                            slopes.reshape(-1, 1, 1), "slopes")])


def yolo(g, l, i, ctx):
    return yolo_raw(g, l, ctx.x(i))


def region(g, l, i, ctx):
    return region_raw(g, l, ctx.x(i), ctx.where(i))


# layer type -> builder; a type missing here is refused naming the layer
LAYER_BUILDERS = {
    "convolutional": convolutional, "connected": connected, "maxpool": maxpool,
    "avgpool": avgpool, "upsample": upsample, "route": route, "shortcut": shortcut,
    "softmax": softmax, "dropout": passthrough, "cost": passthrough, "yolo": yolo,
    "region": region, "batchnorm": batchnorm, "activation": activation_layer,
    "logistic": logistic, "local_avgpool": local_avgpool,
    # the sections of a Caffe import (export/caffe/)
    "caffe_batchnorm": caffe_batchnorm, "eltwise": eltwise, "prelu": prelu,
}


def output_layers(net) -> list[int]:
    """The layers whose tensors the model outputs: every [yolo]/[region] head, else the
    network's output layer."""
    heads = [i for i, l in enumerate(net.layers) if l.detector_head]
    return heads or [net.layers.index(net.output_layer())]


def build_onnx(net, fuse_bn: bool = True, decode: bool = False, dynamic: bool = False,
               nms: tuple[float, float] | None = None):
    """The ONNX ModelProto of `net` at its batch size (net.batch) and input size.

    fuse_bn: batch norm folded into the convolutions (else BatchNormalization nodes).
    decode: one `detections` output of decoded boxes (yolo.py) instead of each head's raw
    output `layer_<i>`. dynamic: batch, height and width left symbolic. nms: (iou threshold,
    score threshold): the decoded boxes go through NonMaxSuppression and `detections` is
    (num, 7): batch, class, score, x1, y1, x2, y2 (nms.py)."""
    net.require_buffers("export")
    g = Graph()
    ctx = Context(net, fuse_bn, dynamic)
    for i, l in enumerate(net.layers):
        builder = LAYER_BUILDERS.get(l.type)
        if builder is None:
            exportable = ", ".join(f"[{t}]" for t in LAYER_BUILDERS)
            raise ExportError(f"{ctx.where(i)}: [{l.type}] layers are not exportable to ONNX "
                              f"(exportable: {exportable})")
        first = len(g.nodes)
        ctx.tensors.append(builder(g, l, i, ctx))
        _name_nodes(g.nodes[first:], i)
    onnx = g.onnx
    f32 = onnx.TensorProto.FLOAT
    batch = "batch" if dynamic else net.batch
    height, width = ("height", "width") if dynamic else (net.h, net.w)
    inputs = [onnx.helper.make_tensor_value_info(INPUT, f32, [batch, net.c, height, width])]
    outs = output_layers(net)
    if nms is not None:
        outputs = _nms_output(g, ctx, outs, *nms)
    else:
        outputs = (_decoded_output if decode else _raw_outputs)(g, ctx, outs, batch, dynamic)
    kind = "nms" if nms is not None else "decoded" if decode else "raw"
    meta = {"cfg": os.path.basename(net.cfg_path or ""), "dialect": net.dialect,
            "outputs": kind, "batch_norm": "folded" if fuse_bn else "nodes"}
    if nms is not None:
        meta.update(iou_threshold=nms[0], score_threshold=nms[1],
                    detections=",".join(DETECTION_COLUMNS))
    return g.model(inputs, outputs, doc="Darknet network exported by darknumba", metadata=meta)


def _name_nodes(nodes, i):
    """Name layer i's nodes `L<i>.<op>` (a second node of the same op `L<i>.<op>.2`, ...): a
    profiler's per-node times (onnxruntime's enable_profiling, bench/layer_peers.py) and a graph
    viewer then name the Darknet layer each node computes."""
    seen = {}
    for node in nodes:
        k = seen[node.op_type] = seen.get(node.op_type, 0) + 1
        node.name = f"L{i}.{node.op_type}" + (f".{k}" if k > 1 else "")


def _raw_outputs(g, ctx, outs, batch, dynamic):
    """Each output layer's tensor as `layer_<i>`, NCHW (a flat one as (batch, outputs, 1, 1))."""
    onnx, net, values = g.onnx, ctx.net, []
    for i in outs:
        l = net.layers[i]
        g.op("Identity", [ctx.tensors[i]], name=f"layer_{i}")
        if l.out_c * l.out_h * l.out_w == l.outputs:
            dims = [batch, l.out_c, f"h{i}" if dynamic else l.out_h, f"w{i}" if dynamic else l.out_w]
        else:
            dims = [batch, l.outputs, 1, 1]
        values.append(onnx.helper.make_tensor_value_info(f"layer_{i}", onnx.TensorProto.FLOAT, dims))
    return values


def _decoded_rows(g, ctx, outs, name=None) -> str:
    """Every [yolo] head's decoded rows (yolo.py), heads in order, as one tensor."""
    net = ctx.net
    heads = [net.layers[i] for i in outs]
    if any(l.type != "yolo" for l in heads) or len({l.classes for l in heads}) != 1:
        raise ExportError(f"{os.path.basename(net.cfg_path or 'network')}: --decode needs "
                          f"[yolo] heads of one class count; this network outputs "
                          + ", ".join(f"[{l.type}] ({getattr(l, 'classes', 0)} classes)"
                                      for l in heads))
    grid = Grid(g, INPUT, ctx.dynamic, net.w, net.h)
    rows = [yolo_decoded(g, net.layers[i], ctx.tensors[i], grid) for i in outs]
    return g.op("Concat" if len(rows) > 1 else "Identity", rows, name=name,
                **({"axis": 1} if len(rows) > 1 else {}))


def _decoded_output(g, ctx, outs, batch, dynamic):
    """One `detections` tensor: every [yolo] head's rows (yolo.py), heads in order."""
    _decoded_rows(g, ctx, outs, name="detections")
    heads = [ctx.net.layers[i] for i in outs]
    count = "boxes" if dynamic else sum(l.n * l.w * l.h for l in heads)
    return [g.onnx.helper.make_tensor_value_info("detections", g.onnx.TensorProto.FLOAT,
                                                 [batch, count, 5 + heads[0].classes])]


def _nms_output(g, ctx, outs, iou_thresh, score_thresh):
    """`detections` (num, 7) after NonMaxSuppression (nms.py)."""
    rows = _decoded_rows(g, ctx, outs)
    nms_detections(g, rows, ctx.net.layers[outs[0]].classes, iou_thresh, score_thresh)
    return [g.onnx.helper.make_tensor_value_info("detections", g.onnx.TensorProto.FLOAT,
                                                 ["detections", len(DETECTION_COLUMNS)])]


def export_onnx(net, path, fuse_bn: bool = True, decode: bool = False, dynamic: bool = False,
                nms: tuple[float, float] | None = None):
    """Write `net` as an ONNX file (see build_onnx), checked by onnx.checker; returns the
    model."""
    model = build_onnx(net, fuse_bn, decode, dynamic, nms)
    onnx = onnx_module()
    onnx.checker.check_model(model)
    atomic_write(path, model.SerializeToString())   # onnx.save's bytes, through a temporary
    return model


def run_onnxruntime(model_or_path, x: np.ndarray) -> dict:
    """The model's outputs on input x (NCHW float32), by name, from onnxruntime."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise ExportError("checking the ONNX file needs onnxruntime: pip install "
                          "darknumba[onnx]") from None
    src = model_or_path.SerializeToString() if hasattr(model_or_path, "SerializeToString") \
        else os.fspath(model_or_path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {INPUT: np.ascontiguousarray(x, np.float32)})))


def compare_with_onnxruntime(net, model, x: np.ndarray | None = None, seed: int = 0) -> dict:
    """Max |difference| per raw output between our forward pass and onnxruntime's on the
    same input (uniform in [0, 1) when x is None): {output name: max abs diff}."""
    if x is None:
        x = np.random.default_rng(seed).random((net.batch, net.c, net.h, net.w), np.float32)
    net.forward(x)
    got = run_onnxruntime(model, x)
    diffs = {}
    for name, val in got.items():
        if not name.startswith("layer_"):
            continue
        l = net.layers[int(name[len("layer_"):])]
        ours = l.output[:l.batch * l.outputs].reshape(val.shape)
        diffs[name] = float(np.max(np.abs(ours.astype(np.float64) - val)))
    return diffs
