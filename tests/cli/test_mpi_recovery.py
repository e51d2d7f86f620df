"""Data-parallel training, round 2 (issue 33), under MPICH's mpirun on this machine: the
allreduce overlapped with backward gives the fused allreduce's weights bit for bit on 2 ranks;
`--ranks 2 --restarts K` restarts a job whose rank was killed mid-iteration from its last
checkpoint and ends where an uninterrupted run from that checkpoint ends, the lock held
throughout. Uses test_mpi's small cfg, data set and helpers."""
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest
from test_mpi import ITERS, SRC, assert_same_weights, mpirun, rank_pids, shapes  # noqa: F401

import darknumba as dn
from darknumba.train.detector import Schedule, TrainOptions, train_detector
from darknumba.train.lock import LOCK_NAME

pytestmark = pytest.mark.slow


def test_overlapped_allreduce_gives_the_fused_weights_bit_for_bit(shapes, tmp_path):
    root, data, sub2, _ = shapes
    runs = {}
    for name, extra in (("fused", []), ("overlap", ["--overlap", "--bucket-mb", 0.1])):
        code, out = mpirun(["detector", "train", data, sub2, "--backup", tmp_path / name,
                            "--no-progress", "--no-chart", *extra])
        assert code == 0, out
        runs[name] = out
    assert re.search(r"in [3-9] buckets overlapping the last mini-batch's backward",
                     runs["overlap"]), runs["overlap"]
    a = dn.load_network(sub2, tmp_path / "fused" / "sub2_final.weights")
    b = dn.load_network(sub2, tmp_path / "overlap" / "sub2_final.weights")
    assert a.seen == b.seen == 8 * ITERS
    for i, (la, lb) in enumerate(zip(a.layers, b.layers)):
        for (name, x), (_, y) in zip(la.weight_records(), lb.weight_records()):
            np.testing.assert_array_equal(y, x, err_msg=f"layer {i} {name}")


def supervised(args, env=None):
    """`darknumba ARGS` as one process (the supervisor), its output a pipe."""
    cmd = [sys.executable, "-c", "from darknumba.cli import main; main()", *map(str, args)]
    return subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": SRC, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_killed_rank_is_restarted_from_the_last_checkpoint(shapes, tmp_path):
    root, data, sub2, _ = shapes
    backup, mark, end = tmp_path / "backup", uuid.uuid4().hex, 7
    proc = supervised(["detector", "train", data, sub2, "--backup", backup, "--no-progress",
                       "--no-chart", "--max-batches", end, "--checkpoint-every", 1,
                       "--backup-every", 1000, "--ranks", 2, "--restarts", 2],
                      env={"DARKNUMBA_TEST_MARK": mark})
    try:
        t = time.time()
        while not (backup / "sub2_2.weights").exists():
            assert proc.poll() is None and time.time() - t < 90, proc.stdout.read()
            time.sleep(0.02)
        lock = (backup / LOCK_NAME).read_text()
        assert f'"pid": {proc.pid},' in lock            # the supervisor holds it
        pids = rank_pids(mark)
        assert sorted(pids) == [0, 1]
        os.kill(pids[1], signal.SIGKILL)                 # rank 1, in iteration 3 or later
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    m = re.search(r"a rank died \(SIGKILL, exit status (\d+)\) at .*; restart 1 of 2 on 2 "
                  r"rank\(s\) from (\S+sub2_(\d+)\.weights) \(seen (\d+)\)", out)
    assert m, out
    resumed_at, seen = int(m.group(3)), int(m.group(4))
    assert 2 <= resumed_at < end and seen == 8 * resumed_at
    assert f"starting at iteration {resumed_at} of {end}" in out
    assert "taking over the lock" not in out and "in use by another training" not in out
    assert not (backup / LOCK_NAME).exists()             # released at the end
    rows = (backup / "sub2_history.csv").read_text().splitlines()[1:]
    assert [r.split(",")[0] for r in rows] == [str(i) for i in range(1, end + 1)]
    train_detector(str(data), str(sub2), TrainOptions(
        weights=m.group(2), backup=str(tmp_path / "resumed"), progress=False, chart=False,
        max_batches=end, schedule=Schedule(every=1, backup_every=1000)), log=lambda *a, **k: None)
    assert_same_weights(sub2, tmp_path / "resumed" / "sub2_final.weights",
                        backup / "sub2_final.weights")
