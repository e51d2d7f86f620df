"""Every network of the wider Darknet family we ship a cfg for builds with the shapes pjreddie
Darknet prints, and runs a forward pass and one training step on random weights.

DARKNET_SHAPES / DARKNET_ROWS were read off `./darknet ops <cfg>` (Darknet's own layer table,
batch 1) for pjreddie/darknet's cfg files; our copies in cfg/ must build the same network.
Shapes are each layer's output, width x height x channels (flat layers: their output count).
"""
import warnings

import numpy as np
import pytest
from conftest import ROOT

import darknumba as dn
from darknumba.parser import init_weights as random_init

DARKNET_SHAPES = {
    "yolov2-tiny": ("416x416x16 208x208x16 208x208x32 104x104x32 104x104x64 52x52x64 52x52x128 "
                          "26x26x128 26x26x256 13x13x256 13x13x512 13x13x512 13x13x1024 13x13x512 "
                          "13x13x425 13x13x425"),
    "yolov1-tiny": ("448x448x16 224x224x16 224x224x32 112x112x32 112x112x64 56x56x64 56x56x128 "
                          "28x28x128 28x28x256 14x14x256 14x14x512 7x7x512 7x7x1024 7x7x256 1x1x1470 1470"),
    "tiny": ("224x224x16 112x112x16 112x112x32 56x56x32 56x56x16 56x56x128 56x56x16 56x56x128 "
                   "28x28x128 28x28x32 28x28x256 28x28x32 28x28x256 14x14x256 14x14x64 14x14x512 "
                   "14x14x64 14x14x512 14x14x128 14x14x1000 1x1x1000 1000"),
    "darknet19": ("256x256x32 128x128x32 128x128x64 64x64x64 64x64x128 64x64x64 64x64x128 "
                        "32x32x128 32x32x256 32x32x128 32x32x256 16x16x256 16x16x512 16x16x256 16x16x512 "
                        "16x16x256 16x16x512 8x8x512 8x8x1024 8x8x512 8x8x1024 8x8x512 8x8x1024 8x8x1000 "
                        "1x1x1000 1000"),
    "yolov2": ("608x608x32 304x304x32 304x304x64 152x152x64 152x152x128 152x152x64 152x152x128 "
                     "76x76x128 76x76x256 76x76x128 76x76x256 38x38x256 38x38x512 38x38x256 38x38x512 "
                     "38x38x256 38x38x512 19x19x512 19x19x1024 19x19x512 19x19x1024 19x19x512 "
                     "19x19x1024 19x19x1024 19x19x1024 38x38x512 38x38x64 19x19x256 19x19x1280 "
                     "19x19x1024 19x19x425 19x19x425"),
    "darknet53": ("256x256x32 128x128x64 128x128x32 128x128x64 128x128x64 64x64x128 64x64x64 "
                        "64x64x128 64x64x128 64x64x64 64x64x128 64x64x128 32x32x256 32x32x128 32x32x256 "
                        "32x32x256 32x32x128 32x32x256 32x32x256 32x32x128 32x32x256 32x32x256 32x32x128 "
                        "32x32x256 32x32x256 32x32x128 32x32x256 32x32x256 32x32x128 32x32x256 32x32x256 "
                        "32x32x128 32x32x256 32x32x256 32x32x128 32x32x256 32x32x256 16x16x512 16x16x256 "
                        "16x16x512 16x16x512 16x16x256 16x16x512 16x16x512 16x16x256 16x16x512 16x16x512 "
                        "16x16x256 16x16x512 16x16x512 16x16x256 16x16x512 16x16x512 16x16x256 16x16x512 "
                        "16x16x512 16x16x256 16x16x512 16x16x512 16x16x256 16x16x512 16x16x512 8x8x1024 "
                        "8x8x512 8x8x1024 8x8x1024 8x8x512 8x8x1024 8x8x1024 8x8x512 8x8x1024 8x8x1024 "
                        "8x8x512 8x8x1024 8x8x1024 1x1x1024 1x1x1000 1000"),
    "resnet50": ("128x128x64 64x64x64 64x64x64 64x64x64 64x64x256 64x64x256 64x64x64 64x64x64 "
                       "64x64x256 64x64x256 64x64x64 64x64x64 64x64x256 64x64x256 64x64x128 32x32x128 "
                       "32x32x512 32x32x512 32x32x128 32x32x128 32x32x512 32x32x512 32x32x128 32x32x128 "
                       "32x32x512 32x32x512 32x32x128 32x32x128 32x32x512 32x32x512 32x32x256 16x16x256 "
                       "16x16x1024 16x16x1024 16x16x256 16x16x256 16x16x1024 16x16x1024 16x16x256 "
                       "16x16x256 16x16x1024 16x16x1024 16x16x256 16x16x256 16x16x1024 16x16x1024 "
                       "16x16x256 16x16x256 16x16x1024 16x16x1024 16x16x256 16x16x256 16x16x1024 "
                       "16x16x1024 16x16x512 8x8x512 8x8x2048 8x8x2048 8x8x512 8x8x512 8x8x2048 "
                       "8x8x2048 8x8x512 8x8x512 8x8x2048 8x8x2048 1x1x2048 1x1x1000 1000"),
    "extraction": ("112x112x64 56x56x64 56x56x192 28x28x192 28x28x128 28x28x256 28x28x256 28x28x512 "
                         "14x14x512 14x14x256 14x14x512 14x14x256 14x14x512 14x14x256 14x14x512 14x14x256 "
                         "14x14x512 14x14x512 14x14x1024 7x7x1024 7x7x512 7x7x1024 7x7x512 7x7x1024 "
                         "7x7x1000 1x1x1000 1000"),
    "alexnet": ("55x55x96 27x27x96 27x27x256 13x13x256 13x13x384 13x13x384 13x13x256 6x6x256 "
                      "1x1x4096 1x1x4096 1x1x4096 1x1x4096 1x1x1000 1000"),
}
DARKNET_ROWS = {
    "yolov2-tiny": {
        0: "    0 conv     16  3 x 3 / 1   416 x 416 x   3   ->   416 x 416 x  16  0.150 BFLOPs",
        15: "   15 detection",
    },
    "yolov1-tiny": {
        0: "    0 conv     16  3 x 3 / 1   448 x 448 x   3   ->   448 x 448 x  16  0.173 BFLOPs",
        14: "   14 connected                            12544  ->  1470",
        15: "   15 Detection Layer",
    },
    "tiny": {
        0: "    0 conv     16  3 x 3 / 1   224 x 224 x   3   ->   224 x 224 x  16  0.043 BFLOPs",
        20: "   20 avg                       14 x  14 x1000   ->  1000",
        21: "   21 softmax                                        1000",
    },
    "darknet19": {
        0: "    0 conv     32  3 x 3 / 1   256 x 256 x   3   ->   256 x 256 x  32  0.113 BFLOPs",
        24: "   24 avg                        8 x   8 x1000   ->  1000",
        25: "   25 softmax                                        1000",
    },
    "yolov2": {
        0: "    0 conv     32  3 x 3 / 1   608 x 608 x   3   ->   608 x 608 x  32  0.639 BFLOPs",
        27: "   27 reorg              / 2    38 x  38 x  64   ->    19 x  19 x 256",
        31: "   31 detection",
    },
    "darknet53": {
        0: "    0 conv     32  3 x 3 / 1   256 x 256 x   3   ->   256 x 256 x  32  0.113 BFLOPs",
        75: "   75 avg                        8 x   8 x1024   ->  1024",
        77: "   77 softmax                                        1000",
    },
    "resnet50": {
        0: "    0 conv     64  7 x 7 / 2   256 x 256 x   3   ->   128 x 128 x  64  0.308 BFLOPs",
        66: "   66 avg                        8 x   8 x2048   ->  2048",
        68: "   68 softmax                                        1000",
    },
    "extraction": {
        0: "    0 conv     64  7 x 7 / 2   224 x 224 x   3   ->   112 x 112 x  64  0.236 BFLOPs",
        25: "   25 avg                        7 x   7 x1000   ->  1000",
        26: "   26 softmax                                        1000",
    },
    "alexnet": {
        0: "    0 conv     96 11 x11 / 4   227 x 227 x   3   ->    55 x  55 x  96  0.211 BFLOPs",
        8: "    8 connected                            9216  ->  4096",
        9: "    9 dropout       p = 0.50               4096  ->  4096",
        10: "   10 connected                            4096  ->  4096",
        11: "   11 dropout       p = 0.50               4096  ->  4096",
        12: "   12 connected                            4096  ->  1000",
        13: "   13 softmax                                        1000",
    },
}


def shapes(net):
    return [f"{l.out_w}x{l.out_h}x{l.out_c}" if l.out_h and l.out_w else str(l.outputs)
            for l in net.layers]


def load(name, batch=1, size=None, tmp=None):
    """Our cfg copy, its weights left at zero (_seeded initialises those that run); with `size`,
    a copy with width = height = size in [net] (classifiers end in [softmax], which Darknet
    cannot resize, so small inputs come from the cfg)."""
    path = ROOT / "cfg" / f"{name}.cfg"
    if size:
        text = path.read_text().replace("width=", f"width={size}\n#width=", 1)
        text = text.replace("height=", f"height={size}\n#height=", 1)
        path = tmp / f"{name}-{size}.cfg"
        path.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dn.parse_network_cfg(path, batch=batch, seed=None)


@pytest.mark.parametrize("name", sorted(DARKNET_SHAPES))
def test_table_matches_darknet(name):
    net = load(name)
    assert shapes(net) == DARKNET_SHAPES[name].split()
    rows = net.summary().splitlines()[1:-1]
    for i, row in DARKNET_ROWS[name].items():
        assert rows[i] == row


def _seeded(net, seed=0):
    random_init(net, seed)
    rng = np.random.default_rng(seed)
    for l in net.layers:
        if getattr(l, "batch_normalize", False):
            l.rolling_variance[:] = rng.uniform(0.5, 1.5, l.rolling_variance.size)
    return net


def _truth(net, rng):
    last = net.layers[-1]
    b = net.batch
    if last.type == "region":
        t = np.zeros((b, last.truths), np.float32)
        t[:, :5] = [0.4, 0.6, 0.3, 0.2, 1]
        t[:, 5:10] = [0.7, 0.3, 0.1, 0.15, 3]
        return t
    if last.type == "detection":
        t = np.zeros((b, last.side * last.side, 1 + last.classes + 4), np.float32)
        t[:, 10, 0] = 1
        t[:, 10, 1 + 7] = 1
        t[:, 10, 1 + last.classes:] = [0.5, 0.4, 0.3, 0.6]
        return t
    return np.eye(net.outputs, dtype=np.float32)[rng.integers(net.outputs, size=b)]


def _forward_and_step(net):
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (net.batch, net.c, net.h, net.w)).astype(np.float32)
    out = net.forward(x)
    assert np.isfinite(out).all()
    t = _truth(net, rng)
    before = [l.weights.copy() for l in net.layers if hasattr(l, "weight_updates")]
    net.learning_rate, net.burn_in, net.policy = 1e-4, 0, "constant"
    err = net.train_datum(x, t)
    assert np.isfinite(err) and err > 0
    after = [l.weights for l in net.layers if hasattr(l, "weight_updates")]
    assert all(np.isfinite(a).all() for a in after)
    assert sum(not np.array_equal(a, b) for a, b in zip(after, before, strict=True)) == len(after)
    return net


@pytest.mark.parametrize("name,size", [("yolov2-tiny", 96), ("tiny", 64), ("darknet19", 64)])
def test_forward_and_one_training_step(name, size, tmp_path):
    _forward_and_step(_seeded(load(name, size=size, tmp=tmp_path)))


@pytest.mark.slow
def test_yolov2_region_train_step_and_detections(tmp_path):
    net = _seeded(load("yolov2", size=160, tmp=tmp_path))     # built small, then resized
    net.resize(128, 128)
    _forward_and_step(net)
    l = net.layers[-1]
    assert (l.w, l.h, l.n, l.classes) == (4, 4, 5, 80)
    assert l.stats["count"] == 2
    net.forward(np.random.default_rng(2).uniform(0, 1, (1, 3, 128, 128)).astype(np.float32))
    from darknumba.vision.box import get_network_boxes
    dets = get_network_boxes(net, 640, 480, thresh=0.0)
    assert len(dets) == 4 * 4 * 5 and np.isfinite(dets.bbox).all()


@pytest.mark.slow
@pytest.mark.parametrize("name,size", [("darknet53", 64), ("resnet50", 64), ("extraction", 64),
                                       ("yolov1-tiny", None), ("alexnet", None)])
def test_forward_and_one_training_step_large(name, size, tmp_path):
    """The larger networks: seconds each, in their random initialisation and GEMMs."""
    net = _forward_and_step(_seeded(load(name, size=size, tmp=tmp_path)))
    if name == "yolov1-tiny":
        l = net.layers[-1]
        assert l.stats["count"] == 1 and l.truths == 7 * 7 * 25


def test_shapes5_classifier_cfg_builds():
    net = load("shapes5-classifier")
    assert shapes(net) == ["32x32x16", "16x16x16", "16x16x32", "8x8x32", "8x8x64", "4x4x64",
                           "4x4x64", "4x4x5", "1x1x5", "5"]
