"""Images as Darknet holds them (`image.c`): float32 in [0, 1], CHW (c, h, w), RGB.

Dimension legend: c channels (3), h rows, w columns.

load_image_color decodes with Pillow and gives what Darknet's stb loader gives: RGB bytes / 255,
whatever the file's mode (grayscale, grey+alpha, RGBA, palette, 16-bit are converted, never
rejected; alpha is dropped, not composited; 16-bit samples keep their high byte). EXIF
orientation is not applied, as Darknet does not. resize_image is Darknet's own two-pass
bilinear resize (not Pillow's resampler); letterbox_image keeps the aspect ratio and fills 0.5.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..detections import letterbox_size
from ..errors import DataError

_16BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")


def _to_rgb_bytes(img) -> np.ndarray:
    """(h, w, 3) uint8 from a Pillow image of any mode, as stb's 3-channel load gives them."""
    if img.mode in _16BIT_MODES:
        a = np.asarray(img, dtype=np.int64)
        grey = (np.clip(a, 0, 65535) >> 8).astype(np.uint8)          # stb keeps the high byte
        return np.repeat(grey[:, :, None], 3, axis=2)
    if img.mode == "F":
        grey = np.clip(np.asarray(img, dtype=np.float64), 0, 255).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if img.mode in ("RGBA", "RGBa", "RGBX"):
        return np.asarray(img, dtype=np.uint8)[:, :, :3]              # alpha dropped
    if img.mode != "RGB":
        img = img.convert("RGB")                                      # L, LA, P, 1, CMYK, YCbCr...
    return np.asarray(img, dtype=np.uint8)


def bytes_to_image(rgb: np.ndarray) -> np.ndarray:
    """(h, w, 3) uint8 -> (3, h, w) float32 in [0, 1], as load_image_stb divides by 255."""
    return np.ascontiguousarray(rgb.transpose(2, 0, 1), dtype=np.float32) / np.float32(255.0)


def image_from_pil(img) -> np.ndarray:
    """(3, h, w) float32 in [0, 1] from a Pillow image of any mode, as load_image_color reads
    files."""
    return bytes_to_image(_to_rgb_bytes(img))


def load_image_color(path, w: int = 0, h: int = 0) -> np.ndarray:
    """load_image_color: (3, h, w) float32 RGB in [0, 1]; resized with resize_image when w and h
    are given and differ. Raises DataError naming the file when it is missing or unreadable."""
    from PIL import Image, UnidentifiedImageError
    p = Path(path)
    if not p.exists():
        raise DataError(f"image not found: {p}")
    if p.is_dir():
        raise DataError(f"{p} is a directory, not an image")
    try:
        with Image.open(p) as img:
            img.load()
            im = image_from_pil(img)
    except UnidentifiedImageError:
        raise DataError(f"cannot read image {p}: not an image format Pillow recognises") from None
    except (OSError, ValueError, SyntaxError) as e:
        raise DataError(f"cannot read image {p}: {e}") from None
    if w and h and (im.shape[1] != h or im.shape[2] != w):
        im = resize_image(im, w, h)
    return im


def _samples(in_n: int, out_n: int):
    """Sample positions s = i * ((in-1)/(out-1)) in float32 as the C computes them:
    (integer part, fraction)."""
    scale = np.float32(in_n - 1) / np.float32(out_n - 1) if out_n > 1 else np.float32(0)
    s = np.arange(out_n, dtype=np.float32) * scale
    ix = s.astype(np.int64)
    return ix, (s - ix.astype(np.float32)).astype(np.float32)


def _resize_columns(im: np.ndarray, w: int) -> np.ndarray:
    """First pass: (1-dx)*im[..., ix] + dx*im[..., ix+1]; the last column (and every column of
    a 1-wide input) copies the input's last column."""
    in_w = im.shape[2]
    ix, dx = _samples(in_w, w)
    ix1 = np.minimum(ix + 1, in_w - 1)
    part = (np.float32(1) - dx) * im[:, :, ix]
    part += dx * im[:, :, ix1]
    part[:, :, w - 1] = im[:, :, in_w - 1]
    if in_w == 1:
        part[:] = im[:, :, :1]
    return part


def _resize_rows(part: np.ndarray, h: int) -> np.ndarray:
    """Second pass: (1-dy)*part[iy], then + dy*part[iy+1] except on the last row (or when the
    input is 1 row high). The last row keeps its (1-dy) factor, exactly as the C does."""
    in_h = part.shape[1]
    iy, dy = _samples(in_h, h)
    iy = np.minimum(iy, in_h - 1)
    dy = dy[None, :, None]
    out = (np.float32(1) - dy) * part[:, iy, :]
    if in_h > 1:
        add = dy * part[:, np.minimum(iy + 1, in_h - 1), :]
        out[:, :h - 1, :] += add[:, :h - 1, :]
    return out


def resize_image(im: np.ndarray, w: int, h: int) -> np.ndarray:
    """resize_image: Darknet's two-pass bilinear resize of a (c, h, w) float32 image: columns
    first (into a (c, im_h, w) buffer), then rows, each in float32 as the C does."""
    im = np.ascontiguousarray(im, dtype=np.float32)
    return np.ascontiguousarray(_resize_rows(_resize_columns(im, w), h), dtype=np.float32)


def letterbox_image(im: np.ndarray, w: int, h: int) -> np.ndarray:
    """letterbox_image: resize keeping the aspect ratio, centred on a (c, h, w) canvas of 0.5."""
    c, im_h, im_w = im.shape
    new_w, new_h = letterbox_size(im_w, im_h, w, h)
    resized = resize_image(im, new_w, new_h)
    boxed = np.full((c, h, w), 0.5, dtype=np.float32)
    dx, dy = (w - new_w) // 2, (h - new_h) // 2
    boxed[:, dy:dy + new_h, dx:dx + new_w] = resized
    return boxed

