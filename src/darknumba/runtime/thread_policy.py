"""How darknumba's thread pools share the cores with the BLAS library's, whatever was imported first.

A forward pass alternates BLAS GEMMs (numpy's OpenBLAS threads) with numba's parallel kernels
(numba's OpenMP threads). After its work each pool's threads spin waiting for more; on a small
machine the spinners of one pool take the cores the other pool needs (measured on 2 cores: a GEMM
+ kernel pair 8x slower, yolov3-tiny inference 30 -> 37-50 ms). Two settings stop it:

- ``GOMP_SPINCOUNT=3000``: numba's OpenMP workers spin only ~3000 rounds (microseconds) after a
  parallel region, then sleep, instead of libgomp's default 300000 (measured here with
  OPENBLAS_THREAD_TIMEOUT=4: a GEMM + small kernel pair 0.73 ms, against 0.78 with
  OMP_WAIT_POLICY=PASSIVE, where workers sleep at once, and 1.34 with the default; yolov3-tiny
  inference 29.0 ms against 30.2 passive, yolov4-tiny 34.3 against 35.4, training steps 2-3 %
  faster: back-to-back kernels find the workers awake). libgomp reads it when numba starts its
  threading layer (at the first parallel kernel), so setting it before that suffices. It is left
  out when the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT (libgomp lets GOMP_SPINCOUNT override
  the policy).
  But when a libgomp was loaded before darknumba (torch loads its own into the global symbol
  scope), numba's OpenMP layer would run on that one, which read the environment without the
  setting (measured at a quiet moment, torch imported first: yolov3-tiny 49 ms against 35 ms,
  with 1.5x the CPU time). `apply` then loads numba's OpenMP layer bound to its own libgomp
  (RTLD_DEEPBIND), which reads the setting (35 ms); when that libgomp is the very one already
  loaded, numba uses its ``workqueue`` layer instead, whose workers sleep when idle (36-44 ms).
- ``OPENBLAS_THREAD_TIMEOUT=4``: OpenBLAS's workers spin 2^4 instead of 2^28 cycles before they
  sleep (measured here: yolov3-tiny inference 55 -> 44 ms/image, a batch-8 training step
  1.49 -> 1.14 s). OpenBLAS reads it when the library loads, i.e. when numpy is imported. When
  numpy came first (``import numpy`` before ``import darknumba``, or cv2/torch importing it),
  `apply_openblas_timeout` has every loaded OpenBLAS re-read its environment and restart its
  workers, as it does itself after a fork; they then sleep after the short timeout too.

Nothing here runs at import: runtime.configure() applies it (the command as it starts, before
numpy loads; a Detector when it is made; a program that embeds darknumba when it asks). A
user's own setting of any of these variables (and of NUMBA_THREADING_LAYER) wins: only
missing ones are filled in.
"""
from __future__ import annotations

import ctypes
import os
import sys

from ..blas_threads import loaded_libraries

ENV_DEFAULTS = {"OPENBLAS_THREAD_TIMEOUT": "4"}
# numba's OpenMP workers' spin before they sleep, unless the user chose a wait policy
OMP_WAIT_DEFAULTS = {"GOMP_SPINCOUNT": "3000"}
# OpenBLAS's own (unprefixed) entry points for: re-reading OPENBLAS_* variables, the timeout it
# read, stopping its worker threads and starting them (which takes the timeout it read).
_OPENBLAS_ENTRIES = ("openblas_read_env", "openblas_thread_timeout", "blas_thread_shutdown_",
                     "blas_thread_init")


# variables that set how long libgomp's idle workers spin
_OMP_WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def apply():
    """The whole policy (runtime.configure runs it once; before numpy and numba load in
    the command)."""
    omp_wait_set = any(name in os.environ for name in _OMP_WAIT_VARS)
    for name, value in ENV_DEFAULTS.items():
        os.environ.setdefault(name, value)
    if not omp_wait_set:
        os.environ.update(OMP_WAIT_DEFAULTS)
    early = set(loaded_libraries("libgomp"))
    if (early and not omp_wait_set and "NUMBA_THREADING_LAYER" not in os.environ
            and not _numba_threads_started() and not _omppool_on_own_libgomp(early)):
        # this process only (an environment variable would reach child processes, which
        # start without that libgomp)
        from numba.core import config
        config.THREADING_LAYER = "workqueue"
    apply_openblas_timeout()


def _omppool_on_own_libgomp(early: set) -> bool:
    """Load numba's OpenMP layer bound to the libgomp it was linked with (RTLD_DEEPBIND: its
    own dependencies before the global scope), a fresh copy that reads GOMP_SPINCOUNT now;
    False when that copy is the one already loaded (nothing gained) or it cannot be done."""
    if "numba.np.ufunc.omppool" in sys.modules or not hasattr(os, "RTLD_DEEPBIND"):
        return False
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | os.RTLD_DEEPBIND)
    try:
        import numba.np.ufunc.omppool  # noqa: F401
    except ImportError:
        return False
    finally:
        sys.setdlopenflags(flags)
    return bool(set(loaded_libraries("libgomp")) - early)


def _numba_threads_started() -> bool:
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    return bool(parallel is not None and parallel._is_initialized)


def _openblas(path):
    """The library at `path` through ctypes if it has the entry points used here, else None."""
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    if not all(hasattr(lib, name) for name in _OPENBLAS_ENTRIES):
        return None
    lib.openblas_thread_timeout.restype = ctypes.c_uint
    return lib


def openblas_thread_timeouts() -> dict[str, int]:
    """OPENBLAS_THREAD_TIMEOUT as each loaded OpenBLAS read it (0: unset, its default 2^28)."""
    out = {}
    for path in loaded_libraries("openblas"):
        lib = _openblas(path)
        if lib is not None:
            out[path] = int(lib.openblas_thread_timeout())
    return out


def apply_openblas_timeout() -> list[str]:
    """Give every OpenBLAS already loaded the timeout now in the environment; returns their paths.

    Call it when no BLAS call is running in another thread (runtime.configure does): the workers
    are joined and started again, which takes a few milliseconds."""
    want = os.environ.get("OPENBLAS_THREAD_TIMEOUT", "")
    if not want.strip().isdigit():
        return []
    changed = []
    for path in loaded_libraries("openblas"):
        lib = _openblas(path)
        if lib is None or int(lib.openblas_thread_timeout()) == int(want):
            continue
        lib.openblas_read_env()
        lib.blas_thread_shutdown_()
        lib.blas_thread_init()
        changed.append(path)
    return changed
