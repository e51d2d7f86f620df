"""The synthetic shapes dataset and the data/partial/detector CLI commands."""
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from darknumba.cli import app
from darknumba.data.datasets import (DataIssues, DetectionDataset, get_paths, label_path,
                                     read_data_cfg)
from darknumba.data.synthetic import NAMES, generate_shapes


def test_generator_layout_labels_and_seed(tmp_path):
    data = generate_shapes(tmp_path / "a", n=30, valid_fraction=0.2, seed=3)
    dc = read_data_cfg(data)
    assert dc.classes == 3 and dc.class_names() == list(NAMES)
    train, valid = get_paths(dc.train), get_paths(dc.valid)
    assert (len(train), len(valid)) == (24, 6) and not set(train) & set(valid)
    issues = DataIssues("stop")
    ds = DetectionDataset(train + valid, 3, issues, check_images=True)
    counts = np.bincount(np.concatenate([b[:, 4] for b in ds.boxes]).astype(int), minlength=3)
    assert all(counts > 0) and all(1 <= len(b) <= 4 for b in ds.boxes)
    for b in ds.boxes:
        assert np.all((b[:, 2:4] > 0.1) & (b[:, 2:4] < 0.6))
    generate_shapes(tmp_path / "b", n=30, valid_fraction=0.2, seed=3)
    for p in train[:3]:
        q = p.replace(str(tmp_path / "a"), str(tmp_path / "b"))
        assert Path(label_path(p)).read_text() == Path(label_path(q)).read_text()


def test_cli_data_shapes_and_check(tmp_path):
    r = CliRunner().invoke(app, ["data", "shapes", str(tmp_path / "s"), "--n", "12"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["data", "check", str(tmp_path / "s" / "shapes.data")])
    assert r.exit_code == 0, r.output
    assert "train: 10 usable images" in r.output and "no problems" in r.output
    bad = tmp_path / "s" / "labels" / "train" / "00000.txt"
    bad.write_text("5 0.5 0.5 0.1 0.1\n")
    r = CliRunner().invoke(app, ["data", "check", str(tmp_path / "s" / "shapes.data")])
    assert r.exit_code == 1
    assert f"{bad}:1" in r.output and "1 image(s) skipped" in r.output
