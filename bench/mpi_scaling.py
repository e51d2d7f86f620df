"""A model of data-parallel training on N machines (one rank each): compute per iteration
against a ring allreduce of the gradients, the efficiency it leaves, and what overlapping the
allreduce with backward would give once a core is spent on MPI progress.

    python bench/mpi_scaling.py [--cfg cfg/yolov3-tiny.cfg] [--image-seconds 0.14]
                                [--batch 64] [--cores 2] [--gbits 10 25] [--machines 8 32 128]

Model (MPICH's ring / reduce-scatter + allgather for large buffers, S bytes, N ranks):
    allreduce = (N-1)/N * S * (2 / bandwidth + reduce) + 2 (N-1) * latency
    compute   = (batch / N) * image_seconds        (the cfg's batch shared by N machines)
    efficiency = compute / (compute + allreduce)   (speed-up = N * efficiency)
Overlap (the allreduce of each layer's gradients started as soon as backward has them) needs a
thread that drives MPI's progress: it takes one of `cores`, so compute grows by
cores / (cores - 1), and at best the allreduce hides behind it:
    overlapped = max(compute * cores / (cores - 1), allreduce)
"""
import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LATENCY = 25e-6       # s per ring step over TCP on 10/25 GbE
REDUCE = 1e-9         # s per byte summed in place (about 1 GB/s on one core, with MPI's copies)
PAYLOAD = 0.9         # share of the line rate TCP carries


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", default=str(ROOT / "cfg" / "yolov3-tiny.cfg"))
    ap.add_argument("--image-seconds", type=float, default=0.14,
                    help="training time per image on one machine, all its cores")
    ap.add_argument("--batch", type=int, default=64, help="the cfg's batch (global)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--gbits", type=float, nargs="+", default=[10, 25])
    ap.add_argument("--machines", type=int, nargs="+", default=[8, 32, 128])
    a = ap.parse_args()
    S = gradient_bytes(a.cfg)
    print(f"{Path(a.cfg).name}: {S / 1e6:.1f} MB of gradients; {a.image_seconds} s per image "
          f"per machine; batch {a.batch}; {a.cores} cores per machine")
    print(f"{'Gbit/s':>6} {'machines':>8} {'img/machine':>11} {'compute s':>9} "
          f"{'allreduce s':>11} {'efficiency':>10} {'overlapped':>10} {'80% needs':>9}")
    for g in a.gbits:
        for n in a.machines:
            k = a.batch / n
            c = k * a.image_seconds
            r = allreduce_seconds(S, n, g)
            over = c / max(c * a.cores / (a.cores - 1), r) if a.cores > 1 else float("nan")
            need = 4 * r / a.image_seconds          # images per machine: compute >= 4 x allreduce
            note = "" if k >= 1 else "  (batch < machines: the cfg cannot be shared)"
            print(f"{g:6.0f} {n:8d} {k:11.2f} {c:9.3f} {r:11.3f} {c / (c + r):10.0%} "
                  f"{over:10.0%} {need:7.1f} img{note}")

if __name__ == "__main__":
    main()
