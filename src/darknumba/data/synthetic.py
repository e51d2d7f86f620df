"""`darknumba data shapes OUT`: a synthetic detection dataset to learn on.

Coloured circles, squares and triangles of varied size, position, colour and count on textured
backgrounds (smooth noise, stripes, speckle). Layout, as Darknet expects it:

    OUT/images/{train,valid}/NNNNN.jpg   OUT/labels/{train,valid}/NNNNN.txt
    OUT/train.txt  OUT/valid.txt  OUT/shapes.names  OUT/shapes.data  OUT/backup/

Objects do not overlap much (IoU <= 0.1 between boxes), so every label is visible.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..outputs import atomic_output, atomic_write

NAMES = ("circle", "square", "triangle")


def background(rng, w, h) -> np.ndarray:
    """An RGB float image in [0,1]: smooth colour noise, plus stripes or speckle."""
    gw, gh = int(rng.integers(2, 7)), int(rng.integers(2, 7))
    grid = rng.uniform(0, 1, (gh, gw, 3)).astype(np.float32)
    ys = np.linspace(0, gh - 1, h)
    xs = np.linspace(0, gw - 1, w)
    y0 = np.floor(ys).astype(int)
    x0 = np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, gh - 1), np.minimum(x0 + 1, gw - 1)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    img = (grid[y0][:, x0] * (1 - fy) * (1 - fx) + grid[y1][:, x0] * fy * (1 - fx)
           + grid[y0][:, x1] * (1 - fy) * fx + grid[y1][:, x1] * fy * fx)
    kind = rng.integers(3)
    if kind == 0:   # stripes at a random angle
        a = rng.uniform(0, np.pi)
        period = rng.uniform(4, 20)
        yy, xx = np.mgrid[0:h, 0:w]
        s = np.sin((xx * np.cos(a) + yy * np.sin(a)) * 2 * np.pi / period)
        img = img + 0.12 * s[..., None]
    elif kind == 1:  # speckle
        img = img + rng.normal(0, 0.08, (h, w, 1))
    img = img * rng.uniform(0.5, 1.0) + rng.uniform(0, 0.3)
    return np.clip(img, 0, 1)


def _iou(a, b):
    ax0, ay0, ax1, ay1 = a
    bx0, by0, bx1, by1 = b
    iw = max(0.0, min(ax1, bx1) - max(ax0, bx0))
    ih = max(0.0, min(ay1, by1) - max(ay0, by0))
    inter = iw * ih
    return inter / ((ax1 - ax0) * (ay1 - ay0) + (bx1 - bx0) * (by1 - by0) - inter)


def make_image(rng, w: int, h: int, max_objects: int = 4, min_size: float = 0.12,
               max_size: float = 0.45):
    """One image (PIL RGB) and its label rows (class, x, y, w, h), relative."""
    from PIL import Image, ImageDraw
    bg = background(rng, w, h)
    im = Image.fromarray((bg * 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(im)
    boxes, labels = [], []
    n = int(rng.integers(1, max_objects + 1))
    for _ in range(n * 10):
        if len(labels) == n:
            break
        cls = int(rng.integers(len(NAMES)))
        side = rng.uniform(min_size, max_size) * min(w, h)
        bw = side if cls != 2 else side * rng.uniform(0.8, 1.25)
        bh = side
        x0, y0 = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
        box = (x0, y0, x0 + bw, y0 + bh)
        if any(_iou(box, b) > 0.1 for b in boxes):
            continue
        # a colour that stands out from the background under the shape
        under = bg[int(y0):int(y0 + bh) + 1, int(x0):int(x0 + bw) + 1].reshape(-1, 3).mean(0)
        for _ in range(20):
            col = rng.uniform(0, 1, 3)
            if np.abs(col - under).sum() > 0.8:
                break
        fill = tuple(int(v * 255) for v in col)
        if cls == 0:
            draw.ellipse(box, fill=fill)
        elif cls == 1:
            draw.rectangle(box, fill=fill)
        else:
            if rng.integers(2):
                pts = [(x0, y0 + bh), (x0 + bw, y0 + bh), (x0 + bw / 2, y0)]
            else:
                pts = [(x0, y0), (x0 + bw, y0), (x0 + bw / 2, y0 + bh)]
            draw.polygon(pts, fill=fill)
        boxes.append(box)
        labels.append((cls, (x0 + bw / 2) / w, (y0 + bh / 2) / h, bw / w, bh / h))
    return im, labels


FILES = ("train.txt", "valid.txt", "shapes.names", "shapes.data", "images", "labels")  # in OUT


def generate_shapes(out, n: int = 2000, valid_fraction: float = 0.2, seed: int = 0,
                    size: tuple[int, int] = (128, 192), progress=None) -> Path:
    """Write the dataset; returns the path of OUT/shapes.data. Image sides are drawn from
    `size` (so the network sees several aspect ratios). Every file is written through a
    temporary file (outputs.py); the CLI refuses an OUT holding FILES unless --force."""
    out = Path(out).resolve()
    rng = np.random.default_rng(seed)
    n_valid = round(n * valid_fraction)
    lists = {"train": [], "valid": []}
    for split in lists:
        (out / "images" / split).mkdir(parents=True, exist_ok=True)
        (out / "labels" / split).mkdir(parents=True, exist_ok=True)
    for i in range(n):
        split = "valid" if i >= n - n_valid else "train"
        w, h = (int(v) for v in rng.integers(size[0], size[1] + 1, 2))
        im, labels = make_image(rng, w, h)
        ip = out / "images" / split / f"{i:05d}.jpg"
        with atomic_output(ip, sync=False) as f:
            im.save(f, format="JPEG", quality=92)
        atomic_write(out / "labels" / split / f"{i:05d}.txt", "".join(
            f"{c} {x:.6f} {y:.6f} {bw:.6f} {bh:.6f}\n" for c, x, y, bw, bh in labels).encode(),
            sync=False)
        lists[split].append(str(ip))
        if progress:
            progress(1)
    for split, paths in lists.items():
        atomic_write(out / f"{split}.txt", "".join(p + "\n" for p in paths).encode())
    atomic_write(out / "shapes.names", "".join(s + "\n" for s in NAMES).encode())
    (out / "backup").mkdir(exist_ok=True)
    data = out / "shapes.data"
    atomic_write(data, (f"classes = {len(NAMES)}\ntrain = {out / 'train.txt'}\n"
                        f"valid = {out / 'valid.txt'}\nnames = {out / 'shapes.names'}\n"
                        f"backup = {out / 'backup'}{os.sep}\n").encode())
    return data
