"""Walk a Caffe net's layers in prototxt order and plan the Darknet sections that compute the
same thing (the handlers for each Caffe type: handlers.py).

Blobs and layers: every Caffe blob is the output of one planned Darknet layer (or the network
input). A Darknet layer reads the previous layer's output; to read another blob the plan puts a
[route] to its layer first. In-place Caffe layers (BatchNorm, Scale, ReLU, ... with top equal to
bottom) and ones whose bottom nobody reads again are folded into the layer that made their
bottom when that layer has not been read yet: batch norm and scale into a convolution's or a
connected layer's weights and biases (in float64), an activation into its `activation=`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .prototxt import Message, PrototxtError

INPUT = -1          # the layer index of the network's input


@dataclass
class Blob:
    layer: int          # the Darknet layer that outputs it, INPUT for the network input
    c: int
    h: int
    w: int
    flat: bool = False  # Caffe sees it as (N, c*h*w) (after Flatten, InnerProduct)


@dataclass
class Planned:
    """One Darknet section: its keys in order, its parameters (float64, Darknet's record
    names and layout), where it came from."""
    section: str
    keys: dict
    origin: str
    out: tuple          # (c, h, w)
    params: dict = field(default_factory=dict)
    activation: str | None = None      # set when the section takes an activation= key


@dataclass
class Plan:
    c: int = 0
    h: int = 0
    w: int = 0
    layers: list = field(default_factory=list)
    blobs: dict = field(default_factory=dict)       # Caffe blob name -> Blob
    tops: dict = field(default_factory=dict)        # Caffe layer name -> Darknet layer index


class Mapper:
    """The state of one import: the plan so far and who read which layer."""

    def __init__(self, net: Message, weights: dict, keep_bn: bool = False):
        self.net, self.weights, self.keep_bn = net, weights, keep_bn
        self.plan = Plan()
        self.readers: list[int] = []
        self.caffe_layers: list[Message] = []
        self.index = 0                              # the Caffe layer being mapped

    # --- where a layer is, and its errors ------------------------------------------------
    def origin(self, layer: Message) -> str:
        return (f"{layer.path}:{layer.line}: layer '{layer.str('name', '?')}' "
                f"({layer.str('type', '?')})")

    def error(self, layer: Message, msg: str) -> PrototxtError:
        return PrototxtError(f"{self.origin(layer)}: {msg}")

    # --- blobs -----------------------------------------------------------------------------
    def blob(self, layer: Message, name: str) -> Blob:
        b = self.plan.blobs.get(name)
        if b is None:
            raise self.error(layer, f"bottom '{name}' is not the top of any layer before it")
        return b

    def bottoms(self, layer: Message, count: int | None = None) -> list[str]:
        names = layer.strs("bottom")
        if count is not None and len(names) != count:
            raise self.error(layer, f"expected {count} bottom blob{'s' * (count > 1)}, "
                                    f"found {len(names)}")
        if not names:
            raise self.error(layer, "has no bottom blob")
        return names

    def top(self, layer: Message) -> str:
        tops = layer.strs("top")
        if len(tops) != 1:
            raise self.error(layer, f"expected one top blob, found {len(tops)}")
        return tops[0]

    def read_later(self, name: str) -> bool:
        """Does a Caffe layer after the current one read blob `name` (before it is
        rewritten)?"""
        for later in self.caffe_layers[self.index + 1:]:
            if name in later.strs("bottom"):
                return True
            if name in later.strs("top"):
                return False
        return False

    def foldable(self, layer: Message, name: str) -> Planned | None:
        """The planned layer that makes blob `name`, if this in-place-like layer may be folded
        into it: nobody read that layer's output yet, and the bottom's old values are not read
        again (the layer works in place, or nothing after it reads its bottom)."""
        b = self.blob(layer, name)
        if b.layer == INPUT or self.readers[b.layer]:
            return None
        if self.top(layer) != name and self.read_later(name):
            return None
        return self.plan.layers[b.layer]

    # --- planning sections ---------------------------------------------------------------
    def feed(self, layer: Message, name: str) -> Blob:
        """Make the next section read blob `name`: nothing to do when the last section makes
        it, else a [route] to its layer."""
        b = self.blob(layer, name)
        last = len(self.plan.layers) - 1
        if b.layer == INPUT:
            if last != -1:
                raise self.error(layer, f"reads the network input '{name}' after other layers: "
                                        f"a Darknet layer can read the input only as the first")
            return b
        if b.layer != last:
            self.emit(layer, "route", {"layers": str(b.layer)}, (b.c, b.h, b.w))
            b = Blob(last + 1, b.c, b.h, b.w, b.flat)
        self.readers[b.layer] += 1
        return b

    def emit(self, layer: Message, section: str, keys: dict, out: tuple, params=None,
             activation: str | None = None) -> int:
        """Append a section; its index. (A [route] or [shortcut] counts its own readers.)"""
        if section == "route":
            for i in keys["layers"].split(","):
                self.readers[int(i)] += 1
        if section == "shortcut":
            self.readers[int(keys["from"])] += 1
        self.plan.layers.append(Planned(section, dict(keys), self.origin(layer), tuple(out),
                                        params or {}, activation))
        self.readers.append(0)
        return len(self.plan.layers) - 1

    def set_top(self, layer: Message, index: int, flat: bool = False):
        c, h, w = self.plan.layers[index].out
        self.plan.blobs[self.top(layer)] = Blob(index, c, h, w, flat)
        self.plan.tops[layer.str("name", "")] = index

    def alias(self, layer: Message, blob: Blob, name: str | None = None, **changes):
        b = Blob(**{**blob.__dict__, **changes})
        self.plan.blobs[name or self.top(layer)] = b
        self.plan.tops[layer.str("name", "")] = b.layer

    # --- blobs of the caffemodel ---------------------------------------------------------
    def params_of(self, layer: Message, shapes: list[tuple]) -> list[np.ndarray]:
        """The layer's blobs from the caffemodel, each checked against its expected shape
        (Caffe's legacy 4-d shapes with leading 1s are accepted) and reshaped to it."""
        name = layer.str("name", "")
        blobs = self.weights.get(name)
        if blobs is None:
            raise self.error(layer, "has no blobs in the caffemodel (a caffemodel of another "
                                    "net?)")
        if len(blobs) < len(shapes):
            raise self.error(layer, f"the caffemodel holds {len(blobs)} blobs for it, expected "
                                    f"{len(shapes)}")
        out = []
        for k, (b, shape) in enumerate(zip(blobs, shapes)):
            squeezed = tuple(d for d in b.shape if d != 1) or (1,)
            want = tuple(d for d in shape if d != 1) or (1,)
            if squeezed != want:
                raise self.error(layer, f"blob {k} in the caffemodel has shape {b.shape}, the "
                                        f"prototxt makes it {shape}")
            out.append(b.reshape(shape))
        return out


def err_of(m: Mapper, layer: Message):
    """A function making `layer`'s one-line errors from a message."""
    return lambda msg: m.error(layer, msg)


def square(layer_error, p: Message, name: str, default: int | None, h_name=None,
           w_name=None) -> int:
    """A size Caffe may give as one repeated value, two (h, w) or name_h / name_w: the one
    value the import accepts (Darknet's windows are square)."""
    vals = p.ints(name)
    h = p.int(h_name) if h_name else None
    w = p.int(w_name) if w_name else None
    if h is not None or w is not None:
        vals = [h if h is not None else w, w if w is not None else h]
    if not vals:
        if default is None:
            raise layer_error(f"has no {name}")
        return default
    if len(set(vals)) != 1:
        raise layer_error(f"{name} {vals} differs between height and width: Darknet's "
                          f"windows are square")
    if vals[0] < 0:
        raise layer_error(f"{name} {vals[0]} is negative")
    return vals[0]
