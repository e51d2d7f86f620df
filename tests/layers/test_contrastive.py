"""AlexeyAB's [contrastive] (layers/contrastive.py, kernels/contrastive.py): the [yolo] labels it
reads, its deltas, accuracy and cost in the detector and the classifier modes, against the
loop-by-loop reference written from its C (tests/naive/contrastive.py: the list of pairs
searched as the C searches it); its output under both behaviours; its cfg errors. (A recorded
AlexeyAB training step: tests/networks/test_ab_new_layers.py.)"""
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import ROOT
from naive import contrastive as naive

import darknumba as dn
from darknumba.cfg import parse_cfg_text
from darknumba.dialect import quirks_for
from darknumba.errors import CfgError
from darknumba.layers import LAYER_TYPES
from darknumba.layers.base import SizeParams
from darknumba.layers.contrastive import ContrastiveLayer

f32 = np.float32
CFG = ROOT / "tests" / "fixtures" / "ab" / "ab-contrastive" / "ab-contrastive.cfg"


def detector_truth(net, rng, shift=0.0):
    """Images 0, 1 and 2, 3 hold the same three objects (track ids 10, 11, 12 and 20, 21,
    22), slightly moved; the classes alternate."""
    y = net.layers[5]
    t = np.zeros((net.batch, y.max_boxes, 6), f32)
    for pair in range(net.batch // 2):
        base = rng.uniform(0.1, 0.8, (3, 2))
        for k in range(2):
            b = 2 * pair + k
            for o in range(3):
                x, yy = base[o] + rng.uniform(-0.04, 0.04, 2) + shift
                t[b, o] = (x, yy, 0.15 + 0.1 * o, 0.2 + 0.05 * o, o % 2, 10 * (pair + 1) + o)
    return t.reshape(-1)


def test_detector_mode_matches_the_reference():
    net = dn.parse_network_cfg(CFG)
    l, y = net.layers[7], net.layers[5]
    assert isinstance(l, ContrastiveLayer) and l.detection and (l.n, l.embedding_size) == (3, 4)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, net.batch * net.inputs).astype(f32)
    truth = detector_truth(net, rng)
    net.forward(x, train=True, truth=truth)
    labels, class_ids = naive.yolo_labels(truth, net.batch, y.truths, y.max_boxes, y.biases,
                                          y.mask, y.total, y.w, y.h, y.classes, net.w, net.h)
    np.testing.assert_array_equal(l._labels, labels)
    np.testing.assert_array_equal(l._class_ids, class_ids)
    assert (labels >= 0).sum() == 12
    inp = net.layers[6].output
    delta, acc, cost = naive.forward(inp, labels, class_ids, net.batch, l.n, l.h, l.w, l.c,
                                     l.embedding_size, 1, 1.0, 3, True, 1.0, 10.0)
    assert np.abs(delta).max() > 1e-3
    np.testing.assert_allclose(l.delta, delta, rtol=1e-4, atol=1e-6)
    assert l.accuracy == acc and l.stats["samples"] == 12
    a = l.stats["all"]
    assert l.stats_line() == (f" Contrast accuracy = {acc:f} %, all = {a}, good = "
                              f"{l.stats['good']}, same = {a}, diff = {a} \n contrastive loss "
                              f"= {l.cost:f} ")
    assert l.cost == pytest.approx(cost, rel=1e-5)
    np.testing.assert_array_equal(l.output, inp)          # the GPU build's copy


@pytest.mark.parametrize("neg_max, temperature, steps", [(1, 0.5, 1), (100, 2.0, 2)])
def test_detector_options_match_the_reference(neg_max, temperature, steps):
    """contrastive_neg_max cuts the negatives; temperature; time steps keep pairs within a
    mini-batch (batch 4, 2 steps: images 0, 1 and 2, 3)."""
    net = dn.parse_network_cfg(CFG)
    l, y = net.layers[7], net.layers[5]
    l.contrastive_neg_max, l.temperature, l.steps = neg_max, temperature, steps
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, net.batch * net.inputs).astype(f32)
    truth = detector_truth(net, rng)
    net.forward(x, train=True, truth=truth)
    labels, class_ids = naive.yolo_labels(truth, net.batch, y.truths, y.max_boxes, y.biases,
                                          y.mask, y.total, y.w, y.h, y.classes, net.w, net.h)
    delta, acc, _ = naive.forward(net.layers[6].output, labels, class_ids, net.batch, l.n, l.h,
                                  l.w, l.c, l.embedding_size, steps, temperature, neg_max,
                                  True, 1.0, 10.0)
    np.testing.assert_allclose(l.delta, delta, rtol=1e-4, atol=1e-6)
    assert l.accuracy == acc


def test_backward_adds_the_delta_and_compat_leaves_the_output_zero():
    net = dn.parse_network_cfg(CFG, compat="darknet-cpu")
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, net.batch * net.inputs).astype(f32)
    net.forward(x, train=True, truth=detector_truth(net, rng))
    l = net.layers[7]
    assert not l.output.any() and l.delta.any()
    route = net.layers[6]
    route.delta[:] = 1.0
    net.index = 7
    net.delta = route.delta
    l.backward(net)
    np.testing.assert_allclose(route.delta, 1.0 + l.delta)


def build_classifier(batch=6, c=5, classes=3, extra=""):
    s = parse_cfg_text(f"[contrastive]\nclasses={classes}\n{extra}", "c.cfg")[0]
    net = SimpleNamespace(layers=[], quirks=quirks_for("alexeyab"),
                          options=SimpleNamespace(time_steps=1))
    params = SizeParams(batch=batch, h=1, w=1, c=c, inputs=c, index=4, net=net, path="c.cfg")
    l = LAYER_TYPES[s.type].from_cfg(s, params)
    l.quirks = net.quirks
    return l


@pytest.mark.parametrize("with_truth", [False, True])
def test_classifier_mode_matches_the_reference(with_truth):
    """Labels b / 2 (pairs of augmentations), or the classes of a one-hot truth."""
    l = build_classifier(extra="temperature=0.5\ncls_normalizer=2")
    assert not l.detection and (l.n, l.embedding_size) == (1, 5)
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, l.batch * l.inputs).astype(f32)
    truth = np.zeros((l.batch, l.classes), f32)
    labels = np.arange(l.batch) // 2
    if with_truth:
        labels = np.array([0, 2, 0, 1, 2, 1])
        truth[np.arange(l.batch), labels] = 1
    net = SimpleNamespace(input=x, train=True, truth=truth.reshape(-1), index=4,
                          label_smooth_eps=0.0)
    l.forward(net)
    delta, acc, cost = naive.forward(x, labels, np.full(l.batch, -1), l.batch, 1, 1, 1, l.c,
                                     l.c, 1, 0.5, 3, False, 2.0)
    assert np.abs(delta).max() > 1e-3
    np.testing.assert_allclose(l.delta, delta, rtol=1e-4, atol=1e-6)
    assert l.accuracy == acc
    assert l.cost == pytest.approx(cost, rel=1e-5)


def test_cfg_errors_are_clear(tmp_path):
    s = parse_cfg_text("[contrastive]\n", "c.cfg")[0]
    net = SimpleNamespace(layers=[], options=SimpleNamespace(time_steps=1))
    with pytest.raises(CfgError, match=r"needs a 1 x 1 x c input"):
        LAYER_TYPES["contrastive"].from_cfg(
            s, SizeParams(batch=2, h=4, w=4, c=3, inputs=48, index=2, net=net, path="c.cfg"))
    cfg = tmp_path / "n.cfg"
    cfg.write_text(CFG.read_text().replace("yolo_layer=-2", "yolo_layer=-3"))
    with pytest.raises(CfgError, match=r"yolo_layer: must name an AlexeyAB \[yolo\] layer"):
        dn.parse_network_cfg(cfg)
    cfg.write_text(CFG.read_text().replace("embedding_layer=-3", "embedding_layer=-2"))
    with pytest.raises(CfgError, match=r"embedding size 4 .* not the \[yolo\] layer 5's 5"):
        dn.parse_network_cfg(cfg)


def test_onlyforward_layer_passes_no_delta_down(tmp_path):
    """AlexeyAB's backward_network passes over a layer with onlyforward=1 (as its
    yolov4-tiny_contrastive.cfg marks two routes): the route to the embeddings hands the
    contrastive delta to nobody, so the embedding convolution gets none."""
    cfg = tmp_path / "n.cfg"
    cfg.write_text(CFG.read_text().replace("[route]\nlayers=-4\n", "[route]\nlayers=-4\n"
                                                                  "onlyforward=1\n"))
    net = dn.parse_network_cfg(cfg)
    assert net.layers[6].onlyforward and net.quirks.onlyforward_skips_backward
    rng = np.random.default_rng(4)
    x = rng.uniform(0, 1, net.batch * net.inputs).astype(f32)
    net.forward(x, train=True, truth=detector_truth(net, rng))
    net.backward()
    assert net.layers[7].delta.any() and not net.layers[2].delta.any()
    net = dn.parse_network_cfg(CFG)                   # without it the delta reaches layer 2
    net.forward(x, train=True, truth=detector_truth(net, np.random.default_rng(4)))
    net.backward()
    assert net.layers[2].delta.any()
