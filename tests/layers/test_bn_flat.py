"""Batch norm on flat images (every pixel the same: zero variance in every channel). By
default both dialects' backward divides by sqrt(var + 1e-5), as their GPU builds (cuDNN) do;
AlexeyAB's CPU normalize_delta_cpu divides by sqrt(var) + 1e-5, which multiplies the delta by
1e5 in each zero-variance layer: that formula comes only with compat="darknet-cpu"."""
import numpy as np
import pytest

import darknumba as dn

CONV = "\n[convolutional]\nbatch_normalize=1\nfilters={f}\nsize={s}\nstride={st}\npad=1\n" \
       "activation=leaky\n"
CFG = ("[net]\nbatch=4\nsubdivisions=1\nwidth=32\nheight=32\nchannels=3\nmomentum=0.9\n"
       "decay=0.0005\nlearning_rate=0.01\nburn_in=0\nmax_batches=10\npolicy=constant\n"
       + CONV.format(f=8, s=3, st=2) + CONV.format(f=8, s=1, st=1)
       + CONV.format(f=16, s=3, st=2) + CONV.format(f=16, s=1, st=1)
       + CONV.format(f=16, s=3, st=2)
       + "\n[convolutional]\nsize=1\nstride=1\npad=1\nfilters=21\nactivation=linear\n"
       + "\n[yolo]\nmask=0,1,2\nanchors=8,8, 12,12, 16,16\nclasses=2\nnum=3\njitter=.3\n"
       "ignore_thresh=.7\ntruth_thresh=1\nrandom=0\n")


def train_flat(tmp_path, dialect, compat, pixel, steps=6):
    cfg = tmp_path / "flat.cfg"
    cfg.write_text(CFG)
    net = dn.parse_network_cfg(cfg, dialect=dialect, compat=compat, seed=3)
    x = np.full((net.batch, net.c, net.h, net.w), pixel, np.float32)
    truth = np.zeros((net.batch, net.truths), np.float32)
    truth[:, :5] = [0.5, 0.5, 0.3, 0.3, 1]
    losses = [net.train_datum(x, truth) for _ in range(steps)]
    bn = [l for l in net.layers if getattr(l, "batch_normalize", 0)]
    return net, losses, bn


@pytest.mark.parametrize("dialect", ["pjreddie", "alexeyab"])
@pytest.mark.parametrize("pixel", [0.0, 0.5])
def test_flat_images_train_to_finite_losses_and_weights(tmp_path, dialect, pixel):
    net, losses, bn = train_flat(tmp_path, dialect, None, pixel)
    assert np.isfinite(losses).all(), losses
    for l in net.layers:
        for name in ("weights", "biases", "scales", "rolling_mean", "rolling_variance"):
            a = getattr(l, name, None)
            if a is not None:
                assert np.isfinite(a).all(), (l.type, name)
    # the gradient of the forward's own normaliser keeps the biases in the weights' range
    # (AlexeyAB's CPU formula took a black image's first biases to ~1e10)
    assert max(float(np.abs(l.biases).max()) for l in bn) < 100


def test_alexeyab_cpu_formula_only_under_compat(tmp_path):
    """One step's backward on a black image: under compat="darknet-cpu" AlexeyAB's divisor
    sqrt(0) + 1e-5 instead of sqrt(0 + 1e-5) makes each zero-variance layer's delta ~316x
    larger; pjreddie's CPU backward keeps the epsilon inside under compat too."""
    cfg = tmp_path / "flat.cfg"
    cfg.write_text(CFG)
    first_delta = {}
    for dialect, compat in (("alexeyab", None), ("alexeyab", "darknet-cpu"),
                            ("pjreddie", "darknet-cpu")):
        net = dn.parse_network_cfg(cfg, dialect=dialect, compat=compat, seed=3)
        assert net.quirks.bn_delta_eps_outside_sqrt == (compat is not None
                                                        and dialect == "alexeyab")
        x = np.zeros((net.batch, net.c, net.h, net.w), np.float32)
        truth = np.zeros((net.batch, net.truths), np.float32)
        truth[:, :5] = [0.5, 0.5, 0.3, 0.3, 1]
        net.forward(x, train=True, truth=truth)
        net.backward()
        first_delta[dialect, compat] = float(np.abs(net.layers[0].delta).max())
    assert first_delta["alexeyab", "darknet-cpu"] > 100 * first_delta["alexeyab", None] > 0
