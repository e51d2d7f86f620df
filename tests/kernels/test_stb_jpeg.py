"""The stb_image JPEG port (vision/stb_jpeg.py, kernels/stb_jpeg*.py) against stb_image itself:
the sha256 of the bytes stbi_load gave (pjreddie's v2.19 and AlexeyAB's v2.30 agree on every
file; tests/fixtures/stb_jpeg/README.md) for small JPEGs made for this (baseline 4:2:0, 4:2:2,
4:4:4, 4:1:1, 4:4:0, grey, CMYK, progressive, restart intervals, 1x1 and other odd sizes; every
req_comp 1..4), for the JPEGs the test dependencies' wheels ship, and for Darknet's sample photos
where present; then the C builds' letterboxed and decoded dog.jpg recorded in the golden
fixtures, the IDCT against a float DCT, and damaged files (a clear error or stb's partial image,
never a crash)."""
import hashlib
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, darknet_photo, golden_dir

from darknumba.errors import DataError
from darknumba.kernels.stb_jpeg import UNZIGZAG
from darknumba.kernels.stb_jpeg_pixels import idct_block
from darknumba.vision.image import letterbox_image, load_image, load_image_color
from darknumba.vision.stb_jpeg import JpegError, decode_jpeg, is_jpeg

FIX = ROOT / "tests" / "fixtures" / "stb_jpeg"
RECORDED = json.loads((FIX / "stb_decoded.json").read_text())
OURS = sorted(k for k, v in RECORDED.items() if v["where"] == "fixture")
WHEELS = sorted(k for k, v in RECORDED.items() if v["where"] in ("matplotlib", "skimage"))
DARKNET = sorted(k for k, v in RECORDED.items() if v["where"] == "darknet")


def sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def path_of(name: str) -> Path:
    rec = RECORDED[name]
    if rec["where"] == "fixture":
        return FIX / rec["path"]
    if rec["where"] == "darknet":
        return darknet_photo(rec["path"])
    return Path(importlib.util.find_spec(rec["where"]).origin).parent / rec["path"]


def assert_stb_bytes(name: str, reqs=(1, 2, 3, 4)):
    rec = RECORDED[name]
    data = path_of(name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == rec["file_sha256"], \
        f"{name}: not the file whose stb_image output was recorded ({rec['where']} {rec['path']})"
    for req in reqs:
        want = rec["decoded"][str(req)]
        got = decode_jpeg(data, req)
        assert list(got.shape) == want["shape"], (name, req)
        assert sha(got) == want["sha256"], f"{name}, req_comp {req}: not stb_image's bytes"


@pytest.mark.parametrize("name", OURS)
def test_small_jpegs_decode_to_stb_bytes(name):
    assert_stb_bytes(name)


def test_wheel_photos_decode_to_stb_bytes():
    """grace_hopper.jpg (matplotlib), rocket, retina and hubble_deep_field (scikit-image): each
    that is the recorded file (another release of a wheel may ship another one; most have not
    changed in years), and at least two of them."""
    same = [n for n in WHEELS if hashlib.sha256(path_of(n).read_bytes()).hexdigest()
            == RECORDED[n]["file_sha256"]]
    assert len(same) >= 2, f"only {same} of {WHEELS} are the files recorded"
    for name in same:
        assert_stb_bytes(name, (1, 3))


@pytest.mark.parametrize("name", DARKNET)
def test_darknet_photos_decode_to_stb_bytes(name):
    assert_stb_bytes(name, (1, 3))


def test_dog_is_what_both_darknets_fed():
    """load_image(decoder="stb") gives AlexeyAB's recorded pixels of dog.jpg, and letterboxed
    it is pjreddie's recorded network input, bit for bit."""
    dog = darknet_photo("dog.jpg")
    ab = np.load(ROOT / "tests" / "fixtures" / "ab" / "yolov4-tiny-train" / "data.npz")["image_u8"]
    im = load_image_color(dog, decoder="stb")
    assert np.array_equal(im, ab.astype(np.float32) / np.float32(255))
    ref = np.load(golden_dir("yolov3-tiny-detect") / "dog" / "data.npz")["input"]
    assert np.array_equal(letterbox_image(im, 416, 416).ravel(), ref)


def test_load_image_picks_the_decoder(tmp_path):
    """decoder="stb" reads JPEGs (by their bytes, whatever the name) with the port; PNGs go
    through Pillow either way; an unknown decoder is refused."""
    jpg = FIX / "coffee-420.jpg"
    disguised = tmp_path / "coffee.png"
    disguised.write_bytes(jpg.read_bytes())
    want = decode_jpeg(jpg.read_bytes(), 3).transpose(2, 0, 1).astype(np.float32) / np.float32(255)
    assert np.array_equal(load_image(disguised, decoder="stb"), want)
    assert not np.array_equal(load_image(jpg), want)       # libjpeg-turbo rounds apart
    grey = load_image(jpg, c=1, decoder="stb")
    assert np.array_equal(grey[0], decode_jpeg(jpg.read_bytes(), 1)[:, :, 0] / np.float32(255))
    png = tmp_path / "x.png"
    from PIL import Image
    Image.fromarray(np.arange(48, dtype=np.uint8).reshape(4, 4, 3)).save(png)
    assert np.array_equal(load_image(png, decoder="stb"), load_image(png))
    with pytest.raises(ValueError, match="decoder"):
        load_image(jpg, decoder="libjpeg")


def test_idct_is_within_one_level_of_the_float_idct(rng):
    """stb's 12-bit integer IDCT against the exact DCT-III in float64 (+128, clamped): within
    one grey level on random coefficient blocks."""
    k = np.arange(8)
    basis = np.cos((2 * k[:, None] + 1) * k[None, :] * math.pi / 16)    # [x, u]
    scale = np.where(k == 0, math.sqrt(0.5), 1.0) / 2
    m = basis * scale[None, :]
    out = np.zeros(64, np.uint8)
    tmp = np.zeros(64, np.int64)
    for _ in range(200):
        coef = np.zeros(64, np.int16)
        n = rng.integers(1, 20)
        coef[rng.integers(0, 64, n)] = rng.integers(-300, 300, n)
        idct_block(coef, 0, out, 0, 8, tmp)
        ref = np.clip(m @ coef.reshape(8, 8).astype(np.float64) @ m.T + 128, 0, 255)
        assert np.abs(out.reshape(8, 8) - ref).max() <= 1.0 + 1e-9


def test_zigzag_table():
    """JPEG's zigzag scan: a permutation of 0..63 that walks the anti-diagonals, then 63s."""
    z = UNZIGZAG[:64]
    assert sorted(z) == list(range(64)) and list(UNZIGZAG[64:]) == [63] * 15
    assert list(z[:10]) == [0, 1, 8, 16, 9, 2, 3, 10, 17, 24] and z[63] == 63
    rows, cols = z // 8, z % 8
    assert np.all(np.diff(rows + cols) >= 0)


def test_is_jpeg():
    assert is_jpeg(b"\xff\xd8\xff\xe0") and is_jpeg(b"\xff\xff\xd8")
    assert not is_jpeg(b"\x89PNG\r\n") and not is_jpeg(b"") and not is_jpeg(b"\xd8\xff")


def test_damaged_files_fail_clearly_or_decode_as_stb_keeps_them(tmp_path, rng):
    data = (FIX / "coffee-progressive-420.jpg").read_bytes()
    twelve_bit = data.replace(b"\xff\xc2\x00\x11\x08", b"\xff\xc2\x00\x11\x0c", 1)
    for bad, reason in [(b"\xff\xd8", "expected marker"), (twelve_bit, "only 8-bit"),
                        (b"\xff\xd8\xff\xc3" + data[4:], "unknown marker")]:
        with pytest.raises(JpegError, match=reason):
            decode_jpeg(bad, 3)
    p = tmp_path / "bad.jpg"
    p.write_bytes(b"\xff\xd8\xff\xfe\x00")
    with pytest.raises(DataError, match="bad.jpg.*stb_image"):
        load_image(p, decoder="stb")
    # cut short: decoded (the missing bits read as zeros), as stb v2.30 keeps such a file
    cut = decode_jpeg(data[:len(data) // 2], 3)
    assert cut.shape == (97, 101, 3)
    # flipped bytes after the header: an image or JpegError, never a crash
    start = data.index(b"\xff\xda")
    for _ in range(30):
        b = bytearray(data)
        for i in rng.integers(start, len(b), 4):
            b[i] = rng.integers(0, 256)
        try:
            assert decode_jpeg(bytes(b), 3).shape == (97, 101, 3)
        except JpegError:
            pass


def test_detector_decodes_with_stb_under_compat():
    """Detector's decoder: Pillow by default, stb under compat="darknet-cpu" or when asked;
    the images it runs on are then stb's bytes."""
    import darknumba as dn
    d = golden_dir("det-small")
    cfg, weights = d / "det-small.cfg", d / "init.weights"
    quiet = {"log": lambda m: None, "names": ["a", "b", "c"] * 30}
    assert dn.Detector(cfg, weights, **quiet).decoder == "pillow"
    det = dn.Detector(cfg, weights, compat="darknet-cpu", **quiet)
    assert det.decoder == "stb" and det.net.quirks.stb_jpeg
    assert dn.Detector(cfg, weights, decoder="stb", **quiet).decoder == "stb"
    with pytest.raises(ValueError, match="decoder"):
        dn.Detector(cfg, weights, decoder="opencv", **quiet)
    jpg = FIX / "coffee-progressive-420.jpg"
    (p,) = det.run([jpg])
    want = decode_jpeg(jpg.read_bytes(), 3).transpose(2, 0, 1) / np.float32(255)
    assert p.error is None and np.array_equal(p.image, want)


def test_training_loader_reads_stb_pixels(tmp_path):
    """DetectionLoader(decoder="stb") (training under compat="darknet-cpu") reads its JPEGs
    as Darknet's CPU build does."""
    from darknumba.data.datasets import DataIssues, DetectionDataset
    from darknumba.data.loader import DetectionLoader, MultiScale
    from darknumba.vision.augment import AugmentConfig
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    jpg = tmp_path / "images" / "a.jpg"
    jpg.write_bytes((FIX / "coffee-420.jpg").read_bytes())
    (tmp_path / "labels" / "a.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    ds = DetectionDataset([str(jpg)], 1, DataIssues(log=lambda m: None))
    want = load_image(jpg, decoder="stb")
    for decoder in ("stb", "pillow"):
        with DetectionLoader(ds, 1, AugmentConfig(), MultiScale(64, 64, False, 0, 1),
                             decoder=decoder) as L:
            _, im = L.draw_image(np.random.default_rng(0))
        assert np.array_equal(im, want) == (decoder == "stb")


def test_compare_letterboxes_darknets_input():
    """compare's `letterbox` row (our decoding and letterbox beside darknet's) is 0 on a JPEG:
    dog.jpg for yolov3-tiny is pjreddie's recorded input, bit for bit."""
    from darknumba.parity.compare import _our_letterbox
    from darknumba.parser import parse_network_cfg
    net = parse_network_cfg(ROOT / "cfg" / "yolov3-tiny.cfg", batch=1, seed=None, allocate=False)
    ref = np.load(golden_dir("yolov3-tiny-detect") / "dog" / "data.npz")["input"]
    assert np.array_equal(_our_letterbox(darknet_photo("dog.jpg"), net), ref)
