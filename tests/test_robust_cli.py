"""Hostile inputs through the command line: every one works the way Darknet would make it work
or is a one-line error (exit status 1) naming the file; nothing writes outside its folder."""
import numpy as np
import pytest
from PIL import Image

import darknumba as dn
from darknumba.cli import run
from darknumba.train.timing import unit_rolling_variance

pytestmark = pytest.mark.slow

CFG = """
[net]
batch=4
subdivisions=1
width=32
height=32
channels={c}
learning_rate=0.001
burn_in=0
max_batches={max_batches}
policy=constant

[convolutional]
batch_normalize=1
filters=8
size=3
stride=2
pad=1
activation=leaky

[convolutional]
filters=16
size=3
stride=2
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
size=1
stride=1
pad=1
filters=24
activation=linear

[yolo]
mask=0,1,2
anchors=6,6, 10,10, 16,16
classes=3
num=3
random=0
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A small shapes dataset, a colour and a grey detector cfg with random weights."""
    from darknumba.data.synthetic import generate_shapes
    root = tmp_path_factory.mktemp("robust")
    data = generate_shapes(root / "ds", n=12, valid_fraction=0.25, seed=3, size=(40, 56))
    nets = {}
    for c in (3, 1):
        cfg = root / f"c{c}.cfg"
        cfg.write_text(CFG.format(c=c, max_batches=2))
        w = root / f"c{c}.weights"
        net = dn.load_network(cfg, batch=1)
        unit_rolling_variance(net)          # Darknet's 0 would blow test-mode outputs up to inf
        dn.save_weights(net, w)
        nets[c] = (cfg, w)
    return {"root": root, "data": data, "nets": nets}


def call(capsys, *args):
    code = run([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _bad_images(folder):
    """Files a hostile user might hand to detect, and whether each one is usable."""
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    photo = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    cases = {}
    Image.fromarray(photo).save(folder / "ok.png")
    cases["ok.png"] = True
    Image.fromarray(np.full((1, 2000, 3), 90, np.uint8)).save(folder / "wide.png")
    cases["wide.png"] = True
    Image.fromarray(np.full((2000, 1, 3), 90, np.uint8)).save(folder / "tall.png")
    cases["tall.png"] = True
    Image.fromarray(photo).convert("CMYK").save(folder / "cmyk.jpg")
    cases["cmyk.jpg"] = True
    Image.fromarray(rng.integers(0, 65536, (20, 20), dtype=np.uint16)).save(folder / "i16.png")
    cases["i16.png"] = True
    Image.fromarray(photo).convert("LA").save(folder / "la.png")
    cases["la.png"] = True
    full = (folder / "ok.png").read_bytes()
    (folder / "trunc.png").write_bytes(full[:len(full) // 3])
    cases["trunc.png"] = False
    (folder / "empty.jpg").write_bytes(b"")
    cases["empty.jpg"] = False
    (folder / "text.jpg").write_text("not an image\n")
    cases["text.jpg"] = False
    return cases


@pytest.mark.parametrize("c", [3, 1])
def test_detect_skips_bad_images_among_many(world, capsys, tmp_path, c):
    cfg, w = world["nets"][c]
    cases = _bad_images(tmp_path / "imgs")
    code, out, err = call(capsys, "detect", cfg, w, tmp_path / "imgs", "--thresh", "0.99",
                          "--out", tmp_path / "drawn")
    assert code == 0, err
    good = sorted(n for n, ok in cases.items() if ok)
    assert sorted(p.name for p in (tmp_path / "drawn").iterdir()) == sorted(
        n.rsplit(".", 1)[0] + ".png" for n in good)
    for name, ok in cases.items():
        assert (f"skipped: cannot read image {tmp_path / 'imgs' / name}" in err) != ok, name


@pytest.mark.parametrize("name", ["trunc.png", "empty.jpg", "text.jpg"])
def test_detect_one_bad_image_is_one_line(world, capsys, tmp_path, name):
    cfg, w = world["nets"][3]
    _bad_images(tmp_path / "imgs")
    code, _, err = call(capsys, "detect", cfg, w, tmp_path / "imgs" / name)
    assert code == 1 and err.count("\n") == 1
    assert err.startswith(f"darknumba: error: cannot read image {tmp_path / 'imgs' / name}")


def test_grey_network_on_colour_photos_detects_and_trains(world, capsys, tmp_path):
    """channels=1: images are loaded grey (AlexeyAB's load_image(path, 0, 0, net.c))."""
    cfg, w = world["nets"][1]
    photo = world["root"] / "ds" / "images" / "train" / "00000.jpg"
    code, out, err = call(capsys, "detect", cfg, w, photo, "--out", tmp_path / "p.png")
    assert code == 0, err
    assert Image.open(tmp_path / "p.png").size == Image.open(photo).size
    code, out, err = call(capsys, "detector", "train", world["data"], cfg, "--no-progress",
                          "--no-chart", "--backup", tmp_path / "b", "--workers", "1")
    assert code == 0, err
    assert (tmp_path / "b" / "c1_final.weights").exists()
    code, out, err = call(capsys, "detector", "map", world["data"], cfg,
                          tmp_path / "b" / "c1_final.weights")
    assert code == 0, err
