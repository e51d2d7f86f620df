"""What every layer class shares, and the conventions all of them keep.

A layer mirrors Darknet's `layer` struct for its own type only:
- Shape fields: ``batch, h, w, c`` (input), ``out_h, out_w, out_c``, ``inputs = h*w*c``,
  ``outputs = out_h*out_w*out_c``.
- ``output`` and ``delta``: flat float32 arrays of ``batch * outputs``, allocated once when the
  layer is built (and again only by ``resize``). ``output.reshape(batch, out_c, out_h, out_w)``.
  At batch 1 a layer's ``output`` may be a view into a [route]'s (``route.share_outputs``).
- Darknet's sign convention: ``delta`` holds the *negative* gradient of the loss with respect to
  ``output`` (for a loss layer, ``truth - prediction``), and updates *add* ``rate * updates``.
- ``forward(net)`` reads ``net.input`` (the previous layer's output), ``net.train`` and
  ``net.truth``; loss layers fill their ``delta`` and ``cost`` during forward.
- ``backward(net)`` reads ``self.delta`` and adds this layer's input gradient into ``net.delta``
  (the previous layer's delta) unless ``net.delta`` is None, which it is for layer 0.
- ``update(a)`` applies one optimizer step (``a`` is an UpdateArgs) to layers with parameters.
- ``weight_records()`` lists the parameter arrays in the order a .weights file stores them.
- Batch-norm layers call ``bn_sync`` (None unless set) when a mini-batch is split across
  processes: ``bn_sync.batch_stats(x, batch, n, spatial, mean, variance)`` puts the whole
  mini-batch's statistics in mean and variance from this part's values x,
  ``bn_sync.sums_buffer(n)`` / ``add_up(sums)`` add up backward's per-channel sums over the
  parts, ``bn_sync.ranks`` is the number of parts.
- Buffers come from ``zeros()``; inside ``shapes_only()`` it hands out read-only zero-stride
  views instead, so a network can be built for its layer table alone (``allocate=False``).
- What only training reads (``delta``, ``weight_updates``, batch norm's ``x``...) comes from
  ``train_buffer()``: in a network built for inference (``memory.inference_only()``, as
  AlexeyAB builds at a given batch) it is allocated on first read, or all at once by
  ``Network.prepare_training``; ``train_alias()`` when a layer shares another's.
Arithmetic over elements lives in ``darknumba.kernels``; layer classes only orchestrate.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dialect import DEFAULT_QUIRKS
from ..errors import CfgError
from ..kernels.blas import adam_update_cpu, axpy_cpu, copy_cpu, sgd_update_cpu
from ..kernels.fused import batchnorm_x_norm, bn_divisors
from .memory import SizeError, buffer, deferring, full, reserve, zeros


@dataclass
class SizeParams:
    """What a layer being built knows of its input (Darknet's `size_params`)."""
    batch: int
    h: int
    w: int
    c: int
    inputs: int
    index: int
    net: object          # the Network being built: .layers so far, learning options
    path: str = "<cfg>"


@dataclass
class UpdateArgs:
    """Darknet's `update_args`: what `update_network` passes to every layer."""
    batch: int            # the full cfg batch (net.batch * subdivisions)
    learning_rate: float
    momentum: float
    decay: float
    adam: bool = False
    B1: float = 0.9
    B2: float = 0.999
    eps: float = 1e-7
    t: int = 0


class Scratch:
    """Float32 buffers shared by all layers of a network, by name: `scratch(name, size)`
    allocates the first time (and grows if a later layer asks for more), never per call.

    `parts(*sizes)`: the buffers one step of one layer uses together (a convolution's columns,
    delta columns and weight-gradient product; Winograd's filters, input and product tiles),
    back to back in one arena that every such step shares, as AlexeyAB's one workspace sized by
    get_workspace_size: it holds the largest step's set, not the sum of every buffer's largest
    size (yolov4-tiny's batch-8 training at 416: 96 MB instead of 190). A step's parts are valid
    until the next `parts` call; nothing keeps data in them from one step to another."""

    ALIGN = 16                    # floats: each part starts on a 64-byte boundary

    def __init__(self):
        self._bufs = {}
        self._arena = np.empty(0, dtype=np.float32)

    def __call__(self, name: str, size: int) -> np.ndarray:
        buf = self._bufs.get(name)
        if buf is None or buf.size < size:
            buf = self._bufs[name] = np.empty(size, dtype=np.float32)
        return buf[:size]

    def parts(self, *sizes: int) -> list[np.ndarray]:
        """Disjoint views of sizes[i] floats each, in the shared arena (grown to fit)."""
        starts, end = [], 0
        for size in sizes:
            starts.append(end)
            end += -(-int(size) // self.ALIGN) * self.ALIGN
        if self._arena.size < end:
            self._arena = np.empty(0, dtype=np.float32)     # the old one freed first
            self._arena = np.empty(end, dtype=np.float32)
        return [self._arena[s:s + int(size)] for s, size in zip(starts, sizes)]

    def in_arena(self, a: np.ndarray) -> bool:
        """Whether `a` is a view of the arena (a part an earlier call handed out)."""
        return self._arena.size > 0 and np.may_share_memory(a, self._arena)

    @property
    def nbytes(self) -> int:
        """What the named buffers and the arena hold."""
        return self._arena.nbytes + sum(b.nbytes for b in self._bufs.values())


def scratch_of(net) -> Scratch:
    """The network's scratch buffers; sub-networks that composite layers (rnn, crnn...) build
    for their inner layers may carry none, and share one process-wide set instead."""
    return getattr(net, "scratch", None) or _SHARED_SCRATCH


_SHARED_SCRATCH = Scratch()




class Layer:
    type = "none"
    weight_records_order: tuple = ()
    cost = None                   # loss layers: float, set in forward
    dontload = False
    dontsave = False
    bn_sync = None                # synchronised batch norm across processes (see above)
    workspace_size = 0            # floats of the network's shared scratch buffer this layer needs
    quirks = DEFAULT_QUIRKS       # the network's named behaviours (set when built from a cfg)
    # True where forward writes the whole output and nothing else, and the layer keeps no
    # other reference to it: at batch 1 its output may be a view into a route's (route.py)
    output_can_be_view = False
    # -- capabilities: what services ask of a layer (nobody outside layers/ reads l.type) -----
    # a detector's head ([yolo], [region]): its loss reads (x, y, w, h, class) truths, it has
    # a stats_line(), and the last one's random=, jitter= and nms_kind drive training and NMS
    detector_head = False
    # a loss layer besides the heads whose training forward also has a stats_line()
    # ([contrastive]: AlexeyAB's "Contrast accuracy" lines)
    reports_stats = False
    # get_network_boxes reads it ([yolo], [region], [detection]): see detections()
    makes_detections = False
    # its state carries from one mini-batch to the next ([rnn], [gru], [lstm], [crnn]): see
    # reset_state() and sublayers()
    recurrent = False
    temperature = None            # softmax: inputs divided by it (test_char_rnn sets it)
    # its training forward draws random numbers ([dropout], [crop], [detection])
    draws_random = False
    # [cost]: get_network_output_layer passes over it
    is_cost_layer = False
    # AlexeyAB's make_*_layer leaves l.train = 0 ([connected], [deconvolutional], [local],
    # [rnn], [gru], [lstm]), so its update_network (CPU and GPU) never updates it: see
    # skips_update and quirks.train_unset_not_updated
    ab_train_unset = False
    # output = weights . input, one row of weights per output channel, then its own batch norm
    # ([convolutional], [connected]): export folds the batch norm into the weights
    bn_foldable = False

    batch = h = w = c = 0
    out_h = out_w = out_c = 0
    inputs = outputs = 0

    def _alloc_io(self):
        """output and delta, batch x outputs each, once the output is known to have pixels
        and the memory budget allows them (delta deferred in a network built for inference)."""
        self.check_output_shape()
        if deferring():
            n = reserve(self.batch * self.outputs, np.float32,
                        f"output ({self.batch} x {self.outputs} values)")
            self.output = buffer(n)
            self.defer("delta", n, f"delta ({self.batch} x {self.outputs} values)")
            return
        n = reserve(2 * self.batch * self.outputs, np.float32,
                    f"output and delta ({self.batch} x {self.outputs} values each)") // 2
        self.output = buffer(n)
        self.delta = buffer(n)

    # -- buffers only training reads (see memory.inference_only) -----------------------
    def train_buffer(self, name: str, n: int, what: str | None = None, dtype=np.float32):
        """self.<name> = zeros(n): now, or in a network built for inference when training
        first reads it (a delta, weight gradients, batch norm's kept input...)."""
        if deferring():
            self.defer(name, n, what, dtype)
        else:
            setattr(self, name, zeros(n, what, dtype))

    def train_alias(self, name: str, source: "Layer", source_name: str | None = None):
        """self.<name> is source.<source_name>, the same array (Darknet aliases them: [dropout]
        and [empty] take the previous layer's delta): now if the source has it, else when
        first read, so an alias does not allocate what the source leaves for training."""
        source_name = source_name or name
        if source_name in vars(source) or source_name not in source.pending():
            setattr(self, name, getattr(source, source_name))
        else:
            vars(self).pop(name, None)
            vars(self).setdefault("_deferred", {})[name] = (source, source_name)

    def defer(self, name: str, n: int, what: str | None = None, dtype=np.float32):
        """self.<name> will be zeros(n, what, dtype) when first read."""
        vars(self).pop(name, None)
        vars(self).setdefault("_deferred", {})[name] = (int(n), what, dtype)

    def pending(self) -> dict:
        """The deferred buffers not yet allocated (nor set since), by name."""
        deferred = vars(self).get("_deferred") or {}
        return {k: v for k, v in deferred.items() if k not in vars(self)}

    def pending_bytes(self) -> int:
        return sum(spec[0] * np.dtype(spec[2]).itemsize for spec in self.pending().values()
                   if not isinstance(spec[0], Layer))

    def allocate_pending(self):
        """Allocate every deferred buffer now (Network.prepare_training)."""
        for name in list(self.pending()):
            getattr(self, name)

    def __getattr__(self, name):
        """Only for names not set: a deferred buffer is allocated on its first read (the
        entry stays: a shallow copy of the layer shares the dict and allocates its own)."""
        deferred = vars(self).get("_deferred")
        if not deferred or name not in deferred:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        spec = deferred[name]
        value = getattr(spec[0], spec[1]) if isinstance(spec[0], Layer) else zeros(*spec)
        vars(self)[name] = value
        return value

    def check_output_shape(self):
        """An image output needs out_w, out_h, out_c >= 1 (a flat one leaves them 0); every
        output needs a value per image. Darknet would go on with a -9 x -9 map."""
        dims = (self.out_w, self.out_h, self.out_c)
        if self.outputs < 1 or self.batch < 1 or (any(dims) and min(dims) < 1):
            shape = f"{self.out_w} x {self.out_h} x {self.out_c}" if any(dims) else \
                f"{self.outputs} values"
            raise SizeError(f"the output has no pixels: {self._size_story()} gives {shape}"
                            + (f" (batch {self.batch})" if self.batch < 1 else ""))

    def _size_story(self) -> str:
        """The input and the size options an output shape comes from."""
        parts = [f"a {self.w} x {self.h} x {self.c} input" if (self.w or self.h or self.c)
                 else f"{self.inputs} inputs"]
        for key in ("size", "stride", "pad"):
            v = getattr(self, key, None)
            if isinstance(v, int | np.integer):
                parts.append(f"{key} {v}")
        return ", ".join(parts)

    @property
    def x_norm(self):
        """Batch norm's normalised input (Darknet's l.x_norm), or None without batch norm.
        Not kept: it would add a copy of every batch-norm output to training memory (1.2 GB
        for yolov3 at batch 8); computed here from x and the batch statistics with the
        forward pass's float operations, so it is what forward computed, bit for bit."""
        if getattr(self, "x", None) is None or getattr(self, "mean", None) is None:
            return None
        out = np.empty_like(self.x)
        divisor = np.empty_like(self.variance)
        bn_divisors(self.variance, self.quirks.bn_epsilon_inside_sqrt, divisor)
        batchnorm_x_norm(self.x, self.mean, divisor, self.batch, self.out_c,
                         self.out_h * self.out_w, out)
        return out

    # -- the four verbs -------------------------------------------------------------
    def forward(self, net):
        raise NotImplementedError

    def backward(self, net):
        raise NotImplementedError(f"backward is not implemented for [{self.type}] layers")

    def update(self, a: UpdateArgs):
        return None

    def random_init(self, rng):
        """Darknet's initialisation of this layer's weights (make_*_layer; biases stay 0, BN
        scales 1), drawn from the numpy Generator `rng`. Layers without weights: nothing."""
        return None

    def resize(self, w: int, h: int):
        raise NotImplementedError(f"[{self.type}] layers cannot be resized")

    def resize_in(self, layers, w: int, h: int):
        """This layer's part of resize_network: `layers` are the network's layers before it
        (already resized), w x h the new size of its input. Layers sized by earlier layers'
        outputs (route, shortcut...) override it; the rest resize to their input."""
        self.resize(w, h)

    # -- weights and reporting ------------------------------------------------------
    def weight_records(self) -> list[tuple[str, np.ndarray]]:
        """(name, array) pairs in .weights file order; empty for layers without parameters."""
        return []

    def forward_path(self, net) -> str:
        """How its forward pass computes (a convolution's ConvPath); empty for the rest."""
        return ""

    def load_records(self) -> list[tuple[str, np.ndarray]]:
        """The records load_weights reads into, in file order: weight_records(), unless the
        layer reads fewer of them (a convolution's numload=, dontloadscales=)."""
        return self.weight_records()

    def after_load(self, transpose: bool):
        """load_weights has filled load_records(): a layer whose file layout differs from its
        own turns it (a [connected] layer of a transposed file, a convolution's flipped=1).
        transpose: the header marks the transposed layout (major or minor > 1000)."""

    def sublayers(self) -> list:
        """The layers a composite layer runs, in .weights order (empty for the rest)."""
        return []

    def reset_state(self, b: int):
        """reset_network_state's part: a recurrent layer forgets sequence b (others: nothing)."""

    def detections(self, net, w: int, h: int, thresh: float, hier: float, relative: bool,
                   b: int, letterbox: bool):
        """fill_network_boxes' part: this layer's Detections for image b of the batch, boxes
        relative to a w x h image (when `relative`); only [region] reads `hier`. Layers with
        makes_detections = True have it."""
        raise NotImplementedError(f"[{self.type}] makes no detections")

    @property
    def bflops(self) -> float:
        return 0.0

    def describe(self) -> str:
        """One row of Darknet's layer table (after the index column)."""
        return f"{self.type:<10}{'':>32}{self.w:4d} x{self.h:4d} x{self.c:4d}   ->  " \
               f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}"

    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.out_c, self.out_h, self.out_w)


def require_image_input(section, params: SizeParams):
    if not (params.h and params.w and params.c):
        raise CfgError(f"{section.where()}: layer {params.index} needs an image input "
                       f"(h x w x c), but the layer before it outputs a flat vector of "
                       f"{params.inputs} values")


def sgd_update_weights(l, a: UpdateArgs):
    """The SGD step of a layer whose only parameters are `weights` (AlexeyAB's weighted
    [shortcut], [implicit]): decay, rate / batch, momentum, as update_convolutional_layer does
    for its weights (also under adam=1, as those layers' C does)."""
    f32 = np.float32
    rate = f32(f32(a.learning_rate) * f32(l.learning_rate_scale))
    sgd_update_cpu(l.nweights, f32(rate / f32(a.batch)), f32(-f32(a.decay) * f32(a.batch)),
                   a.momentum, l.weights, l.weight_updates)


def pass_delta(net, delta, n, overwrite=False):
    """Send this layer's delta (already w.r.t. its input) to the layer below: added into
    net.delta, or copied over it when ``overwrite`` (what several Darknet CPU layers do:
    [activation], [batchnorm], [normalization], [reorg]; quirks.overwrite_delta keeps that)."""
    if net.delta is None:
        return
    if overwrite:
        copy_cpu(n, delta, net.delta)
    else:
        axpy_cpu(n, 1.0, delta, net.delta)


def alloc_params(l, nweights, n):
    """A layer's parameters as Darknet's make_*_layer allocates them: weights and n biases
    with their gradients, and with l.batch_normalize the batch-norm arrays."""
    l.nweights, l.nbiases = nweights, n
    l.weights = zeros(nweights, "weights")
    l.train_buffer("weight_updates", nweights, "weight updates")
    l.biases, l.bias_updates = zeros(n, "biases"), zeros(n, "bias updates")
    if l.batch_normalize:
        alloc_batchnorm(l, n)


def alloc_batchnorm(l, n):
    """Batch-norm scales (1) and their gradients, batch and rolling statistics, for n channels."""
    l.scales, l.scale_updates = full(n, 1.0), zeros(n)
    for name in ("mean", "variance", "mean_delta", "variance_delta", "rolling_mean",
                 "rolling_variance", "divisor"):
        setattr(l, name, zeros(n))


def update_params(l, a):
    """update_convolutional_layer / update_connected_layer: SGD with momentum on biases, BN
    scales and weights (decay on the weights only), dividing the rate by the full cfg batch.
    With adam=1, Darknet's Adam (its GPU path) on all three, decay included;
    quirks.adam_ignored ignores adam=1 as Darknet's CPU build does."""
    f32 = np.float32
    rate = f32(f32(a.learning_rate) * f32(l.learning_rate_scale))
    scales = l.scales if l.batch_normalize else None
    if a.adam and not l.quirks.adam_ignored:
        if getattr(l, "m", None) is None:
            l.m, l.v = zeros(l.nweights), zeros(l.nweights)
            l.bias_m, l.bias_v = zeros(l.nbiases), zeros(l.nbiases)
            l.scale_m, l.scale_v = zeros(l.nbiases), zeros(l.nbiases)
        args = (a.B1, a.B2, a.eps, a.decay, rate, a.batch, a.t)
        adam_update_cpu(l.nweights, l.weights, l.weight_updates, l.m, l.v, *args)
        adam_update_cpu(l.nbiases, l.biases, l.bias_updates, l.bias_m, l.bias_v, *args)
        if scales is not None:
            adam_update_cpu(l.nbiases, scales, l.scale_updates, l.scale_m, l.scale_v, *args)
        return
    step = f32(rate / f32(a.batch))
    sgd_update_cpu(l.nbiases, step, 0.0, a.momentum, l.biases, l.bias_updates)
    if scales is not None:
        sgd_update_cpu(l.nbiases, step, 0.0, a.momentum, scales, l.scale_updates)
    decay = f32(-f32(a.decay) * f32(a.batch))
    sgd_update_cpu(l.nweights, step, decay, a.momentum, l.weights, l.weight_updates)


def skips_update(l, quirks) -> bool:
    """update_network passes over layer l: AlexeyAB's skips every layer its make_*_layer left
    at l.train = 0 (Layer.ab_train_unset), under quirks.train_unset_not_updated."""
    return quirks.train_unset_not_updated and l.ab_train_unset
