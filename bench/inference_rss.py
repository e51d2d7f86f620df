"""Memory of a network at inference, batch 1: what the build counts against the memory limit
and the process's resident memory after a few forward passes, for a network built for
inference (the default at a given batch since issue 32: no deltas, weight gradients or batch
norm's kept input) and one built for training (train=True: every buffer, as every build
allocated before). Each mode runs in its own process.

    python bench/inference_rss.py [--cfg cfg/yolov4.cfg] [--reps 3] [--size 416]
"""
import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import benchlib  # noqa: E402


def rss_mib() -> float:
    """Resident memory now (VmRSS), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(cfg: str, train: bool, reps: int, size: int | None) -> dict:
    import numpy as np

    import darknumba as dn
    dn.configure()
    net = dn.load_network(cfg, None, batch=1, train=train)
    if size:
        net.resize(size, size)
    built = rss_mib()
    x = np.random.default_rng(0).random(net.inputs, dtype=np.float32)
    for _ in range(reps):
        net.predict(x)
    return {"cfg": Path(cfg).name, "mode": "training" if train else "inference",
            "w": net.w, "counted_gib": round(net.built_bytes / (1 << 30), 3),
            "rss_built_mib": round(built), "rss_after_mib": round(rss_mib()),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", default=str(ROOT / "cfg" / "yolov4.cfg"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--size", type=int, default=None, help="resize the input to SIZE x SIZE")
    ap.add_argument("--child", choices=["train", "infer"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.cfg, args.child == "train", args.reps, args.size)))
        return
    benchlib.header("memory at inference, batch 1: a training build and an inference build")
    print("## memory (MiB; counted: what the build counts against the limit, GiB)")
    print(f"{'mode':<16} {'cfg':<22} {'size':>5} {'counted':>8} {'rss_built':>10} "
          f"{'rss_after':>10} {'peak_rss':>9}")
    for mode in ("train", "infer"):
        cmd = [sys.executable, __file__, "--cfg", args.cfg, "--reps", str(args.reps),
               "--child", mode] + (["--size", str(args.size)] if args.size else [])
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{r['mode']:<16} {r['cfg']:<22} {r['w']:>5} {r['counted_gib']:>8.3f} "
              f"{r['rss_built_mib']:>10} {r['rss_after_mib']:>10} {r['peak_rss_mib']:>9}")


if __name__ == "__main__":
    main()
