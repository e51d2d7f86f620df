"""`darknumba compare`: the .npz path against the recorded C darknet fixtures (always), and a
real C darknet build when DARKNET_DIR points at one (pjreddie darknet, built with `make`)."""
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import (ROOT, darknet_ab_dir, darknet_photo, golden_dir, official_weights,
                      tiny_weights, v4tiny_weights)
from typer.testing import CliRunner

import darknumba as dn
from darknumba.cli import app
from darknumba.errors import DarknumbaError
from darknumba.parity.compare import compare_npz
from darknumba.parity.darknet_ref import DarknetTree, find_compiler, run_darknet, tree_kind
from darknumba.parity.roundoff import abs_terms, recursive_sum_bound, sum_tol
from darknumba.parity.tensordiff import diff, term_scales

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
    with pytest.raises(ValueError, match="2 values against 3"):
        diff([1, 2], [1, 2, 3])


def test_term_scales_are_sums_of_absolute_terms():
    """A connected layer (batch 2, 2 -> 2) after a layer without gradients: bias_updates sums
    |delta| over the batch, weight_updates |delta| * |input|, and the momentum buffer after
    the update momentum * (those + decay * batch * |weights|)."""
    from darknumba.layers.connected import ConnectedLayer
    l = ConnectedLayer(2, 2, 2, "logistic")
    ref = {"L001_delta_in": np.array([1, -1, 2, -2], np.float32),
           "L001_output": np.array([0.5, 0.5, 0.5, 0.5], np.float32),     # act' = 0.25
           "L001_delta": np.array([4, -4, 8, -8], np.float32),
           "L000_output": np.array([0.5, -3, 1, 2], np.float32),
           "before_L001_weights": np.array([1, -2, 0, 4], np.float32)}
    S = term_scales(ref, [ConnectedLayer(2, 2, 2, "linear"), l], momentum=0.9, decay_batch=0.5)
    assert S["L001_bias_updates"].tolist() == [0.75, 0.75]
    assert S["L001_weight_updates"].tolist() == [10, 28, 10, 28]
    np.testing.assert_allclose(S["after_L001_weight_updates"], 0.9 * np.array([10.5, 29, 10, 30]))
    assert set(S) == {"L001_bias_updates", "L001_weight_updates", "after_L001_bias_updates",
                      "after_L001_weight_updates"}


# -- locating a darknet tree (no build needed) ------------------------------------------------

def test_darknet_tree_errors(tmp_path, monkeypatch):
    with pytest.raises(DarknumbaError, match="no such directory"):
        DarknetTree.locate(tmp_path / "nope")
    with pytest.raises(DarknumbaError, match="no include/darknet.h"):
        DarknetTree.locate(tmp_path)
    (tmp_path / "include").mkdir()
    h = tmp_path / "include" / "darknet.h"
    h.write_text("typedef struct DarknetNetwork_ *DarknetNetworkPtr;\n")
    with pytest.raises(DarknumbaError, match="hank-ai.*not supported"):
        DarknetTree.locate(tmp_path)
    h.write_text("#define LIB_API\nLIB_API network *load_network_custom(char *cfg, char *w, "
                 "int clear, int batch);\ntypedef struct network_state {int train;} network_state;\n")
    (tmp_path / "libdarknet.so").write_bytes(b"")
    tree = DarknetTree.locate(tmp_path)
    assert tree.kind == "alexeyab" and tree.shim_source.name == "compare_shim_ab.c"
    (tmp_path / "libdarknet.so").unlink()
    h.write_text("struct layer{int batch;};\nfloat train_network_datum(network *net);\n"
                 "void reset_network_state(network *net, int b);\n")
    assert tree_kind(tmp_path, h.read_text()) == "pjreddie"
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
    dog = darknet_photo("dog.jpg")
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


# -- the per-layer figure: replay on C's inputs, tolerances from the reductions ---------------

def test_recursive_sum_bound_covers_float32_sums():
    """u * sum |partial sums| bounds a one-by-one float32 sum, also where equal values make
    the rounding drift one way (a grey border), which sqrt(K) tolerances would not cover."""
    rng = np.random.default_rng(0)
    for v in (np.full(200_000, 0.3, np.float32), rng.random(50_000, dtype=np.float32),
              rng.standard_normal(50_000).astype(np.float32)):
        exact = float(np.sum(v, dtype=np.float64))
        seq = float(np.add.accumulate(v, dtype=np.float32)[-1])
        assert abs(seq - exact) <= recursive_sum_bound(v[None])[0]
    drift = np.full(200_000, 0.3, np.float32)
    err = abs(float(np.add.accumulate(drift, dtype=np.float32)[-1]) - 0.3 * 200_000)
    assert err > float(sum_tol(drift.size, np.abs(drift).sum()))   # the drift is real


def test_sum_tol_covers_reordered_dot_products():
    """BLAS (blocked) vs one-by-one float32 dot products stay within C_SUM eps sqrt(K) sum|t|."""
    rng = np.random.default_rng(1)
    for K in (27, 4608, 173_056):
        a = rng.standard_normal((8, K)).astype(np.float32)
        b = rng.random(K, dtype=np.float32)
        blas = a @ b
        seq = np.array([np.add.accumulate(r * b, dtype=np.float32)[-1] for r in a])
        tau = sum_tol(K, np.abs(a) @ np.abs(b))
        assert np.all(np.abs(blas.astype(np.float64) - seq) <= tau)


def test_abs_terms_are_the_sums_of_absolute_terms(tmp_path):
    """roundoff.abs_terms runs the layer itself on |x|, |w|, |delta|: its three results are
    sum |w x| (output), sum |delta x| (weight gradient), sum |w delta| (input gradient)."""
    from naive import conv_backward
    rng = np.random.default_rng(2)
    cfg = tmp_path / "two.cfg"
    cfg.write_text("[net]\nbatch=2\nwidth=7\nheight=6\nchannels=3\n"
                   "[convolutional]\nfilters=4\nsize=3\nstride=2\npad=1\nactivation=leaky\n"
                   "batch_normalize=1\n[convolutional]\nfilters=5\nsize=3\nstride=1\npad=1\n"
                   "activation=leaky\n")
    net = dn.load_network(cfg)
    l = net.layers[1]
    l.weights[:] = rng.standard_normal(l.weights.size).astype(np.float32)
    x = rng.standard_normal(l.batch * l.inputs).astype(np.float32)
    d = rng.standard_normal(l.batch * l.outputs).astype(np.float32)
    t_out, t_wu, t_prev = abs_terms(l, net, x, d)
    dw, dx = conv_backward(np.abs(x), np.abs(l.weights), np.abs(d), l.batch, l.c, l.h, l.w,
                           l.n, l.size, l.stride, l.pad, 1)
    np.testing.assert_allclose(t_wu, dw, rtol=1e-5)
    np.testing.assert_allclose(t_prev, dx, rtol=1e-5)
    ones = np.zeros_like(d)
    for k in rng.integers(0, d.size, 20):        # sum |w x| of one output: <|delta| = e_k, ...>
        ones[:] = 0
        ones[k] = 1
        _, dxk = conv_backward(np.abs(x), np.abs(l.weights), ones, l.batch, l.c, l.h, l.w,
                               l.n, l.size, l.stride, l.pad, 1)
        assert t_out[k] == pytest.approx(float(dxk @ np.abs(x).astype(np.float64)), rel=1e-5)


def test_npz_per_layer_verdict_catches_a_1e3_change_at_every_layer(monkeypatch):
    """Every layer's output is judged on C's input; making one layer's own result 0.1% larger
    (one layer of each type) fails that layer, and the report names it first."""
    import darknumba.parity.compare as cmp
    (cfg, weights), npz = fixture_args("det-small", "forward_train")
    report, _, _ = compare_npz(npz, cfg, weights)
    outputs = [r for r in report.rows if r.tensor == "output"]
    assert report.passed and outputs and all(r.own_ratio is not None for r in outputs)
    assert max(r.own_ratio for r in report.rows if r.own_ratio is not None) < 0.5
    real = cmp.replay
    one_per_type = {r.type: r for r in reversed(outputs)}.values()
    for r in one_per_type:
        def off(net, ref, meta, mode, truth=None, i=r.layer):
            own = real(net, ref, meta, mode, truth)
            own[f"L{i:03d}_output"] *= np.float32(1.001)
            return own
        monkeypatch.setattr(cmp, "replay", off)
        f = compare_npz(npz, cfg, weights)[0].first_failure
        assert (f.layer, f.tensor) == (r.layer, "output") and f.own_ratio > 1, (r.layer, f)


# -- stock networks on a real photo against a pjreddie build (DARKNET_DIR) -------------------

LABELS = ROOT / "tests" / "fixtures" / "parity" / "dog-labels.txt"


def realistic_random_weights(cfg, path, seed=0):
    """Random weights (Darknet's initialisation) with batch-norm statistics a trained network
    would have: each layer's rolling mean and variance are its batch statistics on dog.jpg,
    scales U(0.5, 1.5) and biases U(-0.2, 0.2). Deterministic for a seed."""
    from darknumba.vision.image import letterbox_image, load_image_color
    net = dn.load_network(cfg, batch=1)
    rng = np.random.default_rng(seed)
    net.input = letterbox_image(load_image_color(darknet_photo("dog.jpg")), net.w, net.h).reshape(-1)
    net.train, net.truth = True, None
    for i, l in enumerate(net.layers):       # layer by layer, each normalised by its own stats
        net.index = i
        if getattr(l, "batch_normalize", 0):
            l.scales[:] = rng.uniform(0.5, 1.5, l.scales.size)
            l.biases[:] = rng.uniform(-0.2, 0.2, l.biases.size)
        l.forward(net)
        if getattr(l, "batch_normalize", 0):
            l.rolling_mean[:], l.rolling_variance[:] = l.mean, l.variance
        net.input = l.output
    dn.save_weights(net, path)
    return path


@pytest.fixture(scope="module")
def yolov2_tiny_weights(tmp_path_factory):
    darknet_dir()                           # the weights serve the runs against C alone
    return realistic_random_weights(ROOT / "cfg" / "yolov2-tiny.cfg",
                                    tmp_path_factory.mktemp("w") / "yolov2-tiny-random.weights")


def train_dog(cfg, weights, *extra):
    dk = darknet_dir()
    r = cli("--darknet", dk, cfg, weights, darknet_photo("dog.jpg"), "--train", "--truth", LABELS,
            "--batch", "1", "--json", *extra)
    return r, json.loads(r.stdout[r.stdout.index("{"):])


@pytest.mark.slow
def test_darknet_yolov3_tiny_train_step_on_dog_passes():
    r, report = train_dog(ROOT / "cfg" / "yolov3-tiny.cfg", tiny_weights())
    assert r.exit_code == 0, report["verdict"]
    own = [row for row in report["rows"] if row["own_ratio"] is not None]
    assert len(own) > 150 and max(row["own_ratio"] for row in own) <= 1
    # the propagated figures are still there: far past 1e-4 deep in the backward pass
    assert max(row["max_rel"] or 0 for row in report["rows"]) > 1e-3
    assert {"delta into 12", "weight_updates", "mean"} <= {row["tensor"] for row in own}


@pytest.mark.slow
def test_darknet_yolov3_tiny_train_step_perturbed_names_layer():
    r, report = train_dog(ROOT / "cfg" / "yolov3-tiny.cfg", tiny_weights(), "--perturb", "13:100")
    assert r.exit_code == 1
    f = report["first_failure"]
    assert f["layer"] == 13
    fails = {(row["layer"], row["tensor"]) for row in report["rows"]
             if row["judged"] and not row["ok"]}
    assert {(13, "output"), (13, "delta into 12")} <= fails
    assert {row[0] for row in fails} == {13}


@pytest.mark.slow
def test_darknet_yolov2_tiny_train_step_on_dog_passes(yolov2_tiny_weights):
    r, report = train_dog(ROOT / "cfg" / "yolov2-tiny.cfg", yolov2_tiny_weights)
    assert r.exit_code == 0, report["verdict"]
    assert report["scalars"]["did_update"]["darknet"] in (0, 1)
    assert any(row["type"] == "region" and row["tensor"] == "delta" and row["own_ratio"] is not None
               for row in report["rows"])


@pytest.mark.slow
def test_darknet_yolov2_tiny_perturbed_names_layer_forward_and_train(yolov2_tiny_weights):
    cfg = ROOT / "cfg" / "yolov2-tiny.cfg"
    r, report = train_dog(cfg, yolov2_tiny_weights, "--perturb", "8:10")
    assert r.exit_code == 1 and report["first_failure"]["layer"] == 8
    r = cli("--darknet", darknet_dir(), cfg, yolov2_tiny_weights, darknet_photo("dog.jpg"),
            "--perturb", "8:10")
    assert r.exit_code == 1 and "first difference at layer 8 (convolutional) output" in r.output


# -- a recorded C train step of yolov3-tiny (official weights, 64x64, dog.jpg) -----------------

RECORDED = ROOT / "tests" / "fixtures" / "parity" / "yolov3-tiny-64-trainstep.npz"


@pytest.fixture(scope="module")
def tiny64(tmp_path_factory):
    cfg = tmp_path_factory.mktemp("cfg") / "yolov3-tiny-64.cfg"
    text = (ROOT / "cfg" / "yolov3-tiny.cfg").read_text()
    cfg.write_text(re.sub(r"(?m)^(width|height)=\d+", r"\1=64", text))
    return cfg, tiny_weights()


def test_recorded_yolov3_tiny_train_step_passes_per_layer(tiny64):
    report, _, _ = compare_npz(RECORDED, *tiny64)
    assert report.passed, report.verdict()
    own = [r for r in report.rows if r.own_ratio is not None]
    tensors = {r.tensor for r in own}
    assert {"output", "mean", "variance", "delta", "weight_updates", "bias_updates",
            "scale_updates", "delta into 12", "weights step", "cost"} <= tensors
    assert max(r.own_ratio for r in own) < 0.5
    assert len(own) > 130


def test_recorded_yolov3_tiny_perturbed_names_layer(tiny64):
    report, _, _ = compare_npz(RECORDED, *tiny64, perturb="4:7")
    f = report.first_failure
    assert f.layer == 4 and not report.passed
    assert {r.layer for r in report.rows if r.judged and not r.ok} == {4}
    assert any(r.tensor == "output" and r.layer == 4 and r.own_ratio > 1 for r in report.rows)


# -- an AlexeyAB build (DARKNET_AB_DIR) ------------------------------------------------------------

def yolov4_tiny():
    d = os.environ.get("DARKNUMBA_YOLOV4_TINY")
    weights = official_weights("yolov4-tiny", Path(d) / "yolov4-tiny.weights") if d \
        else v4tiny_weights()
    return ROOT / "cfg" / "yolov4-tiny.cfg", weights


@pytest.mark.slow
def test_alexeyab_yolov4_tiny_dog_every_layer_within_1e4():
    dk = darknet_ab_dir()
    cfg, weights = yolov4_tiny()
    r = cli("--darknet", dk, cfg, weights, darknet_photo("dog.jpg"), "--json")
    report = json.loads(r.stdout[r.stdout.index("{"):])
    assert r.exit_code == 0, report["verdict"]
    assert report["reference"].startswith("AlexeyAB darknet")
    outputs = [row for row in report["rows"] if row["tensor"] == "output"]
    assert len(outputs) == 38 and all(row["own_rel"] <= 1e-4 for row in outputs)


@pytest.mark.slow
def test_alexeyab_yolov4_tiny_perturbed_names_layer():
    dk = darknet_ab_dir()
    cfg, weights = yolov4_tiny()
    r = cli("--darknet", dk, cfg, weights, darknet_photo("dog.jpg"), "--perturb", "10:5")
    assert r.exit_code == 1 and "first difference at layer 10 (convolutional) output" in r.output
