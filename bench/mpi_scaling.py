"""A model of data-parallel training on N machines (one rank each): compute per iteration
against a ring allreduce of the gradients, the efficiency it leaves, and what overlapping the
allreduce with backward (`--overlap`) gives; and (--measure) the timing on this machine that
the model is fitted from.

    python bench/mpi_scaling.py [--cfg cfg/yolov4-tiny.cfg cfg/yolov3-tiny.cfg]
                                [--image-seconds S ...] [--batch 64] [--cores 2]
                                [--gbits 10 25] [--machines 2 4 8 16 32 64 128]
                                [--more-cores 32]
    python bench/mpi_scaling.py --measure --cfg cfg/yolov4-tiny.cfg [--ranks 2] [--runs 1]

The defaults are docs/mpi.md's scaling model, fitted on 2026-12-03 from `--measure` on this
2-core machine (busy: load average 10-15; yolov4-tiny at 416, batch 16, subdivisions 2, median
of iterations 2..5; FITTED below): the training time per image of one process with both cores,
the share of a rank's compute that is its last mini-batch's backward (the window an overlapped
allreduce has: each rank trains one mini-batch per iteration in the model), the share of that
window the polled allreduce progressed in (the fused allreduce's time less the wait left with
--overlap, over the window), and the compute --overlap added (its polls between layers).
--more-cores adds the same model for machines with that many cores, their time per image scaled
down by cores / more_cores (perfect scaling, an optimistic assumption).

Model (MPICH's ring / reduce-scatter + allgather for large buffers, S bytes, N ranks):
    allreduce  = (N-1)/N * S * (2 / bandwidth + reduce) + 2 (N-1) * latency
    compute    = (batch / N) * image_seconds           (the cfg's batch shared by N machines)
    efficiency = compute / (compute + allreduce)       (speed-up = N * efficiency)
    overlapped = compute / (compute * (1 + cost) + max(0, allreduce - hidden * backward *
                                                       compute))
Assumptions: bandwidth = the link's Gbit/s x PAYLOAD (TCP), LATENCY per ring step, REDUCE per
byte summed; the share `hidden` measured between two ranks on shared memory holds on a network
(optimistic for many ranks: darknumba drives MPI's progress by polling between layers, and a
ring allreduce on N ranks takes 2 (N-1) steps per bucket). S is 4 bytes per gradient (weights,
biases, batch-norm scales) of the cfg, read by darknumba's parser (no weights, no buffers).
"""
import argparse
import os
import re
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402

ROOT = HERE.parent
LATENCY = 25e-6       # s per ring step over TCP on 10/25 GbE
REDUCE = 1e-9         # s per byte summed in place (about 1 GB/s on one core, with MPI's copies)
PAYLOAD = 0.9         # share of the line rate TCP carries
DEFAULT_CFGS = ["cfg/yolov4-tiny.cfg"]
# FITTED, 2026-12-03: `--measure --cfg cfg/yolov4-tiny.cfg --runs 2 --iters 6 --link 100mbit`
# (2 ranks, medians of 2 runs: fused 7.226 s compute + 3.884 s allreduce, last backward
# 4.776 s; --overlap 6.980 s compute + 1.018 s wait, last backward 4.707 s)
DEFAULT_IMAGE_SECONDS = [0.125]   # 1 process, 2 threads, quiet machine (2026-12-02): 2.03 s per
                                  # batch-16 iteration / 16 (this machine was busy on 12-03)
BACKWARD = 0.66           # last backward / compute of a rank (one mini-batch of 8 per rank)
HIDDEN = 0.61             # (3.884 - 1.018) / 4.707: the share of that backward the allreduce
                          # progressed in
COST = 0.07               # compute with --overlap / without, less 1: the larger of the 2 runs'
                          # (+7 % and -16 %; median -3 %: the busy machine's noise)


def gradient_bytes(cfg) -> int:
    from darknumba.parser import parse_network_cfg
    from darknumba.train.data_parallel import GRADIENTS
    net = parse_network_cfg(cfg, seed=None, allocate=False)
    return 4 * sum(getattr(l, u).size for l in net.layers for w, u in GRADIENTS
                   if getattr(l, w, None) is not None and getattr(l, u, None) is not None)


def allreduce_seconds(nbytes, ranks, gbits, payload=PAYLOAD):
    if ranks == 1:
        return 0.0
    bandwidth = gbits * 1e9 / 8 * payload
    return ((ranks - 1) / ranks * nbytes * (2 / bandwidth + REDUCE)
            + 2 * (ranks - 1) * LATENCY)


def overlapped(c, r):
    """Efficiency with --overlap: compute c and allreduce r seconds (see the docstring)."""
    return c / (c * (1 + COST) + max(0.0, r - HIDDEN * BACKWARD * c))


def table(name, S, image_seconds, batch, cores, gbits, machines, payload=PAYLOAD):
    print(f"\n## {name}: {S / 1e6:.1f} MB of gradients; {image_seconds:.4g} s per image per "
          f"machine; batch {batch}; {cores} cores per machine")
    print(f"{'Gbit/s':>6} {'machines':>8} {'img/machine':>11} {'compute s':>9} "
          f"{'allreduce s':>11} {'efficiency':>10} {'overlapped':>10} {'80% needs':>9}")
    for g in gbits:
        for n in machines:
            k = batch / n
            c = k * image_seconds
            r = allreduce_seconds(S, n, g, payload)
            over = overlapped(c, r)
            need = 4 * r / image_seconds          # images per machine: compute >= 4 x allreduce
            note = "" if k >= 1 else "  (batch < machines: the cfg cannot be shared)"
            print(f"{g:6.0f} {n:8d} {k:11.2f} {c:9.3f} {r:11.3f} {c / (c + r):10.0%} "
                  f"{over:10.0%} {need:7.1f} img{note}")


# -- measuring (--measure): 1 process x all cores against N ranks on this machine --------------
SUMMARY = re.compile(r"per iteration (?P<compute>[0-9.]+) s compute, (?P<wait>[0-9.]+) s .*?"
                     r"the last mini-batch's backward (?P<backward>[0-9.]+) s")


SSH = """#!/bin/sh
# hydra's ssh launcher calls: ssh [options] HOST COMMAND...; run COMMAND in HOST's namespace
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
case "$host" in
%s
  *) echo "no namespace for host $host" >&2; exit 1;;
esac
exec ip netns exec "$ns" sh -c "$*"
"""


@contextmanager
def two_hosts(tmp, rate):
    """Two network namespaces joined by a veth pair `dnv`, its both ends shaped to `rate`
    (tc's tbf, e.g. 1gbit): the mpirun that starts one rank in each over that link (hydra's
    ssh launcher through a stand-in that enters the host's namespace; libfabric's tcp), and its
    environment. tests/cli/test_mpi_netns.py does the same without shaping. Needs root."""
    import subprocess
    tag = f"{os.getpid() % 100000}"
    hosts = {"10.233.9.1": f"dnbA{tag}", "10.233.9.2": f"dnbB{tag}"}

    def ip(*args):
        subprocess.run(["ip", *args], check=True, capture_output=True)
    try:
        for ns in hosts.values():
            ip("netns", "add", ns)
        a, b = hosts.values()
        ip("link", "add", "dnv", "netns", a, "type", "veth", "peer", "name", "dnv", "netns", b)
        for addr, ns in hosts.items():
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "dnv")
            ip("-n", ns, "link", "set", "dnv", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", "dnv", "root", "tbf", "rate",
                            rate, "burst", "256kb", "latency", "100ms"], check=True)
        ssh = tmp / "ssh-into-netns"
        ssh.write_text(SSH % "\n".join(f"  {h}) ns={ns};;" for h, ns in hosts.items()))
        ssh.chmod(0o755)
        mpirun = Path(sys.executable).with_name("mpirun")
        yield (["ip", "netns", "exec", a, str(mpirun), "-launcher", "ssh", "-launcher-exec",
                str(ssh), "-iface", "dnv", "-hosts", ",".join(hosts), "-ppn", "1"],
               {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp;ofi_rxm",
                "FI_TCP_IFACE": "dnv"})
    finally:
        for ns in hosts.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def measure(a):
    """Time `detector train` on one machine: one process with all its cores, then `ranks`
    ranks sharing them, fused allreduce and --overlap, interleaved per run. The cfg is
    rewritten for the shapes data set (bench/c_train_step.training_cfg) with subdivisions =
    ranks (each rank trains whole mini-batches). --link RATE: the 2 ranks in two network
    namespaces over a veth link shaped to RATE (two_hosts), each with cores / 2 threads."""
    import subprocess
    import tempfile

    from c_train_step import run_train, training_cfg
    cli = Path(sys.executable).with_name("darknumba")
    darknumba = [str(cli)] if cli.exists() else ["darknumba"]
    mpirun = [str(Path(sys.executable).with_name("mpirun"))]
    env = dict(os.environ)
    rows = {"1 process": [], f"{a.ranks} ranks": [], f"{a.ranks} ranks, overlap": []}
    parts = {k: [] for k in rows}
    with tempfile.TemporaryDirectory(prefix="darknumba-mpi-") as tmp, ExitStack() as stack:
        tmp = Path(tmp)
        if a.link:
            if a.ranks != 2:
                raise SystemExit("--link runs 2 ranks")
            mpirun, link_env = stack.enter_context(two_hosts(tmp, a.link))
            threads = str(max(1, benchlib.cores() // 2))
            env.update(link_env, **{v: threads for v in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS",
                                                          "OPENBLAS_NUM_THREADS")})
        subprocess.run(darknumba + ["data", "shapes", str(tmp / "shapes"), "--n",
                                    str(a.images)], check=True, capture_output=True)
        data = tmp / "shapes" / "shapes.data"
        for cfg in a.cfg:
            src = training_cfg(Path(cfg), tmp / "src.cfg", a.train_batch, a.size, a.iters)
            out = tmp / f"{Path(cfg).stem}-shapes.cfg"
            out.write_text(src.read_text().replace("subdivisions=1", f"subdivisions={a.ranks}"))
            train = ["detector", "train", str(data), str(out), "--no-progress", "--no-chart"]
            runs = {k: None for k in rows}
            runs["1 process"] = darknumba + train
            ranked = mpirun + ["-np", str(a.ranks)] + darknumba + train
            runs[f"{a.ranks} ranks"] = ranked
            runs[f"{a.ranks} ranks, overlap"] = ranked + ["--overlap"]
            for r in range(a.runs):
                for name, cmd in runs.items():
                    times, wall, text, others = run_train(
                        cmd + ["--backup", str(tmp / f"b{r}{len(rows[name])}")], tmp,
                        dict(os.environ) if name == "1 process" else env, a.timeout)
                    if len(times) < 2:
                        raise SystemExit(f"{name}: {len(times)} iteration line(s):\n"
                                         f"{text[-3000:]}")
                    rows[name].append(benchlib.median(times[1:]))
                    m = SUMMARY.search(text)
                    if m:
                        parts[name].append((float(m["compute"]), float(m["wait"]),
                                            float(m["backward"])))
                    print(f"# run {r + 1} {Path(cfg).stem} {name}: steps "
                          + " ".join(f"{t:.2f}" for t in times) + f" s; others kept "
                          f"{others:.2f} cores busy" + (f"; {m.group(0)}" if m else ""),
                          flush=True)
            print(f"\n## {Path(cfg).stem} at {a.size}, batch {a.train_batch}, subdivisions "
                  f"{a.ranks}: seconds per iteration (median of iterations 2..{a.iters}, median "
                  f"of {a.runs} runs); efficiency = 1 process / this")
            t1 = benchlib.median(rows["1 process"])
            for name, times in rows.items():
                t = benchlib.median(times)
                c = (" compute %.3f s, allreduce wait %.3f s, last backward %.3f s" % tuple(
                    benchlib.median([p[i] for p in parts[name]]) for i in (0, 1, 2))
                     if parts[name] else "")
                print(f"{name:<22} {t:7.3f} s  efficiency {t1 / t:5.0%}{c}")
            for k in rows:
                rows[k], parts[k] = [], []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cfg", nargs="+", default=DEFAULT_CFGS)
    ap.add_argument("--image-seconds", type=float, nargs="+", default=None,
                    help="training time per image on one machine, all its cores, one per cfg "
                         "(default: the fitted yolov4-tiny figure for the default cfg)")
    ap.add_argument("--batch", type=int, default=64, help="the cfg's batch (global)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--gbits", type=float, nargs="+", default=[10, 25])
    ap.add_argument("--machines", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64, 128])
    ap.add_argument("--payload", type=float, default=PAYLOAD,
                    help="share of the line rate the allreduce gets (about 0.49 on the shaped "
                         "100 Mbit/s veth link, waiting for the slower rank included)")
    ap.add_argument("--more-cores", type=int, default=32,
                    help="also the model for machines of this many cores (0: not)")
    ap.add_argument("--measure", action="store_true",
                    help="time `detector train` on this machine instead: 1 process against "
                         "--ranks ranks, with and without --overlap (synthetic shapes data)")
    ap.add_argument("--ranks", type=int, default=2, help="--measure: ranks (mpirun -np)")
    ap.add_argument("--train-batch", type=int, default=16, help="--measure: the cfg's batch")
    ap.add_argument("--size", type=int, default=416, help="--measure: width and height")
    ap.add_argument("--iters", type=int, default=5,
                    help="--measure: iterations per run (the first dropped)")
    ap.add_argument("--runs", type=int, default=1, help="--measure: runs of each")
    ap.add_argument("--images", type=int, default=64, help="--measure: synthetic images")
    ap.add_argument("--timeout", type=float, default=3600, help="--measure: s per run")
    ap.add_argument("--link", default=None,
                    help="--measure: run the 2 ranks in two network namespaces over a veth link "
                         "shaped to this rate (tc tbf: 1gbit, 100mbit; needs root)")
    a = ap.parse_args()
    if a.measure:
        benchlib.header("bench/mpi_scaling.py --measure: data-parallel training on this machine",
                        threads=benchlib.cores())
        return measure(a)
    seconds = a.image_seconds or (DEFAULT_IMAGE_SECONDS if a.cfg == DEFAULT_CFGS else None)
    if seconds is None or len(seconds) != len(a.cfg):
        ap.error("give --image-seconds, one per --cfg")
    benchlib.header("bench/mpi_scaling.py: a model of data-parallel training (no timing here)",
                    threads=a.cores, extra={"model": f"latency {LATENCY * 1e6:.0f} us per ring "
                                            f"step, reduce {REDUCE * 1e9:.0f} ns/byte, "
                                            f"{a.payload:.0%} of the line rate; overlap: backward "
                                            f"{BACKWARD:.0%} of compute, {HIDDEN:.0%} of it "
                                            f"hides the allreduce, +{COST:.0%} compute"})
    for cfg, s in zip(a.cfg, seconds):
        S = gradient_bytes(cfg)
        table(Path(cfg).name, S, s, a.batch, a.cores, a.gbits, a.machines, a.payload)
        if a.more_cores and a.more_cores != a.cores:
            table(f"{Path(cfg).name} on {a.more_cores}-core machines (time per image x "
                  f"{a.cores}/{a.more_cores})", S, s * a.cores / a.more_cores, a.batch,
                  a.more_cores, a.gbits, a.machines, a.payload)


if __name__ == "__main__":
    main()
