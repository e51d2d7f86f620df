"""The classifier workflow: labels from path substrings, the .data file, crops, and the
train / predict / valid / example commands through the CLI."""
import re

import numpy as np
import pytest
from conftest import ROOT
from typer.testing import CliRunner

from darknumba.cli import app
from darknumba.errors import DataError
from darknumba.train.classifier import (ClassifierData, center_crop_image, label_index,
                                        rotate_crop_image, top_k, valid_input)


def test_label_from_path_substring():
    labels = ["circle", "square", "cat"]
    assert label_index("/data/train/00012_square.png", labels) == 1
    assert label_index("/data/cat/img1.jpg", labels) == 2
    assert label_index("/data/img_dog.jpg", labels) == -1                  # none
    assert label_index("/data/cat/circle.png", labels) == -1               # several


def test_data_file(tmp_path):
    (tmp_path / "labels.txt").write_text("a_lab\nb_lab\nc_lab\n")
    (tmp_path / "names.txt").write_text("Apple\nBanana\nCherry\n")
    d = tmp_path / "x.data"
    d.write_text("classes=3\ntrain=t.list\nlabels=labels.txt\nnames=names.txt\ntop=2\n")
    dc = ClassifierData.read(d)
    assert dc.labels == ["a_lab", "b_lab", "c_lab"] and dc.names[1] == "Banana" and dc.top == 2
    d.write_text("classes=3\ntrain=t.list\n")
    with pytest.raises(DataError, match="labels"):
        ClassifierData.read(d)


def test_crops():
    rng = np.random.default_rng(0)
    im = rng.uniform(0, 1, (3, 6, 8)).astype(np.float32)
    np.testing.assert_allclose(rotate_crop_image(im, 0.0, 1.0, 8, 6, 0, 0, 1.0), im, atol=1e-6)
    shifted = rotate_crop_image(im, 0.0, 1.0, 4, 4, 1.0, 0.0, 1.0)     # window centre + 1 px
    np.testing.assert_allclose(shifted, im[:, 1:5, 3:7], atol=1e-6)
    assert center_crop_image(im, 4, 4).shape == (3, 4, 4)
    v = valid_input(im, 4, 4)                       # shorter side 6 -> 4, then the centre 4x4
    assert v.shape == (3, 4, 4)
    assert top_k(np.array([0.1, 0.5, 0.5, 0.2]), 3) == [1, 2, 3]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    out = tmp_path_factory.mktemp("cls")
    r = CliRunner().invoke(app, ["classifier", "example", str(out), "--n", "60"])
    assert r.exit_code == 0, r.output
    cfg = (ROOT / "cfg" / "shapes5-classifier.cfg").read_text()
    cfg = re.sub(r"^batch=\d+", "batch=8", cfg, flags=re.M)
    (out / "small.cfg").write_text(cfg)
    return out


def test_train_predict_valid(example):
    runner = CliRunner()
    data, cfg = str(example / "shapes5.data"), str(example / "small.cfg")
    r = runner.invoke(app, ["classifier", "train", data, cfg, "--max-batches", "6",
                            "--backup", str(example / "backup")])
    assert r.exit_code == 0, r.output
    lines = [l for l in r.stdout.splitlines() if re.match(r"^\d+, \d+\.\d+: ", l)]
    assert len(lines) == 6 and lines[-1].startswith("6, 1.000: ")       # 48 images: one epoch
    weights = example / "backup" / "small.weights"
    assert weights.exists() and (example / "backup" / "small_1.weights").exists()
    img = sorted((example / "valid").glob("*.png"))[0]
    r = runner.invoke(app, ["classifier", "predict", data, cfg, str(weights), str(img),
                            "--top", "3"])
    assert r.exit_code == 0, r.output
    rows = [l for l in r.output.splitlines() if "%: " in l]
    assert len(rows) == 3
    probs = [float(l.split("%")[0]) for l in rows]
    assert probs == sorted(probs, reverse=True) and sum(probs) <= 100.01
    assert rows[0].split(": ")[1] in ("circle", "square", "triangle", "cross", "diamond")
    r = runner.invoke(app, ["classifier", "valid", data, cfg, str(weights)])
    assert r.exit_code == 0, r.output
    m = re.search(r"12 images: top 1: ([\d.]+), top 2: ([\d.]+)", r.output)
    assert m and 0 <= float(m.group(1)) <= float(m.group(2)) <= 1
    r = runner.invoke(app, ["classifier", "train", data, cfg, str(weights), "--max-batches", "7",
                            "--backup", str(example / "backup")])
    assert r.exit_code == 0, r.output
    assert "loaded 10 of 10 layers" in r.output and re.search(r"^7, ", r.stdout, re.M)
