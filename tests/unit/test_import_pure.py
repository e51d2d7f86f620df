"""Importing darknumba changes nothing in the host process (runtime/__init__.py): no environment
variable, no collector setting, no OpenBLAS timeout or thread restart, no numba threading layer
choice, no process started; whether numpy or torch came first or after. runtime.configure()
does all of it, once, and the policy is then in force.

Each case runs a fresh interpreter without the variables the policy sets (this test process may
have them: a Detector or the CLI here configured it)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

SRC = os.path.join(os.path.abspath(os.path.join(__file__, "..", "..", "..")), "src")
POLICY_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT",
               "NUMBA_THREADING_LAYER", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS",
               "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

# What a process looks like from inside, read without importing darknumba (which is what is
# tested): its environment, the collector, every loaded OpenBLAS's spin timeout and thread
# count, the libgomp copies loaded, numba's threading layer, its threads and its children.
PROBE = r'''
import ctypes, gc, json, os, sys

def libraries(name):
    with open("/proc/self/maps") as f:
        return sorted({l.split(maxsplit=5)[-1].strip() for l in f if name in l.lower()}
                      - {""})

def openblas():
    out = {}
    for path in libraries("openblas"):
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_thread_timeout"):
            lib.openblas_thread_timeout.restype = ctypes.c_uint
            count = getattr(lib, "scipy_openblas_get_num_threads64_", None) \
                or getattr(lib, "openblas_get_num_threads", None)
            out[path] = [int(lib.openblas_thread_timeout()), count() if count else None]
    return out

def children():
    me, found = str(os.getpid()), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[1] == me:
                    found.append(pid)
        except (OSError, IndexError):
            pass
    return found

def snapshot():
    numba = sys.modules.get("numba")
    return {"env": dict(os.environ), "gc": [gc.isenabled(), gc.get_freeze_count(),
                                           list(gc.get_threshold())],
            "openblas": openblas(), "gomp": libraries("libgomp"),
            "layer": numba.config.THREADING_LAYER if numba is not None else None,
            "omppool": "numba.np.ufunc.omppool" in sys.modules,
            "threads": sorted(os.listdir("/proc/self/task")), "children": children()}
'''

ORDERS = {
    # numpy's OpenBLAS loaded and its workers running before darknumba
    "numpy first": ("import numpy as np\n"
                    "np.ones((256, 256), np.float32) @ np.ones((256, 256), np.float32)\n", ""),
    # torch's libgomp in the global scope (and numpy) before darknumba
    "torch first": ("import torch\nimport numpy as np\n"
                    "np.ones((256, 256), np.float32) @ np.ones((256, 256), np.float32)\n", ""),
    # darknumba before either: then numpy and torch load as they would without it
    "darknumba first": ("", "import numpy as np, torch\n"
                            "np.ones((256, 256), np.float32) @ np.ones((256, 256), np.float32)\n"),
}

CASE = PROBE + r'''
BEFORE
before = snapshot()
import darknumba
bare = snapshot()
from darknumba import Network, load_network
AFTER
after = snapshot()
print(json.dumps({"before": before, "bare": bare, "after": after}))
'''


def run(code: str, **env_extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in POLICY_VARS}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _without_torch(order: str):
    if "torch" in ORDERS[order][0] + ORDERS[order][1] \
            and importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")


@pytest.mark.parametrize("order", list(ORDERS))
def test_importing_darknumba_changes_nothing(order):
    _without_torch(order)
    before_code, after_code = ORDERS[order]
    r = run(CASE.replace("BEFORE", before_code).replace("AFTER", after_code))
    before, bare, after = r["before"], r["bare"], r["after"]
    assert bare == before                   # `import darknumba`: not a thread or variable more
    assert after["env"] == before["env"]
    assert after["gc"] == before["gc"]
    assert after["children"] == before["children"] == []
    assert after["layer"] in (None, "default") and not after["omppool"]
    assert after["gomp"] == before["gomp"] or not before_code
    if before_code:
        # the OpenBLAS loaded before darknumba: same timeout and thread count, workers not
        # restarted (a restart replaces them: new thread ids)
        assert {p: v for p, v in after["openblas"].items() if p in before["openblas"]} \
            == before["openblas"]
        assert set(before["threads"]) <= set(after["threads"])
    else:
        # loaded after darknumba: with OpenBLAS's own default (0: the variable unset)
        assert all(v[0] == 0 for v in after["openblas"].values()), after["openblas"]


CONFIGURE = PROBE + r'''
import numpy as np
np.ones((256, 256), np.float32) @ np.ones((256, 256), np.float32)
import darknumba
darknumba.configure()
once = snapshot()
darknumba.configure()
twice = snapshot()
from darknumba.runtime.thread_policy import ENV_DEFAULTS, OMP_WAIT_DEFAULTS
print(json.dumps({"once": once, "twice": twice,
                  "want": {**ENV_DEFAULTS, **OMP_WAIT_DEFAULTS}}))
'''


def test_configure_applies_the_policy_once():
    """After configure() the policy is in force (its variables set; numpy's OpenBLAS, loaded
    before, restarted with the timeout); a second call changes nothing more."""
    r = run(CONFIGURE)
    once, twice = r["once"], r["twice"]
    assert {k: once["env"].get(k) for k in r["want"]} == r["want"]
    numpy_blas = {p: v for p, v in once["openblas"].items() if "numpy" in p}
    if not numpy_blas:
        pytest.skip("numpy's BLAS is not OpenBLAS")
    assert all(v[0] == int(r["want"]["OPENBLAS_THREAD_TIMEOUT"]) for v in numpy_blas.values())
    assert twice == once                    # not a variable, thread or setting more


def test_configure_keeps_the_users_settings():
    r = run(CONFIGURE, OPENBLAS_THREAD_TIMEOUT="9", OMP_WAIT_POLICY="PASSIVE")
    assert r["once"]["env"]["OPENBLAS_THREAD_TIMEOUT"] == "9"
    assert "GOMP_SPINCOUNT" not in r["once"]["env"]
    assert all(v[0] == 9 for v in r["once"]["openblas"].values()), r["once"]["openblas"]
