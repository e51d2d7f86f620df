"""OpenBLAS's sgemm callable from numba kernels, so that a kernel's own threads can each run a
single-threaded GEMM on a block that is still in their cache (kernels/conv_blocks.py) instead
of one multi-threaded GEMM over a matrix built in memory by a separate sweep.

The library is the OpenBLAS numpy itself loaded (its ILP64 interface: 64-bit integers,
``scipy_cblas_sgemm64_`` in numpy 2's wheels, ``cblas_sgemm64_`` in older ones). The symbol is
given to LLVM by name (`llvmlite.binding.add_symbol`), so kernels that call it are cached like
any other (the address is looked up again in each process). While such a kernel runs, OpenBLAS
is set to one thread (`single_threaded`): each call then runs in the thread that makes it
instead of handing work to OpenBLAS's pool. (Its ``openblas_set_num_threads_local`` would not
do: in the pthreads build numpy ships it sets the process-wide count, measured here, and two
threads restoring it race.)

`available()` says whether it was found; without it the layers keep im2col + numpy's GEMM. Arguments that are pointers are passed as 64-bit integers (``array.ctypes.data``), which
the x86-64 and AArch64 calling conventions pass exactly as pointers.
"""
from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager

import numpy as np
from numba import types

from ..thread_policy import loaded_libraries

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

_SGEMM_NAMES = ("scipy_cblas_sgemm64_", "cblas_sgemm64_")
_SET_THREADS_NAMES = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_")
_GET_THREADS_NAMES = ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_")
_found = None
_threads = None         # (set, get) of the library's thread count

_i32, _i64, _f32 = types.int32, types.int64, types.float32
# cblas_sgemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
sgemm = types.ExternalFunction(
    "darknumba_sgemm",
    types.void(_i32, _i32, _i32, _i64, _i64, _i64, _f32, _i64, _i64, _i64, _i64, _f32, _i64,
               _i64))


def _numpy_openblas_paths():
    np.dot(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))   # numpy's BLAS is loaded
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    own = [p for p in loaded_libraries("openblas") if os.path.dirname(p) == libs]
    return own + [p for p in loaded_libraries("openblas") if p not in own]


def available() -> bool:
    """True when an OpenBLAS with an ILP64 cblas_sgemm and a settable thread count is loaded
    (numpy's); registers the sgemm with LLVM the first time."""
    global _found, _threads
    if _found is None:
        _found = False
        if os.environ.get("DARKNUMBA_NO_BLOCKED_GEMM"):
            return False
        import llvmlite.binding as ll
        for path in _numpy_openblas_paths():
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            gemm, set_n, get_n = (next((getattr(lib, n) for n in names if hasattr(lib, n)), None)
                                  for names in (_SGEMM_NAMES, _SET_THREADS_NAMES,
                                                _GET_THREADS_NAMES))
            if gemm is None or set_n is None or get_n is None:
                continue
            ll.add_symbol("darknumba_sgemm", ctypes.cast(gemm, ctypes.c_void_p).value)
            set_n.argtypes, get_n.restype = [ctypes.c_int], ctypes.c_int
            _threads = (set_n, get_n)
            _found = True
            break
    return _found


@contextmanager
def single_threaded():
    """OpenBLAS on one thread for the duration (see the module); its count is restored after."""
    set_n, get_n = _threads
    before = get_n()
    set_n(1)
    try:
        yield
    finally:
        set_n(before)
