"""Cached kernels loaded without numba's registry refresh (cache_loads.py, the command's path):
in fresh processes sharing a numba cache, a parallel and a serial kernel load and compute what
they computed when compiled, numba's target is not refreshed for the loads, and a kernel
compiled afterwards (needing the registries the loads skipped) still compiles and runs."""
import os
import subprocess
import sys

import numba
import pytest
from conftest import ROOT

import darknumba.runtime.cache_loads as cl

CODE = r"""
import sys
import numpy as np
from numba.core import base
calls = []
original = base.BaseContext.refresh
def counted(self):
    calls.append(1)
    return original(self)
base.BaseContext.refresh = counted
import darknumba
from darknumba.runtime.cache_loads import skip_refresh_on_cache_loads
patched = sys.argv[1] == "patched" and skip_refresh_on_cache_loads()
from darknumba.kernels.blas import axpy_cpu
from darknumba.kernels.winograd import winograd_filters_cpu
from darknumba.layers.conv_winograd import G_KRON
y = np.arange(1000, dtype=np.float32)
axpy_cpu(1000, 0.5, np.ones(1000, np.float32), y)
w = np.linspace(-1, 1, 4 * 3 * 9).astype(np.float32)
U = np.empty((36, 3, 4), np.float32)
winograd_filters_cpu(w, 3, G_KRON, False, U, 0, 3)
loads = len(calls)
from numba import njit
@njit
def fresh(a):
    return a.sum() + len(str(12345))
value = fresh(np.ones(3))
print(patched, float(y.sum()), float(np.abs(U).sum()), loads, len(calls) > loads, value)
"""


def _run(mode, cache):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", CODE, mode], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.skipif(not cl.TESTED[0] <= cl._version(numba.__version__) <= cl.TESTED[1],
                    reason=f"numba {numba.__version__} is outside the versions the patch "
                           f"was checked against: loads go through numba unchanged")
def test_cached_kernels_load_without_refresh_and_compile_after(tmp_path):
    compiled = _run("plain", tmp_path)            # compiles both kernels into the cache
    loaded = _run("patched", tmp_path)            # loads them
    assert compiled[0] == "False" and loaded[0] == "True"
    assert loaded[1:3] == compiled[1:3]           # same results from the cached code
    assert int(loaded[3]) == 0 and int(compiled[3]) > 0   # no refresh for the loads
    assert loaded[4] == "True" and loaded[5] == "8.0"     # a later compile refreshed and ran


def test_outside_the_checked_versions_numba_is_left_alone(monkeypatch):
    from numba.core import caching
    before = caching.Cache.load_overload
    monkeypatch.setattr(numba, "__version__", "0.99.0")
    assert not cl.skip_refresh_on_cache_loads()
    assert caching.Cache.load_overload is before
    assert cl._version("0.68.1") == (0, 68) and cl._version("dev") == (0, 0)
