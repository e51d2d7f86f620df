"""Every file darknumba writes goes through a temporary file and a rename (outputs.py), and no
output is an input.

- Under a file-size limit (a child process with RLIMIT_FSIZE, SIGXFSZ ignored so the write
  fails with EFBIG) and on a full tmpfs, each kind of output (PNG, JSON lines, video, ONNX,
  weights, data-set files, anchors.txt, the history CSV, the chart, results files) leaves the
  previous file's bytes as they were and no temporary file; the error is one line naming the
  file and the reason, exit status 1.
- An output that is an input (the same path, a hard link, a symlink) is refused before
  anything is written: one line naming both, exit status 2; `data shapes` into a folder with
  its own train.txt needs --force.
"""
import errno
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image
from tiny_nets import write_small_detector

from darknumba.cli import run
from darknumba.errors import WriteError
from darknumba.outputs import (TEMP_NAME, PendingFile, atomic_output, atomic_write,
                               check_outputs_not_inputs)

PREVIOUS = b"the previous file, which a failed write must leave as it is\n"


def call(capsys, *args):
    code = run([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def temporaries(folder) -> list:
    return [os.path.join(d, n) for d, _, names in os.walk(folder) for n in names
            if TEMP_NAME.fullmatch(n)]


def write_clip(path, n=4, h=40, w=48):
    from darknumba.vision.video import VideoWriter
    rng = np.random.default_rng(1)
    with VideoWriter(path, w, h, 5) as v:
        for _ in range(n):
            v.write(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from darknumba.data.synthetic import generate_shapes
    root = tmp_path_factory.mktemp("outputs")
    cfg, weights, names = write_small_detector(root)
    rng = np.random.default_rng(0)
    photos = []
    for k in range(2):
        p = root / f"photo{k}.png"
        Image.fromarray(rng.integers(0, 255, (36, 44, 3), dtype=np.uint8)).save(p)
        photos.append(p)
    data = generate_shapes(root / "shapes", n=6, valid_fraction=0.0, seed=2, size=(40, 48))
    return {"root": root, "cfg": cfg, "weights": weights, "names": names, "photos": photos,
            "clip": write_clip(root / "clip.mp4"), "data": data}


# -- the write path ----------------------------------------------------------------------------
def test_atomic_write_replaces_keeps_the_mode_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "sub" / "f.bin"
    atomic_write(p, b"one")
    assert p.read_bytes() == b"one" and os.listdir(p.parent) == ["f.bin"]
    os.chmod(p, 0o600)
    atomic_write(p, b"two")
    assert p.read_bytes() == b"two" and (p.stat().st_mode & 0o777) == 0o600
    with atomic_output(p, "w") as f:
        f.write("three\n")
    with atomic_output(tmp_path / "x.png", None) as tmp:
        assert tmp.endswith("-x.png") and TEMP_NAME.fullmatch(os.path.basename(tmp))
        Image.new("RGB", (4, 4)).save(tmp)          # the format from the extension
    assert p.read_text() == "three\n" and Image.open(tmp_path / "x.png").format == "PNG"
    os.symlink(p, tmp_path / "link.txt")                # a symlink stays one
    atomic_write(tmp_path / "link.txt", b"four")
    assert os.path.islink(tmp_path / "link.txt") and p.read_bytes() == b"four"
    assert temporaries(tmp_path) == []


def test_an_error_in_the_block_leaves_the_previous_file(tmp_path):
    p = tmp_path / "f.json"
    p.write_bytes(PREVIOUS)
    with pytest.raises(KeyError):
        with atomic_output(p, "w") as f:
            f.write("partial")
            raise KeyError("stop")
    with pytest.raises(WriteError, match=r"^could not write .*f\.json: No space left on device "
                                         r"\(the disk is full\)$") as e:
        with atomic_output(p, None):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert e.value.errno == errno.ENOSPC and isinstance(e.value, OSError)
    with pytest.raises(FileNotFoundError):          # an input's error stays the input's
        with atomic_output(p, None):
            open(tmp_path / "missing-input.txt")
    assert p.read_bytes() == PREVIOUS and temporaries(tmp_path) == []


def test_an_unwritable_folder_is_one_error_naming_the_file(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(WriteError, match=r"could not write .*file\.txt/out\.png: Not a directory"):
        PendingFile(blocker / "out.png")


# -- under a file-size limit -------------------------------------------------------------------
CHILD = """
import os, resource, signal, sys
from darknumba.cli import run
from darknumba.errors import DarknumbaError
targets, previous = {targets!r}, {previous!r}

def act():
    try:
{action}
    except DarknumbaError as e:
        print(f"darknumba: error: {{e}}", file=sys.stderr)
        return 1

code = act()
assert code == 0, code
limit = min(os.path.getsize(t) for t in targets) // 2
for t in targets:
    with open(t, "wb") as f:
        f.write(previous)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
print("--- limited", file=sys.stderr, flush=True)
sys.exit(act())
"""


def under_limit(action: str, targets, previous=PREVIOUS):
    """Run `action` (Python returning an exit status) in a child process: once as is, then,
    with every target holding `previous`, under a file-size limit of half the smallest
    target's size. Returns (exit status, stderr of the limited run)."""
    script = CHILD.format(targets=[str(t) for t in targets], previous=previous,
                          action=textwrap.indent(textwrap.dedent(action), " " * 8))
    env = dict(os.environ, DARKNUMBA_FIRST_RUN="compile")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       timeout=600)
    assert "--- limited" in r.stderr, r.stderr
    return r.returncode, r.stderr.split("--- limited\n", 1)[1]


def cli(*args) -> str:
    return f"return run({[str(a) for a in args]!r})"


def assert_kept(code, err, targets, previous=PREVIOUS):
    name = os.path.basename(str(targets[0]))
    last = err.rstrip("\n").rsplit("\n", 1)[-1]      # after the progress bar, if any
    assert code == 1 and "Traceback" not in err and err.count("error") == 1, err
    assert last.startswith("darknumba: error: could not write ") and last.endswith(
        ": File too large (the file-size limit, `ulimit -f`, is reached)"), err
    for t in targets:
        assert open(t, "rb").read() == previous, t
        assert temporaries(os.path.dirname(str(t))) == [], t
    assert name in err or any(os.path.basename(str(t)) in err for t in targets), err


@pytest.mark.parametrize("kind", ["png", "json", "video", "onnx", "weights", "partial"])
def test_cli_outputs_under_a_file_size_limit(world, tmp_path, kind):
    w, out = world, tmp_path
    base = ["detect", w["cfg"], w["weights"]]
    action, target = {
        "png": (base + [w["photos"][0], "--out", out / "drawn.png"], out / "drawn.png"),
        "json": (base + [*w["photos"], "--json", out / "d.json"], out / "d.json"),
        "video": (base + [w["clip"], "--out", out / "drawn.mp4"], out / "drawn.mp4"),
        "onnx": (["export", "onnx", w["cfg"], w["weights"], out / "m.onnx", "--no-check"],
                 out / "m.onnx"),
        "weights": (["export", "weights", w["cfg"], w["weights"], out / "f.weights",
                     "--fuse-bn"], out / "f.weights"),
        "partial": (["partial", w["cfg"], w["weights"], out / "p.weights", "2"],
                    out / "p.weights"),
    }[kind]
    code, err = under_limit(cli(*action), [target])
    assert_kept(code, err, [target])


def test_data_set_files_and_anchors_under_a_file_size_limit(world, tmp_path):
    folder = tmp_path / "ds"
    target = folder / "images" / "train" / "00000.jpg"
    code, err = under_limit(cli("data", "shapes", folder, "--n", "3", "--force"), [target])
    assert_kept(code, err, [target])
    targets = [tmp_path / "counters_per_class.txt", tmp_path / "anchors.txt"]
    code, err = under_limit(cli("detector", "calc_anchors", world["data"], "-num_of_clusters",
                                "2", "--out", tmp_path), targets)
    assert_kept(code, err, targets)


def test_history_chart_and_results_under_a_file_size_limit(world, tmp_path):
    from darknumba.train.history import HEADER
    previous = (HEADER + "1,2,2,0.001,64,,1.000\n").encode()
    code, err = under_limit(f"""
        from darknumba.train.history import TrainingHistory
        h = TrainingHistory({str(tmp_path)!r}, "c", 1, 100, chart=False, log=lambda *a, **k: 0)
        for i in range(2, 60):
            h.add(i, 1.0, 1.0, 0.001, 64 * i)
        h.flush()
        return 0""", [tmp_path / "c_history.csv"], previous)
    assert_kept(code, err, [tmp_path / "c_history.csv"], previous)
    code, err = under_limit(f"""
        from darknumba.train.history import LossChart
        LossChart({str(tmp_path / 'chart.png')!r}, 10).save([[i, 1.0 / i, 1.0 / i, 0.001, 64,
                                                            None, 1.0] for i in range(1, 10)])
        return 0""", [tmp_path / "chart.png"])
    assert_kept(code, err, [tmp_path / "chart.png"])
    results = [tmp_path / "results" / f"comp4_det_test_{n}.txt" for n in ("ring", "block")]
    code, err = under_limit(f"""
        import darknumba as dn
        from darknumba.train.evaluate import validate_detector
        net = dn.load_network({str(world['cfg'])!r}, {str(world['weights'])!r})
        validate_detector(net, {[str(p) for p in world['photos']]!r}, ["ring", "block"],
                          {str(tmp_path / 'results')!r}, thresh=0.0)
        return 0""", results)
    assert_kept(code, err, results)


# -- on a full disk ----------------------------------------------------------------------------
@pytest.fixture
def full_tmpfs(tmp_path):
    """A 512 KiB tmpfs at tmp_path/fs (needs root), filled up by fill()."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("needs root to mount a tmpfs")

    def fill():
        with open(mnt / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as e:
                assert e.errno == errno.ENOSPC
    yield mnt, fill
    subprocess.run(["umount", str(mnt)], check=True)


def test_a_full_disk_leaves_the_previous_files(world, full_tmpfs, capsys):
    mnt, fill = full_tmpfs
    targets = {"drawn.png": ["detect", world["cfg"], world["weights"], world["photos"][0],
                             "--out", mnt / "drawn.png"],
               "m.onnx": ["export", "onnx", world["cfg"], world["weights"], mnt / "m.onnx",
                          "--no-check"]}
    for name in targets:
        (mnt / name).write_bytes(PREVIOUS)
    fill()
    for name, args in targets.items():
        code, _, err = call(capsys, *args)
        assert code == 1 and err.count("\n") == 1, err
        assert err.endswith(f"could not write {mnt / name}: No space left on device (the disk "
                            f"is full)\n"), err
        assert (mnt / name).read_bytes() == PREVIOUS
    with pytest.raises(WriteError, match="No space left on device"):
        atomic_write(mnt / "drawn.png", b"x" * 100_000)
    assert (mnt / "drawn.png").read_bytes() == PREVIOUS and temporaries(mnt) == []


# -- inputs are never outputs ------------------------------------------------------------------
def refused(capsys, *args) -> str:
    code, out, err = call(capsys, *args)
    assert code == 2 and err.count("\n") == 1 and err.startswith("darknumba: error: "), err
    assert "writing it would replace an input; give another name" in err, err
    return err


def test_json_naming_the_input_image_is_refused(world, tmp_path, capsys):
    photo = tmp_path / "in.png"
    photo.write_bytes(world["photos"][0].read_bytes())
    err = refused(capsys, "detect", world["cfg"], world["weights"], photo, "--json", photo)
    assert f"--json {photo} is the input image {photo}" in err
    err = refused(capsys, "detector", "test", world["data"], world["cfg"], world["weights"],
                  photo, "--json", photo)
    assert f"--json {photo} is the input image" in err
    assert photo.read_bytes() == world["photos"][0].read_bytes()


def test_out_equal_to_or_linked_to_the_input_photo_is_refused(world, tmp_path, capsys):
    photo = tmp_path / "in.png"
    photo.write_bytes(world["photos"][0].read_bytes())
    err = refused(capsys, "detect", world["cfg"], world["weights"], photo, "--out", photo)
    assert f"--out {photo} is the input image {photo}:" in err
    hard, soft = tmp_path / "hard.png", tmp_path / "soft.png"
    os.link(photo, hard)
    os.symlink(photo, soft)
    for link in (hard, soft):
        err = refused(capsys, "detect", world["cfg"], world["weights"], photo, "--out", link)
        assert f"--out {link} is the input image {photo} (the same file)" in err
    err = refused(capsys, "detector", "test", world["data"], world["cfg"], world["weights"],
                  photo, "-out", hard)
    assert f"-out {hard} is the input image {photo} (the same file)" in err
    # several images drawn into a folder: a drawing that would land on one of them
    err = refused(capsys, "detect", world["cfg"], world["weights"], photo, hard, "--out",
                  tmp_path)
    assert "is the input image" in err
    err = refused(capsys, "detect", world["cfg"], world["weights"], photo, "--out",
                  world["weights"])
    assert f"is the weights {world['weights']}" in err
    assert photo.read_bytes() == world["photos"][0].read_bytes()


def test_out_or_json_equal_to_the_input_video_is_refused(world, tmp_path, capsys):
    clip = tmp_path / "in.mp4"
    clip.write_bytes(world["clip"].read_bytes())
    before = clip.read_bytes()
    err = refused(capsys, "detect", world["cfg"], world["weights"], clip, "--out", clip)
    assert f"--out {clip} is the input video {clip}:" in err
    os.link(clip, tmp_path / "hard.mp4")
    err = refused(capsys, "detect", world["cfg"], world["weights"], clip, "--out",
                  tmp_path / "hard.mp4")
    assert "is the input video" in err and "(the same file)" in err
    err = refused(capsys, "detect", world["cfg"], world["weights"], clip, "--json", clip)
    assert f"--json {clip} is the input video {clip}:" in err
    demo = ["detector", "demo", world["data"], world["cfg"], world["weights"], clip]
    err = refused(capsys, *demo, "--json", tmp_path / "hard.mp4")
    assert f"--json {tmp_path / 'hard.mp4'} is the input video {clip} (the same file)" in err
    err = refused(capsys, *demo, "-out_filename", clip)
    assert f"--out {clip} is the input video {clip}:" in err
    assert clip.read_bytes() == before


def test_a_failed_video_run_leaves_the_previous_video(world, tmp_path, capsys, monkeypatch):
    import darknumba.vision.video as video
    drawn = tmp_path / "drawn.mp4"
    drawn.write_bytes(PREVIOUS)

    def broken(*a, **k):
        yield from ()
        raise RuntimeError("a frame went wrong")
    monkeypatch.setattr(video, "detect_video", broken)
    code, _, err = call(capsys, "detect", world["cfg"], world["weights"], world["clip"], "--out",
                        drawn, "--json", tmp_path / "d.json")
    assert code == 3 and "a frame went wrong" in err
    assert drawn.read_bytes() == PREVIOUS and sorted(os.listdir(tmp_path)) == ["drawn.mp4"]


def test_exports_and_tools_refuse_to_write_over_their_inputs(world, tmp_path, capsys):
    weights = tmp_path / "w.weights"
    weights.write_bytes(world["weights"].read_bytes())
    cfg = world["cfg"]
    for args in (["export", "onnx", cfg, weights, weights, "--no-check"],
                 ["export", "weights", cfg, weights, weights, "--fuse-bn"],
                 ["export", "weights", cfg, weights, tmp_path / "f.weights", "--fuse-bn",
                  "--cfg-out", cfg],
                 ["partial", cfg, weights, weights, "1"],
                 ["rescale", cfg, weights, weights],
                 ["reset", cfg, weights, weights]):
        refused(capsys, *args)
    assert weights.read_bytes() == world["weights"].read_bytes()
    os.link(world["data"], tmp_path / "anchors.txt")
    err = refused(capsys, "detector", "calc_anchors", world["data"], "--out", tmp_path,
                  "-num_of_clusters", "2")
    assert f"the output {tmp_path / 'anchors.txt'} is the data file {world['data']}" in err


def test_check_outputs_not_inputs_compares_files(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("a")
    check_outputs_not_inputs({"--out": tmp_path / "new.txt"}, {"the input": a})
    check_outputs_not_inputs({"--json": "-"}, {"the input": [a, None]})
    with pytest.raises(Exception, match="is the input"):
        check_outputs_not_inputs([tmp_path / "." / "a.txt"], {"the input": [a]})


def test_data_shapes_keeps_a_folders_own_lists_unless_forced(tmp_path, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "train.txt").write_text("my/own/image.jpg\n")
    code, _, err = call(capsys, "data", "shapes", folder, "--n", "2")
    assert code == 2 and err.count("\n") == 1, err
    assert f"{folder / 'train.txt'} already exists" in err and "--force" in err
    assert (folder / "train.txt").read_text() == "my/own/image.jpg\n"
    assert sorted(os.listdir(folder)) == ["train.txt"]
    code, _, err = call(capsys, "data", "shapes", folder, "--n", "2", "--force")
    assert code == 0, err
    assert (folder / "train.txt").read_text().count("\n") == 2
    assert temporaries(folder) == []
    code, _, err = call(capsys, "data", "shapes", tmp_path / "fresh", "--n", "2")
    assert code == 0, err
    code, _, err = call(capsys, "classifier", "example", folder, "--n", "2")
    assert code == 0, err           # train.txt is not one of its files: nothing to replace
    code, _, err = call(capsys, "classifier", "example", folder, "--n", "2")
    assert code == 2 and "already exist" in err and "--force" in err, err


def test_training_refuses_a_backup_folder_whose_outputs_are_its_inputs(world, tmp_path, capsys):
    """A checkpoint name that is a link to the cfg or the .data file (a resumed run's own
    <cfg>.backup as the starting weights is fine: it is read whole, then replaced by rename)."""
    backup = tmp_path / "b"
    backup.mkdir()
    os.symlink(world["cfg"], backup / "small_1000.weights")
    err = refused(capsys, "detector", "train", world["data"], world["cfg"], "--backup", backup,
                  "--no-progress", "--no-chart")
    assert (f"the training output {backup / 'small_1000.weights'} is the cfg {world['cfg']} "
            f"(the same file)") in err
    os.unlink(backup / "small_1000.weights")
    os.link(world["data"], backup / "small_history.csv")
    err = refused(capsys, "detector", "train", world["data"], world["cfg"], "--backup", backup)
    assert "is the data file" in err


def test_cfg_custom_refuses_a_hard_link_to_its_template(world, tmp_path, capsys):
    template = tmp_path / "t.cfg"
    template.write_text(world["cfg"].read_text())
    os.link(template, tmp_path / "out.cfg")
    code, _, err = call(capsys, "cfg", "custom", template, "--data", world["data"], "--out",
                        tmp_path / "out.cfg", "--force")
    assert code == 2 and f"is the template {template} (the same file)" in err, err
    assert template.read_text() == world["cfg"].read_text()


def test_detector_valid_refuses_result_files_that_are_its_inputs(world, tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    os.symlink(world["cfg"], results / "comp4_det_test_circle.txt")
    err = refused(capsys, "detector", "valid", world["data"], world["cfg"], world["weights"],
                  "--out", results)
    assert (f"the result file {results / 'comp4_det_test_circle.txt'} is the cfg "
            f"{world['cfg']} (the same file)") in err
