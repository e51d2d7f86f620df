"""`darknumba classifier example OUT`: a synthetic image-classification set to learn on.

One shape per 32x32 image, five classes (circle, square, triangle, cross, diamond) in varied
colour, size, position and rotation on textured backgrounds (those of `data shapes`). The class
is in the file name, as Darknet's classifier expects (labels are matched as path substrings):

    OUT/train/NNNNN_<label>.png  OUT/valid/NNNNN_<label>.png
    OUT/train.list  OUT/valid.list  OUT/labels.txt  OUT/shapes5.data  OUT/backup/
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from ..outputs import atomic_output, atomic_write
from .synthetic import background

LABELS = ("circle", "square", "triangle", "cross", "diamond")


def _polygon(kind, cx, cy, r, rot):
    if kind == "square":
        pts = [(-1, -1), (1, -1), (1, 1), (-1, 1)]
        r *= 0.8
    elif kind == "triangle":
        pts = [(math.cos(a), math.sin(a)) for a in (-math.pi / 2, math.pi / 6, 5 * math.pi / 6)]
    elif kind == "diamond":
        pts = [(0, -1), (0.6, 0), (0, 1), (-0.6, 0)]
    else:  # cross
        t = 0.33
        pts = [(-t, -1), (t, -1), (t, -t), (1, -t), (1, t), (t, t), (t, 1), (-t, 1), (-t, t),
               (-1, t), (-1, -t), (-t, -t)]
    c, s = math.cos(rot), math.sin(rot)
    return [(cx + r * (x * c - y * s), cy + r * (x * s + y * c)) for x, y in pts]


def make_image(rng, kind: str, size: int = 32):
    """One PIL RGB image with a single shape of the given kind."""
    from PIL import Image, ImageDraw
    bg = background(rng, size, size)
    im = Image.fromarray((bg * 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(im)
    mean = bg.mean(axis=(0, 1))
    colour = rng.uniform(0, 1, 3)
    while np.abs(colour - mean).sum() < 0.6:        # keep the shape visible on its background
        colour = rng.uniform(0, 1, 3)
    fill = tuple(int(v * 255) for v in colour)
    r = rng.uniform(0.22, 0.4) * size
    cx, cy = rng.uniform(r, size - r), rng.uniform(r, size - r)
    if kind == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    else:
        rot = rng.uniform(0, 2 * math.pi) if kind != "diamond" else rng.uniform(-0.3, 0.3)
        draw.polygon(_polygon(kind, cx, cy, r, rot), fill=fill)
    return im


FILES = ("train.list", "valid.list", "labels.txt", "shapes5.data", "train", "valid")  # in OUT


def make_example(out, n: int = 3000, valid: float = 0.2, seed: int = 0) -> Path:
    """Write the set (every file through a temporary file, outputs.py; the CLI refuses an
    OUT holding FILES unless --force); returns the .data file's path."""
    out = Path(out)
    rng = np.random.default_rng(seed)
    n_valid = int(round(n * valid))
    lists = {"train": [], "valid": []}
    for i in range(n):
        split = "valid" if i < n_valid else "train"
        kind = LABELS[i % len(LABELS)]
        d = out / split
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{i:05d}_{kind}.png"
        with atomic_output(p, sync=False) as f:
            make_image(rng, kind).save(f, format="PNG")
        lists[split].append(os.path.abspath(p))
    for split, paths in lists.items():
        atomic_write(out / f"{split}.list", ("\n".join(paths) + "\n").encode())
    atomic_write(out / "labels.txt", ("\n".join(LABELS) + "\n").encode())
    (out / "backup").mkdir(exist_ok=True)
    data = out / "shapes5.data"
    atomic_write(data, (f"classes = {len(LABELS)}\ntrain = {out.resolve() / 'train.list'}\n"
                        f"valid = {out.resolve() / 'valid.list'}\nlabels = {out.resolve() / 'labels.txt'}\n"
                        f"backup = {out.resolve() / 'backup'}\ntop = 2\n").encode())
    return data
