"""Hostile inputs through the command line: every one works the way Darknet would make it work
or is a one-line error (exit status 1) naming the file; nothing writes outside its folder."""
import numpy as np
import pytest
from conftest import ROOT
from PIL import Image
from tiny_nets import cfg_text, conv, maxpool, section

import darknumba as dn
from darknumba.cli import run
from darknumba.train.timing import unit_rolling_variance

pytestmark = pytest.mark.slow

def small_cfg(c: int, max_batches: int) -> str:
    """A detector of c input channels: two stride-2 convolutions, a maxpool, one yolo head."""
    return cfg_text(dict(batch=4, subdivisions=1, width=32, height=32, channels=c,
                         learning_rate=0.001, burn_in=0, max_batches=max_batches,
                         policy="constant"),
                    conv(8, stride=2), conv(16, stride=2, bn=False), maxpool(),
                    conv(24, size=1, bn=False, activation="linear"),
                    section("yolo", mask="0,1,2", anchors="6,6, 10,10, 16,16", classes=3,
                            num=3, random=0))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A small shapes dataset, a colour and a grey detector cfg with random weights."""
    from tiny_data import shapes_set
    root = tmp_path_factory.mktemp("robust")
    data = shapes_set(root, n=12, seed=3)
    nets = {}
    for c in (3, 1):
        cfg = root / f"c{c}.cfg"
        cfg.write_text(small_cfg(c, max_batches=2))
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


def _dataset_copy(world, tmp_path, **replace):
    """A .data file for the world's dataset with some entries replaced (None: dropped)."""
    ds = world["root"] / "ds"
    entries = {"classes": "3", "train": str(ds / "train.txt"), "valid": str(ds / "valid.txt"),
               "names": str(ds / "shapes.names"), "backup": str(tmp_path / "backup")}
    entries.update(replace)
    p = tmp_path / "x.data"
    p.write_text("".join(f"{k} = {v}\n" for k, v in entries.items() if v is not None))
    return p


def test_data_check_fails_where_training_would(world, capsys, tmp_path):
    code, out, err = call(capsys, "data", "check", _dataset_copy(world, tmp_path))
    assert code == 0 and "train: 9 usable images" in out, err
    code, _, err = call(capsys, "data", "check", _dataset_copy(world, tmp_path, train=None))
    assert code == 1 and err.startswith("darknumba: error: ") and "no `train` list" in err
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    code, out, err = call(capsys, "data", "check", _dataset_copy(world, tmp_path, train=empty))
    assert code == 1 and "the train list names no images" in err and "1 empty-list" in out
    for names in ("a\nb\n", "a\nb\nc\nd\n"):
        (tmp_path / "n.names").write_text(names)
        code, out, err = call(capsys, "data", "check",
                              _dataset_copy(world, tmp_path, names=tmp_path / "n.names"))
        assert code == 1 and f"{names.count(chr(10))} names for classes=3" in err
        assert "1 names-count" in out
    code, _, err = call(capsys, "data", "check", _dataset_copy(world, tmp_path, classes="３"))
    assert code == 1 and "is not an integer" in err and err.count("\n") == 1


@pytest.mark.parametrize("which", ["data", "train", "names"])
def test_text_files_that_are_not_utf8_name_the_file_and_offset(world, capsys, tmp_path, which):
    bad = tmp_path / f"bad.{which}"
    if which == "data":
        data = bad
        bad.write_bytes(b"classes = 3\ntrain = caf\xe9.txt\n")
    else:
        bad.write_bytes(b"first line\n\xff\xfe\n")
        data = _dataset_copy(world, tmp_path, **{which: bad})
    offset, line = (23, 2) if which == "data" else (11, 2)
    for args in (["data", "check", data], ["detector", "train", data, world["nets"][3][0]]):
        code, _, err = call(capsys, *args)
        if which == "names" and args[0] == "detector":
            continue                             # training does not read the names
        assert code == 1 and err.count("\n") == 1, err
        assert f"{bad}: " in err and "is not UTF-8 text" in err
        assert f"offset {offset} (line {line})" in err


def test_detect_names_and_image_lists_that_are_not_utf8(world, capsys, tmp_path):
    cfg, w = world["nets"][3]
    (tmp_path / "n.names").write_bytes(b"a\nb\n\xc3\n")
    code, _, err = call(capsys, "detect", cfg, w, "--names", tmp_path / "n.names",
                        world["root"] / "ds" / "images" / "train" / "00000.jpg")
    assert code == 1 and "n.names: names file is not UTF-8 text: byte 0xc3 at offset 4" in err
    (tmp_path / "l.txt").write_bytes(b"\x80x.jpg\n")
    code, _, err = call(capsys, "detect", cfg, w, tmp_path / "l.txt")
    assert code == 1 and "l.txt: image list is not UTF-8 text" in err


@pytest.mark.parametrize("text, message", [
    ("", "has no classes"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8 text"),
    ("animal -1\ndog 0\ncat zero\n", ":3: expected `name parent`"),
    ("animal -1\ndog 5\n", ":2: class 1 (dog) has parent 5"),
    ("animal 0\n", ":1: class 0 (animal) has parent 0"),
])
def test_class_tree_that_is_not_a_tree(capsys, tmp_path, text, message):
    tree = tmp_path / "bad.tree"
    tree.write_bytes(text if isinstance(text, bytes) else text.encode())
    for section in ("[softmax]\ngroups=1\ntree={}\n",
                    "[region]\nclasses=2\nnum=1\ncoords=4\ntree={}\n"):
        cfg = tmp_path / "t.cfg"
        n = 4 + 1 + 2 if "region" in section else 2
        cfg.write_text(f"[net]\nwidth=1\nheight=1\nchannels={n}\n[convolutional]\nfilters={n}\n"
                       f"size=1\nstride=1\npad=0\n" + section.format(tree))
        code, _, err = call(capsys, "summary", cfg)
        assert code == 1 and err.count("\n") == 1 and f"{tree}" in err and message in err, err


def test_bad_data_stop_fails_on_a_bad_image_in_a_prefetched_batch(world, capsys, tmp_path,
                                                                  monkeypatch):
    """One training iteration; the loader prepares batch 1 ahead and meets a truncated image
    there: with --bad-data stop the run saves its weights and still exits 1 naming the image.
    (The loader thread is made to finish the batches it holds before it closes, as it does
    unless the machine is very busy: a batch not yet started when training ends is dropped
    unread, and then nothing bad was seen.)"""
    from darknumba.data.datasets import DataIssues, DetectionDataset, get_paths
    from darknumba.data.loader import DetectionLoader, MultiScale
    from darknumba.vision.augment import AugmentConfig
    ds_dir = world["root"] / "ds"
    bad = ds_dir / "images" / "train" / "bad.jpg"
    good = (ds_dir / "images" / "train" / "00000.jpg").read_bytes()
    bad.write_bytes(good[:len(good) // 4])
    (ds_dir / "labels" / "train" / "bad.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    train = tmp_path / "train.txt"
    train.write_text((ds_dir / "train.txt").read_text() + f"{bad}\n")
    cfg = world["nets"][3][0]
    net = dn.load_network(cfg)

    def bad_in(seed, k):
        issues = DataIssues("skip", log=lambda m: None)
        ds = DetectionDataset(get_paths(train), 3, issues)
        loader = DetectionLoader(ds, 4, AugmentConfig.from_network(net),
                                 MultiScale(32, 32, False, seed, 2), seed=seed)
        loader.load_batch(k)
        loader.close()
        return bool(issues.issues)
    seed = next(s for s in range(100) if not bad_in(s, 0) and bad_in(s, 1))
    real_close = DetectionLoader.close

    def close_after_loading(self):
        for f in self.pending:
            f.exception()
        real_close(self)
    monkeypatch.setattr(DetectionLoader, "close", close_after_loading)
    data = _dataset_copy(world, tmp_path, train=train)
    args = ["detector", "train", data, cfg, "--max-batches", "1", "--seed", seed, "--workers",
            "1", "--no-progress", "--no-chart", "--backup", tmp_path / "b"]
    code, _, err = call(capsys, *args, "--bad-data", "stop")
    assert code == 1 and err.rstrip().splitlines()[-1].startswith(
        f"darknumba: error: {bad}: cannot read image {bad}"), err
    assert "bad-data policy is `stop`" in err and (tmp_path / "b" / "c3_final.weights").exists()
    code, _, err = call(capsys, *args, "--bad-data", "skip")
    assert code == 0, err


def test_valid_keeps_class_files_inside_the_output_folder(world, capsys, tmp_path):
    cfg, w = world["nets"][3]
    names = tmp_path / "evil.names"
    names.write_text("../../evil\nsub/dir\n..\n")
    data = _dataset_copy(world, tmp_path, names=names)
    out = tmp_path / "deep" / "res"
    code, _, err = call(capsys, "detector", "valid", data, cfg, w, "--out", out, "--prefix", "")
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["_.._evil.txt", "class_2.txt", "sub_dir.txt"]
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == ["res"]
    assert not (tmp_path / "evil.txt").exists()
    code, _, err = call(capsys, "detector", "valid", data, cfg, w, "--prefix", "../x_")
    assert code == 2 and "--prefix" in err


def test_training_removes_only_stale_temporaries_of_its_own(world, capsys, tmp_path):
    import os
    import time
    backup = tmp_path / "b"
    backup.mkdir()
    old, now = time.time() - 3600, time.time() + 3600
    files = {".tmp-abc_1234.weights": old, ".tmp-ABCDEFGH.weights": old, "keep.tmp": old,
             ".tmp-zzzzzzzz.weights": now, ".tmp-short.weights": old}
    for name, t in files.items():
        (backup / name).write_bytes(b"partial")
        os.utime(backup / name, (t, t))
    code, _, err = call(capsys, "detector", "train", world["data"], world["nets"][3][0],
                        "--max-batches", "1", "--no-progress", "--no-chart", "--backup", backup)
    assert code == 0, err
    assert "removed 1 unfinished checkpoint file(s)" in err
    assert not (backup / ".tmp-abc_1234.weights").exists()
    kept = (".tmp-ABCDEFGH.weights", "keep.tmp", ".tmp-zzzzzzzz.weights", ".tmp-short.weights")
    for name in kept:
        assert (backup / name).exists(), name


def test_disk_full_during_a_checkpoint_is_one_line_and_keeps_the_previous(world, capsys, tmp_path,
                                                                          monkeypatch):
    import errno
    import os

    import darknumba.outputs
    real_write, writes = os.write, []

    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("-c3.backup"):     # a checkpoint
            writes.append(len(data))
            if len(writes) >= 2:                # the second checkpoint finds the disk full
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)
    monkeypatch.setattr(darknumba.outputs.os, "write", write)
    backup = tmp_path / "b"
    code, _, err = call(capsys, "detector", "train", world["data"], world["nets"][3][0],
                        "--max-batches", "3", "--backup-every", "1", "--checkpoint-every", "1000",
                        "--no-progress", "--no-chart", "--backup", backup)
    monkeypatch.undo()
    assert code == 1 and err.count("\n") == 1, err
    assert err == (f"darknumba: error: cannot write checkpoint {backup / 'c3.backup'}: the disk is "
                   f"full; existing files are unchanged (last checkpoint of this run: "
                   f"{backup / 'c3.backup'})\n")
    assert sorted(os.listdir(backup)) == ["c3.backup", "c3_history.csv"]   # no temporary left
    assert dn.load_network(world["nets"][3][0], backup / "c3.backup").seen == 4   # iteration 1


def test_temporary_name_pattern_matches_atomic_write(tmp_path):
    import os
    import tempfile

    from darknumba.outputs import PendingFile
    from darknumba.train.checkpoint import TEMP_NAME
    for name in ("c3.backup", "c3_history.csv", "chart.png", "x" * 255):
        pending = PendingFile(tmp_path / name)
        assert TEMP_NAME.fullmatch(os.path.basename(pending.tmp)), pending.tmp
        pending.discard()
    for _ in range(20):             # written by atomic_write up to 2026-12-03
        fd, name = tempfile.mkstemp(prefix=".tmp-", suffix=".weights", dir=tmp_path)
        os.close(fd)
        assert TEMP_NAME.fullmatch(name.rsplit("/", 1)[1]), name


def test_rand_uniform_swaps_bounds_as_darknet_and_draws_as_numpy():
    from darknumba.vision.augment import rand_uniform
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    assert [rand_uniform(a, -2, 3) for _ in range(5)] == [b.uniform(-2, 3) for _ in range(5)]
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    assert rand_uniform(a, 0.2, -0.2) == b.uniform(-0.2, 0.2)          # a negative jitter


def test_classifier_crops_smaller_than_the_network_and_nan_thresholds(world, capsys, tmp_path):
    """max_crop below the network width makes the random shift range negative: Darknet's
    rand_uniform swaps the bounds; a NaN threshold is a usage error."""
    from darknumba.data.classifier_example import make_example
    data = make_example(tmp_path / "cls", n=8, valid=0.25, seed=0)
    cfg = tmp_path / "c.cfg"
    cfg.write_text((ROOT / "cfg" / "shapes5-classifier.cfg").read_text()
                   .replace("width=32", "width=48").replace("height=32", "height=48")
                   .replace("batch=64", "batch=4"))
    code, _, err = call(capsys, "classifier", "train", data, cfg, "--max-batches", "1",
                        "--workers", "1", "--backup", tmp_path / "b")
    assert code == 0, err
    det_cfg, w = world["nets"][3]
    for args in (["detect", det_cfg, w, "--thresh", "nan"],
                 ["detector", "recall", world["data"], det_cfg, w, "--thresh", "nan"],
                 ["detector", "test", world["data"], det_cfg, w, "x.jpg", "-thresh", "nan"]):
        code, _, err = call(capsys, *args)
        assert code == 2 and "NaN is not a threshold" in err, (args, err)
