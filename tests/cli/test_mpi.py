"""`mpirun -np 2 darknumba detector train` (and classifier train) on loopback, against one
process with the same cfg and seed: the same final weights and rolling statistics (whole
mini-batches per rank; subdivisions=1 split with --sync-bn; AlexeyAB's mosaic loader and EMA;
the classifier), resume with the other number of
processes, a killed rank stops the job with the checkpoint intact, Ctrl-C stops every rank at
the same iteration and saves, a cfg the ranks cannot share is refused with its numbers.
mpi4py and MPICH's mpirun come with the [test] extra (and the [mpi] one)."""
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import mpi4py  # noqa: F401  (mpi4py and MPICH come with the [test] extra)
import numpy as np
import pytest

import darknumba as dn
from darknumba.train.detector import Schedule, TrainOptions, train_detector

pytestmark = pytest.mark.slow

MPIRUN = shutil.which("mpirun") or shutil.which("mpirun", path=str(Path(sys.executable).parent))
assert MPIRUN, "mpirun not found (MPICH's wheel brings it)"

SRC = str(Path(dn.__file__).resolve().parents[1])
CFG = Path(__file__).resolve().parents[2] / "cfg" / "shapes-tiny.cfg"
ITERS = 3


def small_cfg(path, subdivisions, max_batches=ITERS):
    """cfg/shapes-tiny.cfg at 64 x 64, batch 8."""
    text = CFG.read_text()
    for key, value in (("batch", 8), ("subdivisions", subdivisions), ("width", 64),
                       ("height", 64), ("burn_in", 0), ("max_batches", max_batches)):
        lines = [ln if not ln.startswith(f"{key}=") else f"{key}={value}"
                 for ln in text.splitlines()]
        text = "\n".join(lines) + "\n"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    from tiny_data import shapes_set
    root = tmp_path_factory.mktemp("mpi")
    data = shapes_set(root, n=40, seed=6, size=(64, 80), valid_fraction=0.0)
    return root, data, small_cfg(root / "sub2.cfg", 2), small_cfg(root / "sub1.cfg", 1)


def mpirun(args, ranks=2, timeout=120, background=False, env=None):
    """`mpirun -np ranks darknumba ARGS` with this checkout's source."""
    cmd = [MPIRUN, "-np", str(ranks), sys.executable, "-c",
           "from darknumba.cli import main; main()", *map(str, args)]
    env = {**os.environ, "PYTHONPATH": SRC, **(env or {})}
    if background:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def train_args(data, cfg, backup, *extra):
    return ["detector", "train", data, cfg, *extra, "--backup", backup, "--no-progress",
            "--no-chart", "--checkpoint-every", 2, "--backup-every", 1000]


def one_process(data, cfg, backup, weights=None):
    opts = TrainOptions(weights=str(weights) if weights else None, backup=str(backup),
                        progress=False, chart=False, schedule=Schedule(every=2, backup_every=1000))
    return train_detector(str(data), str(cfg), opts, log=lambda *a, **k: None)


def assert_same_weights(cfg, a, b, rel=1e-5):
    """Every record (weights, biases, scales, rolling statistics) of two .weights files within
    rel x the record's largest magnitude; the same `seen`."""
    na, nb = dn.load_network(cfg, a), dn.load_network(cfg, b)
    assert na.seen == nb.seen
    worst = []
    for i, (la, lb) in enumerate(zip(na.layers, nb.layers)):
        for (name, x), (_, y) in zip(la.weight_records(), lb.weight_records()):
            d = float(np.abs(x - y).max() / max(np.abs(x).max(), 1e-30))
            worst.append((d, f"layer {i} {name}"))
    assert max(worst)[0] <= rel, sorted(worst)[-3:]


@pytest.fixture(scope="module")
def reference(shapes):
    """One process: sub2 for ITERS iterations (checkpoint at 2), its resume from 2, and sub1."""
    root, data, sub2, sub1 = shapes
    one_process(data, sub2, root / "one")
    one_process(data, sub2, root / "one-resumed", weights=root / "one" / "sub2_2.weights")
    one_process(data, sub1, root / "one-sub1")
    return root


def test_two_ranks_train_what_one_process_trains(shapes, reference):
    root, data, sub2, _ = shapes
    code, out = mpirun(train_args(data, sub2, root / "two"))
    assert code == 0, out
    assert out.count(f"{ITERS}: ") == 1                  # rank 0 alone prints
    assert "each rank trains mini-batches 0..0 of 2" in out
    cores = len(os.sched_getaffinity(0))
    assert f"{max(1, cores // 2)} thread(s) each" in out      # the cores shared out
    rows = (root / "two" / "sub2_history.csv").read_text().splitlines()[1:]
    assert [r.split(",")[0] for r in rows] == [str(i) for i in range(1, ITERS + 1)]  # rank 0's
    assert_same_weights(sub2, root / "one" / "sub2_final.weights",
                        root / "two" / "sub2_final.weights")


def test_sync_bn_splits_one_mini_batch_over_two_ranks(shapes, reference):
    root, data, _, sub1 = shapes
    code, out = mpirun(train_args(data, sub1, root / "two-sub1"))
    assert code != 0 and "subdivisions=1 cannot be shared by 2 ranks" in out \
        and "batch/subdivisions = 8 images" in out and "--sync-bn" in out, out
    assert out.count("darknumba: error") == 1            # the ranks agree: no abort, one message
    code, out = mpirun(train_args(data, sub1, root / "two-sub1", "--sync-bn"))
    assert code == 0, out
    assert_same_weights(sub1, root / "one-sub1" / "sub1_final.weights",
                        root / "two-sub1" / "sub1_final.weights")


def test_resume_on_the_other_number_of_processes(shapes, reference):
    """A 2-rank checkpoint resumed by one process, and a one-process checkpoint by 2 ranks,
    end where one process resuming its own checkpoint ends."""
    root, data, sub2, _ = shapes
    if not (root / "two" / "sub2_2.weights").exists():
        pytest.skip("needs test_two_ranks_train_what_one_process_trains' checkpoint")
    one_process(data, sub2, root / "two-then-one", weights=root / "two" / "sub2_2.weights")
    code, out = mpirun(train_args(data, sub2, root / "one-then-two",
                                  root / "one" / "sub2_2.weights"))
    assert code == 0, out
    assert "starting at iteration 2" in out
    ref = root / "one-resumed" / "sub2_final.weights"
    assert_same_weights(sub2, ref, root / "two-then-one" / "sub2_final.weights")
    assert_same_weights(sub2, ref, root / "one-then-two" / "sub2_final.weights")


def test_alexeyab_mosaic_training_on_two_ranks_as_on_one(shapes, tmp_path):
    """AlexeyAB's loader (mosaic chosen per loader-thread share, blur, noise) and EMA: each rank
    loads its images of the same batches."""
    from ab_tiny import ab_tiny_cfg
    root, data, _, _ = shapes
    cfg = tmp_path / "ab.cfg"
    cfg.write_text(ab_tiny_cfg(max_batches=ITERS))
    one_process(data, cfg, tmp_path / "one")
    code, out = mpirun(["detector", "train", data, cfg, "--backup", tmp_path / "two",
                        "--no-progress", "--no-chart"])
    assert code == 0, out
    assert_same_weights(cfg, tmp_path / "one" / "ab_final.weights",
                        tmp_path / "two" / "ab_final.weights")


def rank_pids(mark):
    """{rank: pid} of the processes whose environment holds the test's mark."""
    found = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = dict(e.split("=", 1) for e in (p / "environ").read_text().split("\0")
                       if "=" in e)
        except OSError:
            continue
        if env.get("DARKNUMBA_TEST_MARK") == mark and "PMI_RANK" in env:
            found[int(env["PMI_RANK"])] = int(p.name)
    return found


def test_killed_rank_stops_the_job_and_the_checkpoint_loads(shapes, tmp_path):
    root, data, sub2, _ = shapes
    backup = tmp_path / "backup"
    mark = uuid.uuid4().hex
    args = ["detector", "train", data, sub2, "--backup", backup, "--no-progress", "--no-chart",
            "--max-batches", 100000, "--backup-every", 1]
    proc = mpirun(args, background=True, env={"DARKNUMBA_TEST_MARK": mark})
    try:
        t = time.time()
        while not (backup / "sub2.backup").exists():
            assert proc.poll() is None and time.time() - t < 90, proc.stdout.read()
            time.sleep(0.1)
        time.sleep(0.5)
        pids = rank_pids(mark)
        assert sorted(pids) == [0, 1]
        os.kill(pids[1], signal.SIGKILL)
        t = time.time()
        code = proc.wait(30)
        assert code != 0
        assert time.time() - t < 30
        assert rank_pids(mark) == {}                     # rank 0 is gone too
    finally:
        if proc.poll() is None:
            proc.kill()
    net = dn.load_network(sub2, backup / "sub2.backup")
    assert net.seen > 0 and net.seen % 8 == 0


def test_an_error_on_one_rank_stops_every_rank_naming_it(tmp_path):
    """An image only rank 1 draws cannot be read (--bad-data stop): rank 1 says so with the
    last checkpoint and aborts the job, rank 0 waiting in the allreduce included."""
    from tiny_data import shapes_set

    from darknumba.data.datasets import get_paths, read_data_cfg
    data = shapes_set(tmp_path, n=40, seed=2, size=(64, 80), valid_fraction=0.0)
    paths = get_paths(read_data_cfg(data).train)
    # the loader's first draw for image `pos` of batch k is the image index (seed 0)
    drawn = [{int(np.random.default_rng([0, k, pos]).integers(len(paths)))
              for k in range(3) for pos in ranks} for ranks in (range(4), range(4, 8))]
    only_rank1 = sorted(drawn[1] - drawn[0])
    Path(paths[only_rank1[0]]).write_bytes(b"not an image")
    cfg = small_cfg(tmp_path / "sub2.cfg", 2, max_batches=3)
    code, out = mpirun(["detector", "train", data, cfg, "--backup", tmp_path / "b", "--no-progress",
                        "--no-chart", "--bad-data", "stop"])
    assert code != 0
    assert "error on rank 1 of 2: DataError" in out and "error on rank 0" not in out, out
    assert "stopping all ranks; the last checkpoint is none" in out, out


def test_a_rank_that_hangs_is_noticed_after_the_timeout(shapes, tmp_path):
    """Rank 1 frozen (SIGSTOP): rank 0 gives up waiting after --mpi-timeout and ends the job."""
    root, data, sub2, _ = shapes
    mark = uuid.uuid4().hex
    args = ["detector", "train", data, sub2, "--backup", tmp_path / "b", "--no-progress",
            "--no-chart", "--max-batches", 100000, "--backup-every", 100000, "--mpi-timeout", 2]
    proc = mpirun(args, background=True, env={"DARKNUMBA_TEST_MARK": mark})
    pids = {}
    try:
        out = ""
        while not out.splitlines() or not out.splitlines()[-1].startswith("2:"):
            line = proc.stdout.readline()
            assert line, out
            out += line
        pids = rank_pids(mark)
        os.kill(pids[1], signal.SIGSTOP)
        t = time.time()
        rest, _ = proc.communicate(timeout=30)
        assert proc.returncode != 0
        assert time.time() - t < 30
        assert "rank 0 of 2: no answer from the other ranks for 2 s" in rest, rest
    finally:
        for pid in pids.values():
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        if proc.poll() is None:
            proc.kill()


def test_ctrl_c_stops_every_rank_at_the_same_iteration_and_saves(shapes, tmp_path):
    root, data, sub2, _ = shapes
    backup = tmp_path / "backup"
    args = ["detector", "train", data, sub2, "--backup", backup, "--no-progress", "--no-chart",
            "--max-batches", 100000, "--backup-every", 100000]
    proc = mpirun(args, background=True)
    out = ""
    t = time.time()
    while time.time() - t < 90:
        line = proc.stdout.readline()
        out += line
        if line.startswith("3:") or not line:
            break
    proc.send_signal(signal.SIGINT)        # mpiexec passes it on to every rank
    rest, _ = proc.communicate(timeout=30)
    out += rest
    assert proc.returncode == 130, out     # the CLI's contract: interrupted, checkpoint saved
    assert out.count("stopped at iteration") == 1, out
    seen = dn.load_network(sub2, backup / "sub2.backup").seen
    stopped = int(out.split("stopped at iteration ")[1].split(";")[0])
    assert seen == 8 * stopped and stopped >= 3


def test_classifier_trains_on_two_ranks_as_on_one(tmp_path):
    from darknumba.data.classifier_example import make_example
    from darknumba.train.classifier import ClassifierTrainOptions, train_classifier
    data = make_example(tmp_path / "cls", n=30, seed=1)
    text = (Path(__file__).resolve().parents[2] / "cfg" / "shapes5-classifier.cfg").read_text()
    for a, b in (("batch=64", "batch=8"), ("subdivisions=1", "subdivisions=2"),
                 ("burn_in=50", "burn_in=0"), ("max_batches=600", "max_batches=2")):
        text = text.replace(a, b)
    cfg = tmp_path / "c5.cfg"
    cfg.write_text(text)
    train_classifier(str(data), str(cfg), ClassifierTrainOptions(backup=str(tmp_path / "one")),
                     log=lambda *a, **k: None)
    code, out = mpirun(["classifier", "train", data, cfg, "--backup", tmp_path / "two"])
    assert code == 0, out
    assert_same_weights(cfg, tmp_path / "one" / "c5.weights", tmp_path / "two" / "c5.weights")
