import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from darknumba.parity.tensordiff import named_rows

# `darknumba detect` on a cold numba cache runs numpy's forward pass and leaves a background
# process compiling; the suite compiles in the foreground instead (no process outliving a test,
# the same path whatever ran first). tests/test_numpy_forward.py covers the numpy first run.
os.environ.setdefault("DARKNUMBA_FIRST_RUN", "compile")

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(os.environ.get("DARKNUMBA_GOLDEN", ROOT.parent / "shared" / "golden"))
DATA = Path(os.environ.get("DARKNUMBA_DATA", ROOT.parent / "shared" / "data"))
TINY_WEIGHTS = Path(os.environ.get("DARKNUMBA_TINY_WEIGHTS", ROOT / "weights" / "yolov3-tiny.weights"))
V4TINY_WEIGHTS = Path(os.environ.get("DARKNUMBA_V4TINY_WEIGHTS",
                                     ROOT / "weights" / "yolov4-tiny.weights"))


@pytest.fixture
def rng(request):
    """A generator seeded from the test's node id: a test draws the same numbers run alone or
    in the suite, whatever other tests draw before it."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def golden_dir(name: str) -> Path:
    d = GOLDEN / name
    if not d.exists():
        pytest.skip(f"C darknet golden fixtures not found at {d} (set DARKNUMBA_GOLDEN)")
    return d


def load_golden(fixture: str, run: str):
    """(npz data, manifest dict, cfg path, init weights path) of one recorded run."""
    d = golden_dir(fixture)
    data = np.load(d / run / "data.npz")
    manifest = json.loads(str(data["manifest_json"]))
    return data, manifest, d / f"{fixture}.cfg", d / "init.weights"


def tiny_weights() -> Path:
    if not TINY_WEIGHTS.exists():
        pytest.skip(f"official yolov3-tiny weights not found at {TINY_WEIGHTS} "
                    f"(run `darknumba weights fetch yolov3-tiny`)")
    return TINY_WEIGHTS


def max_rel(a, b) -> tuple[float, float]:
    """(max |a-b|, max |a-b| / max |b|)"""
    d = float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))) if np.size(b) else 0.0
    scale = float(np.max(np.abs(b))) if np.size(b) else 1.0
    return d, d / (scale if scale > 0 else 1.0)


def pytest_collection_modifyitems(items):
    """The fuzz suite runs last: its driver processes reuse the kernels that the other tests
    compiled into numba's cache."""
    items.sort(key=lambda item: Path(str(item.fspath)).parent.name == "fuzz")
def v4tiny_weights() -> Path:
    if not V4TINY_WEIGHTS.exists():
        pytest.skip(f"official yolov4-tiny weights not found at {V4TINY_WEIGHTS} "
                    f"(run `darknumba weights fetch yolov4-tiny`)")
    return V4TINY_WEIGHTS


# -- guard cells: a kernel's output as a view into a larger buffer whose ends hold a sentinel,
#    which a write past the end of the view changes (numba checks no bounds by default)
SENTINEL = np.float32(-7.25)
GUARD = 64


def guarded(shape, dtype=np.float32, fill=0):
    """(view, big): a zero-filled array of `shape` inside a buffer with GUARD sentinel rows
    on either side."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    big = np.full((shape[0] + 2 * GUARD,) + shape[1:], SENTINEL, dtype)
    view = big[GUARD:GUARD + shape[0]]
    view[...] = fill
    return view, big


def guards_intact(big):
    return bool(np.all(big[:GUARD] == SENTINEL) and np.all(big[-GUARD:] == SENTINEL))


def weights_rows(net, ours: bytes, ref: bytes, tol: float):
    """Two .weights files (their bytes) compared record by record in `net`'s layout, as
    tensordiff rows named "L###_<record>"; the header (version, seen) and the sizes must be
    identical."""
    assert len(ours) == len(ref), f".weights sizes differ: {len(ours)} and {len(ref)} bytes"
    assert ours[:20] == ref[:20], "header (version, seen) differs"
    a, b = np.frombuffer(ours[20:], "<f4"), np.frombuffer(ref[20:], "<f4")
    mine, theirs = {}, {}
    off = 0
    for i, l in enumerate(net.layers):
        for name, arr in l.weight_records():
            mine[f"L{i:03d}_{name}"] = a[off:off + arr.size]
            theirs[f"L{i:03d}_{name}"] = b[off:off + arr.size]
            off += arr.size
    assert off == a.size, f"the network's records hold {off} floats, the file {a.size}"
    return named_rows(mine, theirs, tol=tol)


def darknet_ab_dir() -> Path:
    """The AlexeyAB darknet tree of DARKNET_AB_DIR (built with `make LIBSO=1`), or a skip."""
    d = os.environ.get("DARKNET_AB_DIR")
    if not d:
        pytest.skip("DARKNET_AB_DIR is not set (point it at an AlexeyAB darknet tree built with "
                    "`make LIBSO=1`); the recorded AlexeyAB fixtures are tested in test_ab_*")
    return Path(d)
