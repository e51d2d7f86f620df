"""What every bench script shares: the header that makes a figure traceable (command line, date,
git commit, CPU model, thread settings), a child process's peak RSS, medians.

Imports only the standard library: a bench script's parent process stays free of numpy's,
numba's and the peers' thread pools, and its children start from the environment it found.
"""
from __future__ import annotations

import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the variables that size or shape the thread pools of numpy's OpenBLAS, numba, libgomp,
# PyTorch, onnxruntime and OpenVINO
THREAD_VARS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_NUM_THREADS",
               "OPENBLAS_THREAD_TIMEOUT", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
               "NUMBA_THREADING_LAYER", "DARKNUMBA_EXACT")


def git_commit() -> str:
    """The tree's commit, with '+dirty' when a tracked file under src/ or bench/ differs from it."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short=10", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "src", "bench")
    return commit + ("+dirty" if dirty else "")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> str:
    """The vector extensions that decide which kernels the BLAS and oneDNN pick."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return "?"
    return " ".join(f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags) or "none"


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def header(title: str, threads: int | None = None, extra: dict | None = None) -> None:
    """Print the lines that trace a figure back to how it was made."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    print(f"# {title}")
    script = Path(sys.argv[0]).resolve()
    if script.is_relative_to(ROOT):          # as typed from the repository's top folder
        script = script.relative_to(ROOT)
    cwd = "" if Path.cwd() == ROOT else f"  (in {Path.cwd()})"
    print(f"# command: {shlex.join(['python', str(script), *sys.argv[1:]])}{cwd}")
    print(f"# date:    {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    print(f"# commit:  {git_commit()}")
    print(f"# cpu:     {cpu_model()} ({cores()} usable cores; {cpu_flags()}); "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    env = " ".join(f"{k}={os.environ[k]}" for k in THREAD_VARS if k in os.environ) or "none set"
    print(f"# threads: {threads if threads is not None else cores()} per process; "
          f"thread variables in the environment: {env}")
    print(f"# python:  {platform.python_version()} ({Path(sys.executable).parent.parent})")
    for k, v in (extra or {}).items():
        print(f"# {k + ':':<8} {v}")
    sys.stdout.flush()


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM), in MB; run by the process measured itself."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def median(values) -> float:
    return float(statistics.median(values)) if values else float("nan")


def fmt(v: float, width: int = 9, digits: int = 1) -> str:
    return f"{v:{width}.{digits}f}" if v == v else f"{'-':>{width}}"


def busy_cpu_seconds() -> float:
    """CPU seconds this machine's cores have spent busy since boot (/proc/stat: user, nice,
    system, irq, softirq, steal); nan where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class OtherLoad:
    """How many cores other processes kept busy while a child ran (the machine's busy CPU time
    less the child's own, over the wall time): 0 on an idle machine. A figure measured while
    others took a fair share of a core means little -- PyTorch's OpenMP threads, which spin
    at barriers, lose far more to a busy neighbour than darknumba's (docs/benchmarks.md)."""

    def __enter__(self):
        self.t = time.perf_counter()
        self.busy = busy_cpu_seconds()
        self.mine = children_cpu_seconds()
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.t
        other = (busy_cpu_seconds() - self.busy) - (children_cpu_seconds() - self.mine)
        self.cores = max(0.0, other / wall) if wall > 0 else float("nan")
        return False
