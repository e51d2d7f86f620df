"""darknumba against its peers on the same networks, weights and inputs, each peer in its own
process, runs interleaved, on this CPU.

    pip install -e '.[bench,onnx]' openvino
    python bench/peers.py [--cfg cfg/yolov3-tiny.cfg,cfg/yolov4-tiny.cfg,cfg/yolov3.cfg]
                          [--size 416] [--modes infer,train] [--runs 5] [--iters 10]
                          [--threads 2] [--train-batch 8] [--peers ...] [--openvino-default]
                          [--import-numpy-first] [--exact | --winograd] [--darknet PATH]

For each network, once: a darknumba process writes random weights if weights/<cfg name>.weights
is missing (said in the output: fine for timing) and its outputs on a fixed input; `darknumba
export onnx` (the CLI, in a subprocess) writes the ONNX file of the same cfg + weights. Then
`for run in range(runs): for peer in peers:` one fresh process per peer, which loads its model,
warms up, times `iters` iterations and reports their median and its own peak RSS (VmHWM). The
table gives each run's median, the median of the runs' medians, images/s, peak RSS and
darknumba / peer (time: < 1 darknumba is faster). Every peer starts from the environment this
script found (the parent imports neither darknumba nor numpy before the runs).

Peers at inference (batch 1): darknumba (its default path: Winograd for the large 3x3
convolutions; --exact: im2col + GEMM everywhere); OpenCV DNN (reads the .cfg/.weights itself);
PyTorch (bench/darknet_twin.py: its own .cfg and .weights reader, no darknumba import; batch
norm folded, channels-last, inference_mode); onnxruntime (ORT_ENABLE_ALL, intra_op threads =
--threads, inter_op 1, sequential); OpenVINO (CPU, PERFORMANCE_HINT=LATENCY,
INFERENCE_NUM_THREADS=--threads, INFERENCE_PRECISION_HINT=f32; --openvino-default adds a column
at OpenVINO's own default precision, which is bf16 on CPUs with AVX512_BF16 or AMX: not
float32, labelled so); C darknet with --darknet (its `detector test` timing line). The outputs
of PyTorch, onnxruntime and OpenVINO are compared with darknumba's (largest difference relative
to each head's largest value; the `check` column); OpenCV DNN returns decoded boxes, not checked.

Training (batch --train-batch, default 8): darknumba's `net.train_datum` (forward, Darknet's
yolo loss, backward, SGD update, learning rate 1e-6) against PyTorch: the same layers with
nn.BatchNorm2d in train mode, channels-last, float32, no gradient for the input, SGD with
momentum 0.9 and weight decay 5e-4, and Darknet's yolo loss written in torch ops
(darknet_twin.YoloLoss: logistic cross-entropy on x, y, objectness and classes, squared error
on w, h, the ignore_thresh rule from a dense IoU of every predicted box with the truths; mse
coordinates, also where a cfg asks AlexeyAB's ciou), on the same fixed truth boxes.

Why peers.py printed 1.59x PyTorch's images/s for yolov3-tiny's training step where an
independent harness found 1.06-1.11x (issue 31), as far as 2026-12-03's checks go:
- Not the model. Up to 1f89e4a the PyTorch process also imported darknumba and built its
  network (for the weights; at inference for a check), and trained on sum(y^2) over every head
  output instead of Darknet's yolo loss; but its model was the same work as a clean one (batch
  norm in train mode, channels-last, float32, no gradient for the input). Side by side
  (yolov3-tiny, batch 8, 416, a machine loaded ~12, CPU seconds per step): the old process
  5.6-6.1, a clean twin with Darknet's loss 5.5-5.9, with sum(y^2) 5.0-6.5, with darknumba
  imported 5.9-6.4: within the noise. Darknumba in the process did add 60-170 MB to PyTorch's
  peak RSS (1524-1587 against 1416-1462 MB).
- The machine. PyTorch's OpenMP threads (libgomp, OMP_WAIT_POLICY unset) spin at each of the
  hundreds of barriers of a step, so another busy process on the 2 cores costs PyTorch far more
  than darknumba, which caps its threads' spin (thread_policy: GOMP_SPINCOUNT=3000). With others
  keeping ~1.9 of the 2 cores busy (2026-12-03, to show the mechanism, not a figure), shapes-tiny
  at 96, a batch-2 training step: PyTorch 5.8 s, PyTorch with OMP_WAIT_POLICY=PASSIVE 0.042 s,
  darknumba 0.63 s (inference 825 / 4.7 / 119 ms). Any background work during a run inflates
  darknumba's lead over PyTorch's default settings; the `others` column now shows how many cores
  other processes kept busy during each peer's runs, and a warning marks a table above 0.1.
  `--peers darknumba,torch,torch-passive,torch-legacy` measures both effects on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402

# the environment as this script found it: every peer's process starts from it
CLEAN_ENV = dict(os.environ)
ROOT = HERE.parent
INFER_PEERS = ("darknumba", "opencv", "torch", "torch-passive", "onnxruntime", "openvino",
               "openvino-default", "darknet")
TRAIN_PEERS = ("darknumba", "torch", "torch-passive", "torch-legacy")
# peers that are another peer's worker in another environment
WORKER = {"torch-passive": "torch"}
PEER_ENV = {"torch-passive": {"OMP_WAIT_POLICY": "PASSIVE"}}
MODULES = {"opencv": "cv2", "torch": "torch", "torch-legacy": "torch", "torch-passive": "torch",
           "onnxruntime": "onnxruntime", "openvino": "openvino", "openvino-default": "openvino"}
LABELS = {"openvino": "openvino f32", "openvino-default": "openvino dflt"}
OPTIONAL = ("torch-passive", "torch-legacy", "openvino-default")
CHECKED = ("torch", "torch-passive", "onnxruntime", "openvino", "openvino-default")
TOLERANCE = 1e-3            # relative to a head's largest value; float32 peers must meet it


def available(peer) -> bool:
    import importlib.util
    mod = MODULES.get(peer)
    return mod is None or importlib.util.find_spec(mod) is not None     # found, not imported


def run_child(peer, job, env=None, timeout=3600) -> dict:
    worker = WORKER.get(peer, peer)
    with benchlib.OtherLoad() as load:
        out = subprocess.run([sys.executable, str(HERE / "peer_workers.py"), worker, json.dumps(job)],
                             capture_output=True, text=True, env=env or CLEAN_ENV, timeout=timeout)
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {out.returncode}"}
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["others"] = load.cores
    return res


def sized_cfg(cfg: Path, size: int, out: Path) -> Path:
    """A copy of `cfg` with [net] batch=1, subdivisions=1 and width = height = size (0: keep)."""
    lines, in_net = [], False
    for ln in cfg.read_text().splitlines():
        s = ln.strip()
        if s.startswith("["):
            in_net = s in ("[net]", "[network]")
        key = s.split("=", 1)[0].strip() if in_net and "=" in s and not s.startswith("#") else ""
        if key in ("batch", "subdivisions"):
            ln = f"{key}=1"
        elif key in ("width", "height") and size:
            ln = f"{key}={size}"
        lines.append(ln)
    out.write_text("\n".join(lines) + "\n")
    return out


def prepare(cfg: Path, args, tmp: Path) -> dict:
    """Sized cfg, weights (random ones written by darknumba when there are none), darknumba's
    reference outputs, the ONNX export (through the CLI)."""
    net_cfg = sized_cfg(cfg, args.size, tmp / f"{cfg.stem}.cfg")
    weights = args.weights or str(ROOT / "weights" / f"{cfg.stem}.weights")
    job = {"cfg": str(net_cfg), "weights": weights if os.path.exists(weights) else None,
           "random_weights": str(tmp / f"{cfg.stem}-random.weights"),
           "heads_out": str(tmp / f"{cfg.stem}-darknumba.npz")}
    info = run_child("prepare", job)
    if "error" in info:
        raise SystemExit(f"{cfg}: darknumba could not load it: {info['error']}")
    info.update(cfg=str(net_cfg), name=cfg.stem + (f" at {args.size}" if args.size else ""),
                random=job["weights"] is None, reference=job["heads_out"], onnx=None)
    wants_onnx = any(p in args.peers for p in ("onnxruntime", "openvino", "openvino-default"))
    if "infer" in args.modes and wants_onnx:
        onnx = tmp / f"{cfg.stem}.onnx"
        cli = Path(sys.executable).with_name("darknumba")
        cmd = [str(cli) if cli.exists() else "darknumba", "export", "onnx", str(net_cfg),
               info["weights"], str(onnx), "--no-check"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=CLEAN_ENV)
        if r.returncode == 0:
            info["onnx"] = str(onnx)
        else:
            print(f"# {cfg.stem}: `{' '.join(cmd)}` failed, no onnxruntime / OpenVINO: "
                  f"{(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return info


def check(reference: str, heads: str) -> float:
    """The largest difference of a peer's heads from darknumba's, relative to each head's
    largest value (random weights give raw w, h of ~1e5)."""
    import numpy as np
    a, b = np.load(reference), np.load(heads)
    if len(a.files) != len(b.files):
        return float("inf")
    worst = 0.0
    for k in a.files:
        x, y = a[k], b[k]
        if x.size != y.size:
            return float("inf")
        worst = max(worst, float(np.abs(x.ravel() - y.ravel()).max()) / max(1.0, float(np.abs(x).max())))
    return worst


def bench_mode(info, mode, args, tmp) -> dict:
    """One table: every peer `runs` times, interleaved. Returns {peer: median of medians}."""
    batch = 1 if mode == "infer" else args.train_batch
    peers = [p for p in (INFER_PEERS if mode == "infer" else TRAIN_PEERS) if p in args.peers]
    peers = [p for p in peers if available(p) and (p != "darknet" or args.darknet)
             and (info["onnx"] or p not in ("onnxruntime", "openvino", "openvino-default"))]
    base = {"cfg": info["cfg"], "weights": info["weights"], "onnx": info["onnx"], "mode": mode,
            "batch": batch, "threads": args.threads, "iters": args.iters, "warmup": args.warmup,
            "dialect": info["dialect"], "c": info["c"], "h": info["h"], "w": info["w"],
            "darknet": args.darknet, "path": args.path, "import_numpy_first": args.import_numpy_first}
    res = {p: {"medians": [], "mins": [], "rss": 0.0, "error": None, "check": None, "detail": "",
               "others": []} for p in peers}
    for r in range(args.runs):
        for p in peers:
            job = dict(base)
            if r == 0 and mode == "infer" and p in CHECKED:
                job["heads_out"] = str(tmp / f"heads-{p}.npz")
            env = dict(CLEAN_ENV, **PEER_ENV.get(p, {}))
            if p == "darknumba":        # numba's and OpenBLAS's pools at --threads
                env.update(NUMBA_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
            out = run_child(p, job, env)
            if "error" in out:
                res[p]["error"] = out["error"]
                continue
            res[p]["medians"].append(benchlib.median(out["times"]) * 1000)
            res[p]["mins"].append(min(out["times"]) * 1000)
            res[p]["rss"] = max(res[p]["rss"], out["rss_mb"])
            res[p]["others"].append(out["others"])
            res[p]["detail"] = out.get("detail", "")
            if p not in ("darknumba", "darknet", "torch-legacy") and out.get("darknumba_imported"):
                res[p]["detail"] += " (darknumba WAS imported in this peer's process)"
            if job.get("heads_out"):
                res[p]["check"] = check(info["reference"], job["heads_out"])
    print_table(info, mode, batch, peers, res, args)
    return {p: (benchlib.median(v["medians"]), v["rss"]) for p, v in res.items() if v["medians"]}


def print_table(info, mode, batch, peers, res, args):
    what = "inference, batch 1" if mode == "infer" else f"training step, batch {batch}"
    print(f"\n## {info['name']}, {what}: ms per {'image' if mode == 'infer' else 'step'}, "
          f"median of {args.iters} iterations per run, {args.runs} runs interleaved"
          + ("; RANDOM weights (official ones not here: fine for timing)" if info["random"] else ""))
    runs = "".join(f"{'run ' + str(i + 1):>9}" for i in range(args.runs))
    print(f"{'peer':<15}{runs}{'median':>9}{'min':>9}{'images/s':>10}{'peak RSS':>10}"
          f"{'dn/peer':>9}{'check':>9}{'others':>8}  detail")
    ours = res.get("darknumba", {}).get("medians")
    ours = benchlib.median(ours) if ours else float("nan")
    for p in peers:
        v = res[p]
        label = LABELS.get(p, p)
        if not v["medians"]:
            print(f"{label:<15}failed: {v['error']}")
            continue
        med = benchlib.median(v["medians"])
        cells = "".join(benchlib.fmt(m) for m in v["medians"])
        cells += " " * 9 * (args.runs - len(v["medians"]))
        chk = v["check"]
        chk_s = f"{chk:9.1e}" if chk is not None else f"{'-':>9}"
        bad = chk is not None and p != "openvino-default" and not chk <= TOLERANCE
        print(f"{label:<15}{cells}{med:9.1f}{min(v['mins']):9.1f}{batch * 1000 / med:10.2f}"
              f"{v['rss']:9.0f}M{ours / med:9.2f}{chk_s}{max(v['others']):8.2f}  {v['detail']}"
              + ("  OUTPUTS DIFFER: not the same network" if bad else ""))
    print("dn/peer = darknumba's median / the peer's (< 1: darknumba is faster; its inverse is "
          "darknumba's images/s over the peer's); check = largest output difference from "
          "darknumba's / the head's largest value; others = the most cores other processes kept "
          "busy during one of the peer's runs (on average over the run)")
    busiest = max((max(v["others"]) for v in res.values() if v["others"]), default=0.0)
    if busiest > 0.1:
        print(f"WARNING: other processes kept up to {busiest:.2f} cores busy during these runs: "
              f"not a figure to publish (PyTorch's spinning OpenMP threads lose far more to a "
              f"busy neighbour than darknumba's)")


def print_summary(summary):
    print("\n## summary: darknumba's median time / each peer's (< 1: darknumba is faster); "
          "peak RSS darknumba / peer")
    for (name, mode), meds in summary.items():
        ours = meds.get("darknumba")
        if not ours:
            continue
        cells = [f"{LABELS.get(p, p)} {ours[0] / t:.2f} (RSS {ours[1] / rss:.2f})"
                 for p, (t, rss) in meds.items() if p != "darknumba" and rss == rss and rss > 0]
        speed = (f"; darknumba {meds['torch'][0] / ours[0]:.2f}x PyTorch's images/s"
                 if mode == "train" and "torch" in meds else "")
        print(f"  {name:<20}{mode:<6}{ours[0]:9.1f} ms  " + "  ".join(cells) + speed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cfg", action="append", default=None,
                    help="networks, repeated or a comma list (default: yolov3-tiny, yolov4-tiny, "
                         "yolov3)")
    ap.add_argument("--weights", default=None, help="with one --cfg: its weights (default: "
                    "weights/<cfg name>.weights, else random weights shared by every peer)")
    ap.add_argument("--size", type=int, default=416, help="input width and height (0: the cfg's)")
    ap.add_argument("--modes", default="infer,train", help="infer, train or both")
    ap.add_argument("--runs", "--rounds", type=int, default=5,
                    help="interleaved runs (a process per peer each; --rounds: the old name)")
    ap.add_argument("--iters", "--reps", type=int, default=10,
                    help="timed iterations per process (--reps: the old name)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    ap.add_argument("--threads", type=int, default=2, help="threads of every peer")
    ap.add_argument("--train-batch", type=int, default=8)
    ap.add_argument("--peers", default=",".join(p for p in INFER_PEERS if p not in OPTIONAL),
                    help="which peers, a comma list (default: all but "
                         f"{', '.join(OPTIONAL)}). torch-passive: PyTorch with "
                         "OMP_WAIT_POLICY=PASSIVE; torch-legacy: PyTorch's training as this "
                         "script ran it up to 1f89e4a (darknumba in its process, sum(y^2) loss)")
    ap.add_argument("--openvino-default", action="store_true",
                    help="also OpenVINO at its default precision (bf16 where the CPU has it)")
    path = ap.add_mutually_exclusive_group()
    path.add_argument("--exact", dest="path", action="store_const", const="exact",
                      help="darknumba with im2col + GEMM for every convolution")
    path.add_argument("--winograd", dest="path", action="store_const", const="winograd",
                      help="darknumba with Winograd for the large 3x3 convolutions, whatever "
                           "the environment")
    ap.add_argument("--import-numpy-first", action="store_true",
                    help="the darknumba process imports numpy before darknumba")
    ap.add_argument("--darknet", default=None, help="a built C darknet executable")
    args = ap.parse_args()
    default = ",".join(str(ROOT / "cfg" / f"{n}.cfg") for n in ("yolov3-tiny", "yolov4-tiny", "yolov3"))
    cfgs = [Path(c) for a in (args.cfg or [default]) for c in a.split(",") if c]
    if args.weights and len(cfgs) > 1:
        ap.error("--weights goes with a single --cfg")
    args.modes = [m for m in args.modes.split(",") if m]
    args.peers = [p for p in args.peers.split(",") if p] + ["openvino-default"] * args.openvino_default
    benchlib.header("bench/peers.py: darknumba against its peers", threads=args.threads,
                    extra={"peers": ", ".join(p for p in args.peers if available(p)
                                             and (p != "darknet" or args.darknet)),
                           "settings": f"size {args.size or 'of the cfg'}, runs {args.runs}, "
                                       f"iters {args.iters}, warmup {args.warmup}, "
                                       f"train batch {args.train_batch}, darknumba path "
                                       f"{args.path or 'default'}"
                                       + (", numpy imported first" if args.import_numpy_first else "")})
    summary = {}
    with tempfile.TemporaryDirectory(prefix="darknumba-peers-") as tmp:
        for cfg in cfgs:
            d = Path(tmp) / cfg.stem
            d.mkdir()
            info = prepare(cfg, args, d)
            print(f"\n# {info['name']}: {info['gflop']:.2f} GFLOP per image, dialect "
                  f"{info['dialect']}, weights {'RANDOM (seeded)' if info['random'] else info['weights']}"
                  + (f", ONNX by `darknumba export onnx`" if info["onnx"] else ""))
            for mode in args.modes:
                summary[(info["name"], mode)] = bench_mode(info, mode, args, d)
    print_summary(summary)


if __name__ == "__main__":
    main()
