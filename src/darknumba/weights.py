"""Darknet's .weights binary layout (`load_weights_upto` / `save_weights_upto` in parser.c).

Header: int32 major, minor, revision; then `seen` as uint64 when major*10+minor >= 2 (and both
< 1000), else int32. Then each layer's records in order, no separators (see each layer's
`weight_records`). Little-endian float32 throughout.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import numpy as np

from .errors import WeightsError
from .outputs import TEMP_PREFIX, atomic_write  # noqa: F401  (re-exported)


def _records(net, l):
    """A layer's records as they are read (Layer.load_records: a convolution honours numload
    and dontloadscales)."""
    return l.load_records()


def _sane_version(v) -> bool:
    """A header number Darknet could have written: small, or the transposed-layout marker
    (> 1000, see load_weights)."""
    return 0 <= v <= 100 or 1000 < v <= 1100


def read_header(data: bytes, path: str):
    """(version, seen, transpose, offset of the first record) from a file's first 20 bytes."""
    if len(data) < 12:
        raise WeightsError(f"{path}: {len(data)} bytes is too short for a .weights header "
                           f"(at least 16 bytes expected)")
    major, minor, revision = (int(v) for v in np.frombuffer(data[:12], dtype="<i4"))
    if not (_sane_version(major) and _sane_version(minor) and 0 <= revision <= 1_000_000):
        raise WeightsError(f"{path}: bad header: version {major}.{minor}.{revision} is not one "
                           f"Darknet writes (0.2.0, 0.1.0, ...): is this a Darknet .weights file?")
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
    return (major, minor, revision), seen, transpose, offset


def peek_version(path) -> tuple | None:
    """The (major, minor, revision) a .weights file starts with, or None when it cannot be
    read (load_weights then says what is wrong with it). Only a regular file is opened:
    opening a FIFO would block."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return None
    if len(head) < 12:
        return None
    return tuple(int(v) for v in np.frombuffer(head, dtype="<i4"))


def weights_file_size(path: str) -> int:
    """The size of a weights file, after making sure it is a regular, non-empty file (checked
    with stat, before opening: reading a FIFO would block, /dev/zero would never end)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise WeightsError(f"{path}: cannot read weights file: {e.strerror}") from None
    mode = st.st_mode
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
             (stat.S_ISCHR, "a character device (like /dev/zero)"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    for test, kind in kinds:
        if test(mode):
            raise WeightsError(f"{path}: is {kind}, not a .weights file (weights are read from "
                               f"regular files)")
    if not stat.S_ISREG(mode):
        raise WeightsError(f"{path}: is not a regular file, not a .weights file")
    if st.st_size == 0:
        raise WeightsError(f"{path}: is empty (0 bytes), not a .weights file")
    return st.st_size


@dataclass
class WeightsPlan:
    """What a load will read: the header's fields, and for every layer of the network the file
    offset where its records end (a dontload layer has none in the file)."""
    seen: int
    transpose: bool
    offset: int
    size: int
    ends: list[int]
    layers: int                 # how many layers, from layer 0, the load fills


def _where_it_ends(net, plan: WeightsPlan) -> str:
    """Which record the file ends inside, or after which layer."""
    pos = plan.offset
    for i, l in enumerate(net.layers):
        if l.dontload:
            continue
        for name, arr in _records(net, l):
            if pos + 4 * arr.size > plan.size:
                return f"inside layer {i} ({l.type}) {name}"
            pos += 4 * arr.size
    return "after the last layer"


def plan_weights(net, path, cutoff: int | None = None, partial: bool = False) -> WeightsPlan:
    """Check a weights file against the network before anything is loaded.

    By default the file must hold every layer's records, exactly. With `cutoff` k it must
    hold at least layers 0..k-1 (more is ignored: Darknet's load_weights_upto). With
    `partial` it may hold any number of whole layers from layer 0 (a file cut by `partial`),
    which `layers` then counts, with the layers without weights that follow."""
    path = os.fspath(path)
    size = weights_file_size(path)
    with open(path, "rb") as f:
        head = f.read(20)
    _, seen, transpose, offset = read_header(head, path)
    ends, pos = [], offset
    for l in net.layers:
        if not l.dontload:
            pos += sum(4 * a.size for _, a in _records(net, l))
        ends.append(pos)
    plan = WeightsPlan(seen, transpose, offset, size, ends, 0)
    cfg = os.path.basename(net.cfg_path or "") or "the network"
    held = sum(1 for e in ends if e <= size)             # whole layers the file holds
    if partial and cutoff is None:
        if size > pos:
            raise WeightsError(f"{path}: {size - pos} bytes left over after the last layer: the "
                               f"file has {size} bytes, {cfg} needs at most {pos} (weights do "
                               f"not fit this cfg)")
        if size != (ends[held - 1] if held else offset):
            raise WeightsError(f"{path}: the file ends {_where_it_ends(net, plan)} ({size} "
                               f"bytes): a partial weights file ends after a whole layer")
        plan.layers = held
        return plan
    want = net.n if cutoff is None else min(cutoff, net.n)
    need = ends[want - 1] if want else offset
    if size < need:
        raise WeightsError(
            f"{path}: holds {held} of the {want} layers {cfg} needs ({size} bytes; {need} "
            f"needed): the file ends {_where_it_ends(net, plan)}. A truncated file? (A file cut "
            f"on purpose, by `partial`, loads with partial=True.)")
    if cutoff is None and size > need:
        raise WeightsError(f"{path}: {size - need} bytes left over after the last layer: the "
                           f"file has {size} bytes, {cfg} needs {need} (weights do not fit this "
                           f"cfg)")
    plan.layers = want
    return plan


def load_weights(net, path, cutoff: int | None = None, partial: bool = False):
    """Fill the network's parameters from a .weights file and read its `seen`: every layer's
    (the file must fit exactly), layers [0, cutoff) (the file may hold more), or with
    `partial` the whole layers the file holds (see plan_weights). Everything is checked before
    the first value is written, so a file that does not fit leaves the network as it was."""
    path = os.fspath(path)
    net.require_buffers(f"load {path}")
    plan = plan_weights(net, path, cutoff, partial)
    end = plan.ends[plan.layers - 1] if plan.layers else plan.offset
    with open(path, "rb") as f:
        f.seek(plan.offset)
        data = f.read(end - plan.offset)
    if len(data) != end - plan.offset:                  # the file changed since the check
        raise WeightsError(f"{path}: ended at byte {plan.offset + len(data)} while being read")
    pos = 0
    for l in net.layers[:plan.layers]:
        if l.dontload:
            continue
        for name, arr in _records(net, l):
            arr[:] = np.frombuffer(data, dtype="<f4", count=arr.size, offset=pos)
            pos += 4 * arr.size
        l.after_load(plan.transpose)
    net.seen = plan.seen
    net.weights_changed()
    return net


def nonfinite_layers(net) -> list[tuple[int, str, int]]:
    """(index, type, count) of every layer whose parameters (its .weights records) hold NaN
    or Inf values: what a diverged run saved."""
    out = []
    for i, l in enumerate(net.layers):
        bad = sum(int(np.count_nonzero(~np.isfinite(a))) for _, a in l.weight_records())
        if bad:
            out.append((i, l.type, bad))
    return out


def describe_nonfinite(bad: list[tuple[int, str, int]]) -> str:
    """`layers 3 (convolutional: 12 values), 7 (...)`"""
    return "layer" + ("s " if len(bad) > 1 else " ") + ", ".join(
        f"{i} ({t}: {n} value{'s' if n > 1 else ''})" for i, t, n in bad)


def weights_bytes(net, cutoff: int | None = None) -> bytes:
    layers = net.layers[:cutoff] if cutoff is not None else net.layers
    version = getattr(getattr(net, "quirks", None), "weights_version", (0, 2, 0))
    parts = [np.array(version, dtype="<i4").tobytes(), np.array([net.seen], dtype="<u8").tobytes()]
    for l in layers:
        if l.dontsave:
            continue
        for _, arr in l.weight_records():
            parts.append(np.ascontiguousarray(arr, dtype="<f4").tobytes())
    return b"".join(parts)


def save_weights(net, path, cutoff: int | None = None):
    """save_weights_upto: header 0.2.0 (0.2.5 for an AlexeyAB network, as its Darknet writes)
    with a uint64 `seen`, then every layer's records."""
    atomic_write(path, weights_bytes(net, cutoff))
