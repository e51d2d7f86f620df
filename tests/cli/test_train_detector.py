"""End to end: a tiny cfg trained a few dozen iterations on generated shapes. The loss falls,
checkpoints appear on schedule, resume continues at the saved iteration, Ctrl-C saves, a kill
during a checkpoint write leaves the previous checkpoint loadable, NaN stops with the layer."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from tiny_nets import (HEAD3, TRAIN_NET, cfg_text, conv, maxpool, region_head,
                       set_net_options)

import darknumba as dn
from darknumba.errors import DarknumbaError
from darknumba.train.detector import Schedule, TrainOptions, load_partial_weights, train_detector
from darknumba.train.lock import LOCK_NAME
from darknumba.train.step import TrainingStopped
from darknumba.weights import read_header

pytestmark = pytest.mark.slow

# the detector the training tests train: three 3x3 convolutions and maxpools, one yolo head
BODY = cfg_text(TRAIN_NET, conv(8), maxpool(), conv(16), maxpool(), conv(16), maxpool()) + "\n"
TINY = BODY + HEAD3


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    from tiny_data import shapes_set
    root = tmp_path_factory.mktemp("shapes")
    data = shapes_set(root, n=80, seed=5)
    cfg = root / "tiny.cfg"
    cfg.write_text(TINY)
    return data, cfg, root


def _opts(backup, **kw):
    kw.setdefault("schedule", Schedule(every=10, until=25, every_after=40, backup_every=5))
    return TrainOptions(backup=str(backup), progress=False, chart=False, **kw)


def _seen(path):
    with open(path, "rb") as f:
        return read_header(f.read(20), str(path))[1]


def test_loss_falls_checkpoints_on_schedule_and_resume(shapes, tmp_path):
    data, cfg, _ = shapes
    lines = []
    log = lambda m, file=None: lines.append(m)
    r = train_detector(data, cfg, _opts(tmp_path, max_batches=20), log=log)
    assert r["final_iteration"] == 20 and not r["interrupted"]
    names = sorted(os.listdir(tmp_path))
    assert names == ["tiny.backup", "tiny_10.weights", "tiny_20.weights", "tiny_final.weights",
                     "tiny_history.csv"]
    assert _seen(tmp_path / "tiny_10.weights") == 10 * 8
    assert _seen(tmp_path / "tiny_final.weights") == 20 * 8

    # resume from the iteration-20 checkpoint: continues at 21, until max_batches (40)
    lines.clear()
    train_detector(data, cfg, _opts(tmp_path, max_batches=40,
                                         weights=str(tmp_path / "tiny_20.weights")), log=log)
    iters = [int(m.split(":")[0]) for m in lines if m.split(":")[0].isdigit()]
    assert iters[0] == 21 and iters[-1] == 40
    assert _seen(tmp_path / "tiny_40.weights") == 40 * 8
    assert "tiny_30.weights" not in os.listdir(tmp_path)          # past `until`, not on 40s
    losses = [float(m.split(":")[1].split(",")[0]) for m in lines if m.split(":")[0].isdigit()]

    # the whole-run loss falls: the first iterations of a fresh run against the resumed tail
    lines.clear()
    train_detector(data, cfg, _opts(tmp_path / "again", max_batches=5), log=log)
    start = [float(m.split(":")[1].split(",")[0]) for m in lines if m.split(":")[0].isdigit()]
    assert np.mean(losses[-5:]) < 0.7 * np.mean(start), (start, losses[-5:])

    # seen past max_batches: a clear message; --clear starts again at 0
    with pytest.raises(DarknumbaError, match="nothing to train.*--clear"):
        train_detector(data, cfg, _opts(tmp_path, max_batches=40,
                                         weights=str(tmp_path / "tiny_final.weights")), log=log)
    lines.clear()
    train_detector(data, cfg, _opts(tmp_path / "ft", max_batches=2, clear=True,
                                    weights=str(tmp_path / "tiny_final.weights")), log=log)
    assert [m.split(":")[0] for m in lines if m.split(":")[0].isdigit()] == ["1", "2"]


def test_seed_makes_runs_reproducible(shapes, tmp_path):
    data, cfg, _ = shapes
    a = train_detector(data, cfg, _opts(tmp_path / "a", max_batches=3, seed=7), log=lambda *a, **k: None)
    b = train_detector(data, cfg, _opts(tmp_path / "b", max_batches=3, seed=7), log=lambda *a, **k: None)
    assert a["loss"] == b["loss"]
    wa = (tmp_path / "a" / "tiny_final.weights").read_bytes()
    assert wa == (tmp_path / "b" / "tiny_final.weights").read_bytes()


def test_partial_weights_load_into_a_new_head(shapes, tmp_path):
    from darknumba.parser import init_weights
    from darknumba.train.detector import partial
    cfg = shapes[1]
    net = dn.load_network(cfg)
    init_weights(net, seed=1)
    net.seen = 1234
    dn.save_weights(net, tmp_path / "full.weights")
    partial(cfg, tmp_path / "full.weights", tmp_path / "cut.weights", 3, log=lambda m: None)
    fresh = dn.load_network(cfg)
    assert load_partial_weights(fresh, tmp_path / "cut.weights") == 4   # + the maxpool after
    init_weights(fresh, seed=2, start=3)
    assert fresh.seen == 0
    np.testing.assert_array_equal(fresh.layers[2].weights, net.layers[2].weights)
    assert not np.array_equal(fresh.layers[6].weights, net.layers[6].weights)


def test_nan_loss_stops_naming_iteration_and_layer(shapes, tmp_path, monkeypatch):
    data, cfg, _ = shapes
    real = dn.Network.train_datum

    def poisoned(self, x, truth):
        err = real(self, x, truth)
        if self.current_batch() >= 3:
            self.layers[2].output[5] = np.nan
            return math.nan
        return err
    monkeypatch.setattr(dn.Network, "train_datum", poisoned)
    opts = _opts(tmp_path, max_batches=10, schedule=Schedule(every=2, until=100, backup_every=2))
    with pytest.raises(TrainingStopped, match=r"iteration 3: loss is nan .*layer 2 \(convolutional\)"
                                             r".*tiny_2.weights"):
        train_detector(data, cfg, opts, log=lambda *a, **k: None)
    assert sorted(os.listdir(tmp_path)) == ["tiny.backup", "tiny_2.weights", "tiny_history.csv"]


SCRIPT = """
import os, sys, time
marks = sys.argv[3]
real_fsync = os.fsync
calls = [0]
def slow_fsync(fd):
    if os.readlink(f"/proc/self/fd/{fd}").endswith("-tiny.backup"):     # a checkpoint's
        calls[0] += 1
        open(os.path.join(marks, f"write{calls[0]}"), "w").close()
        if calls[0] >= 2:
            time.sleep(60)       # the kill lands here, in the middle of the second write
    real_fsync(fd)
os.fsync = slow_fsync
from darknumba.train.detector import Schedule, TrainOptions, train_detector
train_detector(sys.argv[1], sys.argv[2], TrainOptions(
    backup=sys.argv[4], progress=False, chart=False, max_batches=int(sys.argv[5]),
    schedule=Schedule(every=1000, until=0, every_after=100000, backup_every=1)))
"""


def _spawn(tmp_path, data, cfg, backup, max_batches, script=SCRIPT):
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    (tmp_path / "run.py").write_text(script)
    return subprocess.Popen([sys.executable, "-u", str(tmp_path / "run.py"), str(data), str(cfg),
                             str(marks), str(backup), str(max_batches)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), marks


def _wait_for(path, proc, timeout=150):
    t = time.time()
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"training exited early:\n{proc.stdout.read()}")
        if time.time() - t > timeout:
            proc.kill()
            raise AssertionError(f"{path} did not appear in {timeout} s")
        time.sleep(0.1)


def test_kill_during_checkpoint_write_keeps_previous_checkpoint(shapes, tmp_path):
    data, cfg, _ = shapes
    backup = tmp_path / "backup"
    proc, marks = _spawn(tmp_path, data, cfg, backup, 40)
    _wait_for(marks / "write2", proc)
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    leftovers = [n for n in os.listdir(backup) if n.startswith(".tmp-")]
    assert leftovers, "the kill did not land inside a write"
    assert sorted(os.listdir(backup)) == sorted(["tiny.backup", "tiny_history.csv", LOCK_NAME]
                                                + leftovers)  # the lock: taken over next time
    net = dn.load_network(cfg, backup / "tiny.backup")      # loads: complete and well-formed
    assert net.seen == 1 * 8                                 # the iteration-1 checkpoint


def test_ctrl_c_saves_and_exits_cleanly(shapes, tmp_path):
    data, cfg, _ = shapes
    backup = tmp_path / "backup"
    script = SCRIPT.replace("if calls[0] >= 2:", "if False:").replace(
        "backup_every=1", "backup_every=100000")
    proc, _ = _spawn(tmp_path, data, cfg, backup, 100000, script)
    t = time.time()
    out = ""
    while time.time() - t < 150:
        line = proc.stdout.readline()
        out += line
        if line.startswith("3:"):
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    out += rest
    assert proc.returncode == 0, out
    assert "stopped at iteration" in out
    seen = dn.load_network(cfg, backup / "tiny.backup").seen
    assert seen >= 3 * 8 and seen % 8 == 0


def test_finetune_from_official_yolov3_tiny_via_partial(shapes, tmp_path):
    """partial cuts the official weights after layer 14; they load into the shapes head cfg,
    and a training step on generated data gives a finite loss."""
    from conftest import ROOT, tiny_weights

    from darknumba.data.datasets import DetectionDataset, get_paths, read_data_cfg
    from darknumba.data.loader import DetectionLoader, MultiScale
    from darknumba.parser import init_weights
    from darknumba.train.detector import partial
    from darknumba.vision.augment import AugmentConfig
    weights = tiny_weights()
    cut = tmp_path / "yolov3-tiny.conv.15"
    partial(ROOT / "cfg" / "yolov3-tiny.cfg", weights, cut, 15, log=lambda m: None)
    net = dn.load_network(ROOT / "cfg" / "shapes-yolov3-tiny.cfg", batch=2)
    assert load_partial_weights(net, cut) == 15 and net.seen == 0
    init_weights(net, seed=0, start=15)
    full = dn.load_network(ROOT / "cfg" / "yolov3-tiny.cfg", weights, batch=1)
    np.testing.assert_array_equal(net.layers[13].weights, full.layers[13].weights)
    dc = read_data_cfg(shapes[0])
    ds = DetectionDataset(get_paths(dc.train), 3)
    with DetectionLoader(ds, 2, AugmentConfig.from_network(net), MultiScale(160, 160, False, 0, 1)) as L:
        X, T = next(L)
    assert np.isfinite(net.train_datum(X, T))


def test_multiscale_sizes_and_resize_during_training(shapes, tmp_path):
    from darknumba.data.loader import MultiScale, multiscale_sizes
    assert multiscale_sizes(416) == list(range(320, 609, 32))
    assert multiscale_sizes(64) == [64, 96]
    ms = MultiScale(416, 416, True, seed=0, max_batches=10000)
    sizes = [ms.size(k) for k in range(2000)]
    assert all(sizes[k] == sizes[k - k % 10] for k in range(2000))       # every 10 batches
    assert len(set(sizes)) > 3 and all(320 <= s[0] <= 608 for s in sizes)
    assert ms.size(9850) == (608, 608)                                   # the last 200: largest
    assert MultiScale(416, 416, False, 0, 10000).size(5) == (416, 416)
    data = shapes[0]
    c2 = tmp_path / "ms.cfg"
    c2.write_text(set_net_options(TINY, width=64, height=64).replace("random=0", "random=1"))
    lines = []
    train_detector(data, c2, _opts(tmp_path, max_batches=3), log=lambda m, file=None: lines.append(m))
    assert "Resizing to 96 x 96" in lines
    net = dn.load_network(c2, tmp_path / "ms_final.weights")
    assert net.seen == 3 * 8


def test_cli_train_map_recall_valid_partial(shapes, tmp_path):
    from typer.testing import CliRunner

    from darknumba.cli import app
    data, cfg, _ = shapes
    run = CliRunner().invoke
    r = run(app, ["detector", "train", str(data), str(cfg), "--max-batches", "3", "--no-progress", "-map",
                  "--no-chart", "--backup", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "3: " in r.output and "tiny_final.weights" in r.output
    w = str(tmp_path / "tiny_final.weights")
    r = run(app, ["detector", "map", str(data), str(cfg), w])
    assert r.exit_code == 0, r.output
    assert "class_id = 2, name = triangle" in r.output and "mAP@0.50" in r.output
    r = run(app, ["detector", "recall", str(data), str(cfg), w])
    assert r.exit_code == 0 and "Recall:" in r.output, r.output
    r = run(app, ["detector", "valid", str(data), str(cfg), w, "--out", str(tmp_path / "res")])
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir(tmp_path / "res")) == [f"comp4_det_test_{n}.txt"
                                                     for n in ("circle", "square", "triangle")]
    coco = tmp_path / "coco.data"
    coco.write_text(data.read_text() + "eval = coco\n")
    r = run(app, ["detector", "valid", str(coco), str(cfg), w, "--out", str(tmp_path / "res2")])
    assert r.exit_code == 0, r.output
    for d in json.loads((tmp_path / "res2" / "coco_results.json").read_text())[:20]:
        assert set(d) == {"image_id", "category_id", "bbox", "score"} and d["category_id"] < 3
    r = run(app, ["partial", str(cfg), w, str(tmp_path / "cut.weights"), "4"])
    assert r.exit_code == 0, r.output
    assert load_partial_weights(dn.load_network(cfg), tmp_path / "cut.weights") == 4


REGION_HEAD = region_head("1.5,1.5, 2.5,2.5, 4,4, 6,6, 8,8")


def test_yolov2_region_head_trains(shapes, tmp_path):
    data, cfg, root = shapes
    v2 = root / "tiny-v2.cfg"
    v2.write_text(BODY + REGION_HEAD)
    lines = []
    r = train_detector(data, v2, _opts(tmp_path, max_batches=30), log=lambda m, file=None: lines.append(m))
    assert r["final_iteration"] == 30
    losses = [float(m.split(":")[1].split(",")[0]) for m in lines if m.split(":")[0].isdigit()]
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:3]), losses
    assert (tmp_path / "tiny-v2_final.weights").exists()
