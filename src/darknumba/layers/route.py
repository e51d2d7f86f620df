"""[route] (Darknet's `route_layer.c`): concatenates the outputs of earlier layers, per image.
AlexeyAB's `groups=G group_id=K`: each input contributes only its K-th of G equal channel
slices (its per-image output cut into G parts), and backward adds back into that slice.

At batch 1 every part is one contiguous run, so `share_outputs` (run by the network after
every allocation of its buffers) takes the copies away where it safely can: a source of a
concatenating route writes straight into its part of the route's output (its `output` becomes
a view of that part), and a route taking one slice of one source gets that slice as its
`output`. Forward then copies only the parts not already in place. Deltas stay separate, so
backward is the same with or without it.
"""
import numpy as np

from ..kernels.blas import copy_parts_cpu
from .base import Layer


class RouteLayer(Layer):
    type = "route"
    output_can_be_view = True

    def __init__(self, batch, input_layers, input_sizes, groups=1, group_id=0):
        self.batch = batch
        self.input_layers = list(input_layers)
        self.groups, self.group_id = groups, group_id
        self._set_sizes(input_sizes)

    def _set_sizes(self, input_sizes):
        self.input_sizes = list(input_sizes)
        self.outputs = self.inputs = sum(input_sizes) // self.groups
        self._alloc_io()
        # share_outputs: source k's output when it is a view of its part of this output; the
        # source output this output is a view of
        self.lent = [None] * len(self.input_layers)
        self.viewed = None

    @classmethod
    def from_cfg(cls, s, params):
        idx = s.find_list("layers", int)
        if not idx:
            raise s.error("layers", "route needs at least one input layer")
        layers = params.net.layers
        resolved = []
        for v in idx:
            i = params.index + v if v < 0 else v
            if not 0 <= i < params.index:
                raise s.error("layers", f"layer index {v} points to layer {i}, but only layers "
                                        f"0..{params.index - 1} come before this route (layer {params.index})")
            resolved.append(i)
        groups = s.find_int("groups", 1)
        group_id = s.find_int("group_id", 0)
        if groups < 1:
            raise s.error("groups", f"must be at least 1, found {groups}")
        if not 0 <= group_id < groups:
            raise s.error("group_id", f"must be in 0..{groups - 1} (groups={groups}), found {group_id}")
        for key in ("stream", "wait_stream"):       # AlexeyAB's GPU streams: nothing on a CPU
            s.find_int(key, -1)
        for i in resolved:
            if layers[i].out_c % groups:
                raise s.error("groups", f"layer {i} has {layers[i].out_c} channels, not "
                                        f"divisible into groups={groups}")
        first = layers[resolved[0]]
        l = cls(params.batch, resolved, [layers[i].outputs for i in resolved], groups, group_id)
        l.out_w, l.out_h, l.out_c = first.out_w, first.out_h, first.out_c
        for i in resolved[1:]:
            nxt = layers[i]
            if nxt.out_w == first.out_w and nxt.out_h == first.out_h:
                l.out_c += nxt.out_c
            else:
                raise s.error("layers", f"cannot concatenate layer {resolved[0]} "
                                        f"({first.out_w}x{first.out_h}) with layer {i} "
                                        f"({nxt.out_w}x{nxt.out_h}): spatial sizes differ")
        l.out_c //= groups
        l.h, l.w, l.c = l.out_h, l.out_w, l.out_c
        return l

    def resize_in(self, layers, w=None, h=None):
        """resize_route_layer: recompute sizes from the (already resized) input layers."""
        first = layers[self.input_layers[0]]
        self.out_w, self.out_h = first.out_w, first.out_h
        self.out_c = sum(layers[i].out_c for i in self.input_layers) // self.groups
        self._set_sizes([layers[i].outputs for i in self.input_layers])
        self.h, self.w, self.c = self.out_h, self.out_w, self.out_c

    def forward(self, net):
        """forward_route_layer: each source's part of every image copied in; nothing for the
        parts share_outputs put in place. At batch 1 one numpy copy; at batch > 1 the images'
        runs in blocks on every thread (blas.copy_parts_cpu): yolov4-tiny's batch-8 training
        step 0.96x (1224-1269 -> 1190-1203 ms, three interleaved runs of 5 steps, 2-core Xeon,
        2026-12-04; a 44 MB route alone 1.83 against 3.21 ms)."""
        out = self.output.reshape(self.batch, self.outputs)
        offset = 0
        for k, (idx, size) in enumerate(zip(self.input_layers, self.input_sizes)):
            src = net.layers[idx].output
            part = size // self.groups
            first = part * self.group_id
            if self.batch > 1:          # never shared (share_outputs): copied on every thread
                copy_parts_cpu(src, size, first, part, self.output, self.outputs, offset,
                               self.batch, False)
            elif not self._in_place(src, k):
                out[:, offset:offset + part] = _images(src, self.batch, size)[:, first:first + part]
            offset += part

    def _in_place(self, src, k) -> bool:
        """Source k's part is already where forward would copy it: share_outputs made one of
        the two arrays a view of the other, and it still is (a deep copy or a pickle of the
        network keeps the identities but gives every array memory of its own)."""
        return ((src is self.lent[k] or src is self.viewed)
                and np.may_share_memory(src, self.output))

    def backward(self, net):
        """backward_route_layer: adds each slice of delta back into its source layer's delta
        (y + x, as axpy_cpu with alpha 1 rounds it)."""
        delta = self.delta.reshape(self.batch, self.outputs)
        offset = 0
        for idx, size in zip(self.input_layers, self.input_sizes):
            part = size // self.groups
            first = part * self.group_id
            if self.batch > 1:          # as forward: blocks of every image on every thread
                copy_parts_cpu(self.delta, self.outputs, offset, part, net.layers[idx].delta,
                               size, first, self.batch, True)
            else:
                dst = _images(net.layers[idx].delta, self.batch, size)[:, first:first + part]
                dst += delta[:, offset:offset + part]
            offset += part

    def describe(self):
        row = "route " + "".join(f" {i}" for i in self.input_layers)
        if self.groups > 1:
            row += (f"{'':>16}{self.group_id}/{self.groups} -> "
                    f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")
        return row


def _images(a, batch, size):
    """The first batch x size values of a flat buffer, one row per image."""
    return a[:batch * size].reshape(batch, size)


def _base_id(a) -> int:
    """The object whose memory an array views (itself when it owns its data)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return id(a)


def _buffer_uses(layers) -> dict[int, int]:
    """How many array references reachable from the layers (attributes, inner layers, lists,
    dicts) fall in each buffer: _base_id -> count. A dropout's or an [empty]'s output is its
    predecessor's, so that buffer counts twice."""
    uses: dict[int, int] = {}
    visited = set()

    def visit(obj):
        if isinstance(obj, np.ndarray):
            key = _base_id(obj)
            uses[key] = uses.get(key, 0) + 1
            return
        if id(obj) in visited:
            return
        visited.add(id(obj))
        if isinstance(obj, list | tuple):
            for v in obj:
                visit(v)
        elif isinstance(obj, dict):
            for v in obj.values():
                visit(v)
        elif isinstance(obj, Layer):
            for v in vars(obj).values():
                visit(v)

    for l in layers:
        visit(l)
    return uses


def share_outputs(layers):
    """Let batch-1 routes copy nothing where that keeps every value the same (see the module
    docstring). Run after the layers' buffers are (re)allocated; forward falls back to copying
    any part whose arrays have changed since.

    Only layers with ``output_can_be_view`` (their forward writes their whole output and
    nothing else does, no other reference to it is kept) lend or take an output, and only when
    no other array reaches into its buffer (a [dropout] or [empty] aliasing it, which may write
    into it in place). A source lends its output to one route: the last one that concatenates
    it. Chains resolve from the last route down: a route that is itself a source gets its view
    first, and its sources then view into that. A route of one source views its slice of that
    source instead (the source stays free to lend itself: the repeated routes of an SPP
    block), unless it is itself lent on to a later route."""
    uses = _buffer_uses(layers)
    free = {id(l) for l in layers if l.output_can_be_view and l.batch == 1
            and l.output.size == l.outputs and uses.get(_base_id(l.output)) == 1}
    routes = [l for l in layers if isinstance(l, RouteLayer)]
    for r in routes:
        r.lent = [None] * len(r.input_layers)
        r.viewed = None

    def can_view(r):
        return len(r.input_layers) == 1 and id(r) in free and id(layers[r.input_layers[0]]) in free

    # a route of one slice of one source: its output will be a view of that slice
    viewing = {id(r) for r in routes if r.groups > 1 and can_view(r)}
    # concatenating routes, last first: which source lends its output to which part (a route
    # of one source only when it is itself lent on: else it views, leaving the source free)
    lent = set()
    for r in reversed(routes):
        if r.groups > 1 or id(r) not in free or (len(r.input_layers) == 1 and id(r) not in lent):
            continue
        offset = 0
        for k, idx in enumerate(r.input_layers):
            src = layers[idx]
            if id(src) in free and id(src) not in lent and id(src) not in viewing:
                lent.add(id(src))
                src.output = r.output[offset:offset + src.outputs]
                r.lent[k] = src.output
            offset += src.outputs
    viewing |= {id(r) for r in routes if r.groups == 1 and can_view(r) and id(r) not in lent}
    for r in routes:                 # first to last: a view of a view takes its source's last
        if id(r) in viewing:
            src = layers[r.input_layers[0]]
            part = src.outputs // r.groups
            r.output = src.output[part * r.group_id:part * (r.group_id + 1)]
            r.viewed = src.output
