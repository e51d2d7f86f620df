"""yolov3-tiny (or any cfg) forward benchmark: compile time, steady-state ms/image and effective
GFLOPS, per-layer profile, and the start-up of a second process with a warm numba cache.

    python bench/forward.py [--cfg cfg/yolov3-tiny.cfg] [--weights weights/yolov3-tiny.weights]
                            [--batch 1] [--reps 20] [--profile] [--exact | --winograd]
                            [--import-numpy-first]

--import-numpy-first imports numpy (and so its OpenBLAS) before darknumba, as most scripts do.
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import benchlib  # noqa: E402


def gemm_floor(net, reps):
    """Median ms/image of just the convolutions' GEMMs (weights @ columns), back to back."""
    import numpy as np
    ops = []
    for l in net.layers:
        if l.type == "convolutional":
            m, k, n = l.n // l.groups, l.size * l.size * l.c // l.groups, l.out_h * l.out_w
            for _ in range(l.groups * net.batch):
                ops.append((l.weights[:m * k].reshape(m, k), np.random.rand(k, n).astype(np.float32),
                            np.empty((m, n), np.float32)))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for a, b, c in ops:
            np.matmul(a, b, out=c)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1000 / net.batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", default=str(ROOT / "cfg" / "yolov3-tiny.cfg"))
    ap.add_argument("--weights", default=str(ROOT / "weights" / "yolov3-tiny.weights"))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="print a per-layer time table")
    path = ap.add_mutually_exclusive_group()
    path.add_argument("--exact", action="store_true",
                      help="im2col + GEMM for every convolution, as Darknet (default: the "
                           "library's, Winograd F(4x4,3x3) for the larger 3x3 ones unless "
                           "DARKNUMBA_EXACT=1)")
    path.add_argument("--winograd", action="store_true",
                      help="Winograd for the larger 3x3 convolutions, whatever the environment")
    ap.add_argument("--import-numpy-first", action="store_true",
                    help="import numpy before darknumba (darknumba must not depend on the order)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.child:
        benchlib.header("bench/forward.py: darknumba's forward pass")

    t0 = time.perf_counter()
    if args.import_numpy_first:
        import numpy  # noqa: F401
    import darknumba as dn
    dn.configure()              # the thread policy the command and a Detector set (runtime/)
    import numpy as np
    t_import = time.perf_counter() - t0
    weights = args.weights if os.path.exists(args.weights) else None
    exact = True if args.exact else False if args.winograd else None
    net = dn.load_network(args.cfg, weights, batch=args.batch, exact=exact)
    if weights is None:
        from darknumba.train.timing import unit_rolling_variance
        unit_rolling_variance(net)
    x = np.random.default_rng(0).uniform(0, 1, (args.batch, net.c, net.h, net.w)).astype(np.float32)
    t1 = time.perf_counter()
    net.forward(x)
    t_first = time.perf_counter() - t1
    if args.child:
        print(f"{t_import:.3f} {t_first:.3f}")
        return
    times = []
    for _ in range(args.reps):
        t = time.perf_counter()
        net.forward(x)
        times.append(time.perf_counter() - t)
    times = np.array(times) * 1000 / args.batch
    gflop = sum(l.bflops for l in net.layers)
    print(f"network      {Path(args.cfg).name}  {net.w}x{net.h}  batch {args.batch}  "
          f"({gflop:.3f} GFLOP/image){'' if weights else '  [random weights]'}")
    print(f"import       {t_import * 1000:8.1f} ms")
    print(f"first call   {t_first * 1000:8.1f} ms   (numba compile or cache load included)")
    print(f"steady state {np.median(times):8.2f} ms/image median, {times.min():.2f} min "
          f"over {args.reps} runs = {1000 / np.median(times):.1f} images/s, "
          f"{gflop / (np.median(times) / 1000):.1f} effective GFLOPS")
    floor = gemm_floor(net, args.reps)
    print(f"GEMMs alone  {floor:8.2f} ms/image (the convolutions' matrix products on random "
          f"operands): darknumba / GEMMs = {np.median(times) / floor:.2f}")
    if args.profile:
        from darknumba.train.timing import profile_forward
        print(profile_forward(net, x, reps=max(3, args.reps // 4)))
    t = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", "--cfg", args.cfg, "--weights",
                          args.weights, "--batch", str(args.batch)] + ["--winograd"] * args.winograd
                         + ["--exact"] * args.exact
                         + ["--import-numpy-first"] * args.import_numpy_first,
                         capture_output=True, text=True,
                         check=True)
    wall = time.perf_counter() - t
    imp, first = map(float, out.stdout.split())
    print(f"2nd process  {wall * 1000:8.1f} ms wall (warm cache): import {imp * 1000:.0f} ms, "
          f"first forward {first * 1000:.0f} ms")


if __name__ == "__main__":
    main()
