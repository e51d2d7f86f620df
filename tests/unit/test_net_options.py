"""[net] read into NetOptions: every cfg/*.cfg gives the values the Network's ad-hoc attributes
had before (a recorded fixture), and a bare [net] gives Darknet's defaults, field by field."""
import json
import warnings
from dataclasses import fields
from pathlib import Path

import pytest

from darknumba.net_options import NET_OPTION_NAMES, NetOptions
from darknumba.network import Network
from darknumba.parser import parse_network_cfg

ROOT = Path(__file__).resolve().parents[2]
RECORDED = json.loads((ROOT / "tests/fixtures/net_options_before.json").read_text())["networks"]

# parse_net_options' defaults (pjreddie's parser.c; the AlexeyAB keys as its parser.c reads
# them) for `[net] width=8 height=6 channels=3`: written out, so that a changed default fails
PJ_DEFAULTS = dict(
    batch=1, subdivisions=1, time_steps=1, h=6, w=8, c=3, inputs=144, learning_rate=0.001,
    momentum=0.9, decay=0.0001, adam=False, B1=0.9, B2=0.999, eps=1e-7, policy="constant",
    burn_in=0, power=4.0, step=1, scale=1.0, steps=[], scales=[], gamma=1.0, max_batches=0,
    max_crop=16, min_crop=8, angle=0.0, aspect=1.0, saturation=1.0, exposure=1.0, hue=0.0,
    random=0)
AB_DEFAULTS = dict(
    flip=1, blur=0, gaussian_noise=0, mixup=0, cutmix=0, mosaic=0, letter_box=0,
    mosaic_bound=0, contrastive=0, contrastive_jit_flip=0, contrastive_color=0, unsupervised=0,
    attention=0, track=0, augment_speed=2, try_fix_nan=0, weights_reject_freq=0,
    equidistant_point=0, use_cuda_graph=0, dynamic_minibatch=0, optimized_memory=0,
    sgdr_mult=2, sequential_subdivisions=1, sgdr_cycle=0, learning_rate_min=0.00001,
    ema_alpha=0.0, label_smooth_eps=0.0, resize_step=32.0, adversarial_lr=0.0,
    max_chart_loss=20.0, loss_scale=1.0, badlabels_rejection_percentage=0.0,
    num_sigmas_reject_badlabels=0.0, workspace_size_limit_mb=1024.0, seq_scales=[])


def _parse(path, dialect):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse_network_cfg(path, dialect=dialect, allocate=False, seed=None)


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_cfg_gives_the_recorded_values(key):
    name, dialect = key.split("|")
    net = _parse(ROOT / "cfg" / name, dialect)
    got = {k: getattr(net, k) for k in RECORDED[key]}
    got = {k: list(v) if isinstance(v, tuple) else v for k, v in got.items()}
    assert got == RECORDED[key]
    assert {k: getattr(net.options, k) for k in RECORDED[key]} == got


@pytest.mark.parametrize("dialect", ["pjreddie", "alexeyab"])
def test_bare_net_gives_darknets_defaults(tmp_path, dialect):
    cfg = tmp_path / "n.cfg"
    cfg.write_text("[net]\nwidth=8\nheight=6\nchannels=3\n[softmax]\n")
    net = _parse(cfg, dialect)
    want = {**PJ_DEFAULTS, **AB_DEFAULTS}
    if dialect == "pjreddie":
        want["sequential_subdivisions"] = 0     # not read: the dataclass default
    assert {k: getattr(net, k) for k in want} == want
    assert set(want) == set(NET_OPTION_NAMES)


def test_alexeyab_adam_eps(tmp_path):
    cfg = tmp_path / "n.cfg"
    cfg.write_text("[net]\nwidth=8\nheight=6\nchannels=3\nadam=1\n[softmax]\n")
    assert (_parse(cfg, "pjreddie").eps, _parse(cfg, "alexeyab").eps) == (1e-7, 1e-6)


def test_dataclass_defaults_are_the_networks():
    """A Network built by hand has NetOptions' defaults; an attribute write lands in options."""
    net = Network()
    sizes = {"h": 0, "w": 0, "c": 0, "inputs": 0, "max_crop": 0, "min_crop": 0,
             "sequential_subdivisions": 0}      # computed from other keys by the parser
    want = {**PJ_DEFAULTS, **AB_DEFAULTS, **sizes}
    assert {f.name: getattr(net, f.name) for f in fields(NetOptions)} == want
    net.batch = 5
    assert net.options.batch == 5 and "batch" not in vars(net)
