"""[route] (Darknet's `route_layer.c`): concatenates the outputs of earlier layers, per image.
AlexeyAB's `groups=G group_id=K`: each input contributes only its K-th of G equal channel
slices (its per-image output cut into G parts), and backward adds back into that slice."""
from ..kernels.blas import axpy_cpu, copy_cpu
from .base import Layer


class RouteLayer(Layer):
    type = "route"

    def __init__(self, batch, input_layers, input_sizes, groups=1, group_id=0):
        self.batch = batch
        self.input_layers = list(input_layers)
        self.groups, self.group_id = groups, group_id
        self._set_sizes(input_sizes)

    def _set_sizes(self, input_sizes):
        self.input_sizes = list(input_sizes)
        self.outputs = self.inputs = sum(input_sizes) // self.groups
        self._alloc_io()

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
        """forward_route_layer"""
        offset = 0
        for idx, size in zip(self.input_layers, self.input_sizes):
            src = net.layers[idx].output
            part = size // self.groups
            first = part * self.group_id
            for b in range(self.batch):
                copy_cpu(part, src[b * size + first:], self.output[offset + b * self.outputs:])
            offset += part

    def backward(self, net):
        """backward_route_layer: adds each slice of delta back into its source layer's delta."""
        offset = 0
        for idx, size in zip(self.input_layers, self.input_sizes):
            dst = net.layers[idx].delta
            part = size // self.groups
            first = part * self.group_id
            for b in range(self.batch):
                axpy_cpu(part, 1.0, self.delta[offset + b * self.outputs:], dst[b * size + first:])
            offset += part

    def describe(self):
        row = "route " + "".join(f" {i}" for i in self.input_layers)
        if self.groups > 1:
            row += (f"{'':>16}{self.group_id}/{self.groups} -> "
                    f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}")
        return row
