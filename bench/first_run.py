"""A first `darknumba detect` on this machine and the runs after it, as a user meets them: the
whole command's wall time with a fresh numba cache (the numpy first run, the default), when the
background compile it leaves has ended, then warm runs; optionally the same cold run with
DARKNUMBA_FIRST_RUN=compile (compile first, then detect).

    python bench/first_run.py [--cfg cfg/yolov3-tiny.cfg] [--weights weights/yolov3-tiny.weights]
                              [--image PATH] [--warm 3] [--compile-first]
                              [--darknumba PATH/TO/bin/darknumba]

--darknumba times another install's command (a venv holding only `pip install -e .`, say: no
SciPy, which numba imports on every run wherever it is installed). Each run gets its own fresh
NUMBA_CACHE_DIR, removed afterwards; every warm run's printed lines are checked against the
cold run's.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import benchlib  # noqa: E402


def timed(cmd, env):
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=900)
    seconds = time.perf_counter() - t
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return seconds, out


def lines(out):
    """The printed detections, without the timing line."""
    return [ln for ln in out.stdout.splitlines() if "Predicted in" not in ln]


def background_running(python) -> bool:
    """Whether a background compile holds the lock (asked of the timed install, cheaply)."""
    code = ("import sys, importlib.util\n"
            "spec = importlib.util.find_spec('darknumba')\n"
            "sys.path.insert(0, spec.submodule_search_locations[0] + '/runtime')\n"
            "import compile_ahead as c\n"
            "sys.exit(0 if c.background_running() else 1)")
    return subprocess.run([python, "-c", code]).returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cfg", default="cfg/yolov3-tiny.cfg")
    ap.add_argument("--weights", default=None)
    ap.add_argument("--image", default=str(ROOT.parent / "shared" / "data" / "dog.jpg"))
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--compile-first", action="store_true")
    ap.add_argument("--darknumba", default=shutil.which("darknumba") or "darknumba")
    a = ap.parse_args()
    benchlib.header("bench/first_run.py: a first `darknumba detect` and the warm runs after it",
                    extra={"darknumba": a.darknumba})
    weights = a.weights or str(ROOT / "weights" / (Path(a.cfg).stem + ".weights"))
    cmd = [a.darknumba, "detect", a.cfg, weights, a.image]
    python = str(Path(a.darknumba).with_name("python"))
    cache = tempfile.mkdtemp(prefix="darknumba-bench-cache-")
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, DARKNUMBA_FIRST_RUN="numpy")
    try:
        while background_running(python):       # someone else's background compile first
            time.sleep(0.5)
        start = time.perf_counter()
        cold, out = timed(cmd, env)
        first = [ln for ln in out.stdout.splitlines() if "Predicted in" in ln]
        print(f"{Path(a.cfg).stem}: cold (numpy first run) {cold:.2f} s; {' '.join(first)}")
        while background_running(python):
            time.sleep(0.2)
        print(f"  background compile ended {time.perf_counter() - start:.1f} s after the start")
        for _ in range(a.warm):
            warm, again = timed(cmd, env)
            notice = "first run" in again.stderr or "compiling" in again.stderr
            print(f"  warm {warm:.2f} s{' (it compiled!)' if notice else ''}; "
                  f"same lines: {'yes' if lines(again) == lines(out) else 'NO'}")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if a.compile_first:
        cache = tempfile.mkdtemp(prefix="darknumba-bench-cache-")
        try:
            seconds, _ = timed(cmd, dict(env, NUMBA_CACHE_DIR=cache,
                                         DARKNUMBA_FIRST_RUN="compile"))
            print(f"  cold, compile first {seconds:.2f} s")
        finally:
            shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
