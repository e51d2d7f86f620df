"""What training prints when stdout is not a terminal (a log file, a pipe, a CI log): no
progress bar (no '\\r' redraws) and AlexeyAB's "next mAP" status lines only when they change;
on a terminal the bar and every line stay. `rnn train --no-progress` as the other training
commands take it."""
import io

import pytest
from conftest import ROOT

from darknumba.cli import run
from darknumba.data.synthetic import generate_shapes
from darknumba.train.history import Progress


class Tty(io.StringIO):
    def isatty(self):
        return True


STATUS = [" (next mAP calculation at 4 iterations) ", " (next mAP calculation at 4 iterations) ",
          " (next mAP calculation at 8 iterations) "]


def step_all(bar):
    for i, status in enumerate(STATUS, 1):
        bar.step([status, f"{i}: iteration line"], 1.0, 1.0)
    bar.close()


def test_not_a_terminal_no_bar_and_status_once(monkeypatch):
    out, err, lines = io.StringIO(), io.StringIO(), []
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    bar = Progress(10, 0, True, log=lines.append)
    assert bar.bar is None
    step_all(bar)
    assert lines == [STATUS[0], "1: iteration line", "2: iteration line", STATUS[2],
                     "3: iteration line"]
    assert err.getvalue() == ""


def test_terminal_bar_and_every_line(monkeypatch):
    out, err, lines = Tty(), Tty(), []
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    step_all(Progress(10, 0, True, log=lines.append))
    assert out.getvalue().count("next mAP calculation") == 3      # AlexeyAB prints it each time
    assert "\r" in err.getvalue()                                   # tqdm redraws its line


def test_stdout_redirected_stderr_a_terminal_no_bar(monkeypatch):
    monkeypatch.setattr("sys.stdout", io.StringIO())
    monkeypatch.setattr("sys.stderr", Tty())
    assert Progress(10, 0, True).bar is None


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return generate_shapes(tmp_path_factory.mktemp("shapes") / "shapes", n=12,
                           valid_fraction=0.25, seed=4)


def test_detector_train_to_a_pipe(shapes, tmp_path, capfd):
    cfg = tmp_path / "tiny.cfg"
    cfg.write_text((ROOT / "cfg" / "shapes-tiny.cfg").read_text().replace("batch=16", "batch=2"))
    code = run(["detector", "train", str(shapes), str(cfg), "--max-batches", "4",
                "--map-every", "2", "--no-chart", "--backup", str(tmp_path / "b"),
                "--workers", "1"])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "\r" not in out + err
    status = [m for m in out.splitlines() if "next mAP calculation" in m]
    assert status == [" (next mAP calculation at 2 iterations) ",
                      " (next mAP calculation at 4 iterations) "], out
    its = [m for m in out.splitlines() if m.split(":")[0].isdigit()]
    assert [m.split(":")[0] for m in its] == ["1", "2", "3", "4"]


@pytest.mark.parametrize("flag", [[], ["--no-progress"]])
def test_rnn_train_progress_option(tmp_path, capfd, flag):
    text = tmp_path / "t.txt"
    text.write_bytes(b"hello world " * 20)
    code = run(["rnn", "train", str(ROOT / "cfg" / "rnn-tiny.cfg"), str(text), "--max-batches",
                "3", "--backup", str(tmp_path / "b")] + flag)
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "\r" not in out + err
    assert [m.split(":")[0] for m in out.splitlines()] == ["1", "2", "3"]
