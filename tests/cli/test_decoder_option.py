"""--decoder stb|pillow on every command that reads photos (issue 32, Must 5), and --compat
darknet-cpu choosing stb when --decoder is not given (vision.image.pick_decoder).

Two observable effects show which decoder a command used:
* pixels: the shapes set's JPEGs (4:2:0) decode a few levels apart under stb and Pillow, which
  moves `detector valid`'s six-decimal scores and the training commands' first loss;
* truncated JPEGs: stb finishes a file cut short (as the C builds read it), Pillow refuses it
  ("image file is truncated"), so a command that prints too few digits for the pixels to show
  (map, recall, classifier predict/valid, data check) runs or fails by the decoder it used."""
import re
import shutil

import numpy as np
import pytest
from tiny_data import shapes_set
from tiny_nets import HEAD3, TRAIN_NET, cfg_text, conv, section
from typer.testing import CliRunner

import darknumba as dn
from darknumba.cli import app
from darknumba.data.classifier_example import LABELS, make_image
from darknumba.errors import DataError

# (options, the decoder they must select): without --compat and with it (which also builds the
# network as the C build computes, so a result is compared within its group)
GROUPS = {compat: [(compat + opts, pick) for opts, pick in (
    ((), "stb" if compat else "pillow"), (("--decoder", "stb"), "stb"),
    (("--decoder", "pillow"), "pillow"))] for compat in ((), ("--compat", "darknet-cpu"))}
CHOICES = [run for group in GROUPS.values() for run in group]


def assert_follows_decoder(results):
    """results[compat][k]: the outcome of GROUPS[compat][k]. Within a group, the runs that
    select the same decoder agree and stb's and Pillow's differ."""
    for compat, group in GROUPS.items():
        by = {}
        for (_, pick), result in zip(group, results[compat]):
            by.setdefault(pick, []).append(result)
        assert by["stb"][0] != by["pillow"][0], compat
        for pick, same in by.items():
            assert all(r == same[0] for r in same), (compat, pick, same)


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def truncate_jpegs(folder):
    """Cut every JPEG under `folder` to 80 % of its bytes."""
    for p in folder.rglob("*.jpg"):
        data = p.read_bytes()
        p.write_bytes(data[:len(data) * 4 // 5])


@pytest.fixture(scope="module")
def det(tmp_path_factory):
    """A 3-class 32x32 yolo detector with random weights (its training cfg beside it), the
    shapes set, and a copy of that set with its JPEGs truncated."""
    root = tmp_path_factory.mktemp("decoder")
    cfg = root / "det.cfg"
    cfg.write_text(cfg_text(dict(batch=1, width=32, height=32, channels=3), conv(8, stride=2),
                            HEAD3))
    weights = root / "det.weights"
    dn.save_weights(dn.load_network(cfg), weights)
    train_cfg = root / "train.cfg"
    train_cfg.write_text(cfg_text({**TRAIN_NET, "batch": 2, "subdivisions": 1, "max_batches": 1},
                                  conv(8, stride=2), HEAD3))
    data = shapes_set(root / "ok", n=6, seed=11, valid_fraction=0.5)
    cut = shapes_set(root / "cut", n=4, seed=12, valid_fraction=0.5)
    truncate_jpegs(cut.parent)
    cut_valid = shapes_set(root / "cut-valid", n=4, seed=13, valid_fraction=0.5)
    truncate_jpegs(cut_valid.parent / "images" / "valid")
    return {"root": root, "cfg": cfg, "weights": weights, "train_cfg": train_cfg, "data": data,
            "cut": cut, "cut_valid": cut_valid}


@pytest.fixture(scope="module")
def cls(tmp_path_factory):
    """A 5-class classifier set of 24x24 JPEGs (labels in the names), a small classifier with
    random weights, and the set's JPEGs truncated in a copy."""
    root = tmp_path_factory.mktemp("decoder-cls")
    rng = np.random.default_rng(4)
    for split, n in (("train", 5), ("valid", 5)):
        (root / split).mkdir()
        paths = []
        for i in range(n):
            p = root / split / f"{i:03d}_{LABELS[i % 5]}.jpg"
            make_image(rng, LABELS[i % 5], size=24).save(p, format="JPEG", quality=90)
            paths.append(str(p))
        (root / f"{split}.list").write_text("\n".join(paths) + "\n")
    (root / "labels.txt").write_text("\n".join(LABELS) + "\n")
    data = root / "cls.data"
    data.write_text(f"classes=5\ntrain={root / 'train.list'}\nvalid={root / 'valid.list'}\n"
                    f"labels={root / 'labels.txt'}\nbackup={root / 'backup'}\ntop=2\n")
    cfg = root / "cls.cfg"
    cfg.write_text(cfg_text(dict(batch=2, subdivisions=1, width=16, height=16, channels=3,
                                 learning_rate=0.01, momentum=0.9, decay=0.0005,
                                 max_batches=1, min_crop=16, max_crop=20),
                            conv(4), conv(5, size=1, bn=False, activation="linear"),
                            section("avgpool"), section("softmax", groups=1)))
    weights = root / "cls.weights"
    dn.save_weights(dn.load_network(cfg), weights)
    cut = root / "cut"
    shutil.copytree(root / "valid", cut)
    truncate_jpegs(cut)
    (root / "cut.list").write_text("".join(f"{p}\n" for p in sorted(cut.glob("*.jpg"))))
    cut_data = root / "cut.data"
    cut_data.write_text(data.read_text().replace(str(root / "valid.list"), str(root / "cut.list")))
    return {"root": root, "data": data, "cfg": cfg, "weights": weights, "cut": cut_data}


def test_pick_decoder():
    from darknumba.dialect import quirks_for
    from darknumba.vision.image import pick_decoder
    assert pick_decoder(None, quirks_for()) == "pillow"
    assert pick_decoder(None, quirks_for(compat="darknet-cpu")) == "stb"
    assert pick_decoder("pillow", quirks_for(compat="darknet-cpu")) == "pillow"
    assert pick_decoder("stb", quirks_for()) == "stb"
    with pytest.raises(ValueError, match="pillow, stb"):
        pick_decoder("jpeg", quirks_for())


def test_detector_valid_scores_follow_the_decoder(det, tmp_path):
    """The result files' six-decimal scores and corners are stb's or Pillow's pixels'."""
    results = {}
    for compat, group in GROUPS.items():
        for k, (opts, _) in enumerate(group):
            out = tmp_path / f"{len(compat)}-{k}"
            r = invoke("detector", "valid", det["data"], det["cfg"], det["weights"], "--out",
                       out, "--thresh", "0.0001", *opts)
            assert r.exit_code == 0, r.output
            text = "".join(p.read_text() for p in sorted(out.glob("*.txt")))
            assert text.count("\n") > 10
            results.setdefault(compat, []).append(text)
    assert_follows_decoder(results)


@pytest.mark.parametrize("command", [["detector", "map"], ["detector", "recall"]])
def test_detector_map_recall_read_with_the_decoder(det, command):
    """stb reads the truncated valid JPEGs, Pillow refuses them (naming the file)."""
    for opts, decoder in CHOICES:
        r = invoke(*command, det["cut"], det["cfg"], det["weights"], *opts)
        if decoder == "stb":
            assert r.exit_code == 0, r.output
            assert ("mAP@" in r.output) if command[1] == "map" else ("Recall:" in r.output)
        else:
            assert isinstance(r.exception, DataError), r.output
            assert "truncated" in str(r.exception) and ".jpg" in str(r.exception)


def train_losses(output):
    """The loss of each iteration line (pjreddie's `1: loss, avg avg, ...`)."""
    return [float(m.group(1)) for m in re.finditer(r"^\s*\d+: ([\d.]+), ", output, re.M)]


def test_detector_train_loss_follows_the_decoder(det, tmp_path):
    """The first iteration's loss (before any update) comes from the decoded pixels: stb's under
    --decoder stb and by default under --compat, Pillow's otherwise."""
    results = {}
    for compat, group in GROUPS.items():
        for k, (opts, _) in enumerate(group):
            r = invoke("detector", "train", det["data"], det["train_cfg"], "--backup",
                       tmp_path / f"{len(compat)}-{k}", "--no-chart", "--no-progress",
                       "--workers", "1", *opts)
            assert r.exit_code == 0, r.output
            (first,) = train_losses(r.stdout)
            results.setdefault(compat, []).append(first)
    assert_follows_decoder(results)


def test_detector_train_map_reads_the_valid_list_with_the_decoder(det, tmp_path):
    """--map-every: the valid list (truncated JPEGs; the training images are whole) is read by
    the training's decoder."""
    for k, (opts, decoder) in enumerate(CHOICES):
        r = invoke("detector", "train", det["cut_valid"], det["train_cfg"], "--backup",
                   tmp_path / str(k), "--no-chart", "--no-progress", "--workers", "1",
                   "--map-every", "1", *opts)
        if decoder == "stb":
            assert r.exit_code == 0, r.output
            assert "mAP@0.50" in r.output
        else:
            assert isinstance(r.exception, DataError), r.output
            assert "truncated" in str(r.exception) and "valid" in str(r.exception)


def test_classifier_train_loss_follows_the_decoder(cls, tmp_path):
    """Iteration 1's loss (`1, epoch: loss, ...`), as detector train's."""
    results = {}
    for compat, group in GROUPS.items():
        for k, (opts, _) in enumerate(group):
            r = invoke("classifier", "train", cls["data"], cls["cfg"], "--backup",
                       tmp_path / f"{len(compat)}-{k}", "--no-chart", "--no-progress",
                       "--workers", "1", *opts)
            assert r.exit_code == 0, r.output
            (first,) = [float(m.group(1))
                        for m in re.finditer(r"^1, [\d.]+: ([\d.]+), ", r.stdout, re.M)]
            results.setdefault(compat, []).append(first)
    assert_follows_decoder(results)


@pytest.mark.parametrize("command", ["predict", "valid"])
def test_classifier_predict_valid_read_with_the_decoder(cls, command):
    cut = sorted((cls["root"] / "cut").glob("*.jpg"))
    for opts, decoder in CHOICES:
        args = [cls["cut"], cls["cfg"], cls["weights"]] + (cut[:2] if command == "predict" else [])
        r = invoke("classifier", command, *args, *opts)
        if decoder == "stb":
            assert r.exit_code == 0, r.output
            assert ("%: " in r.output) if command == "predict" else ("5 images: top 1" in r.output)
        else:
            assert isinstance(r.exception, DataError), r.output
            assert "truncated" in str(r.exception) and ".jpg" in str(r.exception)


def test_data_check_decodes_with_the_decoder(det):
    r = invoke("data", "check", det["cut"], "--decoder", "stb")
    assert r.exit_code == 0, r.output
    assert "train: 2 usable images" in r.output and "valid: 2 usable images" in r.output
    for opts in ((), ("--decoder", "pillow")):
        r = invoke("data", "check", det["cut"], *opts)
        assert r.exit_code == 1
        assert "train: 0 usable images" in r.output and "truncated" in r.output


def bad_value_commands(det, cls):
    d, c = det, cls
    return {
        ("detector", "map"): [d["data"], d["cfg"], d["weights"]],
        ("detector", "recall"): [d["data"], d["cfg"], d["weights"]],
        ("detector", "valid"): [d["data"], d["cfg"], d["weights"]],
        ("detector", "train"): [d["data"], d["train_cfg"]],
        ("classifier", "predict"): [c["data"], c["cfg"], c["weights"], c["cut"]],
        ("classifier", "valid"): [c["data"], c["cfg"], c["weights"]],
        ("classifier", "train"): [c["data"], c["cfg"]],
        ("data", "check"): [d["data"]],
    }


def test_a_bad_decoder_is_a_usage_error(det, cls):
    for command, args in bad_value_commands(det, cls).items():
        r = invoke(*command, *args, "--decoder", "jpeg")
        assert r.exit_code == 2, (command, r.output)
        assert "takes stb or pillow, not 'jpeg'" in r.output, (command, r.output)


def test_a_bad_compat_is_a_usage_error(det, cls):
    for command, args in bad_value_commands(det, cls).items():
        if command == ("data", "check"):
            continue                                # no network, no --compat
        r = invoke(*command, *args, "--compat", "pjreddie")
        assert r.exit_code == 2, (command, r.output)
        assert "darknet-cpu" in r.output and "pjreddie" in r.output, (command, r.output)
