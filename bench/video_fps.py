"""Frames per second of detection on a video file: the `darknumba detect VIDEO --out` command
and the Python API (Detector.iter_video), each run in its own process, runs interleaved.

    pip install -e '.[video]'
    python bench/video_fps.py [--cfg cfg/yolov3-tiny.cfg] [--weights weights/yolov3-tiny.weights]
                              [--frames 90] [--width 640] [--height 360] [--batch 1]
                              [--runs 3] [--threads 2]

A synthetic video first (PyAV, H.264 in .mp4 at 30 fps: coloured discs and boxes moving over a
textured background, seeded), then `for run in range(runs): for way in ways:` one process each:
  cli       `darknumba detect CFG WEIGHTS VIDEO --out OUT.mp4 --batch B`: its own summary line
            (`N frames in X s (Y frames/s)`: decode, letterbox, forward, NMS, draw, encode;
            start-up and model loading excluded) and frames / the command's wall time
            (start-up included);
  api-out   Detector(cfg, weights, batch=B).iter_video(VIDEO, OUT.mp4), every frame drawn and
            encoded, timed from the first frame asked to the last one written;
  api       the same without an output video (decode, detect, no drawing or encoding).
The table gives each run's frames/s and their median. Numba's cache is warm after the first
process (run `darknumba warmup` or any detect first so run 1 does not include a compile).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402

ROOT = HERE.parent
WAYS = ("cli", "api-out", "api")
SUMMARY = re.compile(r"(\d+) frames in ([0-9.]+) s \(([0-9.]+) frames/s\)")


def make_video(path: Path, frames: int, width: int, height: int, fps: int = 30, seed: int = 0):
    """A short H.264 video of shapes moving over a textured background."""
    import av
    import numpy as np
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    background = (96 + 40 * np.sin(xx / 23.0)[..., None] * np.cos(yy / 17.0)[..., None]
                  + rng.normal(0, 8, (height, width, 3))).clip(0, 255)
    shapes = [dict(kind=k, r=rng.uniform(20, 60), pos=rng.uniform([0, 0], [width, height]),
                   vel=rng.uniform(-6, 6, 2), color=rng.uniform(40, 255, 3))
              for k in ("disc", "box", "disc", "box", "disc")]
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for _ in range(frames):
            img = background.copy()
            for s in shapes:
                s["pos"] = (s["pos"] + s["vel"]) % [width, height]
                cx, cy = s["pos"]
                if s["kind"] == "disc":
                    m = (xx - cx) ** 2 + (yy - cy) ** 2 < s["r"] ** 2
                else:
                    m = (abs(xx - cx) < s["r"]) & (abs(yy - cy) < s["r"] * 0.7)
                img[m] = s["color"]
            frame = av.VideoFrame.from_ndarray(img.astype(np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


API_CHILD = """
import json, sys, time
job = json.loads(sys.argv[1])
from darknumba import Detector
det = Detector(job["cfg"], job["weights"], batch=job["batch"])
t = time.perf_counter()
n = sum(1 for _ in det.iter_video(job["video"], job["out"]))
print(json.dumps({"frames": n, "seconds": time.perf_counter() - t}))
"""


def run_way(way, a, video: Path, tmp: Path, env) -> dict:
    """{'fps': frames/s of the loop, 'wall_fps': frames / process wall time}."""
    out = tmp / f"out-{way}.mp4"
    if way == "cli":
        cli = Path(sys.executable).with_name("darknumba")
        cmd = [str(cli) if cli.exists() else "darknumba", "detect", a.cfg, a.weights, str(video),
               "--out", str(out), "--batch", str(a.batch)]
    else:
        job = {"cfg": a.cfg, "weights": a.weights, "video": str(video), "batch": a.batch,
               "out": str(out) if way == "api-out" else None}
        cmd = [sys.executable, "-c", API_CHILD, json.dumps(job)]
    t = time.perf_counter()
    with benchlib.OtherLoad() as load:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{way}: `{' '.join(cmd[:4])} ...` failed:\n{r.stderr[-3000:]}")
    if way == "cli":
        m = SUMMARY.search(r.stderr)
        if not m:
            raise SystemExit(f"cli: no `N frames in X s` line in its output:\n{r.stderr[-2000:]}")
        frames, seconds = int(m.group(1)), float(m.group(2))
    else:
        d = json.loads(r.stdout.strip().splitlines()[-1])
        frames, seconds = d["frames"], d["seconds"]
    if frames != a.frames:
        raise SystemExit(f"{way}: {frames} frames done, the video has {a.frames}")
    return {"fps": frames / seconds, "wall_fps": frames / wall, "others": load.cores}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cfg", default=str(ROOT / "cfg" / "yolov3-tiny.cfg"))
    ap.add_argument("--weights", default=None, help="default: weights/<cfg name>.weights")
    ap.add_argument("--frames", type=int, default=90)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--height", type=int, default=360)
    ap.add_argument("--batch", type=int, default=1, help="frames per forward pass")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ways", default=",".join(WAYS), help="cli, api-out, api (comma list)")
    ap.add_argument("--timeout", type=float, default=1800)
    a = ap.parse_args()
    a.weights = a.weights or str(ROOT / "weights" / f"{Path(a.cfg).stem}.weights")
    if not os.path.exists(a.weights):
        raise SystemExit(f"{a.weights} not found: `darknumba weights fetch {Path(a.cfg).stem}` "
                         f"or give --weights")
    ways = [w for w in a.ways.split(",") if w]
    if set(ways) - set(WAYS):
        ap.error(f"--ways: choose from {', '.join(WAYS)}")
    benchlib.header("bench/video_fps.py: detection on a video, frames/s", threads=a.threads,
                    extra={"video": f"synthetic, {a.frames} frames {a.width}x{a.height} at 30 fps "
                                    f"(H.264); {Path(a.cfg).name}, batch {a.batch}, {a.runs} runs"})
    env = dict(os.environ, NUMBA_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    res = {w: [] for w in ways}
    with tempfile.TemporaryDirectory(prefix="darknumba-video-") as tmp:
        tmp = Path(tmp)
        video = tmp / "shapes.mp4"
        make_video(video, a.frames, a.width, a.height)
        for r in range(a.runs):
            for w in ways:
                res[w].append(run_way(w, a, video, tmp, env))
                print(f"# run {r + 1} {w}: {res[w][-1]['fps']:.2f} frames/s "
                      f"({res[w][-1]['wall_fps']:.2f} over the process's wall time); others kept "
                      f"{res[w][-1]['others']:.2f} cores busy", flush=True)
    print(f"\n## {Path(a.cfg).stem}, {a.frames} frames {a.width}x{a.height}, batch {a.batch}: "
          f"frames/s, {a.runs} runs interleaved")
    print(f"{'way':<10}" + "".join(f"{'run ' + str(i + 1):>9}" for i in range(a.runs))
          + f"{'median':>9}{'wall fps':>10}")
    for w in ways:
        fps = [v["fps"] for v in res[w]]
        print(f"{w:<10}" + "".join(f"{v:9.2f}" for v in fps) + f"{benchlib.median(fps):9.2f}"
              f"{benchlib.median([v['wall_fps'] for v in res[w]]):10.2f}")
    print("frames/s: the detection loop (decode to last frame written); wall fps: frames / the "
          "whole process's time (start-up and model loading included)")
    busiest = max(v["others"] for runs in res.values() for v in runs)
    if busiest > 0.1:
        print(f"WARNING: other processes kept up to {busiest:.2f} cores busy during these runs: "
              f"not a figure to publish")


if __name__ == "__main__":
    main()
