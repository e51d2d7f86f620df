"""The command line's contract, the same for every command: exit status 0 success, 1 bad input
(one line naming what and where), 2 usage, 3 internal error (one line saying it is a bug and how
to report it), 130 interrupted; --debug / DARKNUMBA_DEBUG=1 add the traceback."""
import errno
import subprocess
import sys

import pytest
from conftest import ROOT

import darknumba.parser
from darknumba.cli import run

TINY_CFG = ROOT / "cfg" / "shapes-tiny.cfg"


def call(capsys, *args):
    code = run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_success_is_0(capsys):
    code, out, err = call(capsys, "summary", TINY_CFG)
    assert code == 0 and "yolo" in out and err == ""


def test_bad_cfg_is_1_with_one_line(tmp_path, capsys):
    cfg = tmp_path / "bad.cfg"
    cfg.write_text("[net]\nwidth=32\nheight=32\nchannels=3\n[convolutional]\nfilters=x\n")
    code, _, err = call(capsys, "summary", cfg)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith(f"darknumba: error: {cfg}:6")
    assert "Traceback" not in err


def test_os_error_on_a_user_file_is_1_naming_the_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    weights = tmp_path / "w.weights"
    net = darknumba.parser.parse_network_cfg(TINY_CFG, batch=1)
    darknumba.save_weights(net, weights)
    code, _, err = call(capsys, "partial", TINY_CFG, weights, blocker / "out.weights", 2)
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("darknumba: error: ") and str(blocker) in err


def test_usage_is_2(capsys):
    code, _, err = call(capsys, "summary", "--no-such-option", TINY_CFG)
    assert code == 2 and "No such option" in err
    code, _, err = call(capsys, "summary")
    assert code == 2 and "Missing argument" in err
    code, _, err = call(capsys, "detector", "train", TINY_CFG, TINY_CFG, "--bad-data", "never")
    assert code == 2 and "--bad-data takes skip or stop" in err


def _raise(exc):
    def f(*a, **k):
        raise exc
    return f


def test_internal_error_is_3_one_line_and_traceback_with_debug(monkeypatch, capsys):
    monkeypatch.setattr(darknumba.parser, "parse_network_cfg", _raise(ZeroDivisionError("boom")))
    code, _, err = call(capsys, "summary", TINY_CFG)
    assert code == 3 and err.count("\n") == 1 and "Traceback" not in err
    assert "internal error" in err and "ZeroDivisionError: boom" in err
    assert "--debug" in err and "open an issue" in err
    code, _, err = call(capsys, "--debug", "summary", TINY_CFG)
    assert code == 3 and "Traceback (most recent call last)" in err
    assert err.rstrip().splitlines()[-1].startswith("darknumba: internal error")
    monkeypatch.setenv("DARKNUMBA_DEBUG", "1")
    code, _, err = call(capsys, "summary", TINY_CFG)
    assert code == 3 and "Traceback (most recent call last)" in err


@pytest.mark.parametrize("exc, code, text", [
    (MemoryError(), 1, "darknumba: error: out of memory"),
    (OSError(errno.ENOSPC, "No space left on device", "/x/y.weights"), 1,
     "darknumba: error: /x/y.weights: No space left on device (free some space"),
    (OSError(errno.EFBIG, "File too large"), 1, "darknumba: error: File too large (the file-size"),
    (KeyboardInterrupt(), 130, ""),
])
def test_environment_errors_and_ctrl_c(monkeypatch, capsys, exc, code, text):
    monkeypatch.setattr(darknumba.parser, "parse_network_cfg", _raise(exc))
    got, _, err = call(capsys, "summary", TINY_CFG)
    assert got == code and err.startswith(text) and "Traceback" not in err


def test_installed_entry_point_exits_with_the_status(tmp_path):
    cfg = tmp_path / "bad.cfg"
    cfg.write_text("[net]\nwidth=-\n")
    p = subprocess.run([sys.executable, "-c", "from darknumba.cli import main; main()",
                        "summary", str(cfg)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr


def test_a_run_builds_only_the_command_it_names(capsys):
    from darknumba.cli import _narrowed, app
    one = _narrowed(app, ["--debug", "detector", "train", "x.data"])
    assert [c.callback.__name__ for c in one.registered_commands] == []
    (group,) = one.registered_groups
    assert group.name == "detector"
    assert [c.name for c in group.typer_instance.registered_commands] == ["train"]
    assert len(app.registered_commands) > 5           # the app itself is left whole
    assert _narrowed(app, ["detec"]) is app and _narrowed(app, ["--help"]) is app
    code, out, _ = call(capsys, "detector", "train", "--help")
    assert code == 0 and "Usage: darknumba detector train" in out
    code, _, err = call(capsys, "detec")                # a typo: the whole app, typer's hint
    assert code == 2 and "detect" in err
    code, out, _ = call(capsys, "--debug", "summary", TINY_CFG)
    assert code == 0 and "yolo" in out
