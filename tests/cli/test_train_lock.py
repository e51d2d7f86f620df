"""One training per backup folder (train/lock.py): a second training into a folder whose lock a
running process holds is refused with one line naming it; a dead holder's lock is taken over
with a notice; the lock goes when the training ends, however it ends. Under an MPI launcher the
commands that are not data-parallel refuse to run (exit 2)."""
import json
import os
import socket
import subprocess
import sys

import pytest
from conftest import ROOT

from darknumba.cli import _not_data_parallel, run
from darknumba.train.lock import LOCK_NAME, BackupFolderInUse, BackupLock, lock_backup

RNN_CFG = ROOT / "cfg" / "rnn-tiny.cfg"


def write_lock(folder, pid, host=None, **extra):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(),
                                                "started": "2026-12-03 12:00:00", **extra}))


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def rnn_train(tmp_path, backup):
    text = tmp_path / "t.txt"
    text.write_text("abc abd abe " * 20)
    return run(["rnn", "train", str(RNN_CFG), str(text), "--max-batches", "1",
                "--backup", str(backup)])


def test_second_training_into_a_folder_is_refused_naming_the_holder(tmp_path, capsys):
    backup = tmp_path / "bk"
    write_lock(backup, os.getpid())                 # a live process holds it
    assert rnn_train(tmp_path, backup) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("darknumba: error: "), err   # before any log
    assert f"pid {os.getpid()} on {socket.gethostname()}" in err[0] and LOCK_NAME in err[0]
    assert not list(backup.glob("*.weights"))       # nothing written
    assert json.loads((backup / LOCK_NAME).read_text())["pid"] == os.getpid()   # kept


def test_a_dead_holders_lock_is_taken_over_and_released_at_the_end(tmp_path, capsys):
    backup = tmp_path / "bk"
    pid = dead_pid()
    write_lock(backup, pid)
    assert rnn_train(tmp_path, backup) == 0
    err = capsys.readouterr().err
    assert f"notice: {backup / LOCK_NAME}: taking over the lock" in err and f"pid {pid}" in err
    assert (backup / "rnn-tiny_final.weights").is_file()
    assert not (backup / LOCK_NAME).exists()
    assert rnn_train(tmp_path, backup) == 0         # and the next training takes it again


def test_lock_is_released_when_the_training_raises(tmp_path):
    from darknumba.train.rnn import RnnTrainOptions, train_char_rnn
    text = tmp_path / "t.txt"
    text.write_text("abc abd abe " * 20)
    backup = tmp_path / "bk"
    seen = []

    def log(msg, file=None):
        if (backup / LOCK_NAME).exists():
            seen.append(msg)
        if str(msg).startswith("1: "):
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        train_char_rnn(RNN_CFG, text, RnnTrainOptions(backup=str(backup), max_batches=3), log)
    assert seen and not (backup / LOCK_NAME).exists()


def test_lock_records_and_refusals(tmp_path):
    lock = BackupLock(tmp_path / "bk").acquire()
    holder = json.loads((tmp_path / "bk" / LOCK_NAME).read_text())
    assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    with pytest.raises(BackupFolderInUse, match="in use by another training"):
        BackupLock(tmp_path / "bk").acquire()
    lock.release()
    assert not (tmp_path / "bk" / LOCK_NAME).exists()
    write_lock(tmp_path / "far", dead_pid(), host="elsewhere.example")
    with pytest.raises(BackupFolderInUse, match="on elsewhere.example.*remove the lock if that "
                                                "training is over"):
        BackupLock(tmp_path / "far").acquire()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / LOCK_NAME).write_text("{nope")
    with pytest.raises(BackupFolderInUse, match="cannot read"):
        BackupLock(tmp_path / "junk").acquire()
    # a live pid whose process started at another time is a reused pid: stale
    write_lock(tmp_path / "reused", os.getpid(), start=1)
    notices = []
    BackupLock(tmp_path / "reused").acquire(log=lambda m, file=None: notices.append(m)).release()
    assert notices and "no longer running" in notices[0]
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / LOCK_NAME)
    with pytest.raises(BackupFolderInUse, match="named pipe"):
        BackupLock(tmp_path / "fifo").acquire()
    assert lock_backup(tmp_path / "rank1", root=False) is None
    assert not (tmp_path / "rank1").exists()


@pytest.mark.parametrize("which", ["detector", "classifier"])
def test_detector_and_classifier_training_take_the_lock(which, tmp_path, capsys):
    backup = tmp_path / "bk"
    write_lock(backup, os.getpid())
    if which == "detector":
        from tiny_data import shapes_set
        data = shapes_set(tmp_path, n=4, seed=1, size=(40, 64))
        cfg = ROOT / "cfg" / "shapes-tiny.cfg"
    else:
        from darknumba.data.classifier_example import make_example
        data = make_example(tmp_path / "cls", n=8, valid=0.25, seed=1)
        cfg = ROOT / "cfg" / "shapes5-classifier.cfg"
    code = run([which, "train", str(data), str(cfg), "--max-batches", "1", "--backup",
                str(backup), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and "in use by another training" in err[-1], err


def test_commands_that_are_not_data_parallel_refuse_mpirun(monkeypatch, capsys):
    monkeypatch.setenv("PMI_SIZE", "2")
    assert run(["summary", str(RNN_CFG)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`darknumba summary` is not data-parallel" in err[0]
    assert "detector train, classifier train" in err[0]
    assert run(["rnn", "train", str(RNN_CFG), "t.txt"]) == 2
    for args in (["detector", "train", "d.data", "c.cfg"], ["--debug", "classifier", "train"],
                 ["detector"], ["summary", "--help"]):
        assert _not_data_parallel(args) is None, args
    monkeypatch.setenv("PMI_SIZE", "1")
    assert _not_data_parallel(["summary", "x.cfg"]) is None


def test_two_takeovers_of_one_stale_lock_cannot_both_succeed(tmp_path):
    """The flock decides: while one process holds the lock (taken over from a dead holder),
    a second acquire is refused, and the file is the first one's record."""
    folder = tmp_path / "bk"
    write_lock(folder, dead_pid())
    first = BackupLock(folder).acquire(log=lambda *a, **k: None)
    with pytest.raises(BackupFolderInUse, match=f"pid {os.getpid()}"):
        BackupLock(folder).acquire(log=lambda *a, **k: None)
    assert json.loads((folder / LOCK_NAME).read_text())["token"] == first.token
    first.release()
    assert not (folder / LOCK_NAME).exists()


def test_a_supervisors_lock_is_handed_to_its_training(tmp_path, monkeypatch):
    """A training started by a supervisor that holds the lock (its token in LOCK_TOKEN_VAR)
    goes on under that lock; a foreign token is still refused; the supervisor releases."""
    from darknumba.train.lock import LOCK_TOKEN_VAR
    folder = tmp_path / "bk"
    supervisor = BackupLock(folder).acquire()
    monkeypatch.setenv(LOCK_TOKEN_VAR, "not-the-token")
    with pytest.raises(BackupFolderInUse):
        BackupLock(folder).acquire()
    monkeypatch.setenv(LOCK_TOKEN_VAR, supervisor.token)
    child = BackupLock(folder).acquire()
    child.release()                                 # not its lock: nothing happens
    assert (folder / LOCK_NAME).exists()
    supervisor.release()
    assert not (folder / LOCK_NAME).exists()
