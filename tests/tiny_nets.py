"""Small networks the tests share: a 32x32 yolo detector of two classes that a random
initialisation runs in milliseconds (used by the Detector API, video and evaluation tests)."""
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
