"""darknumba: Darknet's layers, loss and training loop, compiled with Numba for the CPU."""
import os

# numba's OpenMP workers and OpenBLAS's threads both spin after a parallel region; on a
# small machine each side's spinners steal the cores the other needs (8x slower GEMM +
# kernel pairs, see bench/). Passive waiting must be set before numba starts OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# OpenBLAS's own worker threads spin for 2^28 cycles after each GEMM; between GEMMs they then
# take the cores from the numba kernels (im2col, batch norm, pooling). 2^4 cycles: measured
# here, yolov3-tiny inference 55 -> 44 ms/image, a batch-8 training step 1.49 -> 1.14 s.
# OpenBLAS reads this when numpy loads: import darknumba before numpy for it to apply.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from .errors import DarknumbaError, CfgError, WeightsError  # noqa: E402
from .network import Network  # noqa: E402
from .parser import parse_network_cfg, load_network  # noqa: E402
from .weights import load_weights, save_weights  # noqa: E402

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
