"""`detector train --ranks N --restarts K` (train/supervise.py, cli/restarts.py) without MPI:
which exit statuses are a lost rank, which checkpoint a restart resumes from, the supervisor's
loop against stand-in jobs (a small script that exits with the status it is told), the lock
handed to each attempt, and the command line each attempt gets. Under mpirun, with a rank
killed: tests/cli/test_mpi_recovery.py."""
import os
import sys
import time

import numpy as np
import pytest

from darknumba.train.lock import LOCK_NAME
from darknumba.train.supervise import (RANK_LOST, Supervisor, describe_status, last_checkpoint,
                                       lost_rank)


@pytest.mark.parametrize("status,lost", [(0, False), (1, False), (2, False), (3, False),
                                         (130, False), (RANK_LOST, True), (137, True),
                                         (143, True), (-9, True), (9, True), (11, True),
                                         (100, False)])
def test_which_exit_statuses_are_a_lost_rank(status, lost):
    """mpiexec reports a rank killed by SIGKILL as 9, Popen as -9, a shell as 137."""
    assert lost_rank(status) is lost


def test_the_status_is_described():
    assert all("SIGKILL" in describe_status(s) for s in (9, 137, -9))
    assert "stopped answering" in describe_status(RANK_LOST)


def weights_file(path, seen, mtime=None):
    """A .weights header (0.2.0, seen as 8 bytes) and a few bytes of records."""
    path.write_bytes(np.array([0, 2, 0], "<i4").tobytes() + np.array([seen], "<u8").tobytes()
                     + bytes(16))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_the_restart_resumes_from_the_newest_training_state(tmp_path):
    since = time.time() - 10
    weights_file(tmp_path / "net.backup", 16)
    weights_file(tmp_path / "net_2.weights", 16)
    best = weights_file(tmp_path / "net_last.weights", 24)
    weights_file(tmp_path / "net_4.weights", 32, mtime=since - 100)     # an earlier job's
    for name in ("net_best.weights", "net_ema.weights", "net_final.weights",
                 "other_9.weights", "net_x.weights"):
        weights_file(tmp_path / name, 99)
    (tmp_path / "net_5.weights").write_bytes(b"garbage")                # unreadable header
    assert last_checkpoint(tmp_path, "net", since) == str(best)
    assert last_checkpoint(tmp_path, "net", time.time() + 100) is None
    assert last_checkpoint(tmp_path / "absent", "net", since) is None


JOB = """
import json, os, sys
from darknumba.train.lock import BackupLock
folder, weights, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
handed_over = not BackupLock(folder).acquire().held     # the supervisor's, or it raises
plan = json.load(open(os.path.join(folder, "plan.json")))
attempt = len(open(os.path.join(folder, "attempts.txt")).readlines()) \\
    if os.path.exists(os.path.join(folder, "attempts.txt")) else 0
with open(os.path.join(folder, "attempts.txt"), "a") as f:
    f.write(f"{weights} {ranks} {handed_over}\\n")
status, seen = plan[attempt]
if seen:
    import numpy as np
    with open(os.path.join(folder, f"net_{seen // 8}.weights"), "wb") as f:
        f.write(np.array([0, 2, 0], "<i4").tobytes() + np.array([seen], "<u8").tobytes())
sys.exit(status)
"""


def supervise(tmp_path, plan, restarts, shrink_to=None):
    import json
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    job = tmp_path / "job.py"
    job.write_text(JOB)
    lines = []
    sup = Supervisor(lambda w, n: [sys.executable, str(job), str(tmp_path), str(w), str(n)],
                     str(tmp_path), "net", 4, restarts, "start.weights", shrink_to,
                     lambda m, file=None: lines.append(m))
    status = sup.run()
    attempts = [a.split() for a in (tmp_path / "attempts.txt").read_text().splitlines()]
    return status, attempts, "\n".join(lines)


def test_a_lost_rank_is_restarted_from_the_last_checkpoint(tmp_path):
    status, attempts, log = supervise(tmp_path, [[137, 16], [RANK_LOST, 24], [0, 0]], 2,
                                      shrink_to=lambda n: n // 2)
    assert status == 0
    assert attempts == [["start.weights", "4", "True"],
                        [str(tmp_path / "net_2.weights"), "2", "True"],
                        [str(tmp_path / "net_3.weights"), "1", "True"]]
    assert "a rank died (SIGKILL, exit status 137)" in log
    assert f"restart 1 of 2 on 2 rank(s) from {tmp_path / 'net_2.weights'} (seen 16)" in log
    assert "stopped answering" in log and "restart 2 of 2 on 1 rank(s)" in log
    assert "ended with exit status 0 after 2 restart(s)" in log
    assert not (tmp_path / LOCK_NAME).exists()           # released


def test_a_failure_that_would_repeat_is_not_restarted(tmp_path):
    status, attempts, log = supervise(tmp_path, [[1, 0], [0, 0]], 3)
    assert status == 1 and len(attempts) == 1 and "restart" not in log


def test_the_restarts_run_out(tmp_path):
    status, attempts, log = supervise(tmp_path, [[137, 0], [143, 0], [0, 0]], 1)
    assert status == 143 and len(attempts) == 2
    assert attempts[1][0] == "start.weights"            # no checkpoint yet: the start again
    assert "no restarts left (--restarts 1)" in log


def test_each_attempt_gets_the_options_the_user_typed(tmp_path):
    """The attempt's command line: the user's options again (typer's flags and values), the
    supervisor's own left out, the starting weights replaced by the checkpoint."""
    import typer

    from darknumba.cli import app
    from darknumba.cli.restarts import typed_options
    group = typer.main.get_command(app)
    train = group.commands["detector"].commands["train"]
    cfg = tmp_path / "a.cfg"
    cfg.write_text("[net]\n")
    ctx = train.make_context("train", [
        str(cfg), str(cfg), "--no-progress", "--clear", "--max-batches", "7", "--ranks", "2",
        "--restarts", "3", "--shrink", "--seed", "5", "--sync-bn", "--overlap",
        "--bucket-mb", "0.5"])
    assert typed_options(ctx) == ["--clear", "--seed", "5", "--max-batches", "7",
                                  "--no-progress", "--sync-bn", "--overlap", "--bucket-mb",
                                  "0.5"]
