"""darknumba: Darknet's layers, loss and training loop, compiled with Numba for the CPU.

Importing darknumba changes nothing in the process (no environment variable, collector,
BLAS or OpenMP setting, no process started) and loads none of its modules: each name below
loads its module on first use. `configure()` (runtime/__init__.py) sets the process up as the
`darknumba` command and a Detector do.
"""
__all__ = [
    "DarknumbaError", "CfgError", "WeightsError", "Network",
    "parse_network_cfg", "load_network", "load_weights", "save_weights", "Detector", "configure",
]
__version__ = "0.1.0"

# name -> the module that defines it, imported on first use (`dn.Network`, `from darknumba
# import load_network`). The engine's names and the applications' (Detector) alike: importing
# darknumba imports neither numpy nor numba, so the command can configure the process first.
_EXPORTS = {
    "DarknumbaError": "darknumba.errors", "CfgError": "darknumba.errors",
    "WeightsError": "darknumba.errors", "Network": "darknumba.network",
    "parse_network_cfg": "darknumba.parser", "load_network": "darknumba.parser",
    "load_weights": "darknumba.weights", "save_weights": "darknumba.weights",
    "Detector": "darknumba.vision.detector", "configure": "darknumba.runtime",
}


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'darknumba' has no attribute {name!r}")
    import gc
    import importlib

    # numba's import makes a few hundred thousand objects, and the collector's full passes over
    # them (~0.1-0.3 s) find nothing to free: off while importing, then as it was
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    finally:
        if was_enabled:
            gc.enable()
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS))
