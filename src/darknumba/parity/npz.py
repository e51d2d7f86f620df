"""Reading the tensors `compare --npz` compares with: an .npz in the golden layout (what
`compare --dump` and tests/fixtures write), checked before anything runs on it.

The file is an input like any other (inputs.py: a regular file under a size bound); then a zip
archive whose members are numeric arrays (no pickled objects: allow_pickle stays off) holding
at most MAX_NPZ_DATA bytes once decompressed, and whose two JSON members, `manifest_json` and
`run_json`, have the fields compare and replay read, of the types they read them as. Each
problem is one DarknumbaError naming the file and the member.
"""
from __future__ import annotations

import json
import zipfile
import zlib
from numbers import Integral, Real
from pathlib import Path

import numpy as np

from ..errors import DarknumbaError
from ..inputs import GiB, regular_file
from .tensordiff import KEY

MAX_NPZ = 8 * GiB           # compressed, on disk
MAX_NPZ_DATA = 16 * GiB     # decompressed: yolov3's train step, every tensor, is ~2 GiB
_BROKEN = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error,
           NotImplementedError)
_NUMERIC = "biuf"           # bool, signed and unsigned integers, floats


def read_npz(path) -> tuple[dict, dict, dict]:
    """(tensors by name, manifest, run) of a recorded .npz."""
    path = Path(path)
    regular_file(path, "--npz file", DarknumbaError, MAX_NPZ)
    if not zipfile.is_zipfile(path):
        raise DarknumbaError(f"--npz {path}: not an .npz file (a zip archive of arrays, as "
                             f"numpy.savez writes; `compare --dump` writes one)")
    try:
        with zipfile.ZipFile(path) as z:
            unpacked = sum(i.file_size for i in z.infolist())
        if unpacked > MAX_NPZ_DATA:
            raise DarknumbaError(f"--npz {path}: its arrays unpack to {unpacked:,} bytes, more "
                                 f"than the {MAX_NPZ_DATA:,} compare reads")
        tensors = {}
        with np.load(path, allow_pickle=False) as data:
            for name in data.files:
                try:
                    tensors[name] = data[name]
                except _BROKEN as e:
                    raise DarknumbaError(f"--npz {path}: member {name!r} is not a numeric "
                                         f"array numpy can read: {_reason(e)}") from None
    except _BROKEN as e:
        raise DarknumbaError(f"--npz {path}: not a readable .npz file: {_reason(e)}") from None
    manifest = _json(path, tensors.pop("manifest_json", None), "manifest_json")
    run = _json(path, tensors.pop("run_json", None), "run_json")
    for name, a in tensors.items():         # text beside the tensors (stdout_txt) is kept
        compared = name in ("input", "truth", "cost") or KEY.match(name)
        if a.dtype.kind not in _NUMERIC and (compared or a.dtype.kind not in "US"):
            raise DarknumbaError(f"--npz {path}: tensor {name!r} holds {a.dtype} values, not "
                                 f"numbers")
    _check_fields(path, manifest, run)
    return tensors, manifest, run


def check_layers(path, manifest: dict, n: int):
    """The layer indices the manifest names (its layers' `index` and `bwd_dests`) are layers
    of the network built, which has `n`."""
    for k, d in enumerate(manifest.get("layers", [])):
        for j in [d.get("index", k), *(d.get("bwd_dests") or [])]:
            if not 0 <= j < n:
                raise DarknumbaError(f"--npz {path}: manifest_json's layer {k} names layer {j}; "
                                     f"the network has layers 0 to {n - 1}")


def _reason(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())[:200]


def _json(path, a, name: str) -> dict:
    if a is None:
        return {}
    if a.shape != () or a.dtype.kind not in "US":
        raise DarknumbaError(f"--npz {path}: {name} is a {a.dtype} array of shape {a.shape}, "
                             f"not one JSON string")
    try:
        value = json.loads(str(a) if a.dtype.kind == "U" else bytes(a).decode())
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise DarknumbaError(f"--npz {path}: {name} is not JSON: {_reason(e)}") from None
    if not isinstance(value, dict):
        raise DarknumbaError(f"--npz {path}: {name} is a JSON {type(value).__name__}, not an "
                             f"object")
    return value


def _check_fields(path, manifest: dict, run: dict):
    """The fields compare and replay read have the types they are read as (absent is fine)."""
    count = (lambda v: isinstance(v, Integral) and v >= 0)
    number = (lambda v: isinstance(v, Real))
    text = (lambda v: isinstance(v, str))
    dicts = (lambda v: isinstance(v, list) and all(isinstance(d, dict) for d in v))
    rules = [
        ("manifest_json", manifest, {"mode": text, "net": lambda v: isinstance(v, dict),
                                     "layers": dicts}),
        ("manifest_json net", manifest.get("net") or {}, {"batch": lambda v: count(v) and v > 0}),
        ("run_json", run, {"mode": text, "dialect": text, "steps": dicts,
                           "batch": lambda v: count(v) and v > 0, "seen_before": count,
                           "seen_after": count, "did_update": count, "rate": number,
                           "cost": number}),
    ]
    for k, d in enumerate(manifest.get("layers") or []):
        rules.append((f"manifest_json layer {k}", d, {
            "index": count, "type": text, "stopbackward": count,
            "bwd_dests": lambda v: isinstance(v, list) and all(count(j) for j in v)}))
    for k, d in enumerate(run.get("steps") or []):
        rules.append((f"run_json step {k}", d, {"seen_before": count, "seen_after": count,
                                                "did_update": count, "rate": number,
                                                "cost": number}))
    for where, fields, checks in rules:
        for key, ok in checks.items():
            if key in fields and fields[key] is not None and not ok(fields[key]):
                raise DarknumbaError(f"--npz {path}: {where}: {key} = {fields[key]!r} is not "
                                     f"what compare reads there")
    steps = run.get("steps") or [{}]
    if any((s.get("did_update", run.get("did_update")) and
            s.get("rate", run.get("rate")) is None) for s in steps):
        raise DarknumbaError(f"--npz {path}: run_json says the step updated the weights "
                             f"(did_update) without the learning rate it used (rate)")
