"""`darknumba compare`: the .npz path against the recorded C darknet fixtures (always), and a
real C darknet build when DARKNET_DIR points at one (pjreddie darknet, built with `make`)."""
import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA, ROOT, golden_dir, tiny_weights
from typer.testing import CliRunner

import darknumba as dn
from darknumba.cli import app
from darknumba.errors import DarknumbaError
from darknumba.parity.compare import compare_npz
from darknumba.parity.darknet_ref import DarknetTree, find_compiler, run_darknet
from darknumba.parity.tensordiff import diff, term_scale

runner = CliRunner()
FORWARD = [("det-small", "forward_test"), ("det-small", "forward_train"),
           ("cls-small", "forward_test"), ("cls-small-fc", "forward_test"),
           ("act-mix", "forward_test")]


def fixture_args(fixture, run):
    d = golden_dir(fixture)
    return [str(d / f"{fixture}.cfg"), str(d / "init.weights")], d / run / "data.npz"


def cli(*args):
    r = runner.invoke(app, ["compare", *map(str, args)])
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r


# -- the .npz path -------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture,run", FORWARD)
def test_npz_forward_fixtures_pass(fixture, run):
    (cfg, weights), npz = fixture_args(fixture, run)
    report, _, _ = compare_npz(npz, cfg, weights)
    assert report.passed, report.table()
    assert [r.layer for r in report.rows if r.tensor == "output"] == list(range(len(
        json.loads(str(np.load(npz)["manifest_json"]))["layers"])))


@pytest.mark.parametrize("fixture", ["det-small", "cls-small-fc", "act-mix"])
def test_npz_trainstep_passes(fixture):
    (cfg, weights), npz = fixture_args(fixture, "trainstep")
    report, _, _ = compare_npz(npz, cfg, weights)
    assert report.passed, report.table()
    tensors = {r.tensor for r in report.rows}
    assert {"delta", "weight_updates", "bias_updates", "weights step", "rate"} <= tensors
    assert report.scalars["rate"]["darknumba"] == pytest.approx(report.scalars["rate"]["darknet"])


def test_npz_kink_straddle_is_named():
    """cls-small: one leaky output sits within rounding of 0 and lands on the other side in C,
    so layer 2's delta parts while every output agrees; the report says why."""
    (cfg, weights), npz = fixture_args("cls-small", "trainstep")
    report, _, _ = compare_npz(npz, cfg, weights)
    f = report.first_failure
    assert (f.layer, f.tensor) == (2, "delta") and "other side" in f.note
    assert all(r.ok for r in report.rows if r.tensor == "output")


def test_cli_npz_perturbed_weights_file_names_layer(tmp_path):
    (cfg, weights), npz = fixture_args("det-small", "forward_test")
    net = dn.load_network(cfg, weights)
    net.layers[5].weights[7] += 0.5
    bad = tmp_path / "bad.weights"
    dn.save_weights(net, bad)
    r = cli("--npz", npz, cfg, bad)
    assert r.exit_code == 1, r.output
    assert "first difference at layer 5 (convolutional) output" in r.output
    ok = cli("--npz", npz, cfg, weights)
    assert ok.exit_code == 0 and "PASS" in ok.output


def test_cli_perturb_option_json_and_dump_roundtrip(tmp_path):
    (cfg, weights), npz = fixture_args("det-small", "forward_train")
    r = cli("--npz", npz, cfg, weights, "--perturb", "9:3", "--json", "--dump", tmp_path)
    assert r.exit_code == 1
    report = json.loads(r.stdout[r.stdout.index("{"):])
    assert report["first_failure"]["layer"] == 9 and report["first_failure"]["tensor"] == "output"
    assert not report["passed"] and report["mode"] == "forward_train"
    # darknumba's own dump is a valid reference: the unperturbed network differs from it at 9
    r = cli("--npz", tmp_path / "darknumba.npz", cfg, weights)
    assert r.exit_code == 1 and "first difference at layer 9" in r.output
    r = cli("--npz", tmp_path / "darknet.npz", cfg, weights)
    assert r.exit_code == 0, r.output


def test_cli_argument_errors(monkeypatch, tmp_path):
    (cfg, weights), npz = fixture_args("det-small", "forward_test")
    monkeypatch.delenv("DARKNET_DIR", raising=False)
    with pytest.raises(DarknumbaError, match="exactly one of --darknet"):
        cli(cfg, weights)
    monkeypatch.setenv("DARKNET_DIR", str(tmp_path / "nope"))        # the default --darknet
    with pytest.raises(DarknumbaError, match=f"--darknet {tmp_path / 'nope'}: no such directory"):
        cli(cfg, weights)
    r = cli("--npz", npz, cfg, weights)                               # --npz wins over it
    assert r.exit_code == 0, r.output
    with pytest.raises(DarknumbaError, match="brings its own input"):
        cli("--npz", npz, cfg, weights, "--random-input")
    with pytest.raises(DarknumbaError, match="layer 1 .maxpool. has no weights"):
        cli("--npz", npz, cfg, weights, "--perturb", "1")


def test_diff_scales_cancelling_sums_by_their_terms():
    d, r = diff([1e-3], [0.0])
    assert d == pytest.approx(1e-3) and r == pytest.approx(1e3)
    assert diff([1e-3], [0.0], terms=np.array([100.0]))[1] == pytest.approx(1e-5)
    assert diff([np.nan, 1.0], [np.nan, 1.0]) == (0.0, 0.0)

    class Conv:
        type, n, out_h, out_w, batch, nweights = "convolutional", 2, 1, 2, 1, 6
    ref = {"L001_delta_in": np.array([1, -1, 2, -2], np.float32),
           "L000_output": np.array([0.5, -3], np.float32)}
    assert term_scale("bias_updates", 1, ref, Conv()).tolist() == [2, 4]
    assert term_scale("weight_updates", 1, ref, Conv()).tolist() == [6] * 3 + [12] * 3


# -- locating a darknet tree (no build needed) ------------------------------------------------

def test_darknet_tree_errors(tmp_path, monkeypatch):
    with pytest.raises(DarknumbaError, match="no such directory"):
        DarknetTree.locate(tmp_path / "nope")
    with pytest.raises(DarknumbaError, match="no include/darknet.h"):
        DarknetTree.locate(tmp_path)
    (tmp_path / "include").mkdir()
    h = tmp_path / "include" / "darknet.h"
    h.write_text("#define LIB_API\nLIB_API network *load_network_custom(char *cfg, char *w, "
                 "int clear, int batch);\n")
    with pytest.raises(DarknumbaError, match="AlexeyAB"):
        DarknetTree.locate(tmp_path)
    h.write_text("struct layer{int batch;};\nfloat train_network_datum(network *net);\n")
    (tmp_path / "libdarknet.a").write_bytes(b"")
    with pytest.raises(DarknumbaError, match="no libdarknet.so.*libdarknet.a"):
        DarknetTree.locate(tmp_path)
    monkeypatch.setenv("CC", "no-such-cc")
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(DarknumbaError, match="no C compiler"):
        find_compiler()


@pytest.mark.parametrize("name", ["a,b", "x:y", "$ORIGIN", "new\nline", "semi;colon"])
def test_darknet_folder_with_linker_syntax_is_refused(tmp_path, name):
    """The folder is pasted into -Wl,-rpath,DIR: a comma would hand the linker options (e.g.
    `-o` elsewhere), a colon or $ would change the library search path."""
    d = tmp_path / name
    d.mkdir()
    with pytest.raises(DarknumbaError, match="would read as syntax"):
        DarknetTree.locate(d)


def test_shim_compile_is_one_rpath_argument_and_times_out(tmp_path, monkeypatch):
    import subprocess

    from darknumba.parity import darknet_ref
    tree = DarknetTree(tmp_path / "dk tree", tmp_path / "darknet.h", tmp_path / "libdarknet.so")
    for p in (tree.header, tree.library):
        p.write_bytes(b"x")
    monkeypatch.setenv("DARKNUMBA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(darknet_ref, "find_compiler", lambda: "/bin/cc")
    seen = {}

    def slow(cmd, **kw):
        seen["cmd"], seen["timeout"] = cmd, kw.get("timeout")
        raise subprocess.TimeoutExpired(cmd, kw.get("timeout"))
    monkeypatch.setattr(darknet_ref.subprocess, "run", slow)
    with pytest.raises(DarknumbaError, match="took more than 300 s"):
        darknet_ref.compile_shim(tree)
    assert seen["timeout"] == darknet_ref.COMPILE_TIMEOUT
    assert f"-Wl,-rpath,{tmp_path / 'dk tree'}" in seen["cmd"]
    assert list((tmp_path / "cache").iterdir()) == []                 # no half-built shim left


# -- a real C darknet (DARKNET_DIR) ---------------------------------------------------------------

def darknet_dir() -> Path:
    d = os.environ.get("DARKNET_DIR")
    if not d:
        pytest.skip("DARKNET_DIR is not set (point it at a pjreddie darknet tree built with make)")
    return Path(d)


@pytest.fixture(scope="module")
def tiny_dog(tmp_path_factory):
    """yolov3-tiny + official weights on dog.jpg, compared once (with --dump) for the tests below."""
    dk = darknet_dir()
    weights = tiny_weights()
    dog = DATA / "dog.jpg"
    if not dog.exists():
        pytest.skip(f"{dog} not found")
    dump = tmp_path_factory.mktemp("dump")
    args = ["--darknet", dk, ROOT / "cfg" / "yolov3-tiny.cfg", weights, dog]
    return args, cli(*args, "--dump", dump), dump


def test_darknet_yolov3_tiny_dog_forward_passes(tiny_dog):
    _, r, dump = tiny_dog
    assert r.exit_code == 0, r.output
    assert "PASS: 24 tensors" in r.output
    ref = np.load(dump / "darknet.npz")
    assert ref["L023_output"].size == 255 * 26 * 26 and ref["input"].size == 3 * 416 * 416


def test_darknet_perturbed_weight_names_layer(tiny_dog):
    args, _, dump = tiny_dog
    r = cli(*args, "--perturb", "13:100")
    assert r.exit_code == 1
    assert "first difference at layer 13 (convolutional) output" in r.output
    # the C side's dump replays through --npz on any machine
    r = cli("--npz", dump / "darknet.npz", *args[2:4])
    assert r.exit_code == 0, r.output


def test_darknet_det_small_train_step_passes():
    dk = darknet_dir()
    d = golden_dir("det-small")
    r = cli("--darknet", dk, d / "det-small.cfg", d / "init.weights", d / "input.f32",
            "--train", "--truth", d / "truth.f32", "--json")
    report = json.loads(r.stdout[r.stdout.index("{"):])
    assert r.exit_code == 0, r.output
    assert report["mode"] == "trainstep" and report["scalars"]["did_update"]["darknet"] == 1
    tensors = {(row["layer"], row["tensor"]) for row in report["rows"]}
    assert {(9, "weight_updates"), (0, "delta"), (0, "weights step"), (17, "delta")} <= tensors


def test_darknet_rejected_cfg_is_reported(tmp_path):
    dk = darknet_dir()
    bad = tmp_path / "bad.cfg"
    bad.write_text("[convolutional]\nfilters=4\n")
    with pytest.raises(DarknumbaError, match="C darknet rejected .*bad.cfg"):
        run_darknet(DarknetTree.locate(dk), bad, None, "forward_test", x=np.zeros(1, np.float32))
