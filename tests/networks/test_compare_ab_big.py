"""`darknumba compare --darknet AB_DIR` forward on AlexeyAB's largest cfgs (issue 32): each cfg
of AlexeyAB's cfg/ folder, read in place (DARKNET_AB_DIR: an AlexeyAB tree built with
`make LIBSO=1`; skipped without one), at a reduced input size, batch 1, with darknumba's seeded
Darknet initialisation (batch-norm statistics made realistic) written as .weights for both
sides, on a seeded random input: every layer's own output within its rounding tolerance. The
list, sizes and results: docs/alexeyab.md ("AlexeyAB's largest cfgs, forward").

Without C: the same run of a small network of our own in their shape (yolov7's ELAN and MP
blocks, SPPCSPC, a mish CSP block with a shortcut, new_coords heads), recorded from AlexeyAB's
build in tests/fixtures/ab/yolov7-like-64, replayed with `compare --npz`."""
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from test_compare_ab import compare, judged_layers

import darknumba as dn
from conftest import darknet_ab_dir
from darknumba.weights import save_weights

# name -> input size: a multiple of the cfg's largest stride (128 for P7, 64 for P6)
BIG = {
    "yolov7": 128, "yolov7x": 128, "yolov4-csp-x-swish": 128, "cspx-p7-mish": 256,
    "yolov4-p6": 128, "cspx-p7-mish_hp": 384, "yolov4-p5": 128, "resnet152_trident": 128,
    "yolov4x-mish": 128, "yolov4-csp-x-mish": 128, "yolov3-openimages": 128,
    "yolov3-spp": 128, "yolov4-csp-swish": 128,
}
WEIGHTS_SEED, INPUT_SEED = 7, 3


def realistic_seeded_weights(cfg: Path, path: Path, seed: int, input_seed: int) -> dn.Network:
    """Darknet's random initialisation (seeded) with the statistics a trained network would
    have: each layer's rolling mean and variance are its batch statistics on what the
    inference forward of `compare --random-input --seed input_seed` feeds it (the variance at
    least 0.01: a channel nearly constant on one image would multiply the rounding of
    everything before it by 300 and more), scales U(0.5, 1.5), biases U(-0.2, 0.2),
    a convolution without batch norm (a head) scaled to outputs of standard deviation 1;
    written to `path`. (With Darknet's own rolling variance 0 each layer multiplies its output
    by ~300 at inference, and even normalised layers leave a random head's outputs in the
    thousands: values below -88 reach AlexeyAB's logistic and swish, which, built with -Ofast,
    give NaN for 1/(1 + exp(-x)) there, 0 in IEEE arithmetic.)"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = dn.parse_network_cfg(cfg, batch=1, dialect="alexeyab", seed=seed,
                                   compat="darknet-cpu")     # as compare runs it, and C
    rng = np.random.default_rng(seed)
    net.input = np.random.default_rng(input_seed).random(net.inputs, dtype=np.float32)
    net.truth = None
    for i, l in enumerate(net.layers):       # layer by layer, each normalised by its own stats
        net.index = i
        bn = getattr(l, "batch_normalize", 0)
        if bn:           # the batch statistics of a training forward become the rolling ones
            l.scales[:] = rng.uniform(0.5, 1.5, l.scales.size)
            l.biases[:] = rng.uniform(-0.2, 0.2, l.biases.size)
            net.train = True
            l.forward(net)
            l.rolling_mean[:], l.rolling_variance[:] = l.mean, np.maximum(l.variance, 0.01)
        net.train = False                    # what the next layer sees: this layer at inference
        l.forward(net)
        if not bn and l.type == "convolutional" and l.output.std() > 1:
            l.weights /= l.output.std()         # a head's outputs at a trained net's scale
            l.weights_changed()
            l.forward(net)
        net.input = l.output
    save_weights(net, path)
    return net


def resized_cfg(cfg: Path, size: int, out: Path) -> Path:
    """The cfg with its [net] width and height set to `size` (the rest as it is)."""
    lines = cfg.read_text().splitlines()
    first_layer = next(i for i, l in enumerate(lines)
                       if l.strip().startswith("[") and i and not l.strip().startswith("[net"))
    for i in range(first_layer):
        lines[i] = re.sub(r"^(\s*)(width|height)\s*=\s*\d+", rf"\g<1>\g<2>={size}", lines[i])
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BIG))
def test_largest_cfgs_forward_pass(tmp_path, name):
    tree = darknet_ab_dir()
    cfg = resized_cfg(tree / "cfg" / f"{name}.cfg", BIG[name], tmp_path / f"{name}.cfg")
    net = realistic_seeded_weights(cfg, tmp_path / f"{name}.weights", WEIGHTS_SEED, INPUT_SEED)
    assert (net.w, net.h) == (BIG[name], BIG[name])
    code, report = compare(cfg, tmp_path / f"{name}.weights", "--random-input", "--seed",
                           INPUT_SEED)
    assert code == 0 and report["passed"], report["verdict"]
    assert judged_layers(report) == set(range(net.n))


FIX = Path(__file__).resolve().parents[1] / "fixtures" / "ab" / "yolov7-like-64"


def _replay(*extra):
    from typer.testing import CliRunner

    from darknumba.cli import app
    r = CliRunner().invoke(app, ["compare", "--npz", str(FIX / "darknet.npz"),
                                 str(FIX / "yolov7-like.cfg"), str(FIX / "yolov7-like.weights"),
                                 "--json", *extra])
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    import json
    return r.exit_code, json.loads(r.stdout[r.stdout.index("{"):])


def test_recorded_yolov7_like_forward_passes():
    """AlexeyAB's forward of our yolov7-like network at 64x64, every layer judged on C's own
    inputs."""
    code, report = _replay()
    assert code == 0 and report["passed"], report["verdict"]
    assert judged_layers(report) == set(range(41))


def test_recorded_yolov7_like_forward_names_a_perturbed_layer():
    """The self-test: one weight of the SPPCSPC's last convolution made 10 % larger fails that
    layer."""
    code, report = _replay("--perturb", "30")
    assert code == 1 and not report["passed"] and report["first_failure"]["layer"] == 30
    fails = {row["layer"] for row in report["rows"] if row["judged"] and not row["ok"]}
    assert fails == {30}, report["verdict"]
