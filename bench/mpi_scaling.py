"""A model of data-parallel training on N machines (one rank each): compute per iteration
against a ring allreduce of the gradients, the efficiency it leaves, and what overlapping the
allreduce with backward would give once a core is spent on MPI progress.

    python bench/mpi_scaling.py [--cfg cfg/yolov3-tiny.cfg cfg/yolov4-tiny.cfg]
                                [--image-seconds 0.089 0.125] [--batch 64] [--cores 2]
                                [--gbits 10 25] [--machines 8 32 128] [--more-cores 32]

The defaults are the README's scaling model: yolov3-tiny and yolov4-tiny at 416 with the
training time per image measured on one 2-core machine (0.089 and 0.125 s, 2026-12-02: a
batch-16 iteration of `detector train` at subdivisions 2, 1.42-1.45 and 2.03 s, over 16), the
cfg's batch=64 shared out, 10 and 25 Gbit/s. --more-cores adds the same model for machines with
that many cores, their time per image scaled down by cores / more_cores (perfect scaling, an
optimistic assumption), where overlapping pays.

Model (MPICH's ring / reduce-scatter + allgather for large buffers, S bytes, N ranks):
    allreduce = (N-1)/N * S * (2 / bandwidth + reduce) + 2 (N-1) * latency
    compute   = (batch / N) * image_seconds        (the cfg's batch shared by N machines)
    efficiency = compute / (compute + allreduce)   (speed-up = N * efficiency)
Overlap (the allreduce of each layer's gradients started as soon as backward has them) needs a
thread that drives MPI's progress: it takes one of `cores`, so compute grows by
cores / (cores - 1), and at best the allreduce hides behind it:
    overlapped = compute / max(compute * cores / (cores - 1), allreduce)
S is 4 bytes per gradient (weights, biases, batch-norm scales) of the cfg, read by darknumba's
parser (no weights, no buffers).
"""
import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402

ROOT = HERE.parent
LATENCY = 25e-6       # s per ring step over TCP on 10/25 GbE
REDUCE = 1e-9         # s per byte summed in place (about 1 GB/s on one core, with MPI's copies)
PAYLOAD = 0.9         # share of the line rate TCP carries
DEFAULT_CFGS = ["cfg/yolov3-tiny.cfg", "cfg/yolov4-tiny.cfg"]
DEFAULT_IMAGE_SECONDS = [0.089, 0.125]


def gradient_bytes(cfg) -> int:
    from darknumba.parser import parse_network_cfg
    from darknumba.train.data_parallel import GRADIENTS
    net = parse_network_cfg(cfg, seed=None, allocate=False)
    return 4 * sum(getattr(l, u).size for l in net.layers for w, u in GRADIENTS
                   if getattr(l, w, None) is not None and getattr(l, u, None) is not None)


def allreduce_seconds(nbytes, ranks, gbits):
    if ranks == 1:
        return 0.0
    bandwidth = gbits * 1e9 / 8 * PAYLOAD
    return ((ranks - 1) / ranks * nbytes * (2 / bandwidth + REDUCE)
            + 2 * (ranks - 1) * LATENCY)


def table(name, S, image_seconds, batch, cores, gbits, machines):
    print(f"\n## {name}: {S / 1e6:.1f} MB of gradients; {image_seconds:.4g} s per image per "
          f"machine; batch {batch}; {cores} cores per machine")
    print(f"{'Gbit/s':>6} {'machines':>8} {'img/machine':>11} {'compute s':>9} "
          f"{'allreduce s':>11} {'efficiency':>10} {'overlapped':>10} {'80% needs':>9}")
    for g in gbits:
        for n in machines:
            k = batch / n
            c = k * image_seconds
            r = allreduce_seconds(S, n, g)
            over = c / max(c * cores / (cores - 1), r) if cores > 1 else float("nan")
            need = 4 * r / image_seconds          # images per machine: compute >= 4 x allreduce
            note = "" if k >= 1 else "  (batch < machines: the cfg cannot be shared)"
            print(f"{g:6.0f} {n:8d} {k:11.2f} {c:9.3f} {r:11.3f} {c / (c + r):10.0%} "
                  f"{over:10.0%} {need:7.1f} img{note}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cfg", nargs="+", default=DEFAULT_CFGS)
    ap.add_argument("--image-seconds", type=float, nargs="+", default=None,
                    help="training time per image on one machine, all its cores, one per cfg "
                         "(default: 0.089 0.125 for the default cfgs)")
    ap.add_argument("--batch", type=int, default=64, help="the cfg's batch (global)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--gbits", type=float, nargs="+", default=[10, 25])
    ap.add_argument("--machines", type=int, nargs="+", default=[8, 32, 128])
    ap.add_argument("--more-cores", type=int, default=32,
                    help="also the model for machines of this many cores (0: not)")
    a = ap.parse_args()
    seconds = a.image_seconds or (DEFAULT_IMAGE_SECONDS if a.cfg == DEFAULT_CFGS else None)
    if seconds is None or len(seconds) != len(a.cfg):
        ap.error("give --image-seconds, one per --cfg")
    benchlib.header("bench/mpi_scaling.py: a model of data-parallel training (no timing here)",
                    threads=a.cores, extra={"model": f"latency {LATENCY * 1e6:.0f} us per ring "
                                            f"step, reduce {REDUCE * 1e9:.0f} ns/byte, "
                                            f"{PAYLOAD:.0%} of the line rate"})
    for cfg, s in zip(a.cfg, seconds):
        S = gradient_bytes(cfg)
        table(Path(cfg).name, S, s, a.batch, a.cores, a.gbits, a.machines)
        if a.more_cores and a.more_cores != a.cores:
            table(f"{Path(cfg).name} on {a.more_cores}-core machines (time per image x "
                  f"{a.cores}/{a.more_cores})", S, s * a.cores / a.more_cores, a.batch,
                  a.more_cores, a.gbits, a.machines)


if __name__ == "__main__":
    main()
