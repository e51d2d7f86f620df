"""darknumba's forward layer by layer beside onnxruntime's nodes for the same layers: where
darknumba loses (issue 31).

    python bench/layer_peers.py --cfg cfg/yolov3-tiny.cfg [--weights W] [--size 416]
                                [--threads 1] [--runs 3] [--reps 10] [--warmup 2] [--top 8]

One network, batch 1. bench/peers.py's preparation (random weights when there are none, the
ONNX file written by `darknumba export onnx`), then `runs` rounds, each a darknumba process and
an onnxruntime process one after the other (interleaved, so that a busy spell of the shared
machine hits both sides alike), each timing `reps` forwards after `warmup`:

- darknumba: each layer's forward timed on its own (wall, perf_counter; and process CPU time,
  process_time), as `darknumba bench` does, and the path its convolutions took;
- onnxruntime (all graph optimisations, sequential, intra_op threads = --threads):
  enable_profiling's per-node kernel times. The export names every node after its layer
  (`L<i>.<op>`, export/onnx.py); onnxruntime's fusions and its NCHWc rewrite rename nodes after
  a tensor or a node of the original graph (`leakyrelu_4_nchwc`), so a node is mapped to the
  layer of the longest prefix of its name that names an original node or tensor, else (a
  ReorderInput / ReorderOutput it inserts) to the layer of the node that feeds it, read from the
  optimised graph onnxruntime saves.

Each figure is the median or the minimum over all runs x reps. `--threads 1`
(NUMBA_NUM_THREADS, OMP_NUM_THREADS and OPENBLAS_NUM_THREADS = 1 for darknumba,
intra_op_num_threads = 1 for onnxruntime) takes the fight for the 2 cores out of the comparison.
On a busy machine a preempted rep's wall time grows: darknumba's CPU time per layer (process_time)
does not, but onnxruntime's profiler has wall times only, so the layers are compared by their
minimum wall times (the reps that ran undisturbed; a long node, past a scheduler time slice, is
rarely undisturbed on a loaded machine: its minimum then overstates it). The whole forward is
given in wall and CPU time for both sides.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402
import peers  # noqa: E402


# -- the two workers (each in its own process: `layer_peers.py --worker SIDE JOB`) -------------
def _input(job):
    import numpy as np
    return np.random.default_rng(0).uniform(0, 1, (1, job["c"], job["h"], job["w"])
                                            ).astype(np.float32)


def work_darknumba(job) -> dict:
    """Per layer and rep: wall ms and CPU ms; per rep: the whole forward's wall and CPU ms."""
    import darknumba as dn
    dn.configure()
    exact = {"exact": True, "winograd": False}.get(job.get("path"))
    net = dn.load_network(job["cfg"], job["weights"], batch=1, exact=exact)
    x = net._as_input(_input(job))
    wall, cpu, total, total_cpu = [], [], [], []
    for r in range(job["warmup"] + job["reps"]):
        lw, lc = [], []
        net.input, net.truth, net.train = x, None, False
        t0, c0 = time.perf_counter(), time.process_time()
        for i, l in enumerate(net.layers):
            net.index = i
            t, c = time.perf_counter(), time.process_time()
            l.forward(net)
            lw.append(1000 * (time.perf_counter() - t))
            lc.append(1000 * (time.process_time() - c))
            net.input = l.output
        if r >= job["warmup"]:
            total.append(1000 * (time.perf_counter() - t0))
            total_cpu.append(1000 * (time.process_time() - c0))
            wall.append(lw)
            cpu.append(lc)
    layers = [{"type": l.type, "path": l.forward_path(net), "gflop": float(l.bflops)}
              for l in net.layers]
    return {"layers": layers, "wall": wall, "cpu": cpu, "total": total, "total_cpu": total_cpu}


def _layer_of_names(model) -> dict:
    """{node name or tensor name of the exported graph: its layer index}."""
    where = {}
    for node in model.graph.node:
        if node.name.startswith("L") and "." in node.name:
            i = int(node.name[1:].split(".", 1)[0])
            where[node.name] = i
            for out in node.output:
                where[out] = i
    return where


def _lookup(name: str, where: dict):
    """The layer of the longest `_`-prefix of `name` that the exported graph knows."""
    parts = name.split("_")
    for k in range(len(parts), 0, -1):
        i = where.get("_".join(parts[:k]))
        if i is not None:
            return i
    return None


def node_layers(model, optimised) -> dict:
    """{optimised node name: layer index (None: not known)}."""
    where = _layer_of_names(model)
    produced, out = {}, {}
    for node in optimised.graph.node:          # topological order
        i = _lookup(node.name, where)
        if i is None:
            i = next((j for j in (_lookup(o, where) for o in node.output) if j is not None), None)
        if i is None:
            i = next((produced[t] for t in node.input if t in produced), None)
        out[node.name] = i
        for t in node.output:
            produced[t] = i
    return out


def work_onnxruntime(job) -> dict:
    """Per node name and rep: its kernel's wall ms (the profiler's); per rep the run's wall and
    CPU ms; the node -> layer map."""
    import onnx
    import onnxruntime as ort
    tmp = Path(job["tmp"])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = job["threads"]
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp / f"ort-profile-{os.getpid()}")
    so.optimized_model_filepath = str(tmp / f"ort-optimised-{os.getpid()}.onnx")
    so.log_severity_level = 3               # not its warning about saving an NCHWc graph
    sess = ort.InferenceSession(job["onnx"], so, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: _input(job)}
    total, total_cpu, starts = [], [], []
    for r in range(job["warmup"] + job["reps"]):
        t, c = time.perf_counter(), time.process_time()
        sess.run(None, feed)
        if r >= job["warmup"]:
            total.append(1000 * (time.perf_counter() - t))
            total_cpu.append(1000 * (time.process_time() - c))
    events = json.loads(Path(sess.end_profiling()).read_text())
    # the node events in order: one event per node per run, so rep k is the k-th of each name
    per_node: dict[str, list] = {}
    ops = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][:-len("_kernel_time")]
            per_node.setdefault(name, []).append(e["dur"] / 1000)
            ops[name] = e.get("args", {}).get("op_name", "?")
    nodes = {n: v[job["warmup"]:] for n, v in per_node.items()}
    layer = node_layers(onnx.load(job["onnx"], load_external_data=False),
                        onnx.load(so.optimized_model_filepath, load_external_data=False))
    return {"nodes": nodes, "ops": ops, "layer": {n: layer.get(n) for n in nodes},
            "total": total, "total_cpu": total_cpu, "version": ort.__version__}


WORKERS = {"darknumba": work_darknumba, "onnxruntime": work_onnxruntime}


# -- the parent ---------------------------------------------------------------------------------
def run_worker(side, job, env) -> dict:
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", side,
                          json.dumps(job)], capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        raise SystemExit(f"the {side} worker failed: {lines[-1] if lines else out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(xs):
    return benchlib.median(xs) if xs else 0.0


def table(dn_runs, ort_runs, top: int) -> list[str]:
    """The rows: one per darknumba layer, then the totals and the `top` biggest losses, by the
    minimum wall times (onnxruntime's profiler has no CPU time per node)."""
    layers = dn_runs[0]["layers"]
    n = len(layers)

    def stat(f, runs, key, i):
        return f([rep[i] for run in runs for rep in run[key]]) if runs else 0.0
    dn_wall = [stat(_median, dn_runs, "wall", i) for i in range(n)]
    dn_min = [stat(min, dn_runs, "wall", i) for i in range(n)]
    dn_cpu = [stat(_median, dn_runs, "cpu", i) for i in range(n)]
    # onnxruntime's profiler gives wall times only: its minimum over the reps is the figure
    # least touched by preemption (a rep that ran undisturbed), so the comparison is of minimums
    ort_ms, ort_min = [0.0] * (n + 1), [0.0] * (n + 1)
    ort_ops = [[] for _ in range(n + 1)]               # index n: nodes of no layer
    first = ort_runs[0]
    for name in first["nodes"]:
        times = [t for run in ort_runs for t in run["nodes"].get(name, [])]
        i = first["layer"].get(name)
        i = n if i is None or not 0 <= i < n else i
        ort_ms[i] += _median(times)
        ort_min[i] += min(times, default=0.0)
        ort_ops[i].append(first["ops"][name])
    rows = [f"{'layer':>5} {'type':<14}{'path':<12}{'GFLOP':>7}{'dn ms':>9}{'dn min':>9}"
            f"{'dn cpu':>9}{'ort ms':>9}{'ort min':>9}{'min dn-ort':>11}{'dn/ort':>8}  ort nodes"]

    def row(i, label, path, gflop, dn):
        # a space before every figure: a long one (a compile caught in a timing) widens its
        # column instead of running into the one before
        ratio = f"{dn[1] / ort_min[i]:7.2f}" if ort_min[i] > 0 else f"{'-':>7}"
        return (f"{label:<20}{path:<12}{gflop:7.3f} {dn[0]:8.3f} {dn[1]:8.3f} {dn[2]:8.3f}"
                f" {ort_ms[i]:8.3f} {ort_min[i]:8.3f} {dn[1] - ort_min[i]:10.3f} {ratio}")
    for i, l in enumerate(layers):
        rows.append(row(i, f"{i:5d} {l['type']:<14}", l["path"] or "-", l["gflop"],
                        (dn_wall[i], dn_min[i], dn_cpu[i])) + "  "
                    + ("+".join(ort_ops[i]) or "(none: fused into a neighbour or a no-op)"))
    if ort_ops[n]:
        rows.append(row(n, f"{'':5} {'(no layer)':<14}", "-", 0.0, (0.0, 0.0, 0.0)) + "  "
                    + "+".join(ort_ops[n]))
    for v in (ort_ms, ort_min):
        v.append(sum(v))
    rows.append(row(n + 1, f"{'':5} {'sum of rows':<14}", "-", sum(l["gflop"] for l in layers),
                    (sum(dn_wall), sum(dn_min), sum(dn_cpu))))
    rows.append("")
    fw = _median([t for run in dn_runs for t in run["total"]])
    fc = _median([t for run in dn_runs for t in run["total_cpu"]])
    ow = _median([t for run in ort_runs for t in run["total"]])
    oc = _median([t for run in ort_runs for t in run["total_cpu"]])
    rows.append(f"whole forward, median: darknumba {fw:.2f} ms wall, {fc:.2f} ms CPU; "
                f"onnxruntime {first['version']} (profiling on) {ow:.2f} ms wall, {oc:.2f} ms CPU; "
                f"darknumba / onnxruntime: {fw / ow:.2f} wall, {fc / oc:.2f} CPU")
    losses = sorted(range(n), key=lambda i: dn_min[i] - ort_min[i], reverse=True)[:top]
    rows.append("biggest losses (dn min - ort min, ms): " + ", ".join(
        f"layer {i} {layers[i]['type']} {layers[i]['path'] or '-'} "
        f"+{dn_min[i] - ort_min[i]:.2f}" for i in losses if dn_min[i] > ort_min[i]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cfg", help="the network's .cfg")
    ap.add_argument("--weights", default=None, help="its weights (default: weights/<cfg name>"
                    ".weights, else random weights)")
    ap.add_argument("--size", type=int, default=0, help="input width = height (0: the cfg's)")
    ap.add_argument("--threads", type=int, default=2, help="threads of each side (1: the "
                    "steadiest comparison on a shared machine)")
    ap.add_argument("--runs", type=int, default=3, help="rounds of one process per side")
    ap.add_argument("--reps", type=int, default=10, help="timed forwards per process")
    ap.add_argument("--warmup", type=int, default=2, help="untimed forwards per process first")
    ap.add_argument("--top", type=int, default=8, help="how many biggest losses to list")
    ap.add_argument("--path", choices=("default", "exact", "winograd"), default="default",
                    help="darknumba's convolutions: as the environment says (DARKNUMBA_EXACT), "
                         "im2col + GEMM everywhere, or Winograd where the planner takes it "
                         "(as bench/peers.py --exact / --winograd)")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker[0]](json.loads(args.worker[1]))))
        return
    if not args.cfg:
        ap.error("--cfg is required")
    benchlib.header(f"darknumba's layers beside onnxruntime's nodes, batch 1, {args.threads} "
                    f"thread(s) each", threads=args.threads)
    with tempfile.TemporaryDirectory(prefix="layer-peers-") as tmp:
        tmp = Path(tmp)
        info = peers.prepare(Path(args.cfg), SimpleNamespace(
            size=args.size, weights=args.weights, peers=("onnxruntime",), modes=("infer",)), tmp)
        if not info["onnx"]:
            raise SystemExit("no ONNX file: the export failed (see above)")
        job = {"cfg": info["cfg"], "weights": info["weights"], "onnx": info["onnx"],
               "c": info["c"], "h": info["h"], "w": info["w"], "threads": args.threads,
               "reps": args.reps, "warmup": args.warmup, "tmp": str(tmp),
               "path": {"default": None}.get(args.path, args.path)}
        t = str(args.threads)
        env_dn = dict(peers.CLEAN_ENV, NUMBA_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t,
                      OMP_NUM_THREADS=t)
        env_ort = dict(peers.CLEAN_ENV, OMP_NUM_THREADS=t)
        dn_runs, ort_runs = [], []
        for _ in range(args.runs):
            dn_runs.append(run_worker("darknumba", job, env_dn))
            ort_runs.append(run_worker("onnxruntime", job, env_ort))
    print(f"# network: {info['name']}, {info['dialect']}, GFLOP {info['gflop']:.3f}, weights "
          + ("RANDOM (seeded)" if info["random"] else info["weights"]))
    print(f"# {args.runs} runs x {args.reps} forwards per side, interleaved; ms: median and "
          "minimum wall time (darknumba: the layer's forward; onnxruntime: its profiler's "
          "times of the nodes mapped to the layer), darknumba's median process CPU time over "
          "the layer (dn cpu); the differences and ratios compare the minimums")
    print(f"## per layer, {args.threads} thread(s)")
    print("\n".join(table(dn_runs, ort_runs, args.top)))


if __name__ == "__main__":
    main()
