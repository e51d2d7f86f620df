"""First run on a machine: the compile notice, compile kept out of "Predicted in", `darknumba
warmup`. The end-to-end case compiles every kernel a small detector needs in a fresh numba cache
(a subprocess, so this process's compiled kernels do not count)."""
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ROOT, sample_photos
from numba import njit
from tiny_nets import QUICK_DETECTOR

import darknumba as dn
from darknumba.runtime.compile_notice import NOTICE, compile_notice
from darknumba.detections import Detections
from darknumba.train.timing import unit_rolling_variance

CFG = ROOT / "cfg" / "shapes-tiny.cfg"


def random_net(cfg=CFG):
    net = dn.load_network(cfg, None, batch=1)
    unit_rolling_variance(net)              # finite outputs from random weights
    return net


def test_notice_once_on_compile_and_never_on_a_loaded_kernel():
    @njit(cache=False)
    def twice(x):
        return 2 * x

    said = []
    with compile_notice(said.append, "compiling") as notice:
        twice(1)
        twice(1.5)                          # a second compile: still one notice
    assert said == ["compiling"] and notice.compiled
    with compile_notice(said.append) as notice:
        twice(2)                            # compiled already: nothing to say
    assert said == ["compiling"] and not notice.compiled


def test_detector_warms_up_before_the_first_image(monkeypatch):
    """run() compiles on a blank image of the network's size (task by task, compile_ahead)
    before timing the first image."""
    from darknumba.runtime import compile_ahead
    from darknumba.vision import detector as det_mod
    net = random_net()
    calls = []
    real, real_tasks = det_mod.detect, compile_ahead.compile_forwards
    monkeypatch.setattr(det_mod, "detect", lambda net, ims, *a, **k: calls.append(ims[0].shape) or real(net, ims, *a, **k))
    monkeypatch.setattr(compile_ahead, "compile_forwards",
                        lambda net, im, *a: calls.append(("tasks", im.shape)) or real_tasks(net, im, *a))
    d = det_mod.Detector(net, names=["a", "b", "c"], log=lambda m: None)
    image = np.full((3, 40, 60), 0.3, np.float32)
    [p] = list(d.run([image]))
    # every task ran here (no second process claimed any): no second pass over the blank image
    assert calls == [("tasks", (3, net.h, net.w)), image.shape] and p.error is None
    list(d.run([image]))
    assert len(calls) == 3                  # warmed once


def test_compile_tasks_are_claimed_once_between_two_processes(tmp_path):
    """Two processes share a cold compile through a claims folder: a task's key is taken by one
    only; the first process skips the tasks the other claimed, waits for them, then detects
    again; the helper's walk, on the same folder, skips what the first one took."""
    from darknumba.runtime import compile_ahead
    from darknumba.vision.box import detect
    here, there = compile_ahead.Claims(str(tmp_path)), compile_ahead.Claims(str(tmp_path))
    assert here.take("a") and here.take("a") and not there.take("a") and there.take("b")
    assert not here.take("b")
    net = random_net()
    keys = [compile_ahead.kernel_key(l, net) for l in net.layers]
    assert "boxes" not in keys and len(set(keys)) < len(keys)     # layers share their kernels
    other = compile_ahead.Claims(str(tmp_path / "x"))
    os.mkdir(other.folder)
    mine = compile_ahead.Claims(other.folder)
    assert other.take(keys[-1])                                   # the helper has the last one
    ran = []
    for l in net.layers:
        real_forward = l.forward
        l.forward = lambda n, real_forward=real_forward, l=l: ran.append(l) or real_forward(n)
    blank = np.full((net.c, net.h, net.w), 0.5, np.float32)
    assert not compile_ahead.compile_forwards(net, blank, mine, 0.5, 0.5, 0.45)
    assert [l for l in net.layers if compile_ahead.kernel_key(l, net) == keys[-1]] \
        and all(compile_ahead.kernel_key(l, net) != keys[-1] for l in ran)
    assert len(ran) == sum(k != keys[-1] for k in keys)
    other.finish(keys[-1])
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mine.wait_for_theirs(helper)                # returns at once: the task is done
        assert helper.poll() is None
    finally:
        helper.kill()
        helper.wait()
    [dets] = detect(net, [blank], 0.5, 0.5, 0.45)             # the whole pass after the wait
    assert isinstance(dets, Detections)
    fresh = compile_ahead.Claims()
    try:
        assert compile_ahead.compile_forwards(net, blank, fresh, 0.5, 0.5, 0.45)  # alone: whole
    finally:
        fresh.remove()
    assert not os.path.exists(fresh.folder)


def quick_detector(folder):
    """The tests that compile into a fresh cache run QUICK_DETECTOR (fewer kernels to compile)."""
    cfg = folder / "quick.cfg"
    cfg.write_text(QUICK_DETECTOR)
    return cfg


def _cli(args, cache, cwd, **extra_env):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), **extra_env,
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", "from darknumba.cli import main; main()", *args],
                         env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out


@pytest.mark.slow
def test_cold_cache_notice_warmup_and_predicted_in(tmp_path):
    """A fresh cache: `detect` says it compiles and its "Predicted in" for the first image is of
    the order of the second's (the compile took seconds); `warmup` fills a second fresh cache,
    after which `detect` compiles nothing and says nothing."""
    cfg = quick_detector(tmp_path)
    weights = tmp_path / "w.weights"
    dn.save_weights(random_net(cfg), weights)
    image = sample_photos()[0]
    cold = _cli(["detect", str(cfg), str(weights), str(image), str(image), "--thresh", "2"],
                tmp_path / "cache1", tmp_path)
    assert NOTICE in cold.stderr
    first, second = map(float, re.findall(r"Predicted in ([0-9.]+) seconds", cold.stdout))
    assert first < 10 * second + 1.0, (first, second)

    warm = _cli(["warmup", str(cfg)], tmp_path / "cache2", tmp_path)
    assert NOTICE in warm.stderr and "compiled" in warm.stdout
    again = _cli(["warmup", str(cfg)], tmp_path / "cache2", tmp_path)
    assert "already cached" in again.stdout and NOTICE not in again.stderr
    after = _cli(["detect", str(cfg), str(weights), str(image), "--thresh", "2"],
                 tmp_path / "cache2", tmp_path)
    assert NOTICE not in after.stderr and "Predicted in" in after.stdout


def test_compile_ahead_runs_every_layer_backwards(tmp_path):
    """The helper's work on its own: the decoding, NMS and every layer, last to first, on the
    buffers as they are (what a cold run's second process does)."""
    from darknumba.runtime.compile_ahead import compile_backwards
    compile_backwards(str(CFG), 2, 64, 64, "pjreddie", 0.5, 0.5, 0.45)


@pytest.mark.slow
def test_cold_detect_runs_numpy_and_leaves_the_compile_to_a_background_process(tmp_path):
    """A fresh cache, DARKNUMBA_FIRST_RUN at its default (numpy): `detect` answers without
    compiling the forward pass, a background process compiles it; once that has ended, the
    same command runs compiled (no notice) and finds the same boxes."""
    from darknumba.runtime.compile_ahead import background_running
    image = sample_photos()[0]
    cfg = quick_detector(tmp_path)
    weights = tmp_path / "w.weights"
    dn.save_weights(random_net(cfg), weights)
    for _ in range(3000):               # another background compile would keep this one waiting
        if not background_running():
            break
        time.sleep(0.1)
    args = ["detect", str(cfg), str(weights), str(image), "--thresh", "0.05", "--json", "-"]
    cold = _cli(args, tmp_path / "cache", tmp_path, DARKNUMBA_FIRST_RUN="numpy")
    assert "numpy computes the forward pass" in cold.stderr and NOTICE not in cold.stderr
    assert re.search(r"\(pid \d+\)", cold.stderr)
    for _ in range(3000):               # the helper, and the second one started at exit
        if not background_running():
            break
        time.sleep(0.1)
    assert not background_running(), "the background compile ran for more than 300 s"
    warm = _cli(args, tmp_path / "cache", tmp_path, DARKNUMBA_FIRST_RUN="numpy")
    assert "first run" not in warm.stderr and NOTICE not in warm.stderr
    a, b = (json.loads(r.stdout)["detections"] for r in (cold, warm))
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x["name"] == y["name"] and abs(x["prob"] - y["prob"]) < 1e-4


@pytest.mark.parametrize("argv0, command, frozen", [
    ("/usr/bin/darknumba", False, False), ("script.py", False, False),
    ("/usr/bin/darknumba", True, True)])
def test_only_the_command_freezes_the_collector(argv0, command, frozen):
    """The `darknumba` command (runtime.configure(command=True), from cli.main) freezes the
    objects its imports made out of later collections; importing darknumba freezes nothing,
    whatever the program is called, and the collector is on either way."""
    code = ("import gc, sys; cmd = sys.argv[2:]; sys.argv = [sys.argv[1]]; import darknumba; "
            "from darknumba import load_network\n"
            "if cmd == ['command']: darknumba.configure(command=True)\n"
            "print(gc.get_freeze_count(), gc.isenabled())")
    out = subprocess.run([sys.executable, "-c", code, argv0] + ["command"] * command,
                         capture_output=True, text=True, check=True).stdout.split()
    assert (int(out[0]) > 10000) == frozen and out[1] == "True"


@pytest.mark.parametrize("items", [[], ["a"], ["a", "b", "c", "d"]])
def test_warm_up_runs_while_the_first_images_decode(monkeypatch, items):
    """prefetched hands the first images to its worker, then runs `meanwhile` (the
    detector's warm-up) once, before it waits for any of them; with no images too."""
    import threading

    from darknumba.vision import detector as D
    started, events = threading.Event(), []

    def decode(item, c, decoder):
        events.append(("decode", item))
        started.set()
        return item, None

    def meanwhile():
        if items:
            assert started.wait(5)          # the first decode began before the warm-up
        events.append(("meanwhile",))
    monkeypatch.setattr(D, "_decode", decode)
    out = list(D.prefetched(items, 2, meanwhile=meanwhile))
    assert [o[0] for o in out] == items
    assert events.count(("meanwhile",)) == 1
    if items:
        assert events[0] == ("decode", "a")


def test_import_with_an_empty_argv():
    """An embedding interpreter may leave sys.argv empty: the import works, nothing frozen."""
    code = "import gc, sys; sys.argv = []; import darknumba; print(gc.get_freeze_count())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["0"]
