"""Winograd filters kept within the network's budget (conv_plan.winograd_cached, the default)
against kept on every Winograd layer (as up to 2026-12-03), at inference, batch 1, with the
exact path (no Winograd) for scale.

Memory: each mode builds the network in a process of its own and runs --rss-reps forwards;
its peak resident memory. Time: one process runs the three modes forward by forward in turn
(all, budget, exact, all, ...: --reps rounds after a warm-up round, the same network, so a
busy machine slows each mode alike) and prints each mode's median wall and CPU ms per forward;
`others`: how many cores other processes kept busy meanwhile.

    python bench/winograd_cache.py [--cfg cfg/yolov4.cfg] [--reps 5] [--size 608]
                                   [--no-rss] [--fractions 1.0,1.5]
"""
import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import benchlib  # noqa: E402

MODES = ("all", "budget", "exact")


def build(cfg: str, size: int | None, exact=False):
    import darknumba as dn
    dn.configure()
    net = dn.load_network(cfg, None, batch=1, exact=exact)
    if size:
        net.resize(size, size)
    return net


def set_mode(net, mode: str) -> int:
    """Keep every Winograd layer's filters (all), the planned ones (budget), those of a budget
    of F times the weights' bytes (xF), or take the exact path; the bytes of filters kept."""
    from darknumba.layers import conv_plan
    net.exact = mode == "exact"
    default = conv_plan.WINOGRAD_CACHE_OF_WEIGHTS
    if mode.startswith("x"):
        conv_plan.WINOGRAD_CACHE_OF_WEIGHTS = float(mode[1:])
    kept = conv_plan.winograd_cached(net.layers)
    conv_plan.WINOGRAD_CACHE_OF_WEIGHTS = default
    for i, l in enumerate(net.layers):
        if l.type == "convolutional":
            l.winograd_keep = mode == "all" or i in kept
    wino = [i for i, l in enumerate(net.layers) if l.type == "convolutional"
            and conv_plan.plan(l, False, net.exact) in (conv_plan.ConvPath.WINOGRAD4X4,
                                                         conv_plan.ConvPath.WINOGRAD2X2)]
    return sum(conv_plan.winograd_filter_bytes(net.layers[i]) for i in wino
               if net.layers[i].winograd_keep)


def rss_child(cfg: str, mode: str, reps: int, size: int | None) -> dict:
    import numpy as np
    net = build(cfg, size, exact=mode == "exact")
    kept = set_mode(net, mode)
    x = np.random.default_rng(0).random(net.inputs, dtype=np.float32)
    for _ in range(reps):
        net.predict(x)
    return {"kept_mib": kept / (1 << 20),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def time_modes(cfg: str, reps: int, size: int | None, modes) -> None:
    import numpy as np
    net = build(cfg, size)
    x = np.random.default_rng(0).random(net.inputs, dtype=np.float32)
    wall = {m: [] for m in modes}
    cpu = {m: [] for m in modes}
    busy0, mine0, t0 = benchlib.busy_cpu_seconds(), time.process_time(), time.perf_counter()
    for r in range(reps + 1):
        for mode in modes:
            set_mode(net, mode)
            t, c = time.perf_counter(), time.process_time()
            net.predict(x)
            if r:                           # round 0 warms up (and makes the kept filters)
                wall[mode].append(1000 * (time.perf_counter() - t))
                cpu[mode].append(1000 * (time.process_time() - c))
    # other processes: the machine's busy CPU time less this process's, over the wall time
    others = ((benchlib.busy_cpu_seconds() - busy0) - (time.process_time() - mine0)) / \
        (time.perf_counter() - t0)
    print(f"## time ({reps} rounds, modes in turn; others kept {max(0.0, others):.2f} cores "
          f"busy)")
    print(f"{'mode':<7} {'kept MiB':>9} {'wall ms':>9} {'cpu ms':>9}   "
          f"(medians; walls: min .. max)")
    for mode in modes:
        print(f"{mode:<7} {set_mode(net, mode) / (1 << 20):9.0f} "
              f"{benchlib.median(wall[mode]):9.1f} {benchlib.median(cpu[mode]):9.1f}"
              f"   {min(wall[mode]):.0f} .. {max(wall[mode]):.0f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", default=str(ROOT / "cfg" / "yolov4.cfg"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rss-reps", type=int, default=3)
    ap.add_argument("--size", type=int, default=None, help="resize the input to SIZE x SIZE")
    ap.add_argument("--no-rss", action="store_true", help="time only")
    ap.add_argument("--fractions", default="",
                    help="also time budgets of F times the weights' bytes: F1,F2,...")
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(rss_child(args.cfg, args.child, args.rss_reps, args.size)))
        return
    benchlib.header("Winograd filters kept within the budget or on every layer, batch 1")
    print(f"# {Path(args.cfg).name}" + (f" at {args.size}" if args.size else ""))
    if not args.no_rss:
        print("## memory (each mode in its own process)")
        print(f"{'mode':<7} {'kept MiB':>9} {'peak MiB':>9}")
        for mode in MODES:
            cmd = [sys.executable, __file__, "--cfg", args.cfg, "--rss-reps",
                   str(args.rss_reps), "--child", mode] + \
                (["--size", str(args.size)] if args.size else [])
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            res = json.loads(out.strip().splitlines()[-1])
            print(f"{mode:<7} {res['kept_mib']:9.0f} {res['peak_rss_mib']:9.0f}", flush=True)
    time_modes(args.cfg, args.reps, args.size,
               list(MODES) + [f"x{f}" for f in args.fractions.split(",") if f])


if __name__ == "__main__":
    main()
