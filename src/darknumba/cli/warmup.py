"""`darknumba warmup [CFG ...]`: compile the kernels networks use into numba's cache ahead of a
first run (a numba cache cannot ship in a wheel: its key includes the CPU's features)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer


def shipped_cfgs() -> list[Path]:
    """The cfgs shipped inside the package (resources/cfg)."""
    return sorted((Path(__file__).resolve().parents[1] / "resources" / "cfg").glob("*.cfg"))


def warm_network(cfg: Path, log=None) -> bool:
    """Build `cfg` (zero weights, batch 1) and run it once as `detect` would (a network
    without detection layers: a forward pass), compiling or loading every kernel that needs.
    Returns whether numba compiled anything."""
    import numpy as np

    from ..parser import load_network
    from ..runtime.compile_notice import compile_notice
    from ..vision.detector import Detector
    log = log or (lambda m: None)
    net = load_network(cfg, None, batch=1)
    for l in net.layers:        # zero weights: every output 0 or 0.5, so no box to sort
        for name in ("weights", "biases", "scales"):
            a = getattr(l, name, None)
            if isinstance(a, np.ndarray):
                a[...] = 0
    classes = [l.classes for l in net.layers if l.makes_detections]
    if not classes:             # a classifier: its forward pass
        with compile_notice(log) as notice:
            net.forward(np.full((1, net.c, net.h, net.w), 0.5, np.float32), train=False)
        return notice.compiled
    detector = Detector(net, names=[str(i) for i in range(classes[-1])], log=log)
    with compile_notice(lambda m: None) as notice:        # the detector gives the notice
        detector.warm_up()
    return notice.compiled


def warmup(cfgs: Annotated[Optional[list[Path]], typer.Argument(
        exists=True, dir_okay=False, metavar="CFG",
        help="Darknet .cfg files (default: every cfg shipped with darknumba)",
        show_default=False)] = None):
    """Compile (or check in numba's cache) the kernels these networks need for detection, so
    that a first `darknumba detect` starts at once."""
    for cfg in cfgs or shipped_cfgs():
        t = time.perf_counter()
        compiled = warm_network(cfg, log=lambda m: typer.echo(m, err=True))
        typer.echo(f"{cfg}: {'compiled' if compiled else 'already cached'} "
                   f"({time.perf_counter() - t:.1f} s)")


def register(app: typer.Typer):
    app.command()(warmup)
