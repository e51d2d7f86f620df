"""xnor=1 networks against the C builds, recorded (tests/fixtures/ab/xnor, its README):
AlexeyAB's bit-packed inference (fuse_conv_batchnorm + calculate_binary_weights +
forward_network, as its detector test) of our small xnor network and of the yolov3-tiny XNOR
architecture at 64x64; the float way's forward and training step against pjreddie's build."""
import json

import numpy as np
import pytest
from conftest import ROOT

import darknumba as dn
from darknumba.layers.xnor import calculate_binary_weights
from darknumba.parity.compare import compare_npz
from darknumba.parity.tensordiff import diff

FIX = ROOT / "tests" / "fixtures" / "ab" / "xnor"
CFG, WEIGHTS = FIX / "ab-xnor.cfg", FIX / "init.weights"
PJ_CFG, PJ_WEIGHTS = FIX / "pj-xnor.cfg", FIX / "pj-init.weights"
TOL = 1e-4


@pytest.mark.parametrize("run", ["forward_test", "trainstep"])
def test_float_way_against_pjreddies_build(run):
    """The float way (binarised copies, the float layer; backward and update on the real weights
    and input) as pjreddie's CPU build computes it, every layer judged on C's own inputs
    (compare's per-layer replay): the forward, and one training step down to the update.
    AlexeyAB's CPU build has no defined float way (layers/xnor.py)."""
    report, _, _ = compare_npz(FIX / f"pj-xnor-{run}.npz", PJ_CFG, PJ_WEIGHTS)
    assert report.passed, report.table()
    judged = {r.layer for r in report.rows if r.own_ratio is not None and r.layer is not None}
    assert {2, 4, 5, 6, 8, 9, 10} <= judged
    if run == "trainstep":
        assert {"delta", "weight_updates", "weights step"} <= {r.tensor for r in report.rows}


def seeded_network(cfg, seed):
    """The recorded runs' weights: darknumba's seeded initialisation, then per convolution
    biases U(+-0.2) and batch norm scales U(0.5, 1.5), rolling mean U(+-0.5), rolling variance
    U(0.5, 2) from default_rng(seed) (how init.weights was made too)."""
    net = dn.parse_network_cfg(cfg, dialect="alexeyab", seed=seed)
    net.exact = True
    rng = np.random.default_rng(seed)
    for l in net.layers:
        if l.type == "convolutional":
            l.biases[:] = rng.uniform(-0.2, 0.2, l.n)
            if l.batch_normalize:
                l.scales[:] = rng.uniform(0.5, 1.5, l.n)
                l.rolling_mean[:] = rng.uniform(-0.5, 0.5, l.n)
                l.rolling_variance[:] = rng.uniform(0.5, 2.0, l.n)
    net.weights_changed()
    return net


def test_init_weights_are_the_seeded_network():
    ours = seeded_network(CFG, 7)
    loaded = dn.load_network(CFG, WEIGHTS, dialect="alexeyab")
    for a, b in zip(ours.layers, loaded.layers):
        for name in ("weights", "biases", "scales", "rolling_mean", "rolling_variance"):
            if getattr(a, name, None) is not None:
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def _check_bits(net, d, images, label, full=True):
    """Every layer's output of the first `images` images against AlexeyAB's bit-packed run."""
    bad, judged = [], 0
    for i, l in enumerate(net.layers):
        key = f"L{i:03d}_output" if full else f"L{i:03d}_sub"
        if key not in d.files:
            continue
        ours = l.output[:l.batch * l.outputs].reshape(l.batch, -1)[:images].reshape(-1)
        ref = d[key].reshape(l.batch, -1)[:images].reshape(-1) if full else d[key]
        if not full:
            ours = l.output[:l.outputs].reshape(-1)[::int(d[f"L{i:03d}_step"])]
        a, r = diff(ours, ref, None)
        judged += 1
        if not r <= TOL:
            bad.append(f"layer {i} ({l.type}): max abs {a:.3g}, max rel {r:.3g}")
    assert judged >= 10, f"{label}: only {judged} tensors compared"
    assert not bad, f"{label}: {len(bad)} of {judged} layers off:\n" + "\n".join(bad)


@pytest.mark.parametrize("compat", [None, "darknet-cpu"])
def test_small_xnor_network_bits(compat):
    """AlexeyAB's bit path at batch 2: by default the first image of every layer (its CPU bit
    path computes no other); under compat="darknet-cpu" both, the second as its bug leaves it."""
    d = np.load(FIX / "ab-xnor-bits.npz")
    net = dn.load_network(CFG, WEIGHTS, batch=2, dialect="alexeyab", compat=compat, exact=True)
    calculate_binary_weights(net)
    net.forward(d["input"])
    assert [l.use_bin_output for l in net.layers if getattr(l, "xnor", False)] == \
        [True, False, False, False, False, False, False]
    _check_bits(net, d, 2 if compat else 1, f"compat={compat}")


def test_yolov3_tiny_xnor_bits():
    """The yolov3-tiny XNOR architecture at 64x64 (seeded weights), AlexeyAB's bit path: every
    layer's output, sampled."""
    d = np.load(FIX / "yolov3-tiny-xnor-64-bits.npz")
    m = json.loads((FIX / "yolov3-tiny-xnor-64.json").read_text())
    net = seeded_network(FIX / "yolov3-tiny-xnor-64.cfg", m["weights_seed"])
    calculate_binary_weights(net)
    net.forward(d["input"])
    _check_bits(net, d, 1, "yolov3-tiny-xnor-64", full=False)
