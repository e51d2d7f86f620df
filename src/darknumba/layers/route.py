"""[route] (Darknet's `route_layer.c`): concatenates the outputs of earlier layers, per image."""
from ..kernels.blas import axpy_cpu, copy_cpu
from .base import Layer


class RouteLayer(Layer):
    type = "route"

    def __init__(self, batch, input_layers, input_sizes):
        self.batch = batch
        self.input_layers = list(input_layers)
        self.input_sizes = list(input_sizes)
        self.outputs = sum(input_sizes)
        self.inputs = self.outputs
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
        first = layers[resolved[0]]
        l = cls(params.batch, resolved, [layers[i].outputs for i in resolved])
        l.out_w, l.out_h, l.out_c = first.out_w, first.out_h, first.out_c
        for i in resolved[1:]:
            nxt = layers[i]
            if nxt.out_w == first.out_w and nxt.out_h == first.out_h:
                l.out_c += nxt.out_c
            else:
                raise s.error("layers", f"cannot concatenate layer {resolved[0]} "
                                        f"({first.out_w}x{first.out_h}) with layer {i} "
                                        f"({nxt.out_w}x{nxt.out_h}): spatial sizes differ")
        l.h, l.w, l.c = l.out_h, l.out_w, l.out_c
        return l

    def resize_from(self, layers):
        """resize_route_layer: recompute sizes from the (already resized) input layers."""
        first = layers[self.input_layers[0]]
        self.out_w, self.out_h = first.out_w, first.out_h
        self.out_c = sum(layers[i].out_c for i in self.input_layers)
        self.input_sizes = [layers[i].outputs for i in self.input_layers]
        self.outputs = self.inputs = sum(self.input_sizes)
        self.h, self.w, self.c = self.out_h, self.out_w, self.out_c
        self._alloc_io()

    def forward(self, net):
        """forward_route_layer"""
        offset = 0
        for idx, size in zip(self.input_layers, self.input_sizes):
            src = net.layers[idx].output
            for b in range(self.batch):
                copy_cpu(size, src[b * size:], self.output[offset + b * self.outputs:])
            offset += size

    def backward(self, net):
        """backward_route_layer: adds each slice of delta back into its source layer's delta."""
        offset = 0
        for idx, size in zip(self.input_layers, self.input_sizes):
            dst = net.layers[idx].delta
            for b in range(self.batch):
                axpy_cpu(size, 1.0, self.delta[offset + b * self.outputs:], dst[b * size:])
            offset += size

    def describe(self):
        return "route " + "".join(f" {i}" for i in self.input_layers)
