"""The inference epilogue of a network not asked to be exact (layers/batchnorm.py
fast_epilogue: the batch norm as one multiply-add, leaky in float32) against the exact one
(Darknet's sequence), layer by layer on the direct, stride-2 direct, im2col and 1x1 paths, with
and without batch norm; training and compat= keep Darknet's."""
import numpy as np

import darknumba as dn
from darknumba.kernels.activations import LEAKY
from darknumba.kernels.fused import FAST
from darknumba.layers.batchnorm import fast_epilogue
from darknumba.train.timing import unit_rolling_variance

CFG = """[net]
width=40
height=40
channels=3
batch=1

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=leaky

[convolutional]
batch_normalize=1
filters=16
size=3
stride=2
pad=1
activation=leaky

[convolutional]
batch_normalize=1
filters=24
size=3
stride=1
pad=1
activation=linear

[convolutional]
batch_normalize=1
filters=48
size=3
stride=1
pad=1
activation=leaky

[convolutional]
batch_normalize=0
filters=12
size=1
stride=1
pad=1
activation=leaky

[convolutional]
batch_normalize=1
filters=32
size=3
stride=2
pad=1
activation=leaky
"""


def _load(path, exact):
    net = dn.load_network(path, None, batch=1, exact=exact)
    unit_rolling_variance(net)
    rng = np.random.default_rng(3)
    for l in net.layers:
        for name in ("biases", "scales", "rolling_mean"):
            a = getattr(l, name, None)
            if a is not None and a.size:
                a[:] = rng.normal(0, 0.5, a.size).astype(np.float32)
        if l.batch_normalize:
            l.rolling_variance[:] = rng.uniform(0.2, 2, l.rolling_variance.size)
    return net


def test_fast_epilogue_within_roundings_of_darknets(tmp_path):
    cfg = tmp_path / "fast.cfg"
    cfg.write_text(CFG)
    fast, exact = _load(cfg, False), _load(cfg, True)
    assert [fast_epilogue(l, fast, LEAKY) for l in fast.layers] == [LEAKY | FAST] * 6
    assert [fast_epilogue(l, exact, LEAKY) for l in exact.layers] == [LEAKY] * 6
    paths = [l.forward_path(fast) for l in fast.layers]
    assert {"direct", "direct-s2", "1x1", "im2col"} <= set(paths)
    x = np.random.default_rng(1).uniform(0, 1, (1, 3, 40, 40)).astype(np.float32)
    fast.forward(x)
    exact.forward(x)
    for i, (a, b) in enumerate(zip(fast.layers, exact.layers, strict=True)):
        scale = float(np.abs(b.output).max())
        # the first layer's sums are the same; later ones also carry their inputs' roundings
        # and the paths' own summation orders
        assert np.abs(a.output - b.output).max() <= 2e-6 * scale, (i, paths[i])
        assert not np.array_equal(a.output, b.output) or i == 4, (i, paths[i])
    fast.train = True
    assert fast_epilogue(fast.layers[0], fast, LEAKY) == LEAKY


def test_compat_keeps_darknets_epilogue(tmp_path):
    cfg = tmp_path / "fast.cfg"
    cfg.write_text(CFG)
    net = dn.load_network(cfg, None, batch=1, compat="darknet-cpu")
    net.exact = False
    assert fast_epilogue(net.layers[0], net, LEAKY) == LEAKY
