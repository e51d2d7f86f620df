"""Darknet's .weights binary layout (`load_weights_upto` / `save_weights_upto` in parser.c).

Header: int32 major, minor, revision; then `seen` as uint64 when major*10+minor >= 2 (and both
< 1000), else int32. Then each layer's records in order, no separators (see each layer's
`weight_records`). Little-endian float32 throughout.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

from .errors import WeightsError


def _records(net, l):
    """A layer's records as they are read: conv honours numload and dontloadscales."""
    recs = l.weight_records()
    numload = getattr(l, "numload", 0)
    if l.type == "convolutional" and numload:
        per = l.nweights // l.n
        recs = [(name, a[:numload * per] if name == "weights" else a[:numload]) for name, a in recs]
    if l.type == "convolutional" and getattr(l, "dontloadscales", False):
        recs = [r for r in recs if r[0] not in ("scales", "rolling_mean", "rolling_variance")]
    return recs


def read_header(data: bytes, path: str):
    if len(data) < 12:
        raise WeightsError(f"{path}: {len(data)} bytes is too short for a .weights header "
                           f"(at least 16 bytes expected)")
    major, minor, revision = np.frombuffer(data[:12], dtype="<i4")
    if major < 0 or minor < 0 or revision < 0:
        raise WeightsError(f"{path}: bad header: version {major}.{minor}.{revision} "
                           f"(is this a Darknet .weights file?)")
    if major * 10 + minor >= 2 and major < 1000 and minor < 1000:
        if len(data) < 20:
            raise WeightsError(f"{path}: header ends at byte {len(data)}, 20 bytes expected")
        seen = int(np.frombuffer(data[12:20], dtype="<u8")[0])
        offset = 20
    else:
        if len(data) < 16:
            raise WeightsError(f"{path}: header ends at byte {len(data)}, 16 bytes expected")
        seen = int(np.frombuffer(data[12:16], dtype="<i4")[0])
        offset = 16
    transpose = major > 1000 or minor > 1000
    return (int(major), int(minor), int(revision)), seen, transpose, offset


def load_weights(net, path, cutoff: int | None = None):
    """Fill the network's parameters from a .weights file (layers [0, cutoff)). Reads `seen`.
    A file that runs out, or has bytes left over, is an error naming the layer and the counts."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise WeightsError(f"{path}: cannot read weights file: {e.strerror}") from None
    _, seen, transpose, offset = read_header(data, path)
    layers = net.layers[:cutoff] if cutoff is not None else net.layers
    expected = offset + sum(4 * a.size for l in layers if not l.dontload for _, a in _records(net, l))
    pos = offset
    for i, l in enumerate(layers):
        if l.dontload:
            continue
        for name, arr in _records(net, l):
            nbytes = 4 * arr.size
            if pos + nbytes > len(data):
                raise WeightsError(
                    f"{path}: the file ends inside layer {i} ({l.type}) {name}: it has "
                    f"{len(data)} bytes, the cfg {os.path.basename(net.cfg_path or '')} needs "
                    f"{expected} (weights do not fit this cfg)")
            vals = np.frombuffer(data, dtype="<f4", count=arr.size, offset=pos)
            if name == "weights" and l.type == "connected" and transpose:
                vals = vals.reshape(l.inputs, l.outputs).T.reshape(-1)
            arr[:] = vals
            pos += nbytes
        if l.type == "convolutional" and getattr(l, "flipped", 0):
            k = l.nweights // l.n
            l.weights[:] = l.weights.reshape(k, l.n).T.reshape(-1)
    if cutoff is None and pos != len(data):
        raise WeightsError(f"{path}: {len(data) - pos} bytes left over after the last layer: "
                           f"the file has {len(data)} bytes, the cfg needs {pos} "
                           f"(weights do not fit this cfg)")
    net.seen = seen
    return net


def weights_bytes(net, cutoff: int | None = None) -> bytes:
    layers = net.layers[:cutoff] if cutoff is not None else net.layers
    parts = [np.array([0, 2, 0], dtype="<i4").tobytes(), np.array([net.seen], dtype="<u8").tobytes()]
    for l in layers:
        if l.dontsave:
            continue
        for _, arr in l.weight_records():
            parts.append(np.ascontiguousarray(arr, dtype="<f4").tobytes())
    return b"".join(parts)


TEMP_PREFIX, TEMP_SUFFIX = ".tmp-", ".weights"     # atomic_write's temporary files


def atomic_write(path, data: bytes):
    """Write to a temporary file beside `path`, then rename: a crash never leaves half a file."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_weights(net, path, cutoff: int | None = None):
    """save_weights_upto: header 0.2.0 with a uint64 `seen`, then every layer's records."""
    atomic_write(path, weights_bytes(net, cutoff))
