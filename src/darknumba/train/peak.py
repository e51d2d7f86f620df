"""The machine's measured peak, for `darknumba bench`'s share-of-peak columns: the best float32
GEMM rate numpy's BLAS reaches on a few large square matrices with the process's thread count.

Measured once and kept in darknumba's cache folder (data/fetch.py cache_dir()), in one JSON file
whose entries are keyed by CPU model, thread count, numpy and BLAS version: a different machine,
thread count or BLAS measures again. An unreadable or corrupt file is measured again, not an
error; `bench --remeasure-peak` replaces the entry.
"""
import json
import math
import os
import platform
import time
from datetime import datetime, timezone

import numpy as np

from ..data.fetch import cache_dir
from ..errors import WriteError
from ..outputs import atomic_write

CACHE_NAME = "gemm-peak.json"
SIZES = (1024, 2048)            # square float32 matmuls: n x n @ n x n, 2 n^3 FLOPs each
RUNS = 3                        # best of RUNS timed calls per size, after one untimed call


def cpu_model() -> str:
    """/proc/cpuinfo's first `model name` (Linux), else what platform reports."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def thread_count() -> int:
    """The BLAS threads a matmul of this process may use: OPENBLAS_NUM_THREADS or
    OMP_NUM_THREADS when set (as OpenBLAS reads them at load), else the usable cores."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "").split(",")[0].strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:          # not Linux
        return os.cpu_count() or 1


def blas_version() -> str:
    """numpy's BLAS as its build configuration names it (name and version)."""
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '?')}"
    except Exception:               # an older numpy or a build without the record
        return "unknown"


def peak_key(threads: int) -> str:
    """The cache entry's key: a peak holds for one CPU model, thread count, numpy and BLAS."""
    return f"{cpu_model()} | {threads} threads | numpy {np.__version__} | {blas_version()}"


def measure_gemm_peak(sizes=SIZES, runs: int = RUNS) -> float:
    """Best GFLOP/s of `np.matmul` into a preallocated float32 buffer over `sizes` x `runs`."""
    rng = np.random.default_rng(0)
    best = 0.0
    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        c = np.empty((n, n), np.float32)
        np.matmul(a, b, out=c)                      # BLAS threads started, pages touched
        for _ in range(runs):
            t = time.perf_counter()
            np.matmul(a, b, out=c)
            best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t) / 1e9)
    return best


def _read_entries(path) -> dict:
    """The cache file's entries; {} when it is missing, unreadable or not the expected JSON."""
    try:
        entries = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _valid(entry) -> bool:
    g = entry.get("gflops") if isinstance(entry, dict) else None
    return isinstance(g, (int, float)) and not isinstance(g, bool) and math.isfinite(g) and g > 0


def gemm_peak(remeasure: bool = False, path=None) -> tuple[float, int, bool]:
    """(peak GFLOP/s, threads, measured now): the cached entry for this machine, thread count
    and BLAS, or a new measurement written to the cache (a cache that cannot be written costs
    only the next run a measurement)."""
    path = path if path is not None else cache_dir() / CACHE_NAME
    threads = thread_count()
    key = peak_key(threads)
    entries = _read_entries(path)
    if not remeasure and _valid(entries.get(key)):
        return float(entries[key]["gflops"]), threads, False
    gflops = measure_gemm_peak()
    entries = {k: v for k, v in entries.items() if _valid(v)}
    entries[key] = {"gflops": round(gflops, 2), "sizes": list(SIZES), "runs": RUNS,
                    "measured": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, (json.dumps(entries, indent=1) + "\n").encode())
    except (OSError, WriteError):
        pass
    return gflops, threads, True
