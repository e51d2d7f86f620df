"""Caffe's .caffemodel: a NetParameter in protobuf's binary wire format, read without Caffe or
the protobuf package, for the one thing the import needs from it: each layer's blobs by name.

The fields read (caffe.proto):
    NetParameter    layer = 100 (LayerParameter), layers = 2 (V1LayerParameter, old files)
    LayerParameter  name = 1, blobs = 7
    V1LayerParameter name = 4, blobs = 6
    BlobProto       shape = 7 (BlobShape), data = 5 (float), double_data = 8,
                    num = 1, channels = 2, height = 3, width = 4 (the legacy 4-d shape)
    BlobShape       dim = 1 (int64)
Every other field is skipped by its wire type. A truncated or malformed file is an error
naming the file and the byte offset.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import DarknumbaError
from ...inputs import read_bytes

MAX_CAFFEMODEL = 4 << 30
VARINT, I64, LEN, I32 = 0, 1, 2, 5


class CaffemodelError(DarknumbaError):
    """A .caffemodel that is not a readable NetParameter."""


class _Reader:
    def __init__(self, data: memoryview, path: str, base: int = 0):
        self.data, self.path, self.base = data, path, base

    def error(self, pos, msg):
        return CaffemodelError(f"{self.path}: byte {self.base + pos}: {msg} (not a caffemodel, "
                               f"or a damaged one)")

    def varint(self, pos):
        shift = result = 0
        while True:
            if pos >= len(self.data):
                raise self.error(pos, "the file ends inside a number")
            b = self.data[pos]
            result |= (b & 0x7F) << shift
            pos += 1
            if not b & 0x80:
                return result, pos
            shift += 7
            if shift > 63:
                raise self.error(pos, "a number longer than 10 bytes")

    def fields(self):
        """(field number, wire type, value, offset) for each field: an int for VARINT, a
        memoryview for LEN, I32 and I64; offset is where the value starts."""
        pos, end = 0, len(self.data)
        while pos < end:
            start = pos
            key, pos = self.varint(pos)
            num, wire = key >> 3, key & 7
            if wire == VARINT:
                value, pos = self.varint(pos)
            elif wire in (I64, I32, LEN):
                if wire == LEN:
                    size, pos = self.varint(pos)
                else:
                    size = 8 if wire == I64 else 4
                if pos + size > end:
                    raise self.error(start, f"field {num} runs past the end of its message")
                value, start = self.data[pos:pos + size], pos
                pos += size
            else:
                raise self.error(start, f"unknown wire type {wire} for field {num}")
            if num == 0:
                raise self.error(pos, "field number 0")
            yield num, wire, value, start

    def sub(self, value, offset):
        return _Reader(value, self.path, self.base + offset)


def _floats(r: _Reader, value, offset, dtype):
    """A repeated float/double field's values, packed (LEN) or one (I32/I64)."""
    size = np.dtype(dtype).itemsize
    if len(value) % size:
        raise r.error(offset, f"{len(value)} bytes of packed values of {size} bytes each")
    return np.frombuffer(value, dtype=dtype).astype(np.float64)


def _blob(r: _Reader) -> np.ndarray:
    """A BlobProto as a float64 array of its shape."""
    dims, legacy, parts, dparts = None, {}, [], []
    for num, wire, value, off in r.fields():
        if num == 7 and wire == LEN:
            dims = []
            for n2, w2, v2, o2 in r.sub(value, off).fields():
                if n2 == 1 and w2 == VARINT:
                    dims.append(v2)
                elif n2 == 1 and w2 == LEN:          # packed int64s
                    sr, p = r.sub(v2, off), 0
                    while p < len(v2):
                        d, p = sr.varint(p)
                        dims.append(d)
        elif num in (1, 2, 3, 4) and wire == VARINT:
            legacy[num] = value
        elif num == 5 and wire in (LEN, I32):
            parts.append(_floats(r, value, off, "<f4"))
        elif num == 8 and wire in (LEN, I64):
            dparts.append(_floats(r, value, off, "<f8"))
    values = np.concatenate(parts or dparts or [np.zeros(0)])
    if dims is None:
        dims = [legacy.get(k, 1) for k in (1, 2, 3, 4)] if legacy else [values.size]
    if math.prod(dims) != values.size:
        raise r.error(0, f"a blob of shape {tuple(dims)} holds {values.size} values")
    return values.reshape(dims)


def parse_caffemodel(data, path: str = "<caffemodel>") -> dict[str, list[np.ndarray]]:
    """layer name -> its blobs (float64 arrays, Caffe's shapes), in file order."""
    r = _Reader(memoryview(data), path)
    layers = {}
    for num, wire, value, off in r.fields():
        if num not in (100, 2) or wire != LEN:
            continue
        name_field, blobs_field = (1, 7) if num == 100 else (4, 6)
        lr = r.sub(value, off)
        name, blobs = None, []
        for n2, w2, v2, o2 in lr.fields():
            if n2 == name_field and w2 == LEN:
                name = bytes(v2).decode("utf-8", "replace")
            elif n2 == blobs_field and w2 == LEN:
                blobs.append(_blob(lr.sub(v2, o2)))
        if name is not None:
            layers[name] = blobs
    if not layers:
        raise CaffemodelError(f"{path}: no layers found (not a caffemodel?)")
    return layers


def read_caffemodel(path) -> dict[str, list[np.ndarray]]:
    """parse_caffemodel of a file, checked as every input is (inputs.read_bytes)."""
    return parse_caffemodel(read_bytes(path, "the caffemodel", CaffemodelError, MAX_CAFFEMODEL),
                            str(path))
