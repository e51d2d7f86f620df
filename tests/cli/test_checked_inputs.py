"""Every file a command reads goes through one checked reader (inputs.py): a directory, a
character device, a FIFO or an oversized file is one error naming it, exit status 1, before
anything opens it; `compare --npz` checks its archive (parity/npz.py); `rnn valid` scores texts
whose words never end."""
import json
import os
import zipfile

import numpy as np
import pytest
from conftest import ROOT, golden_dir

from darknumba.cfg import read_cfg
from darknumba.cli import run
from darknumba.errors import CfgError, DataError
from darknumba.inputs import read_bytes, regular_file

RNN_CFG = ROOT / "cfg" / "rnn-tiny.cfg"


def one_line_error(capsys, *args) -> str:
    code = run([str(a) for a in args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) >= 1 and err[-1].startswith("darknumba: error: "), (code, err)
    assert not any("Traceback" in ln for ln in err)
    return err[-1]


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "pipe"
    os.mkfifo(p)
    return p


def test_reader_refuses_what_is_not_a_regular_file(tmp_path, fifo):
    for path, kind in [("/dev/zero", "a character device"), (tmp_path, "a directory"),
                       (fifo, "a named pipe")]:
        with pytest.raises(DataError, match=f"{path}: cannot read list: it is {kind}"):
            read_bytes(path, "list", DataError)
    with pytest.raises(DataError, match="nope.txt: cannot read list: No such file"):
        read_bytes(tmp_path / "nope.txt", "list", DataError)
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 11)
    with pytest.raises(DataError, match="big.txt: cannot read list: 11 bytes is more than the 10"):
        read_bytes(big, "list", DataError, max_bytes=10)
    assert regular_file(big, "list") == 11 and read_bytes(big, "list", max_bytes=11) == b"x" * 11


def test_cfg_that_is_a_device_or_fifo_is_refused_before_reading(fifo):
    for path in ("/dev/zero", fifo):
        with pytest.raises(CfgError, match="cannot read cfg file: it is a"):
            read_cfg(path)


@pytest.mark.parametrize("argv", [
    ["summary", "{bad}"], ["bench", "{bad}", "--reps", "1"],
    ["export", "onnx", "{bad}", "{w}", "{tmp}/out.onnx"],
    ["export", "weights", "{bad}", "{w}", "{tmp}/out.weights", "--fuse-bn"],
    ["data", "check", "{bad}"], ["rnn", "train", "{bad}", "{tmp}/t.txt"],
    ["rnn", "train", str(RNN_CFG), "{bad}"]])
@pytest.mark.parametrize("bad", ["/dev/zero", "fifo"])
def test_commands_refuse_devices_and_fifos(argv, bad, tmp_path, capsys):
    if bad == "fifo":
        bad = tmp_path / "pipe"
        os.mkfifo(bad)
    (tmp_path / "t.txt").write_text("abc abc\n")
    w = ROOT / "weights" / "yolov3-tiny.weights"
    argv = [a.format(bad=bad, w=w, tmp=tmp_path) for a in argv]
    msg = one_line_error(capsys, *argv)
    assert f"{bad}" in msg and ("not a regular file" in msg or "named pipe" in msg), msg


def test_rnn_valid_scores_a_text_without_spaces(tmp_path, capsys):
    """A long run without whitespace made the word perplexity 2 ** (a large number): Python's
    OverflowError; it is inf now."""
    from darknumba.parser import parse_network_cfg
    from darknumba.weights import save_weights
    cfg = tmp_path / "one.cfg"
    cfg.write_text(RNN_CFG.read_text())
    w = tmp_path / "w.weights"
    save_weights(parse_network_cfg(cfg, seed=1), w)
    text = tmp_path / "long.txt"
    text.write_bytes(b"\x01" * 3000)
    assert run(["rnn", "valid", str(cfg), str(w), str(text), "--log-every", "5000"]) == 0
    assert "Word Perplexity:  inf" in capsys.readouterr().out
    assert "/dev/zero" in one_line_error(capsys, "rnn", "valid", cfg, w, "/dev/zero")


# -- compare --npz ---------------------------------------------------------------------------------
def _fixture():
    d = golden_dir("det-small")
    return d / "det-small.cfg", d / "init.weights", d / "forward_test" / "data.npz"


def _npz(path, **members):
    cfg, weights, good = _fixture()
    with np.load(good) as data:
        arrays = {k: data[k] for k in data.files}
    arrays.update(members)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


@pytest.mark.parametrize("case, expect", [
    ("text", "not an .npz file"),
    ("npy", "not an .npz file"),
    ("truncated", "not an .npz file"),
    ("corrupt", "is not a numeric array numpy can read: BadZipFile"),
    ("object", "'input' is not a numeric array"),
    ("strings", "tensor 'L000_output' holds <U"),
    ("manifest-not-json", "manifest_json is not JSON"),
    ("manifest-list", "manifest_json is a JSON list"),
    ("layers-of-numbers", "manifest_json: layers = [1, 2]"),
    ("bwd-dest-out-of-range", "names layer 99"),
    ("run-batch-text", "run_json: batch = 'two'"),
    ("update-without-rate", "without the learning rate"),
    ("input-size", "values; the network's input needs"),
    ("device", "it is a character device"),
])
def test_compare_npz_bad_archives_are_one_line_errors(case, expect, tmp_path, capsys):
    cfg, weights, good = _fixture()
    p = tmp_path / "bad.npz"
    with np.load(good) as data:
        manifest = json.loads(str(data["manifest_json"]))
    if case == "text":
        p.write_text("not a zip\n")
    elif case == "npy":
        np.save(tmp_path / "bad.npy", np.zeros(3))
        os.replace(tmp_path / "bad.npy", p)
    elif case == "truncated":
        p.write_bytes(good.read_bytes()[:-200])
    elif case == "corrupt":
        data = bytearray(good.read_bytes())
        data[len(data) // 2] ^= 0xff
        p.write_bytes(bytes(data))
    elif case == "object":
        np.savez(p, input=np.array([{"a": 1}, None], dtype=object))
    elif case == "strings":
        _npz(p, L000_output=np.array(["a", "b"]))
    elif case == "manifest-not-json":
        _npz(p, manifest_json=np.array("{nope"))
    elif case == "manifest-list":
        _npz(p, manifest_json=np.array("[1]"))
    elif case == "layers-of-numbers":
        _npz(p, manifest_json=np.array(json.dumps({**manifest, "layers": [1, 2]})))
    elif case == "bwd-dest-out-of-range":
        layers = [dict(d) for d in manifest["layers"]]
        layers[-1]["bwd_dests"] = [99]
        _npz(p, manifest_json=np.array(json.dumps({**manifest, "layers": layers})))
    elif case == "run-batch-text":
        _npz(p, run_json=np.array(json.dumps({"mode": "forward_test", "batch": "two"})),
             manifest_json=np.array(json.dumps({**manifest, "net": {}})))
    elif case == "update-without-rate":
        _npz(p, run_json=np.array(json.dumps({"mode": "trainstep", "did_update": 1})))
    elif case == "input-size":
        _npz(p, input=np.zeros(7, np.float32))
    elif case == "device":
        p = "/dev/zero"
    msg = one_line_error(capsys, "compare", cfg, weights, "--npz", p)
    assert f"{p}" in msg and expect in msg, msg


def test_compare_npz_refuses_a_zip_bomb(tmp_path, capsys, monkeypatch):
    import darknumba.parity.npz as npz
    cfg, weights, good = _fixture()
    monkeypatch.setattr(npz, "MAX_NPZ_DATA", 1000)
    msg = one_line_error(capsys, "compare", cfg, weights, "--npz", good)
    assert "unpack to" in msg and "more than the 1,000" in msg
    with zipfile.ZipFile(good) as z:
        assert sum(i.file_size for i in z.infolist()) > 1000


# -- data sets -------------------------------------------------------------------------------------
def test_no_usable_images_names_the_list(tmp_path):
    from darknumba.data.datasets import valid_dataset
    (tmp_path / "empty.txt").write_text("\n")
    (tmp_path / "gone.txt").write_text("nope.jpg\n")
    for lst, why in [("empty.txt", "the list names none"), ("gone.txt", "1 missing-image")]:
        data = tmp_path / "d.data"
        data.write_text(f"classes=1\ntrain={lst}\nvalid={lst}\n")
        with pytest.raises(DataError, match=f"{tmp_path / lst}: no usable images .*{why}"):
            valid_dataset(data)
    from darknumba.train.classifier import labelled_paths
    with pytest.raises(DataError, match=f"{tmp_path / 'empty.txt'}: no usable images"):
        labelled_paths(str(tmp_path / "empty.txt"), ["a", "b"])


def test_label_file_that_is_a_fifo_is_a_problem_not_a_hang(tmp_path):
    from darknumba.data.datasets import DataIssues, parse_label_file
    os.mkfifo(tmp_path / "a.txt")
    issues = DataIssues()
    assert parse_label_file(str(tmp_path / "a.txt"), 3, issues) is None
    assert "named pipe" in str(issues.issues[0]) and issues.issues[0].kind == "unreadable-label"


def test_weights_fetch_refuses_what_is_not_a_file_in_the_way(tmp_path, capsys):
    """The file to check (sha256) and replace is read only when it is a regular one: a FIFO
    blocked the command, before any download."""
    os.mkfifo(tmp_path / "yolov3-tiny.weights")
    msg = one_line_error(capsys, "weights", "fetch", "yolov3-tiny", "--dir", tmp_path)
    assert "yolov3-tiny.weights" in msg and "named pipe" in msg


def test_compare_input_tensors_are_checked(tmp_path):
    from darknumba.errors import DarknumbaError
    from darknumba.parity.compare import read_floats
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object))
    np.save(tmp_path / "s.npy", np.array(["a"]))
    np.save(tmp_path / "g.npy", np.arange(4))
    for name, expect in [("o.npy", "Object arrays"), ("s.npy", "<U1 values, not numbers"),
                         ("nope.npy", "No such file")]:
        with pytest.raises(DarknumbaError, match=expect):
            read_floats(tmp_path / name, "input")
    with pytest.raises(DarknumbaError, match="character device"):
        read_floats("/dev/zero", "input")
    assert read_floats(tmp_path / "g.npy", "input").tolist() == [0, 1, 2, 3]


def test_rnn_valid_reads_a_bounded_standard_input(tmp_path, capsys, monkeypatch):
    import io
    import sys

    import darknumba.inputs as inputs
    from darknumba.parser import parse_network_cfg
    from darknumba.weights import save_weights
    w = tmp_path / "w.weights"
    save_weights(parse_network_cfg(RNN_CFG, seed=1), w)
    monkeypatch.setattr(inputs, "MAX_TEXT", 100)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"y" * 101)))
    msg = one_line_error(capsys, "rnn", "valid", RNN_CFG, w)
    assert "standard input holds more than 100 bytes" in msg


def test_detector_test_refuses_an_endless_stdin_line(tmp_path, capsys, monkeypatch):
    """Paths typed on stdin are read a bounded line at a time: `< /dev/zero` is a usage error
    (exit 2) naming stdin, not a read until memory runs out."""
    import io
    import sys

    import darknumba.cli.detector_test as detector_test
    from tiny_nets import write_small_detector
    cfg, weights, names = write_small_detector(tmp_path)
    data = tmp_path / "small.data"
    data.write_text(f"classes=2\nnames={names}\n")
    monkeypatch.setattr(detector_test, "MAX_PATH_LINE", 64)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\0" * 1000)))
    code = run(["detector", "test", str(data), str(cfg), str(weights), "-dont_show"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("darknumba: error: stdin: a line longer than 64")
