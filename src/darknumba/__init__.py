"""darknumba: Darknet's layers, loss and training loop, compiled with Numba for the CPU."""
import gc as _gc

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
