"""`darknumba bench CFG [WEIGHTS]`: forward (or training-step) timing with a per-layer profile."""
from pathlib import Path
from typing import Annotated, Optional

import typer

from .options import ExactOption


def bench(cfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg file")],
          weights: Annotated[Optional[Path], typer.Argument(exists=True, dir_okay=False,
                                                             help=".weights (random if omitted)")] = None,
          batch: Annotated[int, typer.Option(min=1, help="images per forward")] = 1,
          reps: Annotated[int, typer.Option(min=1, help="timed repetitions")] = 10,
          train: Annotated[bool, typer.Option(help="time training steps (forward, backward, "
                                                   "update) with random yolo truths")] = False,
          remeasure_peak: Annotated[bool, typer.Option(
              "--remeasure-peak", help="measure the machine's peak GEMM rate again instead of "
                                       "reading it from darknumba's cache folder")] = False,
          exact: ExactOption = None):
    """Time the forward pass (or a training step): first call (compile), steady state, and
    where the time goes per layer, each layer's effective GFLOPS (Darknet's BFLOPs over its
    time) and its share of the machine's peak (a float32 GEMM measured once, then cached)."""
    import time

    import numpy as np

    from ..parser import load_network
    from ..train.peak import gemm_peak
    from ..train.timing import profile_forward, profile_train, unit_rolling_variance
    from ..layers.xnor import calculate_binary_weights
    net = load_network(cfg, weights, batch=batch, exact=exact)
    calculate_binary_weights(net)        # xnor layers by bits at inference, as `detect` runs them
    if weights is None:
        unit_rolling_variance(net)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (batch, net.c, net.h, net.w)).astype(np.float32)
    if train:
        truth = np.zeros((batch, net.truths), np.float32)
        per_box = next((getattr(l, "truth_size", 5) for l in net.layers if l.type == "yolo"), 0)
        if per_box:                  # yolo: five random boxes per image (AlexeyAB's: 6 values each)
            for k in range(5):
                truth[:, per_box * k:per_box * k + 4] = rng.uniform([.1, .1, .05, .05],
                                                                    [.9, .9, .4, .4], (batch, 4))
        else:
            truth[np.arange(batch), rng.integers(0, net.truths, batch)] = 1
        net.learning_rate = 1e-6           # keep the weights sane over the timed steps
        step = lambda: net.train_datum(x, truth)      # noqa: E731
    else:
        step = lambda: net.forward(x)                  # noqa: E731
    t = time.perf_counter()
    step()
    typer.echo(f"first call {1000 * (time.perf_counter() - t):.1f} ms (compile or cache load)")
    peak, threads, measured = gemm_peak(remeasure=remeasure_peak)
    typer.echo(f"peak {peak:.1f} GFLOPS: float32 GEMM, {threads} thread(s), "
               + ("measured now" if measured else "cached (--remeasure-peak measures again)"))
    typer.echo(profile_train(net, x, truth, reps=reps, peak=peak) if train
               else profile_forward(net, x, reps=reps, peak=peak))
    gflop = sum(l.bflops for l in net.layers) * batch * (3 if train else 1)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    med = float(np.median(times))
    what = "training step" if train else "forward"
    typer.echo(f"{what} {1000 * med:.2f} ms median for {batch} image(s): "
               f"{batch / med:.2f} images/s, {gflop / med:.1f} effective GFLOPS, "
               f"{gflop / med / peak:.1%} of peak")


def register(app: typer.Typer):
    app.command()(bench)
