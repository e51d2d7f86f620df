"""A first day that explains itself: the training history CSV and chart (detector and
classifier), `detect`'s JSON and list files, Darknet's single-dash flags on every command that
Darknet gives them to, and a checkout left clean by the README's commands."""
import csv
import os
import re

import pytest
from typer.testing import CliRunner

from darknumba.cli import app
from darknumba.train.history import COLUMNS, HEADER, TrainingHistory, read_history


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _fill(h, first, last):
    for i in range(first, last + 1):
        h.add(i, 10.0 / i, 20.0 / i, 0.001, 8 * i)


# -- the history file ----------------------------------------------------------------------------
def test_history_buffers_until_flush_and_appends(tmp_path):
    h = TrainingHistory(tmp_path, "net", 0, 100, chart=False)
    _fill(h, 1, 3)
    assert not (tmp_path / "net_history.csv").exists()          # buffered
    h.set_map(3, 0.25)
    h.flush()
    _fill(h, 4, 5)
    h.flush()
    rows = _rows(tmp_path / "net_history.csv")
    assert tuple(rows[0]) == COLUMNS
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3, 4, 5]
    assert [r["map"] for r in rows] == ["", "", "0.250000", "", ""]
    assert float(rows[1]["loss"]) == 5.0 and float(rows[1]["avg_loss"]) == 10.0
    assert int(rows[4]["images"]) == 40 and float(rows[0]["rate"]) == 0.001
    secs = [float(r["seconds"]) for r in rows]
    assert secs == sorted(secs) and secs[0] >= 0
    assert (tmp_path / "net_history.csv").read_text().count(HEADER) == 1


def test_resume_drops_rows_past_the_checkpoint_and_continues(tmp_path):
    h = TrainingHistory(tmp_path, "net", 0, 100, chart=False)
    _fill(h, 1, 6)
    h.flush()
    with open(tmp_path / "net_history.csv", "a") as f:
        f.write("7,0.1,0.2")                                   # a crash cut this line short
    notes = []
    h2 = TrainingHistory(tmp_path, "net", 4, 100, chart=False,
                         log=lambda m, file=None: notes.append(m))
    assert [r[0] for r in h2.rows] == [1, 2, 3, 4]              # the chart's rows: the whole run
    assert "continuing the history after iteration 4 (2 later rows" in notes[0]
    assert h2.offset == h2.rows[-1][6]                         # seconds go on from the last row
    _fill(h2, 5, 8)
    h2.flush()
    rows, clean = read_history(tmp_path / "net_history.csv")
    assert clean and [r[0] for r in rows] == list(range(1, 9))
    # a fresh run (iteration 0, or --clear) starts the file anew
    h3 = TrainingHistory(tmp_path, "net", 0, 100, chart=False)
    assert h3.rows == [] and read_history(tmp_path / "net_history.csv")[0] == []


def test_resume_refuses_a_history_that_is_not_a_regular_file(tmp_path):
    """The history is read through the checked reader: a FIFO in its place is refused by name
    (opening it would block the training forever)."""
    from darknumba.errors import DataError
    os.mkfifo(tmp_path / "net_history.csv")
    with pytest.raises(DataError, match=r"net_history\.csv: cannot read training history.*"
                                        r"named pipe"):
        TrainingHistory(tmp_path, "net", 4, 100, chart=False)


def test_disabled_history_writes_nothing(tmp_path):
    h = TrainingHistory(tmp_path, "net", 0, 100, chart=True, enabled=False)
    _fill(h, 1, 3)
    h.flush()
    h.draw()
    assert os.listdir(tmp_path) == []


def test_chart_is_drawn_from_the_whole_history(tmp_path, monkeypatch):
    from darknumba.train import history
    h = TrainingHistory(tmp_path, "net", 0, 20, chart=True)
    _fill(h, 1, 4)
    h.flush()
    seen = []
    real = history.LossChart.save
    monkeypatch.setattr(history.LossChart, "save",
                        lambda self, rows: (seen.append([r[0] for r in rows]), real(self, rows)))
    h2 = TrainingHistory(tmp_path, "net", 4, 20, chart=True)
    _fill(h2, 5, 6)
    h2.set_map(6, 0.5)
    h2.draw()
    assert seen == [[1, 2, 3, 4, 5, 6]]
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- training runs write it ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    from test_train_detector import TINY
    from tiny_data import shapes_set
    root = tmp_path_factory.mktemp("fd-shapes")
    data = shapes_set(root, n=24, seed=5)
    cfg = root / "tiny.cfg"
    cfg.write_text(TINY)
    return data, cfg


@pytest.mark.slow
def test_detector_train_history_survives_a_crash_and_resume(shapes, tmp_path):
    from darknumba.train.detector import Schedule, TrainOptions, train_detector
    data, cfg = shapes

    def opts(**kw):
        return TrainOptions(backup=str(tmp_path), progress=False, workers=1,
                            schedule=Schedule(every=4, until=100, backup_every=1000), **kw)
    def quiet(*a, **k):
        pass
    train_detector(data, cfg, opts(max_batches=6), log=quiet)   # checkpoints at 4, final at 6
    rows, _ = read_history(tmp_path / "tiny_history.csv")
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r[4] for r in rows] == [8 * i for i in range(1, 7)]
    # resume from the iteration-4 checkpoint as after a crash: rows 5, 6 are redone, not doubled
    train_detector(data, cfg, opts(max_batches=8, weights=str(tmp_path / "tiny_4.weights")),
                   log=quiet)
    rows, clean = read_history(tmp_path / "tiny_history.csv")
    assert clean and [r[0] for r in rows] == list(range(1, 9))
    if TrainingHistory(tmp_path, "x", 0, 1).chart.plt is not None:
        assert (tmp_path / "chart.png").exists()


@pytest.fixture(scope="module")
def cls_example(tmp_path_factory):
    from conftest import ROOT
    out = tmp_path_factory.mktemp("fd-cls")
    r = CliRunner().invoke(app, ["classifier", "example", str(out), "--n", "40"])
    assert r.exit_code == 0, r.output
    cfg = (ROOT / "cfg" / "shapes5-classifier.cfg").read_text()
    (out / "small.cfg").write_text(re.sub(r"^batch=\d+", "batch=4", cfg, flags=re.M))
    return out


@pytest.mark.slow
def test_classifier_train_has_the_bar_history_and_chart(cls_example):
    data, cfg = str(cls_example / "shapes5.data"), str(cls_example / "small.cfg")
    backup = cls_example / "backup"
    r = CliRunner().invoke(app, ["classifier", "train", data, cfg, "--max-batches", "3",
                                 "--backup", str(backup), "-dont_show", "-clear"])
    assert r.exit_code == 0, r.output
    assert re.search(r"^3, [\d.]+: ", r.stdout, re.M)           # Darknet's lines above the bar
    rows, clean = read_history(backup / "small_history.csv")
    assert clean and [r[0] for r in rows] == [1, 2, 3] and rows[-1][4] == 12
    try:
        import matplotlib  # noqa: F401
        assert (backup / "chart.png").exists()
    except ImportError:
        assert not (backup / "chart.png").exists()


# -- Darknet's flags ---------------------------------------------------------------------------
# (darknumba command, Darknet flags it takes): each Darknet command's own argument parsing
# (pjreddie's and AlexeyAB's examples/detector.c, classifier.c, darknet.c; see
# cli/darknet_flags.py). Meaningful or accepted-and-ignored; never a usage error.
ALL6 = ["-dont_show", "-ext_output", "-map", "-clear", "-thresh", "0.3", "-out", "NAME"]
FLAG_TABLE = [
    (["detect"], ["-thresh", "0.3", "-out", "NAME.png", "-ext_output", "-dont_show"], 3),
    (["detector", "test"], ALL6[:-2] + ["-out", "NAME"], 3),
    (["detector", "train"], ALL6, 2),
    (["detector", "map"], ALL6, 3),
    (["detector", "recall"], ALL6, 3),
    (["detector", "valid"], ALL6, 3),
    (["detector", "calc_anchors"], ALL6, 1),
    (["classifier", "train"], ["-dont_show", "-clear"], 2),
    (["classifier", "predict"], ["-dont_show", "-clear"], 4),
    (["classifier", "valid"], ["-dont_show", "-clear"], 3),
]


def _command(path):
    import typer.main
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return cmd


@pytest.mark.parametrize("path,flags,files", FLAG_TABLE, ids=[" ".join(p) for p, _, _ in FLAG_TABLE])
def test_darknet_flags_are_accepted(path, flags, files, tmp_path):
    f = tmp_path / "f"
    f.write_text("")
    args = [str(f)] * files + flags
    plain = _command(path).make_context(path[-1], args[:files]).params
    ctx = _command(path).make_context(path[-1], list(args))  # parses; a usage error raises
    assert not ctx.args
    changed = [k for k, v in ctx.params.items() if v != plain[k]]
    assert len(changed) == sum(a.startswith("-") for a in flags), changed   # each flag landed


def test_darknet_flags_have_their_meaning(tmp_path):
    f = tmp_path / "f"
    f.write_text("")
    p = _command(["detect"]).make_context("detect", ["-thresh", "0.3", "-out", "x.png"]).params
    assert p["thresh"] == 0.3 and str(p["out"]) == "x.png"
    p = _command(["detector", "test"]).make_context("test", [str(f)] * 3 + [
        "-thresh", "0.3", "-out", "r.json", "-ext_output", "-letter_box"]).params
    assert p["thresh"] == 0.3 and p["out"] == "r.json" and p["ext_output"] and p["letter_box"]
    p = _command(["detector", "train"]).make_context("train", [str(f)] * 2 + [
        "-map", "-clear", "-thresh", "0.4"]).params
    assert p["map_flag"] and p["clear"] and p["map_thresh"] == 0.4
    p = _command(["detector", "valid"]).make_context("valid", [str(f)] * 3 + ["-out", "x_"]).params
    assert p["prefix"] == "x_"
    p = _command(["classifier", "train"]).make_context("train", [str(f)] * 2 + ["-clear"]).params
    assert p["clear"]
    helptext = _command(["detector", "map"]).get_help(
        _command(["detector", "map"]).make_context("map", [str(f)] * 3))
    assert "-map" in helptext and "accepted and ignored" in helptext


# -- detect: JSON, lists -------------------------------------------------------------------------
def _decimals(x) -> int:
    text = repr(x)
    return len(text.split(".")[1]) if "." in text and "e" not in text else 0


@pytest.fixture
def detect_setup(tmp_path, monkeypatch):
    from conftest import ROOT, sample_photos, tiny_weights
    weights = tiny_weights()
    images = sample_photos()[:2]
    monkeypatch.chdir(tmp_path)
    return ROOT / "cfg" / "yolov3-tiny.cfg", weights, images, ROOT / "cfg" / "coco.data"


def _run(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def test_json_to_stdout_draws_nothing_and_rounds(detect_setup, tmp_path):
    import json
    cfg, weights, images, _ = detect_setup
    r = _run("detect", cfg, weights, images[0], "--json", "-")
    rec = json.loads(r.stdout)                                   # stdout is the JSON alone
    assert rec["detections"] and os.listdir(tmp_path) == []     # no predictions.png
    for d in rec["detections"]:
        assert all(_decimals(d[k]) <= 6 for k in ("prob", "x", "y", "w", "h", "objectness"))
        assert all(isinstance(d[k], int) for k in ("left", "top", "right", "bottom"))
    from darknumba.vision.detector import Detector
    assert Detector(cfg, weights).predict([images[0]])[0] == rec     # the Python record
    _run("detect", cfg, weights, images[0], "--json", "-", "--out", tmp_path / "asked.png")
    assert os.listdir(tmp_path) == ["asked.png"]                 # drawn where asked
    _run("detect", cfg, weights, images[0])
    assert "predictions.png" in os.listdir(tmp_path)            # Darknet's default drawing


def test_list_file_says_how_many_paths_it_read(detect_setup, tmp_path):
    cfg, weights, images, _ = detect_setup
    lst = tmp_path / "list.txt"
    lst.write_text("".join(f"{p}\n" for p in images) + "# a comment\n\n")
    r = _run("detect", cfg, weights, lst, "--json", tmp_path / "d.jsonl")
    assert f"{lst}: read 2 image paths from the list" in r.stderr
    assert len((tmp_path / "d.jsonl").read_text().splitlines()) == 2


def test_detector_test_out_json_and_json_stdout(detect_setup, tmp_path):
    import json
    cfg, weights, images, data = detect_setup
    r = _run("detector", "test", data, cfg, weights, images[0], "-dont_show", "-ext_output",
             "-out", "result.json")
    rec = json.loads((tmp_path / "result.json").read_text())    # AlexeyAB's -out result.json
    assert rec["image"] == str(images[0]) and rec["detections"]
    assert "left_x:" in r.stdout and (tmp_path / "predictions.png").exists()
    os.remove(tmp_path / "predictions.png")
    os.remove(tmp_path / "result.json")
    r = CliRunner().invoke(app, ["detector", "test", str(data), str(cfg), str(weights),
                                 "--json", "-"], input=f"{images[0]}\n{images[1]}\n")
    assert r.exit_code == 0, r.output
    recs = [json.loads(s) for s in r.stdout.splitlines()]      # no prompt, no text lines
    assert [x["image"] for x in recs] == [str(p) for p in images]
    assert os.listdir(tmp_path) == []
