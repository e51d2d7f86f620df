"""Peak resident memory (VmHWM) of darknumba's training step, as bench/peers.py's training
rows run it (bench/peer_workers.work_darknumba: net.train_datum at batch 8, the cfg's size,
its yolo truths), each in a fresh process, with what the network holds: its layers' buffers
by name, the shared scratch (Scratch.parts' arena, the workspace at its start) and the rest
(the process: Python, numpy, numba, OpenBLAS, the input).

    python bench/train_rss.py [--cfg cfg/yolov3-tiny.cfg,cfg/yolov4-tiny.cfg] [--runs 3]
                              [--batch 8] [--steps 2]

Resident memory does not depend on the machine's load (unlike times).
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import benchlib  # noqa: E402


def child(cfg: str, batch: int, steps: int) -> dict:
    import darknumba as dn
    dn.configure()
    import numpy as np
    from darknet_twin import truths
    weights = ROOT / "weights" / (Path(cfg).stem + ".weights")
    net = dn.load_network(cfg, str(weights) if weights.exists() else None, batch=batch)
    x = np.random.default_rng(0).uniform(0, 1, (batch, net.c, net.h, net.w)).astype(np.float32)
    net.learning_rate, net.subdivisions = 1e-6, 1
    heads = [l for l in net.layers if l.type == "yolo"]
    per = getattr(heads[0], "truth_size", 5)
    truth = np.zeros((batch, net.truths), np.float32)
    for i, boxes in enumerate(truths(batch, heads[0].classes)):
        for k, box in enumerate(boxes):
            truth[i, per * k:per * k + 5] = box
    for _ in range(steps):
        net.train_datum(x, truth)
    held = {}
    for l in net.layers:
        for name, v in vars(l).items():
            if isinstance(v, np.ndarray) and v.base is None:
                held[name] = held.get(name, 0) + v.nbytes
    mb = 1 << 20
    scratch = getattr(net.scratch, "nbytes", None)    # before 272916d: named buffers only
    if scratch is None:
        scratch = sum(b.nbytes for b in net.scratch._bufs.values()) + net.workspace.nbytes
    big = {k: round(v / mb, 1) for k, v in sorted(held.items(), key=lambda kv: -kv[1])
           if v >= mb}
    return {"cfg": Path(cfg).stem, "peak_mb": round(benchlib.peak_rss_mb(), 1),
            "layers_mb": big, "scratch_mb": round(scratch / mb, 1),
            "weights": weights.exists()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", default="cfg/yolov3-tiny.cfg,cfg/yolov4-tiny.cfg")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.batch, args.steps)))
        return
    benchlib.header(f"peak RSS of a training step, batch {args.batch}, fresh processes")
    for cfg in args.cfg.split(","):
        peaks = []
        for _ in range(args.runs):
            cmd = [sys.executable, __file__, "--child", cfg, "--batch", str(args.batch),
                   "--steps", str(args.steps)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            peaks.append(r["peak_mb"])
        held = sum(r["layers_mb"].values())
        print(f"{r['cfg']:<14} peak RSS median {statistics.median(peaks):7.1f} MB "
              f"(runs {', '.join(f'{p:.1f}' for p in peaks)}); layers {held:.0f} MB "
              f"{r['layers_mb']}, scratch {r['scratch_mb']} MB"
              + ("" if r["weights"] else " (random weights)"))


if __name__ == "__main__":
    main()
