"""AlexeyAB's [region] (YOLOv2) against its CPU build, under compat="darknet-cpu": runs of our
small yolov2-tiny-style network (tests/fixtures/ab/ab-region, three sets of [region] keys,
seeded weights, random inputs and truths) recorded with `darknumba compare --darknet AB_DIR
... --dump` and replayed here without C, every layer judged on C's own inputs: the flattened
output, the loss deltas, the cost and the step. Then AlexeyAB's `detector test` print-outs,
and the same runs live when DARKNET_AB_DIR names an AlexeyAB build."""
import json
import re

import numpy as np
import pytest
from conftest import ROOT, darknet_ab_dir
from typer.testing import CliRunner

import darknumba as dn
from darknumba.cli import app
from darknumba.errors import CfgError, CfgWarning, DataError
from darknumba.layers.region import RegionLayer
from darknumba.layers.region_ab import AbRegionLayer
from darknumba.parity.compare import compare_npz

FIX = ROOT / "tests" / "fixtures" / "ab" / "ab-region"
IMAGE = ROOT / "tests" / "fixtures" / "ab" / "ab-gaussian" / "detect" / "image.png"
# (cfg, recorded run)
RUNS = [("ab-region", "forward_test"), ("ab-region", "trainstep"),
        ("ab-region-b", "trainstep-b"), ("ab-region-c", "trainstep-c")]
runner = CliRunner()


@pytest.mark.parametrize("cfg, run", RUNS)
def test_recorded_alexeyab_region_run_passes_every_layer(cfg, run):
    report, ours, ref = compare_npz(FIX / f"{run}.npz", FIX / f"{cfg}.cfg", FIX / "init.weights")
    assert report.passed, report.verdict()
    n = len(ours["meta"]["layers"])
    assert {r.layer for r in report.rows if r.judged and r.layer is not None} == set(range(n))
    last = f"L{n - 1:03d}_output"
    np.testing.assert_allclose(ours[last], ref[last].reshape(ours[last].shape), rtol=1e-4,
                               atol=1e-5 * np.abs(ref[last]).max())
    if run.startswith("trainstep"):
        key = f"L{n - 1:03d}_delta"
        assert np.abs(ref[key]).max() > 1e-2          # the loss did train something
        np.testing.assert_allclose(ours[key], ref[key].reshape(ours[key].shape),
                                   rtol=1e-4, atol=1e-5 * np.abs(ref[key]).max())
        assert ours["cost"][0] == pytest.approx(float(ref["cost"][0]), rel=1e-5)


def test_recorded_output_is_flattened_with_only_objectness_and_classes_activated():
    """The recorded C output is the convolution's output transposed per image to
    [cell][anchor][4 + 1 + classes], logistic on the objectness, softmax over the classes."""
    ref = np.load(FIX / "forward_test.npz")
    conv = ref["L003_output"].astype(np.float64).reshape(2, 3 * 7, 16)
    flat = conv.transpose(0, 2, 1).reshape(2, 16, 3, 7).copy()
    flat[..., 4] = 1 / (1 + np.exp(-flat[..., 4]))
    e = np.exp(flat[..., 5:] - flat[..., 5:].max(-1, keepdims=True))
    flat[..., 5:] = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(ref["L004_output"].reshape(flat.shape), flat, rtol=1e-5,
                               atol=1e-7)


def test_region_class_by_dialect_and_compat():
    """AlexeyAB's [region] in its dialect, with or without compat (both of its builds compute
    it); pjreddie's dialect keeps its own."""
    cfg = FIX / "ab-region.cfg"
    for dialect, compat, cls in [("alexeyab", "darknet-cpu", AbRegionLayer),
                                 ("alexeyab", None, AbRegionLayer),
                                 ("pjreddie", None, RegionLayer),
                                 ("pjreddie", "darknet-cpu", RegionLayer)]:
        net = dn.parse_network_cfg(cfg, dialect=dialect, compat=compat, seed=None,
                                   allocate=False)
        assert type(net.layers[-1]) is cls
    l = dn.parse_network_cfg(cfg, dialect="alexeyab", compat="darknet-cpu", seed=None,
                             allocate=False).layers[-1]
    assert (l.max_boxes, l.truth_size, l.truths) == (200, 6, 1200)


@pytest.mark.parametrize("box, what", [((1.0, 0.5, 0.2, 0.2, 0), "x=1"),
                                       ((0.5, 0.5, 0.0, 0.2, 1), "w=0"),
                                       ((0.5, 0.5, 0.2, 0.2, -1), "class=-1")])
def test_bad_truth_is_a_one_line_error(box, what):
    net = dn.load_network(FIX / "ab-region.cfg", FIX / "init.weights", dialect="alexeyab",
                          compat="darknet-cpu")
    t = np.zeros((net.batch, 200, 6), np.float32)
    t[0, 0] = (0.3, 0.3, 0.1, 0.1, 0, 0)
    t[1, 0] = (0.5, 0.5, 0.2, 0.2, 7, 0)        # class past classes: skipped, as AlexeyAB
    t[1, 1] = (*box, 0)
    x = np.zeros(net.batch * net.inputs, np.float32)
    with pytest.raises(DataError, match=rf"\[region\] layer 4: truth of image 1 of the batch, "
                                        rf"box 1: .*{what}"):
        net.forward(x, train=True, truth=t.reshape(-1))


@pytest.mark.parametrize("cfg, stdout", [("ab-region", "stdout.txt"),
                                         ("ab-region-c", "stdout-c.txt")])
def test_region_detector_test_prints_alexeyabs_lines(tmp_path, cfg, stdout):
    """`detector test -ext_output --compat darknet-cpu` on a PNG (the same pixels on both
    sides): AlexeyAB's lines, in its order."""
    names = tmp_path / "r.names"
    names.write_text("alpha\nbeta\n")
    data = tmp_path / "r.data"
    data.write_text(f"classes=2\nnames={names}\n")
    command = next(c for c in (FIX / "detect" / "command.txt").read_text().splitlines()
                   if f" {cfg}.cfg " in c)
    thresh = re.search(r"-thresh (\S+)", command).group(1)
    r = runner.invoke(app, ["detector", "test", str(data), str(FIX / f"{cfg}.cfg"),
                            str(FIX / "init.weights"), str(IMAGE), "-ext_output", "-dont_show",
                            "-thresh", thresh, "--compat", "darknet-cpu",
                            "--out", str(tmp_path / "pred")])
    assert r.exit_code == 0, r.output
    line = re.compile(r"^\S+: -?\d+%")
    ours = [s for s in r.stdout.splitlines() if line.match(s)]
    theirs = [s for s in (FIX / "detect" / stdout).read_text().splitlines() if line.match(s)]
    assert len(theirs) > 5 and ours == theirs


@pytest.mark.slow
@pytest.mark.parametrize("cfg, run", RUNS)
def test_live_alexeyab_region_run_passes_every_layer(tmp_path, cfg, run):
    ab = darknet_ab_dir()
    ref = np.load(FIX / f"{run}.npz")
    np.save(tmp_path / "x.npy", ref["input"])
    args = [str(tmp_path / "x.npy")]
    if run.startswith("trainstep"):
        np.save(tmp_path / "t.npy", ref["truth"])
        args += ["--train", "--truth", str(tmp_path / "t.npy")]
    r = runner.invoke(app, ["compare", "--darknet", str(ab), str(FIX / f"{cfg}.cfg"),
                            str(FIX / "init.weights"), *args, "--json"])
    report = json.loads(r.stdout[r.stdout.index("{"):])
    assert r.exit_code == 0 and report["passed"], report["verdict"]


def test_coords_alexeyab_does_not_reproduce_falls_back_with_a_warning(tmp_path):
    """coords other than 4: AlexeyAB's [region] indexes as if 4, which is not reproduced; in
    its dialect pjreddie's [region] computes the layer, with a warning naming the line, and
    under compat (where compare holds the tensors against AlexeyAB's build) it is refused."""
    text = (FIX / "ab-region.cfg").read_text()
    body = text.replace("coords=4", "coords=5")
    assert body != text
    # the head's filters for coords=5: num * (classes + coords + 1)
    l0 = dn.parse_network_cfg(FIX / "ab-region.cfg", dialect="alexeyab", seed=None,
                              allocate=False).layers[-1]
    body = body.replace(f"filters={l0.n * (l0.classes + 5)}", f"filters={l0.n * (l0.classes + 6)}")
    cfg = tmp_path / "coords5.cfg"
    cfg.write_text(body)
    with pytest.warns(CfgWarning, match=r"coords5\.cfg:\d+.*coords=5 is not reproduced; "
                                        r"pjreddie's \[region\] computes this layer"):
        net = dn.parse_network_cfg(cfg, dialect="alexeyab", seed=None, allocate=False)
    assert type(net.layers[-1]) is RegionLayer and net.layers[-1].coords == 5
    with pytest.raises(CfgError, match=r"coords5\.cfg:\d+.*coords=5 is not reproduced"):
        dn.parse_network_cfg(cfg, dialect="alexeyab", compat="darknet-cpu", seed=None,
                             allocate=False)
