"""The BLAS library's thread count, for the layers that deal GEMMs out to threads themselves
(layers/conv_winograd.py): every loaded OpenBLAS found through /proc/self/maps, its
set/get_num_threads through ctypes. Importing this changes nothing; only
`blas_single_threaded` does, for the duration of its block. The process-wide policy (spin
timeouts, numba's OpenMP) is runtime/thread_policy.py's.
"""
from __future__ import annotations

import ctypes
from contextlib import contextmanager


def loaded_libraries(name: str) -> list[str]:
    """Paths of the shared libraries loaded in this process whose path contains `name`
    (case-insensitive): "openblas" finds numpy's, scipy's and OpenCV's OpenBLAS."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(maxsplit=5)[-1].strip() for line in f if name in line.lower()}
    except OSError:                 # not Linux: nothing to find this way, nothing changed
        return []
    return sorted(p for p in paths if p.startswith("/"))


def blas_thread_counts() -> list:
    """(set, get) of the thread count of every loaded OpenBLAS that exports them (numpy's:
    ``scipy_openblas_{set,get}_num_threads64_``), looked up once. The count is process-wide:
    ``openblas_set_num_threads_local`` does not help here, since in the pthreads build numpy
    ships it sets that same count (measured: set from one thread, every thread's calls run
    single-threaded after)."""
    global _THREAD_COUNTS
    if _THREAD_COUNTS is None:
        found = []
        for path in loaded_libraries("openblas"):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for prefix, suffix in (("scipy_openblas", "64_"), ("openblas", "64_"), ("openblas", "")):
                set_n = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                get_n = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                if set_n is not None and get_n is not None:
                    set_n.argtypes, get_n.restype = [ctypes.c_int], ctypes.c_int
                    found.append((set_n, get_n))
                    break
        _THREAD_COUNTS = found
    return _THREAD_COUNTS


_THREAD_COUNTS = None


@contextmanager
def blas_single_threaded():
    """Every loaded OpenBLAS on one thread for the duration, its count restored after: BLAS
    calls made meanwhile from several threads each run in the thread that makes them. Only for
    the thread that drives the work (the count is process-wide)."""
    counts = blas_thread_counts()
    before = [get_n() for _, get_n in counts]
    for set_n, _ in counts:
        set_n(1)
    try:
        yield
    finally:
        for (set_n, _), n in zip(counts, before, strict=True):
            set_n(n)
