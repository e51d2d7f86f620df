"""The shared fixtures fuzz cases refer to as "{FIX}": small networks with random weights (a
character RNN among them), a small shapes dataset and a recorded C run for compare --npz, built
deterministically (seeded), so that corpus cases replay alike."""
from __future__ import annotations

from pathlib import Path

from tiny_nets import cfg_text, conv, maxpool, region_head, set_net_options

ROOT = Path(__file__).resolve().parents[2]
VERSION = "5"          # bump when what is built here changes
NPZ = ROOT / "tests" / "fixtures" / "golden" / "cls-small"   # a recorded run compare --npz reads

# A YOLOv2-style head for 3 classes: 5 anchors x (4 + 1 + 3) = 40 filters.
REGION_CFG = cfg_text(dict(batch=4, subdivisions=1, width=64, height=64, channels=3,
                           learning_rate=0.001, max_batches=10, policy="constant"),
                      conv(8, stride=2), maxpool(), conv(16),
                      region_head("1.08,1.19, 3.42,4.41, 6.63,11.38, 9.42,5.11, 16.62,10.52",
                                  absolute=1))


def small_cfg(name: str, side: int = 64, batch: int = 4) -> str:
    """One of our cfg/ files at side x side and batch/subdivisions = batch/1, to keep fuzz
    cases fast (every network of cfg/ still builds at 64)."""
    return set_net_options((ROOT / "cfg" / name).read_text(), width=side, height=side,
                           batch=batch, subdivisions=1)


def build(fix: Path) -> Path:
    """Build the fixtures into `fix` once (a stamp file records the version)."""
    stamp = fix / "VERSION"
    if stamp.is_file() and stamp.read_text() == VERSION:
        return fix
    import darknumba as dn
    from darknumba.data.classifier_example import make_example
    from darknumba.data.synthetic import generate_shapes
    from darknumba.train.timing import unit_rolling_variance
    fix.mkdir(parents=True, exist_ok=True)
    det = small_cfg("shapes-tiny.cfg", side=96)
    cfgs = {"det": det, "grey": set_net_options(det, channels=1), "region": REGION_CFG,
            "cls": small_cfg("shapes5-classifier.cfg", side=32, batch=8)}
    for name, text in cfgs.items():
        (fix / f"{name}.cfg").write_text(text)
        net = dn.load_network(fix / f"{name}.cfg", batch=1)
        unit_rolling_variance(net)
        dn.save_weights(net, fix / f"{name}.weights")
    generate_shapes(fix / "ds", n=8, valid_fraction=0.25, seed=1, size=(40, 64))
    make_example(fix / "cls", n=12, valid=0.25, seed=1)
    (fix / "npz").mkdir(exist_ok=True)          # compare --npz: the run, its cfg and weights
    for name in ("cls-small.cfg", "init.weights", "forward_test/data.npz"):
        (fix / "npz" / name.replace("forward_test/", "")).write_bytes((NPZ / name).read_bytes())
    rnn = (ROOT / "cfg" / "rnn-tiny.cfg").read_text()       # a character RNN with its weights
    (fix / "rnn.cfg").write_text(rnn)
    dn.save_weights(dn.load_network(fix / "rnn.cfg"), fix / "rnn.weights")
    stamp.write_text(VERSION)
    return fix
