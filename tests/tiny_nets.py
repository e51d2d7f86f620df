"""Small networks the tests share: a 32x32 yolo detector of two classes that a random
initialisation runs in milliseconds (used by the Detector API, video and evaluation tests), and
the builder the other small cfgs are written with (section, conv, maxpool, cfg_text,
set_net_options)."""
import re
from pathlib import Path

SMALL_CFG = """[net]
width=32
height=32
channels=3

[convolutional]
filters=8
size=3
stride=2
pad=1
activation=leaky

[convolutional]
filters=21
size=1
stride=1
pad=0
activation=linear

[yolo]
mask=0,1,2
anchors=4,5, 8,9, 14,12
classes=2
num=3
"""
NAMES = ["ring", "block"]


def write_small_detector(root: Path) -> tuple[Path, Path, Path]:
    """SMALL_CFG with Darknet's random initialisation saved as .weights, and its names file,
    in `root`: (cfg, weights, names)."""
    import darknumba as dn
    cfg = root / "small.cfg"
    cfg.write_text(SMALL_CFG)
    weights = root / "small.weights"
    dn.save_weights(dn.load_network(cfg), weights)
    names = root / "small.names"
    names.write_text("\n".join(NAMES) + "\n")
    return cfg, weights, names


# -- writing small cfgs: one builder instead of a cfg text per test file ------------------------
def section(name: str, **keys) -> str:
    """One cfg section: `[name]` and a `key=value` line per keyword, in the order given."""
    return "\n".join([f"[{name}]", *(f"{k}={v}" for k, v in keys.items())]) + "\n"


def conv(filters: int, size: int = 3, stride: int = 1, bn: bool = True,
         activation: str = "leaky", **more) -> str:
    """A [convolutional] section (pad=1, Darknet's usual), batch-normalised unless bn=False."""
    return section("convolutional", **({"batch_normalize": 1} if bn else {}), filters=filters,
                   size=size, stride=stride, pad=1, activation=activation, **more)


def maxpool(size: int = 2, stride: int = 2) -> str:
    return section("maxpool", size=size, stride=stride)


# the yolo head of three anchors and three classes the training tests share (24 filters before)
YOLO3 = section("yolo", mask="0,1,2", anchors="6,6, 10,10, 16,16", classes=3, num=3,
                jitter=".2", ignore_thresh=".7", random=0)
HEAD3 = conv(24, size=1, bn=False, activation="linear") + "\n" + YOLO3
# a training [net] at 32x32: batch 8 in 2 subdivisions, a constant rate
TRAIN_NET = dict(batch=8, subdivisions=2, width=32, height=32, channels=3, momentum=0.9,
                 decay=0.0005, learning_rate=0.01, burn_in=0, max_batches=40,
                 policy="constant")


def cfg_text(net: dict, *sections: str) -> str:
    """A whole cfg: the [net] section of `net`'s options, then the sections, a blank line apart."""
    return "\n".join([section("net", **net), *sections])


def set_net_options(text: str, **options) -> str:
    """The cfg text with each `key=value` set in its [net] section: the key's line replaced, or
    a line added after [net] (other sections' keys of the same name are left alone)."""
    start = text.index("[net]")
    end = text.find("\n[", start + 1)
    end = len(text) if end < 0 else end
    net = text[start:end]
    for key, value in options.items():
        pattern = re.compile(rf"^{key}\s*=.*$", re.M)
        net = (pattern.sub(f"{key}={value}", net, count=1) if pattern.search(net)
               else net.replace("[net]", f"[net]\n{key}={value}", 1))
    return text[:start] + net + text[end:]


def region_head(anchors: str, **more) -> str:
    """A YOLOv2 head for 3 classes: the 1x1 convolution of 5 x (4 + 1 + 3) = 40 filters and a
    [region] of five anchors (`anchors`), with Darknet's yolov2 scales."""
    return conv(40, size=1, bn=False, activation="linear") + "\n" + section(
        "region", anchors=anchors, bias_match=1, classes=3, coords=4, num=5, softmax=1,
        jitter=".2", rescore=1, object_scale=5, noobject_scale=1, class_scale=1, coord_scale=1,
        **more, thresh=".6", random=0)


# a detector with few kernels (convolution with batch norm, upsample, yolo boxes, NMS): the tests
# that compile into a fresh numba cache use it, its cold compile about half of shapes-tiny's
QUICK_DETECTOR = cfg_text(dict(batch=1, width=32, height=32, channels=3), conv(8, stride=2),
                          conv(8, size=1), section("upsample", stride=2),
                          conv(21, size=1, bn=False, activation="linear"),
                          section("yolo", mask="0,1,2", anchors="4,5, 8,9, 14,12", classes=2,
                                  num=3))
