"""Small Caffe models for the import's tests: a .caffemodel writer (protobuf's wire format by
hand, the fields caffemodel.py reads and OpenCV's importer needs) and the nets the tests build.
The writer is independent of the reader under test: it encodes, the reader decodes."""
from __future__ import annotations

import struct

import numpy as np


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _len_field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def blob_bytes(arr: np.ndarray, legacy: bool = False, unpacked: bool = False) -> bytes:
    """A BlobProto: shape (field 7, packed dims) or the legacy num/channels/height/width
    (fields 1-4), then data (field 5) packed or one float per field."""
    arr = np.asarray(arr, np.float32)
    if legacy:
        dims = (1,) * (4 - arr.ndim) + arr.shape
        head = b"".join(_varint(k << 3) + _varint(d) for k, d in zip((1, 2, 3, 4), dims))
    else:
        head = _len_field(7, _len_field(1, b"".join(_varint(d) for d in arr.shape)))
    if unpacked:
        data = b"".join(_varint(5 << 3 | 5) + struct.pack("<f", v) for v in arr.ravel())
    else:
        data = _len_field(5, arr.astype("<f4").tobytes())
    return head + data


def caffemodel_bytes(layers: dict, v1: bool = False, **blob_options) -> bytes:
    """A NetParameter: {layer name: (type, [arrays])} as `layer` fields (100), or V1's
    `layers` (2) with name 4 and blobs 6; a varint field (the net's `state`-like noise, 7)
    and a name (1) before them, which the reader skips."""
    out = _len_field(1, b"net") + _varint(300 << 3) + _varint(12345)
    for name, (kind, arrays) in layers.items():
        if v1:
            body = _len_field(4, name.encode()) + b"".join(
                _len_field(6, blob_bytes(a, **blob_options)) for a in arrays)
            out += _len_field(2, body)
        else:
            body = _len_field(1, name.encode()) + _len_field(2, kind.encode()) + b"".join(
                _len_field(7, blob_bytes(a, **blob_options)) for a in arrays)
            out += _len_field(100, body)
    return out


def write_model(tmp_path, prototxt: str, layers: dict, stem: str = "m", **options):
    """(prototxt path, caffemodel path) of a model written into tmp_path."""
    p, m = tmp_path / f"{stem}.prototxt", tmp_path / f"{stem}.caffemodel"
    p.write_text(prototxt)
    m.write_bytes(caffemodel_bytes(layers, **options))
    return p, m


def input_layer(c: int, h: int, w: int, name: str = "data") -> str:
    return (f'layer {{ name: "{name}" type: "Input" top: "{name}" '
            f'input_param {{ shape: {{ dim: 1 dim: {c} dim: {h} dim: {w} }} }} }}\n')


def layer(name: str, kind: str, bottoms, top: str | None = None, params: str = "") -> str:
    bottoms = [bottoms] if isinstance(bottoms, str) else bottoms
    b = " ".join(f'bottom: "{x}"' for x in bottoms)
    return f'layer {{ name: "{name}" type: "{kind}" {b} top: "{top or name}" {params} }}\n'


def bn_blobs(rng, c: int, factor: float = 999.0):
    """BatchNorm's three blobs: mean and variance sums (scaled by the factor, as Caffe keeps
    them) and the factor."""
    mean = rng.normal(0, 0.5, c)
    var = rng.uniform(0.5, 2.0, c)
    return [mean * factor, var * factor, np.array([factor])]
