"""darknumba: Darknet's layers, loss and training loop, compiled with Numba for the CPU."""
import os

# numba's OpenMP workers and OpenBLAS's threads both spin after a parallel region; on a
# small machine each side's spinners steal the cores the other needs (8x slower GEMM +
# kernel pairs, see bench/). Passive waiting must be set before numba starts OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .errors import DarknumbaError, CfgError, WeightsError  # noqa: E402
from .network import Network  # noqa: E402
from .parser import parse_network_cfg, load_network  # noqa: E402
from .weights import load_weights, save_weights  # noqa: E402

__all__ = [
    "DarknumbaError", "CfgError", "WeightsError", "Network",
    "parse_network_cfg", "load_network", "load_weights", "save_weights",
]
__version__ = "0.1.0"
