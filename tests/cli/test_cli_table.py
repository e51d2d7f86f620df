"""The exit-status contract (cli/__init__.py) over the whole command table: every command and
subcommand typer knows, found by walking it (a new command is checked without being listed),
answers --help with 0, an unknown option with a usage error (2, one `Error:` line), and a bad
file where it expects one (missing, a directory, /dev/zero) with 1 or 2 and one line naming
it, never a traceback. Counts of zero are usage errors; a closed or full standard output ends
with 1, without a traceback."""
import os
import subprocess
import sys

import pytest
import typer
from conftest import ROOT, official_weights

from darknumba.cli import app, run

CFG, WEIGHTS = ROOT / "cfg" / "yolov3-tiny.cfg", ROOT / "weights" / "yolov3-tiny.weights"


def _commands(command, path=()):
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield path, command
        return
    for name, sub in sorted(subcommands.items()):
        yield from _commands(sub, (*path, name))


COMMANDS = dict(_commands(typer.main.get_command(app)))
NOT_FILES = {"out": "{tmp}/out.bin", "n": "1"}      # outputs and counts among the arguments
# commands whose first arguments decide how the rest are read: valid ones before the bad file
# or the options they need
ARGV = {("detect",): [str(CFG), str(WEIGHTS), "{bad}"],
        ("compare",): ["{bad}", "{bad}", "--npz", "{bad}"],
        ("cfg", "custom"): ["{bad}", "--data", "{bad}"],
        ("export", "weights"): ["{bad}", "{bad}", "{tmp}/out.weights", "--fuse-bn"],
        ("weights", "fetch"): None}                 # takes a name, no file


def _arguments(command) -> list:
    return [p for p in command.params if type(p).__name__.endswith("Argument")]


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines()
             if ln.startswith(("darknumba: error", "Error:", "darknumba: internal"))]
    assert len(lines) == 1, err
    return lines[0]


def _run(capsys, argv):
    code = run([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_table_is_whole():
    names = {" ".join(p) for p in COMMANDS}
    assert {"detect", "detector train", "classifier train", "rnn valid", "compare",
            "export onnx", "data check", "summary", "weights fetch"} <= names, names


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_help_and_unknown_option(path, capsys):
    code, out, err = _run(capsys, [*path, "--help"])
    assert code == 0 and "Usage: darknumba " + " ".join(path) in out, (code, out, err)
    code, out, err = _run(capsys, [*path, "--no-such-option"])
    assert code == 2, (code, out, err)
    line = _one_error_line(err)     # (detector demo takes Darknet's flags among its arguments)
    assert "No such option" in line or path == ("detector", "demo"), line


def _template(path):
    """The command line of `path` with "{bad}" where it reads a file (None: it reads none)."""
    template = ARGV.get(path, [NOT_FILES.get(p.name, "{bad}") for p in _arguments(COMMANDS[path])])
    return template if template and "{bad}" in template else None


READERS = sorted(p for p in COMMANDS if _template(p))


def test_the_commands_that_read_no_named_file():
    assert {" ".join(p) for p in COMMANDS if p not in READERS} == \
        {"classifier example", "data shapes", "weights fetch"}


@pytest.mark.parametrize("kind", ["missing", "directory", "device"])
@pytest.mark.parametrize("path", READERS, ids=" ".join)
def test_a_bad_file_is_one_line(path, kind, tmp_path, capsys, monkeypatch):
    template = _template(path)
    bad = {"missing": tmp_path / "nope.cfg", "directory": tmp_path / "dir.cfg",
           "device": "/dev/zero"}[kind]
    if kind == "directory":
        bad.mkdir()
    monkeypatch.chdir(tmp_path)
    if str(WEIGHTS) in template:    # the real weights before the bad file: fetched if missing
        official_weights("yolov3-tiny", WEIGHTS)
    code, out, err = _run(capsys, [*path, *(a.format(bad=bad, tmp=tmp_path) for a in template)])
    assert code in (1, 2), (code, out, err)
    line = _one_error_line(err)
    assert str(bad) in line or os.path.basename(bad) in line or "dir.cfg" in err, line


ZERO = [  # (argv, the option named): the count first, so that it is read before the files
    (["detector", "train", "--max-batches", "0", "d.data", "c.cfg"], "--max-batches"),
    (["detector", "train", "--workers", "0", "d.data", "c.cfg"], "--workers"),
    (["detector", "train", "--checkpoint-every", "0", "d.data", "c.cfg"], "--checkpoint-every"),
    (["classifier", "train", "--max-batches", "0", "d.data", "c.cfg"], "--max-batches"),
    (["classifier", "train", "--log-every", "0", "d.data", "c.cfg"], "--log-every"),
    (["classifier", "valid", "--batch", "0", "d.data", "c.cfg", "w"], "--batch"),
    (["classifier", "predict", "--top", "0", "d.data", "c.cfg", "w", "i.png"], "--top"),
    (["classifier", "example", "--n", "0", "out"], "--n"),
    (["rnn", "train", "--max-batches", "0", "c.cfg", "t.txt"], "--max-batches"),
    (["rnn", "generate", "--len", "0", "c.cfg", "w"], "--len"),
    (["rnn", "valid", "--log-every", "0", "c.cfg", "w"], "--log-every"),
    (["data", "shapes", "--n", "0", "out"], "--n"),
    (["summary", "--batch", "0", "c.cfg"], "--batch"),
    (["bench", "--reps", "0", "c.cfg"], "--reps"),
    (["bench", "--batch", "0", "c.cfg"], "--batch"),
    (["detect", "--batch", "0"], "--batch"),
    (["detector", "calc_anchors", "-num_of_clusters", "0", "d.data"], "-num_of_clusters"),
    (["export", "onnx", "--batch", "0", "c.cfg", "w", "o.onnx"], "--batch"),
    (["speed", "--tics", "0", "c.cfg"], "--tics"),
    (["partial", str(CFG), str(WEIGHTS), "out.weights", "0"], "'n'"),
]


@pytest.mark.parametrize("argv, option", ZERO, ids=[" ".join(a[:3]) for a, _ in ZERO])
def test_a_count_of_zero_is_a_usage_error(argv, option, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if str(WEIGHTS) in argv:        # partial checks its files before the count: fetched if missing
        official_weights("yolov3-tiny", WEIGHTS)
    code, out, err = _run(capsys, argv)
    line = _one_error_line(err)
    assert code == 2 and option in line, (code, err)


def _darknumba(args, stdout):
    return subprocess.run([sys.executable, "-c", "from darknumba.cli import main; main()", *args],
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300)


@pytest.mark.parametrize("args", [["summary", str(CFG)], ["--help"], ["detector", "--help"]])
def test_a_closed_or_full_stdout_is_exit_1_without_a_traceback(args):
    r, w = os.pipe()
    os.close(r)                                 # `darknumba ... | head -c0`
    try:
        p = _darknumba(args, w)
    finally:
        os.close(w)
    assert p.returncode == 1 and p.stderr == "", (p.returncode, p.stderr)
    with open("/dev/full", "w") as full:
        p = _darknumba(args, full)
    assert p.returncode == 1 and "Traceback" not in p.stderr and "Exception ignored" \
        not in p.stderr, p.stderr
    assert _one_error_line(p.stderr).startswith("darknumba: error: ")
