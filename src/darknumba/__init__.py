"""darknumba: Darknet's layers, loss and training loop, compiled with Numba for the CPU."""
import gc as _gc
import os as _os
import sys as _sys

# numba's import makes a few hundred thousand objects: the collector's full passes over them
# during the import cost ~0.1-0.3 s and find nothing to free. Off while importing, then as it was.
_gc_was_enabled = _gc.isenabled()
_gc.disable()
try:
    from . import thread_policy

    # numba's OpenMP workers and OpenBLAS's workers spin after their work and take each
    # other's cores: set their wait policies before numba starts, also when numpy or torch
    # came first (thread_policy.py).
    thread_policy.apply()
    # Under mpirun, several ranks share this machine's cores: size the thread pools before
    # they start.
    from .launcher import limit_threads_per_rank

    limit_threads_per_rank()

    from .errors import DarknumbaError, CfgError, WeightsError
    from .network import Network
    from .parser import parse_network_cfg, load_network
    from .weights import load_weights, save_weights
finally:                    # also when an import fails: the collector as it was
    if _gc_was_enabled:
        # Run as the `darknumba` command, this process is ours: what the import made stays
        # until exit, so it is frozen out of later collections (their first passes over it
        # took 0.1-0.15 s of a warm `detect`). Imported as a library, the user's objects are
        # left to the collector as they were.
        if _os.path.basename((getattr(_sys, "argv", None) or [""])[0] or "") == "darknumba":
            _gc.freeze()
        _gc.enable()

__all__ = [
    "DarknumbaError", "CfgError", "WeightsError", "Network",
    "parse_network_cfg", "load_network", "load_weights", "save_weights", "Detector",
]
__version__ = "0.1.0"

# Built on the engine, loaded on first use (`dn.Detector`): importing darknumba loads no
# application module, so the engine stays usable without them.
_APPLICATIONS = {"Detector": "darknumba.vision.detector"}


def __getattr__(name):
    if name not in _APPLICATIONS:
        raise AttributeError(f"module 'darknumba' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(_APPLICATIONS[name]), name)
