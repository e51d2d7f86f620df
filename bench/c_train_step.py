"""C darknet's training step time on this CPU, given a C build, beside darknumba's on the same
cfg, data and batch (--darknumba).

    python bench/c_train_step.py --darknet DIR [--dialect pjreddie|alexeyab]
                                 [--cfg cfg/yolov3-tiny.cfg] [--batch 8] [--size 416]
                                 [--iters 6] [--runs 3] [--threads 2] [--weights FILE]
                                 [--darknumba] [--images 64]

DIR is a darknet tree with its `darknet` executable built (pjreddie: `make`, OPENMP=1 for
threads; AlexeyAB: `make GPU=0 OPENCV=0 OPENMP=1 AVX=1`); DARKNET_DIR is the default. Without
one the script says so and exits (status 0: nothing measured).

What it runs: a synthetic data set (`darknumba data shapes`, --images images, 3 classes); the
cfg rewritten for it: [net] batch=--batch subdivisions=1 width=height=--size
max_batches=--iters, each [yolo] classes=3 random=0 (no multi-scale resizing) and the
convolution before it filters=(5+3) x its anchors; then `./darknet detector train DATA CFG
[WEIGHTS]` (AlexeyAB: with -dont_show), OMP_NUM_THREADS=--threads, from DIR. The time of a step
is darknet's own per-iteration line (`N: loss, avg, rate, X seconds, ...`: train_network alone,
the data loading thread's wait excluded); the first iteration (allocations, first touches) is
dropped and the rest's median is the run's figure. --darknumba runs `darknumba detector train`
on the same files in the same way (its line has the same meaning: the step, loading excluded),
interleaved with C darknet: for run in runs: C darknet, then darknumba.
"""
from __future__ import annotations

import argparse
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
CLASSES = 3             # circles, squares, triangles
STEP_LINE = re.compile(r"^\s*(\d+): [-+0-9.naif]+, [-+0-9.naif]+ avg( loss)?, [-+0-9.e]+ rate, "
                       r"(?P<seconds>[0-9.]+) seconds", re.M)
NO_DARKNET = ("no C darknet build: give --darknet DIR or set DARKNET_DIR (a darknet tree with its "
              "`darknet` executable built); nothing measured")


def dialect_of(tree: Path) -> str:
    ab = (tree / "include" / "yolo_v2_class.hpp").exists() or (tree / "src" / "yolo_v2_class.cpp").exists()
    return "alexeyab" if ab else "pjreddie"


def tree_commit(tree: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True,
                         text=True)
    return out.stdout.strip() or "?"


def training_cfg(src: Path, out: Path, batch: int, size: int, iters: int) -> Path:
    """`src` rewritten for the shapes data set (see the module docstring)."""
    sections: list[list[str]] = []
    for ln in src.read_text().splitlines():
        if ln.strip().startswith("["):
            sections.append([ln])
        elif sections:
            sections[-1].append(ln)

    def setkey(sec, key, value):
        for k, ln in enumerate(sec):
            if ln.split("=", 1)[0].strip() == key and "=" in ln and not ln.lstrip().startswith("#"):
                sec[k] = f"{key}={value}"
                return
        sec.append(f"{key}={value}")

    def getkey(sec, key):
        for ln in sec:
            if "=" in ln and ln.split("=", 1)[0].strip() == key and not ln.lstrip().startswith("#"):
                return ln.split("=", 1)[1].strip()
        return None

    for k, sec in enumerate(sections):
        name = sec[0].strip()
        if name in ("[net]", "[network]"):
            for key, v in (("batch", batch), ("subdivisions", 1), ("width", size),
                           ("height", size), ("max_batches", iters)):
                setkey(sec, key, v)
        elif name == "[yolo]":
            mask = getkey(sec, "mask")
            n = len(mask.split(",")) if mask else int(getkey(sec, "num") or 1)
            setkey(sec, "classes", CLASSES)
            setkey(sec, "random", 0)
            conv = next(s for s in reversed(sections[:k]) if s[0].strip() == "[convolutional]")
            setkey(conv, "filters", (5 + CLASSES) * n)
    out.write_text("\n".join("\n".join(s) for s in sections) + "\n")
    return out


def step_times(text: str) -> list[float]:
    """(seconds of each iteration) from darknet's or darknumba's per-iteration lines."""
    return [float(m["seconds"]) for m in STEP_LINE.finditer(text)]


def run_train(cmd, cwd, env, timeout) -> tuple[list[float], float, str, float]:
    """(step seconds, wall seconds, output, cores other processes kept busy meanwhile)"""
    t = time.perf_counter()
    with benchlib.OtherLoad() as load:
        out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t
    text = out.stdout + out.stderr
    times = step_times(text)
    if out.returncode != 0 and not times:
        raise SystemExit(f"`{' '.join(map(str, cmd))}` failed (exit {out.returncode}):\n{text[-3000:]}")
    return times, wall, text, load.cores


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--darknet", default=os.environ.get("DARKNET_DIR"),
                    help="a darknet tree with `darknet` built (default: $DARKNET_DIR)")
    ap.add_argument("--dialect", choices=["pjreddie", "alexeyab"], default=None,
                    help="whose darknet the tree is (default: guessed from its files)")
    ap.add_argument("--cfg", default=str(ROOT / "cfg" / "yolov3-tiny.cfg"))
    ap.add_argument("--weights", default=None, help="initial weights (default: darknet's random "
                    "initialisation), e.g. yolov4-tiny.conv.29")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=416)
    ap.add_argument("--iters", type=int, default=6, help="iterations per run (the first dropped)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--images", type=int, default=64, help="images in the synthetic data set")
    ap.add_argument("--darknumba", action="store_true",
                    help="also time `darknumba detector train` on the same files, interleaved")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per training run")
    a = ap.parse_args()
    if a.iters < 2:
        ap.error("--iters must be at least 2 (the first iteration is dropped)")
    if not a.darknet:
        print(f"c_train_step: skipped: {NO_DARKNET}")
        return
    tree = Path(a.darknet).resolve()
    exe = tree / "darknet"
    if not exe.is_file():
        print(f"c_train_step: skipped: {exe} not found: build darknet in {tree} first "
              f"(or point --darknet / DARKNET_DIR elsewhere); nothing measured")
        return
    dialect = a.dialect or dialect_of(tree)
    benchlib.header(f"bench/c_train_step.py: a training step of C darknet ({dialect})"
                    + (" and darknumba" if a.darknumba else ""), threads=a.threads,
                    extra={"darknet": f"{exe} (git {tree_commit(tree)})",
                           "network": f"{Path(a.cfg).name} at {a.size}, batch {a.batch}, "
                                      f"{CLASSES} classes, {a.iters} iterations per run "
                                      f"(first dropped), {a.runs} runs"})
    cli = Path(sys.executable).with_name("darknumba")
    darknumba = str(cli) if cli.exists() else "darknumba"
    with tempfile.TemporaryDirectory(prefix="darknumba-ctrain-") as tmp:
        tmp = Path(tmp)
        subprocess.run([darknumba, "data", "shapes", str(tmp / "shapes"), "--n", str(a.images)],
                       check=True, capture_output=True)
        data = tmp / "shapes" / "shapes.data"
        cfg = training_cfg(Path(a.cfg), tmp / f"{Path(a.cfg).stem}-shapes.cfg", a.batch, a.size,
                           a.iters)
        weights = [str(Path(a.weights).resolve())] if a.weights else []
        impls = {"C darknet": ([str(exe), "detector", "train", str(data), str(cfg), *weights]
                               + (["-dont_show"] if dialect == "alexeyab" else []),
                               tree, dict(os.environ, OMP_NUM_THREADS=str(a.threads)))}
        if a.darknumba:
            impls["darknumba"] = ([darknumba, "detector", "train", str(data), str(cfg), *weights,
                                   "--dialect", dialect, "--no-progress", "-dont_show"],
                                  tmp, dict(os.environ, NUMBA_NUM_THREADS=str(a.threads),
                                            OPENBLAS_NUM_THREADS=str(a.threads)))
        medians = {k: [] for k in impls}
        busiest = 0.0
        for r in range(a.runs):
            for name, (cmd, cwd, env) in impls.items():
                times, wall, text, others = run_train(cmd, cwd, env, a.timeout)
                busiest = max(busiest, others)
                if len(times) < 2:
                    raise SystemExit(f"{name}: {len(times)} iteration line(s) found in its "
                                     f"output:\n{text[-3000:]}")
                medians[name].append(benchlib.median(times[1:]))
                print(f"# run {r + 1} {name}: {len(times)} iterations, steps "
                      + " ".join(f"{t:.2f}" for t in times) + f" s; wall {wall:.1f} s; "
                      f"others kept {others:.2f} cores busy", flush=True)
    print(f"\n## {Path(a.cfg).stem} at {a.size}, training step, batch {a.batch}: seconds per "
          f"step, median of iterations 2..{a.iters} per run")
    print(f"{'implementation':<16}" + "".join(f"{'run ' + str(i + 1):>9}" for i in range(a.runs))
          + f"{'median':>9}{'images/s':>10}")
    for name, meds in medians.items():
        m = benchlib.median(meds)
        print(f"{name:<16}" + "".join(f"{v:9.3f}" for v in meds) + f"{m:9.3f}{a.batch / m:10.2f}")
    if busiest > 0.1:
        print(f"WARNING: other processes kept up to {busiest:.2f} cores busy during these runs: "
              f"not a figure to publish")
    if a.darknumba:
        c, d = (benchlib.median(medians[k]) for k in ("C darknet", "darknumba"))
        print(f"darknumba / C darknet time: {d / c:.2f} (C darknet takes {c / d:.2f}x darknumba's time)")


if __name__ == "__main__":
    main()
