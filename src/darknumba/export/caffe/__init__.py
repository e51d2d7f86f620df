"""Import a Caffe model (deploy .prototxt + .caffemodel) as a Darknet .cfg + .weights.

- ``prototxt.py``: the text format, read with line numbers (no schema, no protobuf package);
- ``caffemodel.py``: the binary wire format, read for each layer's blobs;
- ``mapping.py``: the walk over Caffe's layers and its bookkeeping; ``handlers.py`` (layers
  with blobs, activations) and ``topology.py`` (pooling, joining, reshaping): one function per
  Caffe layer type;
- here: `plan_caffe` (the plan alone) and `import_caffe` (the files, written through
  outputs.py: the cfg is parsed by darknumba's own parser and the weights saved by its own
  writer, so the result loads as any Darknet network does).

Supported types: HANDLERS in handlers.py (docs/caffe.md has the table); any other layer is
an error naming the prototxt line, its name and its type.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

from ...errors import CfgError, UsageError
from ...outputs import atomic_output, atomic_write, check_outputs_not_inputs
from .caffemodel import CaffemodelError, read_caffemodel
from .handlers import HANDLERS, V1_TYPES, set_input
from .mapping import Mapper, Plan
from .prototxt import Message, PrototxtError, read_prototxt

__all__ = ["import_caffe", "plan_caffe", "CaffemodelError", "PrototxtError", "CaffeImport"]

TRAIN_ONLY = ("TRAIN", "0")


@dataclass
class CaffeImport:
    """What import_caffe wrote: the plan (plan.tops: Caffe layer name -> Darknet layer index,
    plan.blobs: Caffe blob -> Darknet layer) and the files."""
    plan: Plan
    cfg: str
    weights: str


def _layers(net: Message) -> list[Message]:
    """The net's layers (`layer`, or V1's `layers`), without those only for training."""
    out = []
    for layer in net.all("layer") + net.all("layers"):
        if not isinstance(layer, Message):
            raise net.error("'layer' should be a { ... } block", "layer")
        phases = [r.str("phase") for r in layer.all("include") if isinstance(r, Message)]
        if phases and all(ph in TRAIN_ONLY for ph in phases):
            continue
        kind = layer.str("type")
        if kind in V1_TYPES:
            layer.fields = [(k, v) for k, v in layer.fields if k != "type"] + \
                [("type", type(layer.all("type")[0])(V1_TYPES[kind], True, layer.line))]
        out.append(layer)
    return out


def _top_level_input(m: Mapper, net: Message):
    """The old way of naming the input: `input: "data"` with `input_shape { dim ... }` or four
    `input_dim`s."""
    names = net.strs("input")
    if not names:
        return
    if len(names) > 1:
        raise net.error("several network inputs: Darknet networks have one", "input")
    dims = net.ints("input_dim") or net.msg("input_shape").ints("dim")
    set_input(m, net, names[0], dims)


def plan_caffe(net: Message, weights: dict, keep_bn: bool = False) -> Plan:
    """The Darknet sections that compute `net` (a parsed prototxt) with `weights` (layer name ->
    blobs, read_caffemodel's)."""
    m = Mapper(net, weights, keep_bn)
    m.caffe_layers = _layers(net)
    _top_level_input(m, net)
    for m.index, layer in enumerate(m.caffe_layers):
        kind = layer.str("type")
        handler = HANDLERS.get(kind)
        if handler is None:
            raise m.error(layer, f"layer type '{kind}' is not supported by the import "
                                 f"(supported: {', '.join(sorted(HANDLERS))})")
        if kind != "Input" and not m.plan.c:
            raise m.error(layer, "comes before the network's input is defined")
        handler(m, layer)
    if not m.plan.layers:
        raise net.error("no layers to import")
    return m.plan


def cfg_text(plan: Plan, sources: tuple[str, str]) -> str:
    """The .cfg of a plan: [net] with the input's shape, then one section per planned layer,
    each after a comment naming the Caffe layer it comes from."""
    lines = [f"# imported from {os.path.basename(sources[0])} and "
             f"{os.path.basename(sources[1])} by `darknumba import caffe`",
             "[net]", "batch=1", "subdivisions=1", f"width={plan.w}", f"height={plan.h}",
             f"channels={plan.c}", ""]
    for i, p in enumerate(plan.layers):
        lines.append(f"# {i}: {p.origin}")
        lines.append(f"[{p.section}]")
        lines += [f"{k}={v}" for k, v in p.keys.items()]
        lines.append("")
    return "\n".join(lines)


def _from_caffe(e: CfgError, tmp: str, out_cfg) -> CfgError:
    """The parser's error about the written cfg, naming the Caffe layer its section comes
    from (cfg_text puts each section's origin in the comment line above it)."""
    msg = str(e).replace(tmp, os.fspath(out_cfg))
    m = re.search(r":(\d+): \[", msg)
    if m:
        with open(tmp, encoding="utf-8") as f:
            lines = f.read().split("\n")[:int(m.group(1))]
        origins = [ln[2:].split(": ", 1)[1] for ln in lines
                   if re.match(r"# \d+: ", ln)]
        if origins:
            return CfgError(f"{origins[-1]}: Darknet refuses the section it maps to: {msg}")
    return CfgError(msg)


def fill_weights(net, plan: Plan):
    """Copy every planned parameter into the built network's records (float32)."""
    for i, p in enumerate(plan.layers):
        l = net.layers[i]
        for name, value in p.params.items():
            dest = getattr(l, name)
            value = np.asarray(value, np.float64).ravel()
            if dest.size != value.size:
                raise AssertionError(f"layer {i} ({p.origin}) {name}: {value.size} values for "
                                     f"{dest.size}")
            dest[...] = value.astype(np.float32).reshape(dest.shape)


def import_caffe(prototxt, caffemodel, out_cfg, out_weights, keep_bn: bool = False,
                 log=None) -> CaffeImport:
    """Read the Caffe files, write the Darknet cfg and weights (each replaced whole or not at
    all; neither may be an input). keep_bn: BatchNorm as [caffe_batchnorm] sections (Caffe's
    training arithmetic) instead of folded into the convolutions."""
    from ...parser import parse_network_cfg
    from ...weights import weights_bytes
    check_outputs_not_inputs({"the cfg": out_cfg, "the weights": out_weights},
                             {"the prototxt": prototxt, "the caffemodel": caffemodel})
    if os.path.abspath(out_cfg) == os.path.abspath(out_weights):
        raise UsageError(f"{out_cfg}: the cfg and the weights would be the same file; give "
                         f"two names")
    net_msg = read_prototxt(prototxt)
    plan = plan_caffe(net_msg, read_caffemodel(caffemodel), keep_bn)
    text = cfg_text(plan, (os.fspath(prototxt), os.fspath(caffemodel)))
    with atomic_output(out_cfg, mode=None) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            net = parse_network_cfg(tmp, batch=1, seed=None)
        except CfgError as e:       # sizes Darknet refuses (no output pixels, too much memory)
            raise _from_caffe(e, tmp, out_cfg) from None
        fill_weights(net, plan)
        atomic_write(out_weights, weights_bytes(net))
    if log:
        log(f"{out_cfg}: {len(plan.layers)} layers; {out_weights}: written")
    return CaffeImport(plan, os.fspath(out_cfg), os.fspath(out_weights))
