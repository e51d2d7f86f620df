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
# (folder, cfg, recorded run, weights)
RUNS = [("ab-gaussian", "ab-gaussian", "forward_test", "init"),
        ("ab-gaussian", "ab-gaussian", "trainstep", "init"),
        ("ab-gaussian", "ab-gaussian-b", "trainstep-b", "init"),
        ("ab-contrastive", "ab-contrastive", "trainstep", "init"),
        ("ab-contrastive", "ab-contrastive-b", "trainstep-b", "init"),
        # the classifier form (no yolo_layer=): AlexeyAB's parser dies on it, so compare builds
        # the layer with its make_contrastive_layer (parity/ab_contrastive.py)
        ("ab-contrastive", "ab-contrastive-cls", "trainstep-cls", "init-cls"),
        ("ab-contrastive", "ab-contrastive-cls-b", "trainstep-cls-b", "init-cls"),
        ("ab-contrastive", "ab-contrastive-cls-sm", "trainstep-cls-sm", "init-cls-sm")]
runner = CliRunner()


def judged_layers(report) -> set:
    return {r.layer for r in report.rows if r.judged and r.layer is not None}


@pytest.mark.parametrize("name, cfg, run, weights", RUNS)
def test_recorded_alexeyab_run_passes_every_layer(name, cfg, run, weights):
    d = FIX / name
    report, ours, ref = compare_npz(d / f"{run}.npz", d / f"{cfg}.cfg", d / f"{weights}.weights")
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
@pytest.mark.parametrize("name, cfg, run, weights", RUNS)
def test_live_alexeyab_run_passes_every_layer(tmp_path, name, cfg, run, weights):
    ab = darknet_ab_dir()
    d = FIX / name
    ref = np.load(d / f"{run}.npz")
    np.save(tmp_path / "x.npy", ref["input"])
    args = [str(tmp_path / "x.npy")]
    if run.startswith("trainstep"):
        np.save(tmp_path / "t.npy", ref["truth"])
        args += ["--train", "--truth", str(tmp_path / "t.npy")]
    r = runner.invoke(app, ["compare", "--darknet", str(ab), str(d / f"{cfg}.cfg"),
                            str(d / f"{weights}.weights"), *args, "--json"])
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


# -- the classifier form of [contrastive] (no yolo_layer=) ------------------------------------

# (cfg, recorded run, weights); the last with a [softmax] head beside the loss (layer 4)
CLS_RUNS = [("ab-contrastive-cls", "trainstep-cls", "init-cls"),
            ("ab-contrastive-cls-b", "trainstep-cls-b", "init-cls"),
            ("ab-contrastive-cls-sm", "trainstep-cls-sm", "init-cls-sm")]


@pytest.mark.parametrize("cfg, run, weights", CLS_RUNS)
def test_classifier_contrastive_prints_alexeyabs_lines(cfg, run, weights):
    """The step's " Contrast accuracy = ..." and " contrastive loss = ..." lines are the ones
    AlexeyAB printed (recorded with the run: tests/fixtures/ab/ab-contrastive/cls-stdout.json)."""
    d = FIX / "ab-contrastive"
    ref = np.load(d / f"{run}.npz")
    net = dn.load_network(d / f"{cfg}.cfg", d / f"{weights}.weights", compat="darknet-cpu",
                          dialect="alexeyab", exact=True)
    loss = net.layers[4]
    assert loss.type == "contrastive" and not loss.detection
    assert net.truths == 3 and loss.c == 5     # classes, not the embedding's size
    net.forward(ref["input"], train=True, truth=ref["truth"])
    theirs = json.loads((d / "cls-stdout.json").read_text())[run]
    ours = [s.rstrip() for s in loss.stats_line().splitlines()]
    acc = re.compile(r" Contrast accuracy = [\d.]+ %, all = \d+, good = \d+")
    assert acc.match(ours[0]).group(0) == acc.match(theirs[0]).group(0)
    loss = float(theirs[1].split("=")[1])
    assert float(ours[1].split("=")[1]) == pytest.approx(loss, rel=1e-5)


def test_classifier_stand_in_for_alexeyabs_parser(tmp_path):
    """What compare hands AlexeyAB's parser for a classifier [contrastive]: an [empty] layer in
    its place (same line numbers) and the keys its shim builds the layer with; a detector one
    (yolo_layer= naming a [yolo]) is left alone, yolo_layer= resolving to layer 0 is the
    classifier form too (a null [yolo] in AlexeyAB's parse_contrastive)."""
    from darknumba.parity.ab_contrastive import FLT_MAX, classifier_stand_ins
    d = FIX / "ab-contrastive"
    text, found = classifier_stand_ins(d / "ab-contrastive-cls-b.cfg")
    original = (d / "ab-contrastive-cls-b.cfg").read_text()
    assert len(text.split("\n")) == len(original.split("\n"))
    assert "[contrastive]" not in text.split("\n") and text.rstrip().endswith("[empty]")
    assert found == [{"index": 4, "classes": 3, "temperature": 0.5, "cls_normalizer": 2.0,
                      "max_delta": 1.2, "contrastive_neg_max": 3}]
    for det in ("ab-contrastive", "ab-contrastive-b"):
        text, found = classifier_stand_ins(d / f"{det}.cfg")
        assert found == [] and text == (d / f"{det}.cfg").read_text()
    cfg = tmp_path / "zero.cfg"
    cfg.write_text("[net]\nbatch=2\nwidth=1\nheight=1\nchannels=4\n"
                   "[avgpool]\n[contrastive]\nyolo_layer=-1\n# kept\n")
    text, found = classifier_stand_ins(cfg)
    assert found[0]["index"] == 1 and found[0]["classes"] == 1000
    assert found[0]["max_delta"] == FLT_MAX
    assert text.split("\n")[6:9] == ["[empty]", "", "# kept"]


@pytest.mark.slow
def test_live_alexeyabs_parser_dies_on_the_classifier_form(monkeypatch):
    """AlexeyAB's parse_contrastive reads yolo_layer->type through a null pointer when
    yolo_layer= is absent: handed the cfg itself (no stand-in), its parse is killed by SIGSEGV."""
    from darknumba.errors import DarknumbaError
    from darknumba.parity import darknet_ref
    ab = darknet_ab_dir()
    d = FIX / "ab-contrastive"
    monkeypatch.setattr(darknet_ref, "classifier_stand_ins",
                        lambda cfg: (open(cfg).read(), []))
    tree = darknet_ref.DarknetTree.locate(ab)
    with pytest.raises(DarknumbaError, match="killed by signal 11"):
        darknet_ref.run_darknet(tree, d / "ab-contrastive-cls.cfg", d / "init-cls.weights",
                                "forward_test", x=np.zeros(6 * 192, np.float32), timeout=120)
