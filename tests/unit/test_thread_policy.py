"""The thread policy holds whatever the user imported before darknumba configures the process
(runtime/thread_policy.py, applied by runtime.configure: the command and a Detector call it).

Each case runs a fresh interpreter without the variables this test process may already have (a
Detector or the CLI here set them) and checks the effect on the loaded libraries, not a timing.
tests/unit/test_import_pure.py checks that importing darknumba alone changes none of it."""
import ctypes.util
import json
import os
import subprocess
import sys

import pytest

from darknumba.runtime import thread_policy

SRC = os.path.dirname(os.path.dirname(os.path.dirname(thread_policy.__file__)))
POLICY_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT", "NUMBA_THREADING_LAYER")


def run(code, **env_extra):
    env = {k: v for k, v in os.environ.items() if k not in POLICY_VARS}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


NUMPY_FIRST = """
import json, os
import numpy as np
np.ones((256, 256), np.float32) @ np.ones((256, 256), np.float32)   # OpenBLAS's workers run
before = set(os.listdir("/proc/self/task"))
import darknumba
darknumba.configure()
from darknumba.runtime.thread_policy import openblas_thread_timeouts
after = set(os.listdir("/proc/self/task"))
print(json.dumps({"timeouts": openblas_thread_timeouts(), "gone": sorted(before - after),
                  "numpy_blas": np.__config__.CONFIG["Build Dependencies"]["blas"]["name"]}))
"""


def test_numpy_first_openblas_takes_the_timeout():
    r = run(NUMPY_FIRST)
    if "openblas" not in r["numpy_blas"]:
        pytest.skip(f"numpy uses {r['numpy_blas']}, not OpenBLAS")
    numpy_libs = [p for p in r["timeouts"] if "numpy" in p]
    assert numpy_libs, f"numpy's OpenBLAS not found among {list(r['timeouts'])}"
    for path in numpy_libs:
        assert r["timeouts"][path] == int(thread_policy.ENV_DEFAULTS["OPENBLAS_THREAD_TIMEOUT"]), path
    if os.cpu_count() > 1:          # the workers started with the old timeout were replaced
        assert r["gone"], "OpenBLAS's worker threads were not restarted"


def test_users_own_timeout_wins():
    r = run(NUMPY_FIRST, OPENBLAS_THREAD_TIMEOUT="9")
    if "openblas" not in r["numpy_blas"]:
        pytest.skip(f"numpy uses {r['numpy_blas']}, not OpenBLAS")
    assert all(v == 9 for v in r["timeouts"].values()), r["timeouts"]


GOMP_FIRST = """
import ctypes, json, os
ctypes.CDLL({lib!r}, mode=ctypes.RTLD_GLOBAL)   # numba's own libgomp, loaded by someone else
import darknumba, numba
darknumba.configure()
print(json.dumps({{"layer": numba.config.THREADING_LAYER, "wait": os.environ.get("OMP_WAIT_POLICY"),
                  "spin": os.environ.get("GOMP_SPINCOUNT"),
                  "env": os.environ.get("NUMBA_THREADING_LAYER")}}))
"""


@pytest.mark.parametrize("user_env,layer,wait,spin", [
    ({}, "workqueue", None, thread_policy.OMP_WAIT_DEFAULTS["GOMP_SPINCOUNT"]),
    ({"OMP_WAIT_POLICY": "PASSIVE"}, "default", "PASSIVE", None)])
def test_early_system_libgomp_moves_numba_off_openmp(user_env, layer, wait, spin):
    """The libgomp numba links was loaded (and read its environment) before darknumba: numba's
    OpenMP would spin, so darknumba picks numba's workqueue layer, unless the user had set the
    wait policy themselves (then darknumba adds no GOMP_SPINCOUNT, which would override it)."""
    lib = ctypes.util.find_library("gomp")
    if lib is None:
        pytest.skip("no libgomp on this system")
    r = run(GOMP_FIRST.format(lib=lib), **user_env)
    # NUMBA_THREADING_LAYER is not set: child processes unaffected
    assert r == {"layer": layer, "wait": wait, "spin": spin, "env": None}


TORCH_FIRST = """
import ctypes, json
import torch
import darknumba, numba, numpy as np
from numba import njit, prange
darknumba.configure()

gomps = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libgomp" in l})
torch_in_parallel = ctypes.CDLL([p for p in gomps if "torch" in p][0]).omp_in_parallel
torch_in_parallel.restype = ctypes.c_int
torch_in_parallel.argtypes = []

@njit(parallel=True)
def probe(out):
    for i in prange(out.size):
        out[i] = torch_in_parallel()     # 1 when torch's libgomp runs this parallel region

out = np.zeros(64, np.int64)
probe(out)
print(json.dumps({"layer": numba.threading_layer(), "torch_gomp_ran_it": int(out.max())}))
"""


def test_torch_first_numba_openmp_runs_on_its_own_libgomp():
    """torch's libgomp is in the global scope first (it read the environment before darknumba
    set GOMP_SPINCOUNT): numba's parallel regions still run on numba's own libgomp."""
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    r = run(TORCH_FIRST)
    assert r == {"layer": "omp", "torch_gomp_ran_it": 0}


def test_darknumba_first_keeps_openmp():
    r = run("import json, darknumba, numba; darknumba.configure(); "
            "print(json.dumps(numba.config.THREADING_LAYER))")
    assert r == "default"


def test_import_leaves_the_garbage_collector_as_it_found_it():
    """The collector is off while darknumba's engine imports (numba's objects), then as it
    was."""
    code = ("import gc, json; gc.{}(); from darknumba import Network; "
            "print(json.dumps(gc.isenabled()))")
    assert run(code.format("enable")) is True
    assert run(code.format("disable")) is False
    failing = ("import gc, json, sys; sys.modules['darknumba.network'] = None\n"
               "try:\n    from darknumba import Network\nexcept ImportError:\n    pass\n"
               "print(json.dumps(gc.isenabled()))")
    assert run(failing) is True                 # an import that fails half way restores it
