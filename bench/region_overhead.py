"""How much of a small network's training iteration goes to starting parallel regions (issue 31,
Must 4: at most 10 %).

For rnn-tiny (cfg/rnn-tiny.cfg, one `darknumba rnn train` datum: 8 streams x 16 steps) and a
small classifier (cfg/shapes5-classifier.cfg, one `darknumba classifier train` batch of 64
32x32 images), in one process with darknumba's thread policy applied (configure()):

1. the iteration (net.train_datum: forward, backward, update; data loading not included),
   median wall time of --iters runs;
2. the parallel regions it starts: every call from Python into a kernel compiled with
   parallel=True is counted (a counting CPUDispatcher.__call__, installed after the timing), times
   that kernel's prange loops (read from its source; a prange inside a serial loop starts one
   region per pass, so this is a lower bound). Kernels called from other compiled kernels are
   not seen; calls to a kernel's serial twin (kernels/twins.py) are counted apart;
3. the cost of starting one region: a trivial prange kernel over 16 floats against its serial
   twin, median over blocks of calls;
4. the estimated share: regions x cost / iteration, in wall time and in the process's CPU time
   (the CPU a region start costs includes the team's spinning at the barrier);
5. a region start's cost amid the real work (the trivial kernel in a tight loop finds the team
   awake and the caches warm): the iteration's saving before -> after over the regions the twins
   removed (an upper bound: the serial twins may also run their loops faster), and the shares
   at that cost.

Each network runs before (kernels/twins.py's SERIAL_BELOW = 0: every kernel parallel, as before
the twins) and after (its threshold), one iteration of each in turn, so one run compares them.

On a loaded machine the wall times are inflated and move together only roughly: compare the
share within one run, and publish figures only from an idle machine (the `others` line says how
many cores other processes kept busy).
"""
from __future__ import annotations

import argparse
import ast
import inspect
import statistics
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import ROOT, busy_cpu_seconds, header  # noqa: E402

NETWORKS = ("rnn-tiny", "shapes5-classifier")


def prange_loops(dispatcher) -> int:
    """The prange loops in a kernel's source (at least 1: a parallel kernel starts a region)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(dispatcher.py_func)))
    except (OSError, TypeError, SyntaxError):
        return 1
    n = sum(isinstance(node, ast.Call) and getattr(node.func, "id", None) == "prange"
            for node in ast.walk(tree))
    return max(n, 1)


def launch_cost(calls: int = 2000, blocks: int = 15) -> tuple[float, float, float]:
    """(wall seconds per region start, process CPU seconds per region start (the team's
    spinning included), seconds per serial call): a trivial prange kernel on 16 floats against
    the same body compiled serial, interleaved blocks, medians."""
    import numpy as np
    from numba import njit, prange

    def touch(x):
        for i in prange(x.size):
            x[i] += 1.0

    par, ser = njit(parallel=True)(touch), njit(touch)
    x = np.zeros(16, np.float32)
    par(x), ser(x)
    per = {par: [], ser: []}
    cpu = {par: [], ser: []}
    for _ in range(blocks):
        for k in (par, ser):
            t, c = time.perf_counter(), time.process_time()
            for _ in range(calls):
                k(x)
            per[k].append((time.perf_counter() - t) / calls)
            cpu[k].append((time.process_time() - c) / calls)
    p, s = statistics.median(per[par]), statistics.median(per[ser])
    return p - s, statistics.median(cpu[par]) - statistics.median(cpu[ser]), s


def build(name: str):
    """The network and one datum (x, truth) as its trainer feeds it."""
    import numpy as np

    from darknumba.parser import load_network
    net = load_network(ROOT / "cfg" / f"{name}.cfg")
    rng = np.random.default_rng(0)
    if name == "rnn-tiny":
        from darknumba.train.rnn import CHARACTERS, get_rnn_data
        text = rng.integers(32, 127, 4096).astype(np.uint8)
        steps = net.time_steps
        streams = net.batch // steps
        x, y = get_rnn_data(text, rng.integers(0, text.size, streams), CHARACTERS, streams, steps)
        return net, x, y
    x = rng.uniform(0, 1, (net.batch, net.c, net.h, net.w)).astype(np.float32)
    y = np.zeros((net.batch, net.outputs), np.float32)
    y[np.arange(net.batch), rng.integers(0, net.outputs, net.batch)] = 1
    return net, x, y


class RegionCounter:
    """Counts calls from Python into numba dispatchers while installed: parallel ones with their
    prange loops, serial twins apart."""

    def __init__(self):
        from numba.core.registry import CPUDispatcher
        self.cls = CPUDispatcher
        self.parallel, self.serial_twin, self.loops = Counter(), Counter(), {}

    def __enter__(self):
        base_call = self.cls.__mro__[-2].__call__        # _dispatcher.Dispatcher's tp_call
        counter = self

        def counting_call(disp, *args, **kwargs):
            name = disp.py_func.__module__.rsplit(".", 1)[-1] + "." + disp.py_func.__name__
            if disp.targetoptions.get("parallel"):
                counter.parallel[name] += 1
                if name not in counter.loops:
                    counter.loops[name] = prange_loops(disp)
            elif getattr(disp.py_func, "serial_twin", False):
                counter.serial_twin[name] += 1
            return base_call(disp, *args, **kwargs)

        self.cls.__call__ = counting_call
        return self

    def __exit__(self, *exc):
        del self.cls.__call__

    def regions(self) -> int:
        return sum(n * self.loops[k] for k, n in self.parallel.items())


def measure(name: str, iters: int, thresholds) -> dict:
    """threshold -> the iteration's median wall and CPU time (the thresholds interleaved, one
    iteration each in turn) and the kernel calls one iteration makes."""
    from darknumba.kernels import twins
    net, x, y = build(name)
    net.learning_rate = 1e-6
    wall = {t: [] for t in thresholds}
    cpu = {t: [] for t in thresholds}
    for k in range(iters + 2):
        for threshold in thresholds:
            twins.SERIAL_BELOW = threshold
            t, c = time.perf_counter(), time.process_time()
            net.train_datum(x, y)
            if k >= 2:                          # the first two compile or load every kernel
                wall[threshold].append(time.perf_counter() - t)
                cpu[threshold].append(time.process_time() - c)
    out = {}
    for threshold in thresholds:
        twins.SERIAL_BELOW = threshold
        with RegionCounter() as counted:
            net.train_datum(x, y)
        out[threshold] = {
            "iteration": statistics.median(wall[threshold]),
            "cpu": statistics.median(cpu[threshold]), "calls": sum(counted.parallel.values()),
            "regions": counted.regions(), "serial": sum(counted.serial_twin.values()),
            "top": counted.parallel.most_common(6)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=20, help="timed iterations per network and "
                                                          "threshold")
    ap.add_argument("--top", action="store_true", help="list the most called parallel kernels")
    args = ap.parse_args()

    import darknumba
    darknumba.configure()
    import numba

    from darknumba.kernels import twins
    after = twins.SERIAL_BELOW
    thresholds = (0, after)
    header("parallel region starts per training iteration (rnn-tiny, shapes5-classifier)",
           threads=numba.get_num_threads(),
           extra={"twins": f"before: every kernel parallel (SERIAL_BELOW = 0); after: "
                           f"kernels/twins.py's SERIAL_BELOW = {after} elements"})
    busy0, own0, t0 = busy_cpu_seconds(), time.process_time(), time.perf_counter()
    cost, cpu_cost, serial_call = launch_cost()
    print(f"region start: {cost * 1e6:.1f} us wall, {cpu_cost * 1e6:.1f} us process CPU (trivial "
          f"prange kernel on 16 floats, {numba.get_num_threads()} threads, less its serial "
          f"twin's call of {serial_call * 1e6:.1f} us)")
    print(f"{'network':<20}{'':7}{'iteration ms':>13}{'cpu ms':>8}{'par calls':>10}"
          f"{'regions':>8}{'serial':>8}{'est. ms':>8}{'share':>7}{'cpu share':>10}")
    for name in NETWORKS:
        runs = measure(name, args.iters, thresholds)
        for threshold, m in runs.items():
            est = m["regions"] * cost
            print(f"{name:<20}{'before' if threshold == 0 else 'after':7}"
                  f"{m['iteration'] * 1e3:13.2f}{m['cpu'] * 1e3:8.2f}{m['calls']:10d}"
                  f"{m['regions']:8d}{m['serial']:8d}{est * 1e3:8.2f}"
                  f"{est / m['iteration']:7.1%}{m['regions'] * cpu_cost / m['cpu']:10.1%}")
            if args.top:
                print("    " + ", ".join(f"{k} {n}" for k, n in m["top"]))
        before, after_ = runs[0], runs[after]
        moved = before["regions"] - after_["regions"]
        if moved > 0:
            # what a region start costs amid the real work: the time the serial twins saved
            in_context = (before["iteration"] - after_["iteration"]) / moved
            print(f"{name:<20}{'':7}region start in context: {in_context * 1e6:.1f} us at most "
                  f"(the iteration's saving over the {moved} regions the twins removed); at that "
                  f"cost before {before['regions'] * in_context / before['iteration']:.1%}, "
                  f"after {after_['regions'] * in_context / after_['iteration']:.1%}")
    twins.SERIAL_BELOW = after
    others = ((busy_cpu_seconds() - busy0) - (time.process_time() - own0)) / (
        time.perf_counter() - t0)
    print(f"# others: other processes kept {others:.2f} cores busy during the run"
          + ("; figures from a loaded machine are not for publishing" if others > 0.1 else ""))


if __name__ == "__main__":
    main()
