"""AlexeyAB's training rules (train/alexeyab.py): checkpoint and -map schedules by hand, the
weights' moving average against a numpy recurrence, and a short end-to-end run of a small
AlexeyAB-style network with mosaic and -map (files, lines, finite loss, resume), and ten
iterations of yolov7-tiny-custom at 160x160 on the shapes data."""
import os
import re

import numpy as np
import pytest
from ab_tiny import ab_tiny_cfg
from conftest import ROOT

import darknumba as dn
from darknumba.data.datasets import DataConfig
from darknumba.parser import parse_network_cfg
from darknumba.train.alexeyab import AbSchedule, Ema, MapSchedule
from darknumba.weights import read_header


def test_checkpoint_schedule_by_hand():
    s = AbSchedule(save_after=4, save_last=2, start=0)
    assert [s.due(i) for i in range(1, 9)] == [
        [], ["_last.weights"], [], ["_4.weights", "_last.weights"], [], ["_last.weights"], [],
        ["_8.weights", "_last.weights"]]
    s = AbSchedule(4, 2, start=5)                 # resumed at 5: counted from there as well
    assert [s.due(i) for i in range(6, 11)] == [
        ["_last.weights"], [], ["_8.weights", "_last.weights"], [], ["_last.weights"]]
    assert AbSchedule(100, 100, 0).due(100) == ["_100.weights"]       # no _last: not fewer
    d = DataConfig("x.data", classes=1)
    assert vars(AbSchedule.from_data(d, 6000, 0))["save_after"] == 1000
    assert vars(AbSchedule.from_data(d, 10000, 0))["save_after"] == 10000
    d.options = {"saveweights": "500", "savelast": "50"}
    s = AbSchedule.from_data(d, 6000, 0)
    assert (s.save_after, s.save_last) == (500, 50)


def test_map_schedule_by_hand():
    # 1000 images, 64 a batch: 4 epochs = 62 iterations -> at least 100; not before burn_in
    m = MapSchedule(-1, 1000, 64, burn_in=1000, max_batches=6000, start=0)
    assert m.next == 1000 and not m.due(999) and m.due(1000)
    m.done(1000)
    assert m.next == 1100 and m.due(1100) and not m.due(1099)
    m = MapSchedule(-1, 10000, 64, burn_in=0, max_batches=6000, start=300)
    assert m.next == 300 + 625 and m.due(6000)               # and always at max_batches
    m = MapSchedule(-1, 10000, 64, burn_in=0, max_batches=6000, start=0, epochs=1)
    assert m.next == 156
    m = MapSchedule(50, 10, 8, burn_in=500, max_batches=6000, start=0)   # --map-every 50
    assert m.due(50) and not m.due(60) and m.next == 50


def _net(tmp_path, **kw):
    p = tmp_path / "ab-tiny.cfg"
    p.write_text(ab_tiny_cfg(**kw))
    return parse_network_cfg(p, seed=3)


def test_ema_follows_alexeyabs_recurrence_and_saves_the_average(tmp_path):
    net = _net(tmp_path, max_batches=2010, ema_alpha=0.9)
    ema = Ema(net)
    conv = net.layers[1]
    rng = np.random.default_rng(0)
    a = np.float32(0.9)
    ref = None
    for i in range(1000, 1012):
        w = rng.normal(size=conv.weights.size).astype(np.float32)
        conv.weights[:] = w
        ema.step(i, log=lambda m: None)
        if i < 1005:                                  # starts at max_batches // 2
            assert not ema.initialized
            continue
        if ref is None:
            ref = w.copy()                            # started as a copy
        if i == 1010:                                 # max_batches - 1000: the average
            np.testing.assert_allclose(conv.weights, ref, rtol=1e-6)   # replaces the weights
        elif i < 1010:
            ref = a * ref + (np.float32(1) - a) * w
    avg = [avg for live, avg in ema.pairs if live is conv.weights][0]
    np.testing.assert_allclose(avg, ref, rtol=1e-6)   # and is not updated after that
    live = conv.weights.copy()
    conv.rolling_mean[:] = 0.25
    ema.save(net, tmp_path / "ema.weights")
    np.testing.assert_array_equal(conv.weights, live)        # the live weights are back
    back = dn.load_network(tmp_path / "ab-tiny.cfg", tmp_path / "ema.weights")
    np.testing.assert_array_equal(back.layers[1].weights, avg)
    np.testing.assert_array_equal(back.layers[1].rolling_mean, 0.25)   # not averaged


def test_ema_before_2000_batches_is_the_copy_at_half_way(tmp_path):
    """max_batches - 1000 comes before max_batches / 2: AlexeyAB never updates the copy."""
    net = _net(tmp_path, max_batches=100, ema_alpha=0.5)
    ema = Ema(net)
    conv = net.layers[0]
    conv.weights[:] = 1
    ema.step(50, log=lambda m: None)
    conv.weights[:] = 3
    ema.step(51, log=lambda m: None)
    assert all((avg == 1).all() for live, avg in ema.pairs if live is conv.weights)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    from tiny_data import shapes_set
    root = tmp_path_factory.mktemp("abshapes")
    data = shapes_set(root, n=40, seed=5, size=(48, 64))
    ab = root / "ab.data"
    ab.write_text(data.read_text() + "savelast = 2\nsaveweights = 4\n")
    cfg = root / "ab-tiny.cfg"
    cfg.write_text(ab_tiny_cfg())
    return ab, cfg


def _seen(path):
    with open(path, "rb") as f:
        return read_header(f.read(20), str(path))


@pytest.mark.slow
def test_train_with_mosaic_and_map_writes_alexeyabs_files(shapes, tmp_path):
    from darknumba.train.detector import TrainOptions, train_detector
    data, cfg = shapes
    lines = []
    r = train_detector(data, cfg, TrainOptions(backup=str(tmp_path), progress=False, chart=False,
                                               map_every=-1),
                       log=lambda m, file=None: lines.append(m))
    assert r["final_iteration"] == 6 and np.isfinite(r["loss"])
    assert sorted(os.listdir(tmp_path)) == ["ab-tiny_4.weights", "ab-tiny_best.weights",
                                            "ab-tiny_ema.weights", "ab-tiny_final.weights",
                                            "ab-tiny_history.csv", "ab-tiny_last.weights"]
    its = [m for m in lines if m.split(":")[0].isdigit()]
    assert len(its) == 6 and all("avg loss" in m and "hours left" in m for m in its)
    assert any("mean_average_precision (mAP@0.50) = " in m for m in lines)
    assert "New best mAP!" in lines and " EMA initialization" in lines
    assert any("(next mAP calculation at 100 iterations)" in m for m in lines)
    assert _seen(tmp_path / "ab-tiny_final.weights")[:2] == ((0, 2, 5), 6 * 8)
    # resume from _last: it continues at 7
    lines.clear()
    train_detector(data, cfg, TrainOptions(weights=str(tmp_path / "ab-tiny_last.weights"),
                                           max_batches=8, backup=str(tmp_path / "r"),
                                           progress=False, chart=False),
                   log=lambda m, file=None: lines.append(m))
    assert [m.split(":")[0] for m in lines if m.split(":")[0].isdigit()] == ["7", "8"]


@pytest.mark.slow
def test_cli_grammar_as_alexeyab(shapes, tmp_path):
    """detector train DATA CFG [WEIGHTS] -map -clear -dont_show, and --dialect."""
    from typer.testing import CliRunner

    from darknumba.cli import app
    data, cfg = shapes
    run = CliRunner().invoke
    r = run(app, ["detector", "train", str(data), str(cfg), "--max-batches", "2",
                  "--no-progress", "--no-chart", "--backup", str(tmp_path)])
    assert r.exit_code == 0, r.output
    w = tmp_path / "ab-tiny_final.weights"
    r = run(app, ["detector", "train", str(data), str(cfg), str(w), "-map", "-clear",
                  "-dont_show", "--max-batches", "2", "--no-progress", "--no-chart",
                  "--backup", str(tmp_path / "ft"), "--dialect", "alexeyab"])
    assert r.exit_code == 0, r.output
    assert "1: " in r.output and "avg loss" in r.output and "New best mAP!" in r.output
    assert sorted(os.listdir(tmp_path / "ft")) == ["ab-tiny_best.weights", "ab-tiny_ema.weights",
                                                  "ab-tiny_final.weights",
                                                  "ab-tiny_history.csv",
                                                  "ab-tiny_last.weights"]
    r = run(app, ["detector", "train", str(data), str(cfg), "--dialect", "darknet"])
    assert r.exit_code != 0 and "pjreddie or alexeyab" in r.output


def _needs_route_groups():
    net = parse_network_cfg(ROOT / "cfg" / "yolov4-tiny.cfg", allocate=False)
    if net.layers[3].out_c != 32:
        pytest.skip("yolov4-tiny needs [route] groups (AlexeyAB's layers)")
    return ROOT


@pytest.mark.slow
def test_partial_yolov4_tiny_conv29_then_custom_training_starts(shapes, tmp_path):
    """partial cfg/yolov4-tiny.cfg yolov4-tiny.weights yolov4-tiny.conv.29 29 as AlexeyAB's:
    layers 0..28, header 0.2.5, seen 0; AlexeyAB reads only those layers, so the 1-class
    custom cfg cuts the same bytes; training the custom cfg (here 3 classes, 96x96) from it
    starts with those 29 layers loaded."""
    from conftest import v4tiny_weights
    from typer.testing import CliRunner

    from darknumba.cli import app
    from darknumba.train.detector import TrainOptions, train_detector
    root = _needs_route_groups()
    weights = v4tiny_weights()
    cut = tmp_path / "yolov4-tiny.conv.29"
    r = CliRunner().invoke(app, ["partial", str(root / "cfg" / "yolov4-tiny.cfg"), str(weights),
                                 str(cut), "29"])
    assert r.exit_code == 0, r.output
    net = parse_network_cfg(root / "cfg" / "yolov4-tiny.cfg", batch=1, allocate=False)
    size = 20 + 4 * sum(a.size for l in net.layers[:29] for _, a in l.weight_records())
    assert os.path.getsize(cut) == size and _seen(cut)[:2] == ((0, 2, 5), 0)
    assert cut.read_bytes()[20:] == weights.read_bytes()[20:size]
    custom = root / "cfg" / "yolov4-tiny-custom.cfg"
    r = CliRunner().invoke(app, ["partial", str(custom), str(weights), str(tmp_path / "c"), "29"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "c").read_bytes() == cut.read_bytes()

    text = custom.read_text()
    for a, b in (("classes=1", "classes=3"), ("filters=18", "filters=24"), ("batch=64", "batch=2"),
                 ("subdivisions=16", "subdivisions=1"), ("width=416", "width=96"),
                 ("height=416", "height=96"), ("max_batches=6000", "max_batches=2")):
        text = text.replace(a, b)
    small = tmp_path / "yolov4-tiny-custom.cfg"
    small.write_text(text)
    lines = []
    r = train_detector(shapes[0], small, TrainOptions(weights=str(cut), backup=str(tmp_path / "b"),
                                                      progress=False, chart=False),
                       log=lambda m, file=None: lines.append(m))
    assert any(m.startswith("loaded 29 of 38 layers") for m in lines), lines[:3]
    assert r["final_iteration"] == 2 and np.isfinite(r["loss"])


def test_dynamic_minibatch_with_random_resize_is_refused_naming_the_way_out(shapes, tmp_path):
    """AlexeyAB's dynamic_minibatch changes the batch at each random size; darknumba keeps
    the cfg's batch, so it refuses such a cfg (before any data is read) and says what to set."""
    from darknumba.errors import DarknumbaError
    from darknumba.train.detector import TrainOptions, train_detector
    data, _ = shapes
    cfg = tmp_path / "dyn.cfg"
    cfg.write_text(ab_tiny_cfg(dynamic_minibatch=1).replace("random=0", "random=1"))
    with pytest.raises(DarknumbaError, match=r"dyn\.cfg: \[net\] dynamic_minibatch=1 .* not "
                                             r"supported.*dynamic_minibatch=0.*batch=8.*random=0"):
        train_detector(data, cfg, TrainOptions(backup=str(tmp_path), progress=False,
                                               chart=False), log=lambda m, file=None: None)


@pytest.mark.slow
def test_dynamic_minibatch_without_random_resize_trains_as_alexeyab(shapes, tmp_path):
    """Without random resizing AlexeyAB never changes the batch either: training runs."""
    from darknumba.train.detector import TrainOptions, train_detector
    data, _ = shapes
    cfg = tmp_path / "dyn0.cfg"
    cfg.write_text(ab_tiny_cfg(dynamic_minibatch=1, max_batches=1, mosaic=0))
    r = train_detector(data, cfg, TrainOptions(backup=str(tmp_path), progress=False,
                                               chart=False, map_every=-1),
                       log=lambda m, file=None: None)
    assert r["final_iteration"] == 1 and np.isfinite(r["loss"])


def test_yolov7_tiny_custom_trains_on_shapes_and_the_loss_falls(shapes, tmp_path):
    """cfg/yolov7-tiny-custom.cfg (logistic heads, new_coords [yolo] layers) made 3-class at
    160x160, batch 4, no burn-in: ten iterations on the shapes data run, every loss is finite,
    and the loss falls (the first step's objectness loss over every prediction is learnt away
    at once, then it keeps below a tenth of it); the final weights reload."""
    from darknumba.train.detector import TrainOptions, train_detector
    from darknumba.weights import load_weights
    data, _ = shapes
    text = (ROOT / "cfg" / "yolov7-tiny-custom.cfg").read_text()
    for a, b in (("classes=1", "classes=3"), ("filters=18", "filters=24"), ("batch=64", "batch=4"),
                 ("subdivisions=16", "subdivisions=1"), ("width=416", "width=160"),
                 ("height=416", "height=160"), ("max_batches=6000", "max_batches=10"),
                 ("burn_in=1000", "burn_in=0"), ("learning_rate=0.00261", "learning_rate=0.01")):
        assert f"\n{a}\n" in text, a
        text = text.replace(f"\n{a}\n", f"\n{b}\n")
    cfg = tmp_path / "yolov7-tiny-shapes.cfg"
    cfg.write_text(text)
    lines = []
    r = train_detector(data, cfg, TrainOptions(backup=str(tmp_path / "b"), progress=False,
                                               chart=False, map_every=0, seed=1),
                       log=lambda m, file=None: lines.append(m))
    losses = [float(m.group(2)) for m in (re.match(r"(\d+): (\S+),", s) for s in lines) if m]
    assert r["final_iteration"] == 10 and len(losses) == 10, lines
    assert np.all(np.isfinite(losses)), losses
    assert max(losses[1:]) < losses[0] / 10 and np.mean(losses[-3:]) < np.mean(losses[1:4]), \
        losses
    net = parse_network_cfg(cfg, batch=1)
    load_weights(net, tmp_path / "b" / "yolov7-tiny-shapes_final.weights")
    assert net.n == 99 and _seen(tmp_path / "b" / "yolov7-tiny-shapes_final.weights")[1] == 40
