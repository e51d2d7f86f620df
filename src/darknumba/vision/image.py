"""Images as Darknet holds them (`image.c`): float32 in [0, 1], CHW (c, h, w), RGB.

Dimension legend: c channels (3, or the network's `channels`), h rows, w columns.

load_image decodes with Pillow (decoder="pillow", the default) or, for JPEG files, with
vision/stb_jpeg.py (decoder="stb": a port of the stb_image both Darknets build, the same bytes as
their `stbi_load`); either way it gives what Darknet's stb loader gives for `c` requested
channels (AlexeyAB's load_image(path, w, h, c); load_image_color is c = 3): bytes / 255,
whatever the file's mode. Grey, grey+alpha, RGB and RGBA files are converted as stb converts
them (grey replicated; colour to grey as stb's (77 r + 150 g + 29 b) >> 8; alpha dropped, not
composited, or 255 when asked for and absent); palette, CMYK, YCbCr... through RGB; 16-bit
samples keep their high byte. EXIF orientation is not applied, as Darknet does not. Pillow's
JPEG decoder (libjpeg-turbo) upsamples chroma and rounds differently from stb: its pixels differ
from Darknet's by a few levels, and a JPEG's grey (c = 1) is Pillow's luma of its RGB where stb
keeps the file's Y; decoder="stb" gives Darknet's bytes (PNG and the other lossless formats
decode alike either way).
resize_image is Darknet's own two-pass bilinear resize (not Pillow's resampler);
letterbox_image keeps the aspect ratio and fills 0.5.

A file Darknet could not use either (missing, truncated, not an image, no pixels, more pixels
than Pillow's decompression-bomb limit) is a DataError naming it.
"""
from __future__ import annotations

import threading
import warnings
from pathlib import Path

import numpy as np

from ..detections import letterbox_size
from ..errors import DataError

DECODERS = ("pillow", "stb")         # JPEG decoding: libjpeg-turbo, or our port of stb_image
_16BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
_OPEN_LOCK = threading.Lock()       # warnings filters are process-wide: one open at a time


def _native_bytes(img) -> np.ndarray:
    """(h, w, n) uint8, n = 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA: the file's samples as stb
    reads them before converting to the requested channels."""
    if img.mode in _16BIT_MODES:
        a = np.asarray(img, dtype=np.int64)
        return (np.clip(a, 0, 65535) >> 8).astype(np.uint8)[:, :, None]   # stb: high byte
    if img.mode == "F":
        return np.clip(np.asarray(img, dtype=np.float64), 0, 255).astype(np.uint8)[:, :, None]
    if img.mode in ("1", "L"):
        return np.asarray(img.convert("L"), dtype=np.uint8)[:, :, None]
    if img.mode in ("LA", "La"):
        return np.asarray(img.convert("LA"), dtype=np.uint8)
    if img.mode in ("RGBA", "RGBa", "PA") or (img.mode == "P" and "transparency" in img.info):
        return np.asarray(img.convert("RGBA"), dtype=np.uint8)
    return np.asarray(img.convert("RGB"), dtype=np.uint8)    # RGB, RGBX, P, CMYK, YCbCr, ...


def _stb_grey(rgb: np.ndarray) -> np.ndarray:
    """stbi__compute_y: (77 r + 150 g + 29 b) >> 8."""
    r, g, b = (rgb[:, :, k].astype(np.uint32) for k in range(3))
    return ((77 * r + 150 * g + 29 * b) >> 8).astype(np.uint8)


def convert_channels(a: np.ndarray, c: int) -> np.ndarray:
    """stbi__convert_format: (h, w, n) uint8 samples to (h, w, c), n and c in 1..4."""
    n = a.shape[2]
    if n == c:
        return a
    grey = a[:, :, 0] if n <= 2 else _stb_grey(a)
    alpha = a[:, :, n - 1] if n in (2, 4) else np.full(a.shape[:2], 255, np.uint8)
    colour = np.repeat(a[:, :, :1], 3, axis=2) if n <= 2 else a[:, :, :3]
    planes = {1: [grey], 2: [grey, alpha], 3: [colour], 4: [colour, alpha[:, :, None]]}[c]
    return np.dstack([p if p.ndim == 3 else p[:, :, None] for p in planes])


def bytes_to_image(rgb: np.ndarray) -> np.ndarray:
    """(h, w, c) uint8 -> (c, h, w) float32 in [0, 1], as load_image_stb divides by 255."""
    return np.ascontiguousarray(rgb.transpose(2, 0, 1), dtype=np.float32) / np.float32(255.0)


def image_from_pil(img, c: int = 3) -> np.ndarray:
    """(c, h, w) float32 in [0, 1] from a Pillow image of any mode, as load_image reads files
    (c = 3: as load_image_color)."""
    return bytes_to_image(convert_channels(_native_bytes(img), c))


def _decode_stb_jpeg(p: Path, c: int) -> np.ndarray | None:
    """A JPEG file decoded by the stb_image port (vision/stb_jpeg.py); None for another format."""
    from PIL import Image

    from .stb_jpeg import JpegError, decode_jpeg, is_jpeg
    try:
        with open(p, "rb") as f:
            if not is_jpeg(f.read(64)):
                return None
            f.seek(0)
            data = f.read()
    except OSError as e:
        raise DataError(f"cannot read image {p}: {e.strerror or e}") from None
    try:
        return bytes_to_image(decode_jpeg(data, c, max_pixels=Image.MAX_IMAGE_PIXELS))
    except JpegError as e:
        raise DataError(f"cannot read image {p}: stb_image refuses this JPEG ({e})") from None
    except MemoryError:
        raise DataError(f"cannot read image {p}: it does not fit in memory") from None


def _decode(p: Path, c: int, decoder: str = "pillow") -> np.ndarray:
    if decoder == "stb":
        im = _decode_stb_jpeg(p, c)
        if im is not None:
            return im
    from PIL import Image, UnidentifiedImageError
    try:
        with _OPEN_LOCK, warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(p)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise DataError(f"cannot read image {p}: more than {Image.MAX_IMAGE_PIXELS} pixels, "
                        f"Pillow's decompression-bomb limit") from None
    except UnidentifiedImageError:
        raise DataError(f"cannot read image {p}: not an image format Pillow recognises") from None
    except Exception as e:               # noqa: BLE001 - any decoder failure is a bad file
        raise DataError(f"cannot read image {p}: {type(e).__name__}: {e}") from None
    with img:
        if img.width <= 0 or img.height <= 0:
            raise DataError(f"cannot read image {p}: it has no pixels ({img.width} x {img.height})")
        try:
            img.load()
            return image_from_pil(img, c)
        except MemoryError:
            raise DataError(f"cannot read image {p}: {img.width} x {img.height} does not fit "
                            f"in memory") from None
        except Exception as e:           # noqa: BLE001 - truncated or corrupt data
            raise DataError(f"cannot read image {p}: {type(e).__name__}: {e}") from None


def pick_decoder(decoder: str | None, quirks) -> str:
    """The JPEG decoder a command uses: `decoder` when given (one of DECODERS), else the
    network's rule: stb under compat="darknet-cpu" (Quirks.stb_jpeg: the C build decodes with
    stb_image), Pillow otherwise."""
    if decoder is None:
        return "stb" if quirks.stb_jpeg else "pillow"
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, not {decoder!r}")
    return decoder


def load_image(path, w: int = 0, h: int = 0, c: int = 3, decoder: str = "pillow") -> np.ndarray:
    """load_image: (c, h, w) float32 in [0, 1] with c channels (1 grey, 2 grey+alpha, 3 RGB,
    4 RGBA); resized with resize_image when w and h are given and differ. decoder: "pillow",
    or "stb" for JPEGs decoded to the C builds' pixels (other formats go through Pillow either
    way). Raises DataError naming the file when it is missing or unusable."""
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, not {decoder!r}")
    if c not in (1, 2, 3, 4):
        raise DataError(f"cannot load {path} with {c} channels: Darknet's image loader gives "
                        f"1 (grey), 2, 3 (RGB) or 4 channels (the cfg's [net] channels)")
    p = Path(path)
    if not p.exists():
        raise DataError(f"image not found: {p}")
    if not p.is_file():
        raise DataError(f"{p} is a {'directory' if p.is_dir() else 'special file'}, not an image")
    im = _decode(p, c, decoder)
    if w and h and (im.shape[1] != h or im.shape[2] != w):
        im = resize_image(im, w, h)
    return im


def load_image_color(path, w: int = 0, h: int = 0, decoder: str = "pillow") -> np.ndarray:
    """load_image_color: load_image with 3 channels (RGB)."""
    return load_image(path, w, h, 3, decoder)


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

