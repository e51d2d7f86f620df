"""Read the layer table AlexeyAB's parser prints (`parse_network_cfg_custom`) and compare it with
a network darknumba built.

AlexeyAB's format is not pjreddie's (ours, `Network.summary`): each row starts with the index
(`%4d `), then the layer's own line, whose layout depends on its type:

    0 conv     32       3 x 3/ 2    416 x 416 x   3 ->  208 x 208 x  32 0.075 BF
    3 route  2 		                       1/2 ->  104 x 104 x  32
    7 Shortcut Layer: 4,  wt = 0, wn = 0, outputs: 304 x 304 x  64 0.006 BF
   30 yolo

Messages may come between the index and the row (`type: Using default 'sse'` then the row on
the next line) or after it (the `[yolo] params:` lines), and composite layers print their
sub-layers unnumbered: a row is the first line of its index's chunk that reads as a row.
An antialiased layer prints its stride-1 self, then `AA:` and the stride-s blur convolution
whose output is the layer's output (what the next layer sees).

`check(cfg, table)` gives the verdict the table tests use: pass, expected failure (darknumba
says what it lacks) or failure.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import darknumba as dn
from darknumba.cfg import read_cfg
from darknumba.errors import CfgError

WHC = r"(\d+) x\s*(\d+) x\s*(\d+)"
BF = r"([\d.]+) BF"

# kind -> pattern of the row text (after the index), and the names of its groups
ROWS = {
    "conv": (rf"(conv|convX|convXB|convS|convAE)\s*(\d+)(?:/\s*(\d+))?\s+(\d+)\s*x\s*\d+/\s*(\d+)"
             rf"(?:x\s*(\d+))?(?:\((\d+)\))?\s+{WHC} ->\s+{WHC}\s+{BF}",
             "variant filters groups size stride_x stride_y dilation w h c out_w out_h out_c bflops"),
    "pool": (rf"(max|max-depth|avg)\s+(\d+)x\s*\d+/\s*(\d+)(?:x\s*(\d+))?\s+{WHC} ->\s+{WHC}\s+{BF}",
             "variant size stride_x stride_y w h c out_w out_h out_c bflops"),
    "avgpool": (rf"avg\s+{WHC} ->\s+(\d+)", "w h c out_c"),
    "route": (r"route((?:\s+\d+)+?)\s+(?:(\d+)/(\d+)\s+)?->\s+" + WHC,
              "layers group_id groups out_w out_h out_c"),
    "shortcut": (rf"Shortcut Layer: ((?:\d+,\s*)+)\s*wt = (\d+), wn = (\d+), outputs:\s*{WHC}\s+{BF}",
                 "layers weights_type weights_normalization out_w out_h out_c bflops"),
    "scale": (r"scale Layer: (\d+)", "index"),
    "upsample": (rf"(upsample|downsample)\s+(\d+)x\s+{WHC} ->\s+{WHC}",
                 "variant stride w h c out_w out_h out_c"),
    "yolo": (r"yolo", ""),
    "gaussian_yolo": (r"\[Gaussian_yolo\].*", ""),
    "connected": (r"connected\s+(\d+)\s+->\s+(\d+)", "inputs outputs"),
    "dropout": (r"(?:dropout|dropblock)\s+p = ([\d.]+)\s.*?(\d+)\s+->\s+(\d+)",
                "probability inputs outputs"),
    "softmax": (r"softmax\s+(\d+)", "inputs"),
    "cost": (r"cost\s+(\d+)", "inputs"),
    "region": (r"detection", ""),
    "detection": (r"Detection Layer", ""),
    "reorg": (rf"(reorg|reorg_old)\s+/\s*(\d+)\s+{WHC}\s+->\s+{WHC}",
              "variant stride w h c out_w out_h out_c"),
    "crop": (r"Crop Layer: (\d+) x (\d+) -> (\d+) x (\d+) x (\d+) image", "h w out_h out_w c"),
    "local": (r"Local Layer: (\d+) x (\d+) x (\d+) image, (\d+) filters -> (\d+) x (\d+) x (\d+) image",
              "h w c filters out_h out_w out_c"),
    "recurrent": (r"(RNN|GRU|LSTM) Layer: (\d+) inputs, (\d+) outputs", "variant inputs outputs"),
    "crnn": (r"CRNN Layer: (\d+) x (\d+) x (\d+) image, (\d+) filters", "h w c out_c"),
    "batchnorm": (r"Batch Normalization Layer: (\d+) x (\d+) x (\d+) image", "w h c"),
    "activation": (r"Activation Layer: (\d+) inputs", "inputs"),
    "contrastive": (r"contrastive\s.*", ""),
    "implicit": (r"implicit Layer: (\d+) x (\d+)\s.*", "filters atoms"),
    "empty": (r"empty", ""),
}
_COMPILED = {k: (re.compile(p + r"\s*$"), names.split()) for k, (p, names) in ROWS.items()}

# AlexeyAB's row kind -> the layer types (our `Layer.type`, which is the cfg section name)
# that print it
OUR_TYPES = {
    "conv": {"convolutional"}, "avgpool": {"avgpool"}, "route": {"route"},
    "shortcut": {"shortcut"}, "scale": {"scale_channels", "sam"}, "upsample": {"upsample"},
    "yolo": {"yolo"}, "gaussian_yolo": {"gaussian_yolo"}, "connected": {"connected"},
    "dropout": {"dropout"}, "softmax": {"softmax"}, "cost": {"cost"}, "region": {"region"},
    "detection": {"detection"}, "crop": {"crop"}, "local": {"local"}, "crnn": {"crnn"},
    "batchnorm": {"batchnorm"}, "activation": {"activation"}, "contrastive": {"contrastive"},
    "implicit": {"implicit"}, "empty": {"empty"},
}
VARIANT_TYPES = {  # kinds whose type depends on the row's variant
    ("pool", "max"): {"maxpool"}, ("pool", "max-depth"): {"maxpool"},
    ("pool", "avg"): {"local_avgpool"},
    ("reorg", "reorg_old"): {"reorg"}, ("reorg", "reorg"): {"reorg3d"},
    ("recurrent", "RNN"): {"rnn"}, ("recurrent", "GRU"): {"gru"}, ("recurrent", "LSTM"): {"lstm"},
}


@dataclass
class ABRow:
    index: int
    kind: str
    fields: dict = field(default_factory=dict)
    text: str = ""

    @property
    def types(self) -> set:
        return VARIANT_TYPES.get((self.kind, self.fields.get("variant")), OUR_TYPES.get(self.kind))


@dataclass
class ABTable:
    rows: list
    total_bflops: float | None
    parsed: tuple | None            # (n layers, w, h, c) from the recorder's closing line


def _value(name, v):
    if v is None:
        return None
    if name == "layers":
        return [int(x) for x in re.findall(r"\d+", v)]
    if name == "variant":
        return v
    return float(v) if name in ("bflops", "probability") else int(v)


def parse_row(text: str):
    """(kind, fields) of one row's text, or None when the line is not a row. Fields a row
    leaves out get AlexeyAB's defaults (no `g/G` on a route: 1 group; no `(d)`: dilation 1)."""
    text = text.strip()
    for kind, (pattern, names) in _COMPILED.items():
        m = pattern.match(text)
        if m:
            fields = {n: _value(n, g) for n, g in zip(names, m.groups())}
            for name, default in (("groups", 1), ("group_id", 0), ("dilation", 1),
                                  ("stride_y", fields.get("stride_x"))):
                if name in fields and fields[name] is None:
                    fields[name] = default
            return kind, fields
    return None


def parse_table(text: str) -> ABTable:
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.strip().startswith("layer   filters"))
    chunks, index = [], 0
    for line in lines[start + 1:]:
        m = re.match(r"^ *(\d+) (.*)$", line)
        if m and int(m.group(1)) == index and len(line) - len(line.lstrip(" ")) + len(m.group(1)) == 4:
            chunks.append([m.group(2)])
            index += 1
        elif line.startswith("Total BFLOPS"):
            break
        elif chunks:
            chunks[-1].append(line)
    rows = []
    for i, chunk in enumerate(chunks):
        found = next((r for r in map(parse_row, chunk) if r), None)
        if found is None or found[0] == "conv" and chunk[0].startswith("AA:"):
            raise ValueError(f"AlexeyAB table row {i} not understood: {chunk!r}")
        blur = [parse_row(line[3:]) for line in chunk if line.startswith("AA:")]
        if blur:
            found[1]["blur"] = blur[0][1]
        rows.append(ABRow(i, found[0], found[1], chunk[0]))
    total = re.search(r"^Total BFLOPS ([\d.]+)", text, re.MULTILINE)
    done = re.search(r"^ABREC parsed (\d+) layers, w=(\d+) h=(\d+) c=(\d+)", text, re.MULTILINE)
    return ABTable(rows, float(total.group(1)) if total else None,
                   tuple(int(g) for g in done.groups()) if done else None)


# -- comparing with a darknumba network -----------------------------------------------------------
BFLOPS_TOL = 0.0005 * 1.001 + 1e-7      # AlexeyAB prints %5.3f


def _get(l, name):
    """Our layer's value of one of AlexeyAB's row fields."""
    shape = {"w": "w", "h": "h", "c": "c", "out_w": "out_w", "out_h": "out_h", "out_c": "out_c",
             "inputs": "inputs", "outputs": "outputs", "size": "size"}
    if name in shape:
        return getattr(l, shape[name], None)
    if name == "filters":
        return getattr(l, "n", None)
    if name in ("stride_x", "stride_y"):
        return getattr(l, name, getattr(l, "stride", None))
    if name == "stride":
        return getattr(l, "stride", None)
    if name == "dilation":
        return getattr(l, "dilation", 1)
    if name == "groups":
        return getattr(l, "groups", 1)
    if name == "group_id":
        return getattr(l, "group_id", 0)
    if name == "layers":
        return list(getattr(l, "input_layers", [getattr(l, "index", None)]))
    if name == "index":
        return getattr(l, "index", None)
    if name == "probability":
        return getattr(l, "probability", None)
    return getattr(l, name, None)


def _ab_bflops(l, row: ABRow) -> float:
    """What AlexeyAB counts for the layer: a convolution's own count (an xnor one's / 32); a
    max/avg pool size*size*c*out_h*out_w, a shortcut out_w*out_h*out_c*(its number of inputs),
    as its maxpool_layer.c and shortcut_layer.c do (pjreddie's table prints none for either)."""
    if row.kind == "pool":
        return l.size * l.size * l.c * l.out_h * l.out_w / 1e9
    if row.kind == "shortcut":
        return l.out_w * l.out_h * l.out_c * len(row.fields["layers"]) / 1e9
    if getattr(l, "xnor", False):       # make_convolutional_layer: an xnor layer's count / 32
        return l.bflops / 32
    return l.bflops


SKIP = {"variant", "bflops", "weights_type", "weights_normalization", "atoms", "blur"}


def compare_layer(l, row: ABRow) -> list[str]:
    """What differs between our layer and AlexeyAB's row (empty when they agree). An
    antialiased layer's strides and output are its blur convolution's."""
    if l.type not in row.types:
        return [f"type: ours [{l.type}], AlexeyAB's row {row.text.strip()!r}"]
    expected = dict(row.fields)
    if "blur" in expected:
        blur = expected["blur"]
        expected.update({k: blur[k] for k in ("stride_x", "stride_y", "out_w", "out_h", "out_c")})
    out = []
    for name, ab in expected.items():
        if name in SKIP:
            continue
        ours = _get(l, name)
        if name == "probability":
            same = ours is not None and abs(ours - ab) < 5e-4
        else:
            same = ours == ab
        if not same:
            out.append(f"{name}: ours {ours}, AlexeyAB {ab}")
    if "bflops" in row.fields:
        ours = _ab_bflops(l, row)
        if abs(ours - row.fields["bflops"]) > BFLOPS_TOL:
            out.append(f"BFLOPs: ours {ours:.4f}, AlexeyAB {row.fields['bflops']:.3f}")
    return out


def compare_network(net, table: ABTable) -> list[tuple[int, str]]:
    """(layer index, what differs) for every difference; -1 for the network as a whole."""
    diffs = []
    if table.parsed is not None:
        n, w, h, c = table.parsed
        if (net.n, net.w, net.h, net.c) != (n, w, h, c):
            diffs.append((-1, f"network: ours {net.n} layers {net.w}x{net.h}x{net.c}, "
                              f"AlexeyAB {n} layers {w}x{h}x{c}"))
    if net.n != len(table.rows):
        diffs.append((-1, f"ours {net.n} layers, AlexeyAB's table {len(table.rows)}"))
    for l, row in zip(net.layers, table.rows):
        diffs += [(row.index, f"layer {row.index} [{l.type}]: {d}") for d in compare_layer(l, row)]
    return diffs


# -- the verdict on one cfg ------------------------------------------------------------------------
_UNUSED = re.compile(r"^(.*):(\d+): \[(\w+)\] unused field '([^ ]+) = ")


def unused_by_layer(cfg: Path, caught) -> dict[int, list[str]]:
    """Layer index (-1: [net]) -> the keys of its section darknumba warned it left unused."""
    sections = read_cfg(cfg)
    starts = [s.line for s in sections]
    out: dict[int, list[str]] = {}
    for w in caught:
        m = _UNUSED.match(str(w.message))
        if m:
            line = int(m.group(2))
            section = max(i for i, start in enumerate(starts) if start <= line)
            out.setdefault(section - 1, []).append(f"[{m.group(3)}] {m.group(4)}")
    return out


def build(cfg: Path):
    """(network, unused keys by layer); an expected failure when darknumba refuses the cfg."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            net = dn.parse_network_cfg(cfg, batch=1, dialect="alexeyab", allocate=False)
        except CfgError as e:
            pytest.xfail(f"darknumba cannot build it yet: {e}")
    return net, unused_by_layer(cfg, caught)


def check(cfg: Path, table_path: Path):
    """Build `cfg` as AlexeyAB's table was made (batch 1, alexeyab dialect, no buffers) and
    compare. Passes when every row agrees; an expected failure when darknumba refuses the cfg
    (reason: its CfgError) or when the first layer that differs has keys darknumba left unused
    (reason: those keys); fails on any other difference, listing them."""
    table = parse_table(table_path.read_text())
    net, unused = build(cfg)
    diffs = compare_network(net, table)
    if not diffs:
        return
    first = next((i for i, _ in diffs if i >= 0), -1)
    if unused.get(first):
        pytest.xfail(f"layer {first} uses {', '.join(unused[first])}, which darknumba does not "
                     f"implement yet (unused field); first difference: {diffs[0][1]}")
    shown = "\n  ".join(d for _, d in diffs[:12])
    more = f"\n  ... and {len(diffs) - 12} more" if len(diffs) > 12 else ""
    pytest.fail(f"{cfg.name}: {len(diffs)} difference(s) from AlexeyAB's table "
                f"{table_path.name}:\n  {shown}{more}")
