"""`darknumba bench CFG [WEIGHTS]`: forward (or training-step) timing with a per-layer profile."""
from pathlib import Path
from typing import Annotated, Optional

import typer


def bench(cfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg file")],
          weights: Annotated[Optional[Path], typer.Argument(exists=True, dir_okay=False,
                                                             help=".weights (random if omitted)")] = None,
          batch: Annotated[int, typer.Option(help="images per forward")] = 1,
          reps: Annotated[int, typer.Option(help="timed repetitions")] = 10,
          train: Annotated[bool, typer.Option(help="time train-mode forward passes")] = False):
    """Time the forward pass: first call (compile), steady state, and where the time goes per layer."""
    import time

    import numpy as np

    from ..parser import load_network
    from ..profile import profile_forward
    net = load_network(cfg, weights, batch=batch)
    x = np.random.default_rng(0).uniform(0, 1, (batch, net.c, net.h, net.w)).astype(np.float32)
    t = time.perf_counter()
    net.forward(x, train=train)
    typer.echo(f"first call {1000 * (time.perf_counter() - t):.1f} ms (compile or cache load)")
    typer.echo(profile_forward(net, x, reps=reps, train=train))
    gflop = sum(l.bflops for l in net.layers) * batch
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        net.forward(x, train=train)
        times.append(time.perf_counter() - t)
    med = float(np.median(times))
    typer.echo(f"forward {1000 * med:.2f} ms median for {batch} image(s): "
               f"{batch / med:.1f} images/s, {gflop / med:.1f} effective GFLOPS")


def register(app: typer.Typer):
    app.command()(bench)
