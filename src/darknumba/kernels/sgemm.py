"""OpenBLAS's sgemm callable from numba kernels, so that a kernel's own threads can each run a
single-threaded GEMM on a block that is still in their cache (kernels/conv_blocks.py) instead
of one multi-threaded GEMM over a matrix built in memory by a separate sweep.

The library is the OpenBLAS numpy itself loaded (its ILP64 interface: 64-bit integers,
``scipy_cblas_sgemm64_`` in numpy 2's wheels, ``cblas_sgemm64_`` in older ones). Its
``openblas_set_num_threads_local`` (OpenBLAS >= 0.3.27) sets the calling thread's count: one
inside a kernel's thread, so two concurrent calls do not both wake OpenBLAS's pool. Both
symbols are given to LLVM by name (`llvmlite.binding.add_symbol`), so kernels that call them
are cached like any other (the address is looked up again in each process).

`available()` says whether both were found; without them the layers keep im2col + numpy's
GEMM. Arguments that are pointers are passed as 64-bit integers (``array.ctypes.data``), which
the x86-64 and AArch64 calling conventions pass exactly as pointers.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np
from numba import types

from ..thread_policy import loaded_libraries

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

_SGEMM_NAMES = ("scipy_cblas_sgemm64_", "cblas_sgemm64_")
_LOCAL_THREADS_NAMES = ("openblas_set_num_threads_local", "scipy_openblas_set_num_threads_local64_")
_found = None

_i32, _i64, _f32 = types.int32, types.int64, types.float32
# cblas_sgemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
sgemm = types.ExternalFunction(
    "darknumba_sgemm",
    types.void(_i32, _i32, _i32, _i64, _i64, _i64, _f32, _i64, _i64, _i64, _i64, _f32, _i64,
               _i64))
# openblas_set_num_threads_local(n) -> the calling thread's previous count
set_threads_local = types.ExternalFunction("darknumba_blas_threads_local", _i32(_i32))


def _numpy_openblas_paths():
    np.dot(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))   # numpy's BLAS is loaded
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    own = [p for p in loaded_libraries("openblas") if os.path.dirname(p) == libs]
    return own + [p for p in loaded_libraries("openblas") if p not in own]


def available() -> bool:
    """True when an OpenBLAS with an ILP64 cblas_sgemm and per-thread thread counts is loaded
    (numpy's); registers both with LLVM the first time."""
    global _found
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
            gemm = next((getattr(lib, n) for n in _SGEMM_NAMES if hasattr(lib, n)), None)
            local = next((getattr(lib, n) for n in _LOCAL_THREADS_NAMES if hasattr(lib, n)),
                         None)
            if gemm is None or local is None:
                continue
            ll.add_symbol("darknumba_sgemm", ctypes.cast(gemm, ctypes.c_void_p).value)
            ll.add_symbol("darknumba_blas_threads_local",
                          ctypes.cast(local, ctypes.c_void_p).value)
            _found = True
            break
    return _found
