"""AlexeyAB's classifier-form [contrastive] (no yolo_layer=) on the C side of `compare`.

AlexeyAB's parse_contrastive (parser.c, since its commit 74f32a39 of 2020-07-25) reads
`yolo_layer->type` before it checks the pointer; without yolo_layer= (or with one that resolves
to layer 0) that pointer is null and the parse dies with SIGSEGV, in every command (`classifier
train` included). Its classifier code itself (make_contrastive_layer with no [yolo], the
`!l.detection` branch of forward_contrastive_layer) is intact, so compare builds that layer with
it: the cfg handed to the parser has an ``[empty]`` layer in the section's place (AlexeyAB's
EMPTY: the sizes of its input), and the shim's ``dnc_contrastive_classifier`` replaces it by
``make_contrastive_layer(batch, w, h, c, classes, inputs, NULL)`` with the keys
parse_contrastive reads, as its parser built the layer from 09991d04 (2020-06-14) until then.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from ..cfg import parse_cfg_text
from ..textfile import read_text

FLT_MAX = float(np.finfo(np.float32).max)


def classifier_stand_ins(cfg) -> tuple[str, list[dict]]:
    """(the cfg text for AlexeyAB's parser, one dict per classifier-form [contrastive]: its
    layer index and the keys parse_contrastive reads, with its defaults). The text is the cfg's
    own when there is none; line numbers are kept (a section's key lines become blank)."""
    text = read_text(Path(cfg), "cfg file")
    with warnings.catch_warnings():     # darknumba's own parse of the cfg has said them
        warnings.simplefilter("ignore")
        sections = parse_cfg_text(text, str(cfg))
    lines = text.split("\n")
    found = []
    for k, s in enumerate(sections[1:]):
        if s.type != "contrastive":
            continue
        yid = s.find_int("yolo_layer", 0)
        if (yid + k if yid < 0 else yid) != 0:
            continue
        found.append({"index": k, "classes": s.find_int("classes", 1000),
                      "temperature": s.find_float("temperature", 1.0),
                      "cls_normalizer": s.find_float("cls_normalizer", 1.0),
                      "max_delta": min(s.find_float("max_delta", FLT_MAX), FLT_MAX),
                      "contrastive_neg_max": s.find_int("contrastive_neg_max", 3)})
        end = sections[k + 2].line - 1 if k + 2 < len(sections) else len(lines)
        lines[s.line - 1] = "[empty]"
        for j in range(s.line, end):
            if lines[j].strip() and lines[j].lstrip()[0] not in "#;":
                lines[j] = ""
    return "\n".join(lines), found


def build_stand_ins(lib, net, stand_ins: list[dict]) -> str | None:
    """In the child: each [empty] stand-in becomes AlexeyAB's classifier [contrastive]; an
    error message when the shim refuses (the layer is not the stand-in)."""
    for s in stand_ins:
        if lib.dnc_contrastive_classifier(net, s["index"], s["classes"], s["temperature"],
                                          s["cls_normalizer"], s["max_delta"],
                                          s["contrastive_neg_max"]) != 0:
            return (f"layer {s['index']}: the shim could not build AlexeyAB's classifier "
                    f"[contrastive] in place of its [empty] stand-in")
    return None
