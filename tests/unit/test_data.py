"""Data files, the label path rule and label validation (each problem once, with file:line)."""
import numpy as np
import pytest

from darknumba.data.datasets import (DataIssues, DetectionDataset, check_data, label_path,
                                     parse_label_file, read_data_cfg)
from darknumba.errors import DataError


def test_label_path_rule():
    assert label_path("/d/images/train/a.jpg") == "/d/labels/train/a.txt"
    assert label_path("/voc/JPEGImages/x.JPEG") == "/voc/labels/x.txt"
    assert label_path("/d/raw/b.png") == "/d/labels/b.txt"
    assert label_path("/d/images/c.bmp") == "/d/labels/c.txt"


def test_read_data_cfg(tmp_path):
    p = tmp_path / "obj.data"
    p.write_text("classes= 3\n# comment\ntrain = t.txt\nvalid=v.txt\nnames = n.names\n"
                 "backup = bk/\neval=coco\n")
    dc = read_data_cfg(p)
    assert (dc.classes, dc.train, dc.valid, dc.names, dc.backup, dc.eval) == \
        (3, "t.txt", "v.txt", "n.names", "bk/", "coco")
    p.write_text("train = t.txt\n")
    with pytest.raises(DataError, match="classes"):
        read_data_cfg(p)
    p.write_text("classes = 2\njunk line\n")
    with pytest.raises(DataError, match=r"obj.data:2"):
        read_data_cfg(p)


BAD_LINES = {
    "bad-class": "3 0.5 0.5 0.1 0.1",
    "out-of-range": "0 1.5 0.5 0.1 0.1",
    "nan": "0 nan 0.5 0.1 0.1",
    "malformed-line": "0 0.5 0.5 0.1",
}


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_bad_label_lines_reported_with_file_and_line(tmp_path, kind):
    lab = tmp_path / "a.txt"
    lab.write_text("1 0.5 0.5 0.2 0.2\n" + BAD_LINES[kind] + "\n")
    msgs = []
    issues = DataIssues("skip", log=msgs.append)
    assert parse_label_file(str(lab), 3, issues, image="a.jpg") is None
    assert parse_label_file(str(lab), 3, issues, image="a.jpg") is None   # reported once
    assert len(msgs) == 1 and f"{lab}:2" in msgs[0]
    assert [i.kind for i in issues.issues] == [kind]
    with pytest.raises(DataError, match=f"{lab}:2"):
        parse_label_file(str(lab), 3, DataIssues("stop"), image="a.jpg")


def _dataset(tmp_path):
    from PIL import Image
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    paths = []
    for i, lab in enumerate(["0 0.5 0.5 0.2 0.2\n1 0.25 0.25 0.1 0.1\n", "", None, "7 .5 .5 .1 .1\n"]):
        p = tmp_path / "images" / f"{i}.jpg"
        Image.new("RGB", (16, 16)).save(p)
        if lab is not None:
            (tmp_path / "labels" / f"{i}.txt").write_text(lab)
        paths.append(str(p))
    broken = tmp_path / "images" / "4.jpg"
    broken.write_bytes(b"not a jpeg")
    (tmp_path / "labels" / "4.txt").write_text("")
    paths += [str(broken), str(tmp_path / "images" / "missing.jpg")]
    (tmp_path / "train.txt").write_text("\n".join(paths) + "\n")
    (tmp_path / "d.data").write_text(f"classes=2\ntrain={tmp_path / 'train.txt'}\n")
    return paths


def test_dataset_skips_bad_items_and_summarises(tmp_path):
    paths = _dataset(tmp_path)
    msgs = []
    ds = DetectionDataset(paths, 2, DataIssues("skip", log=msgs.append))
    assert ds.paths == paths[:2] + paths[4:5]       # the broken jpeg is caught when decoded
    np.testing.assert_allclose(ds.boxes[0], [[.5, .5, .2, .2, 0], [.25, .25, .1, .1, 1]])
    assert ds.boxes[1].shape == (0, 5)
    kinds = sorted(i.kind for i in ds.issues.issues)
    assert kinds == ["bad-class", "missing-image", "missing-label"]
    _, counts, issues = check_data(tmp_path / "d.data", log=msgs.append)
    assert counts == {"train": 2}
    assert "unreadable-image" in {i.kind for i in issues.issues}
    assert "4 problem(s)" in issues.summary() and "4 image(s) skipped" in issues.summary()
    with pytest.raises(DataError):
        check_data(tmp_path / "d.data", policy="stop")
