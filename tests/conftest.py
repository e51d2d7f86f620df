import json
import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(os.environ.get("DARKNUMBA_GOLDEN", ROOT.parent / "shared" / "golden"))
DATA = Path(os.environ.get("DARKNUMBA_DATA", ROOT.parent / "shared" / "data"))
TINY_WEIGHTS = Path(os.environ.get("DARKNUMBA_TINY_WEIGHTS", ROOT / "weights" / "yolov3-tiny.weights"))


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
