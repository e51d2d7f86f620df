"""What loading each compiled kernel from numba's cache costs in a warm `darknumba detect`: every
cache load (numba's Cache.load_overload) is timed in a fresh process per run, runs after a
warm-up that fills the cache, and the table gives each kernel's median load time, whether it is
a parallel (prange) kernel, and the totals split parallel / serial.

    python bench/kernel_loads.py [--cfg cfg/yolov3-tiny.cfg] [--weights weights/yolov3-tiny.weights]
                                 [--image PATH] [--runs 3] [--top 25] [--json OUT.json]

Each run is `darknumba detect CFG WEIGHTS IMAGE` inside a child Python that wraps numba's cache
load before the command starts (the command's own load path, runtime/cache_loads.py, sits on
top of it and stays in use); the child prints one JSON line of (kernel, seconds, parallel)
records and the command's wall time. The machine's other load during the runs is printed
(benchlib's header), as for every figure in docs/.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402

ROOT = HERE.parent

# the child: time every cache load, run the command, print the records as one JSON line
CHILD = r"""
import json, sys, time
t = time.perf_counter()
from darknumba.cli import configure, run
configure(command=True)             # as the `darknumba` command's main() does; it may put its own
from numba.core import caching      # cache load in place: the timing wraps whatever is there
loads = []
original = caching.Cache.load_overload
def timed_load(self, sig, target_context):
    t = time.perf_counter()
    try:
        return original(self, sig, target_context)
    finally:
        func = getattr(self, "_py_func", None)
        name = f"{func.__module__}.{func.__qualname__}" if func is not None else self._name
        loads.append([name, time.perf_counter() - t])
caching.Cache.load_overload = timed_load
code = run(sys.argv[1:])
wall = time.perf_counter() - t
def is_parallel(name):               # the dispatcher of module.function (gc.freeze hides
    module, _, func = name.rpartition(".")      # objects from gc: look them up by name)
    d = getattr(sys.modules.get(module), func, None)
    return bool(getattr(d, "targetoptions", {}).get("parallel"))
parallel = {n: is_parallel(n) for n, _ in loads}
print("KERNEL-LOADS " + json.dumps({"code": code, "wall": wall,
                                    "loads": [[n, s, parallel.get(n, False)] for n, s in loads]}))
"""


def one_run(args, out_dir: str) -> dict:
    cmd = [sys.executable, "-c", CHILD, "detect", str(args.cfg), str(args.weights),
           str(args.image), "--out", os.path.join(out_dir, "p.png")]
    env = {**os.environ, "DARKNUMBA_FIRST_RUN": "compile"}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out_dir, timeout=900)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("KERNEL-LOADS ")), None)
    if line is None:
        raise SystemExit(f"the child printed no records (exit {p.returncode}):\n{p.stderr[-2000:]}")
    rec = json.loads(line[len("KERNEL-LOADS "):])
    if rec["code"] != 0:
        raise SystemExit(f"detect ended with status {rec['code']}:\n{p.stderr[-2000:]}")
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cfg", type=Path, default=ROOT / "cfg" / "yolov3-tiny.cfg")
    ap.add_argument("--weights", type=Path, default=ROOT / "weights" / "yolov3-tiny.weights")
    ap.add_argument("--image", type=Path, default=None,
                    help="default: Darknet's dog.jpg beside the checkout, else a synthetic photo")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.image is None:
            dog = ROOT.parent / "shared" / "data" / "dog.jpg"
            if dog.is_file():
                args.image = dog
            else:
                import numpy as np
                from PIL import Image
                rng = np.random.default_rng(0)
                args.image = Path(tmp) / "photo.png"
                Image.fromarray(rng.integers(0, 255, (480, 640, 3), np.uint8)).save(args.image)
        benchlib.header(f"kernel loads: darknumba detect {args.cfg.name}")
        t = time.time()
        one_run(args, tmp)                       # warm-up: fills the cache, not counted
        print(f"warm-up (cache filled) {time.time() - t:.1f} s", flush=True)
        runs, others = [], []
        for _ in range(args.runs):
            with benchlib.OtherLoad() as load:
                runs.append(one_run(args, tmp))
            others.append(load.cores)
    per: dict[str, list] = {}
    parallel: dict[str, bool] = {}
    first = [r["loads"][0][1] for r in runs if r["loads"]]
    for r in runs:
        seen: dict[str, float] = {}
        for name, seconds, par in r["loads"][1:]:   # the first load also starts numba's runtime
            seen[name] = seen.get(name, 0.0) + seconds        # all signatures of a kernel
            parallel[name] = par
        for name, seconds in seen.items():
            per.setdefault(name, []).append(seconds)
    med = {n: statistics.median(v) for n, v in per.items()}
    totals = [sum(s for _, s, _ in r["loads"]) for r in runs]
    walls = [r["wall"] for r in runs]
    print(f"\nfirst load (starts numba's runtime and imports what loading needs): "
          f"{runs[0]['loads'][0][0]}, median {1e3 * statistics.median(first):.0f} ms")
    print(f"{len(med)} more kernels loaded per run ({sum(len(r['loads']) for r in runs) // len(runs)} "
          f"signatures); medians of {len(runs)} runs")
    print(f"{'kernel':60s} {'par':>4s} {'ms':>8s}")
    for n in sorted(med, key=med.get, reverse=True)[:args.top]:
        print(f"{n:60s} {'yes' if parallel[n] else '':>4s} {1e3 * med[n]:8.2f}")
    par = [v for n, v in med.items() if parallel[n]]
    ser = [v for n, v in med.items() if not parallel[n]]
    print(f"\nparallel kernels: {len(par)}, {1e3 * sum(par):.0f} ms "
          f"(mean {1e3 * statistics.mean(par) if par else 0:.1f} ms)")
    print(f"serial kernels:   {len(ser)}, {1e3 * sum(ser):.0f} ms "
          f"(mean {1e3 * statistics.mean(ser) if ser else 0:.1f} ms)")
    print(f"all loads: median {1e3 * statistics.median(totals):.0f} ms of a median "
          f"{statistics.median(walls):.2f} s command (in-process wall time, start-up excluded)")
    print(f"other processes kept {max(others):.2f} of a core busy at most during a run")
    if args.json:
        from darknumba.outputs import atomic_write
        atomic_write(args.json, json.dumps({"median_ms": {n: 1e3 * v for n, v in med.items()},
                                            "parallel": parallel, "walls": walls,
                                            "totals": totals}, indent=1).encode())


if __name__ == "__main__":
    main()
