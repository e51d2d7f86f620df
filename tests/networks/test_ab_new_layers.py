"""[Gaussian_yolo] and [contrastive] against AlexeyAB's CPU build: runs of two small networks of
our own (tests/fixtures/ab/ab-gaussian, ab-contrastive; seeded weights, random inputs and
truths), recorded with `darknumba compare --darknet AB_DIR ... --dump` (see their README), and
replayed here without C as `darknumba compare --npz` replays them: every layer judged on C's
own inputs within its rounding tolerance, forward (test mode) and one training step
(compat="darknet-cpu"). Then AlexeyAB's `detector test` print-out of the Gaussian network on a
PNG, and the same runs live when DARKNET_AB_DIR names an AlexeyAB build."""
import json
import re

import numpy as np
import pytest
from conftest import ROOT, darknet_ab_dir
from typer.testing import CliRunner

import darknumba as dn
from darknumba.cli import app
from darknumba.parity.compare import compare_npz, read_truth

FIX = ROOT / "tests" / "fixtures" / "ab"
# (folder, cfg, recorded run)
RUNS = [("ab-gaussian", "ab-gaussian", "forward_test"), ("ab-gaussian", "ab-gaussian", "trainstep"),
        ("ab-gaussian", "ab-gaussian-b", "trainstep-b"),
        ("ab-contrastive", "ab-contrastive", "trainstep"),
        ("ab-contrastive", "ab-contrastive-b", "trainstep-b")]
runner = CliRunner()


def judged_layers(report) -> set:
    return {r.layer for r in report.rows if r.judged and r.layer is not None}


@pytest.mark.parametrize("name, cfg, run", RUNS)
def test_recorded_alexeyab_run_passes_every_layer(name, cfg, run):
    d = FIX / name
    report, ours, ref = compare_npz(d / f"{run}.npz", d / f"{cfg}.cfg", d / "init.weights")
    assert report.passed, report.verdict()
    n = len(ours["meta"]["layers"])
    assert judged_layers(report) == set(range(n))
    if run.startswith("trainstep"):
        heads = [i for i, l in enumerate(ours["meta"]["layers"])
                 if l["type"] in ("gaussian_yolo", "contrastive")]
        for i in heads:
            key = f"L{i:03d}_delta"
            assert np.abs(ref[key]).max() > 1e-3, key        # the loss did train something
            np.testing.assert_allclose(ours[key], ref[key].reshape(ours[key].shape),
                                       rtol=1e-3, atol=1e-4 * np.abs(ref[key]).max())
        assert ours["cost"][0] == pytest.approx(float(ref["cost"][0]), rel=1e-4)


def test_gaussian_detector_test_prints_alexeyabs_lines(tmp_path):
    """`detector test -ext_output` of ab-gaussian on a PNG (the same pixels on both sides):
    AlexeyAB's lines, in its order."""
    d = FIX / "ab-gaussian"
    names = tmp_path / "g.names"
    names.write_text("alpha\nbeta\n")
    data = tmp_path / "g.data"
    data.write_text(f"classes=2\nnames={names}\n")
    recorded = (d / "detect" / "stdout.txt").read_text()
    thresh = re.search(r"thresh (\S+)", (d / "detect" / "command.txt").read_text()).group(1)
    r = runner.invoke(app, ["detector", "test", str(data), str(d / "ab-gaussian.cfg"),
                            str(d / "init.weights"), str(d / "detect" / "image.png"),
                            "-ext_output", "-dont_show", "-thresh", thresh,
                            "--out", str(tmp_path / "pred")])
    assert r.exit_code == 0, r.output
    line = re.compile(r"^\S+: \d+%")
    ours = [s for s in r.stdout.splitlines() if line.match(s)]
    theirs = [s for s in recorded.splitlines() if line.match(s)]
    assert len(theirs) > 0 and ours == theirs


@pytest.mark.slow
@pytest.mark.parametrize("name, cfg, run", RUNS)
def test_live_alexeyab_run_passes_every_layer(tmp_path, name, cfg, run):
    ab = darknet_ab_dir()
    d = FIX / name
    ref = np.load(d / f"{run}.npz")
    np.save(tmp_path / "x.npy", ref["input"])
    args = [str(tmp_path / "x.npy")]
    if run.startswith("trainstep"):
        np.save(tmp_path / "t.npy", ref["truth"])
        args += ["--train", "--truth", str(tmp_path / "t.npy")]
    r = runner.invoke(app, ["compare", "--darknet", str(ab), str(d / f"{cfg}.cfg"),
                            str(d / "init.weights"), *args, "--json"])
    report = json.loads(r.stdout[r.stdout.index("{"):])
    assert r.exit_code == 0 and report["passed"], report["verdict"]


@pytest.mark.parametrize("name, filters", [("ab-gaussian", ("33", "36")),
                                           ("ab-contrastive", ("21", "24"))])
def test_detector_train_runs_the_networks(tmp_path, name, filters):
    """`detector train` on the tiny shapes set (3 classes): a Gaussian network, and a [yolo]
    network whose last layer is the [contrastive] loss (AlexeyAB's train_detector takes its
    last detection layer wherever it is)."""
    from tiny_data import shapes_set
    data = shapes_set(tmp_path, 8, seed=5)
    cfg = tmp_path / f"{name}.cfg"
    cfg.write_text((FIX / name / f"{name}.cfg").read_text()
                   .replace("classes=2", "classes=3")
                   .replace(f"filters={filters[0]}", f"filters={filters[1]}")
                   .replace("contrastive=1", "contrastive=0"))
    r = runner.invoke(app, ["detector", "train", str(data), str(cfg), "--max-batches", "2",
                            "--no-chart", "--no-progress", "--backup", str(tmp_path / "bk"),
                            "--workers", "1"])
    assert r.exit_code == 0, r.output
    losses = [float(m.group(1)) for m in re.finditer(r"^\d+: ([\d.]+),", r.output, re.M)]
    assert len(losses) == 2 and all(np.isfinite(losses))
    assert (tmp_path / "bk" / f"{name}_final.weights").exists()


def test_label_file_truth_for_a_network_ending_in_contrastive(tmp_path):
    """compare --truth labels.txt reads the last detection layer's layout (AlexeyAB's 6
    values), past a [contrastive] loss after it."""
    net = dn.parse_network_cfg(FIX / "ab-contrastive" / "ab-contrastive.cfg", seed=None,
                               allocate=False)
    labels = tmp_path / "l.txt"
    labels.write_text("1 0.5 0.25 0.2 0.1\n")
    t = read_truth(labels, net).reshape(net.batch, 200, 6)
    np.testing.assert_array_equal(t[:, 0], np.float32([[0.5, 0.25, 0.2, 0.1, 1, 0]] * 4))
