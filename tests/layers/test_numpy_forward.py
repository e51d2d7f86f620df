"""The numpy forward pass of a first run (numpy_forward.py) against the compiled kernels, layer
by layer; the Detector's numpy first run and its hand-over to the compiled path; the cache
probe and the background compile's lock (runtime/compile_ahead.py)."""
import importlib.util
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ROOT, sample_photos, tiny_weights, v4tiny_weights

import darknumba as dn
from darknumba.runtime import compile_ahead, numpy_forward
from darknumba.train.timing import unit_rolling_variance
from darknumba.vision.detector import Detector

HEAD = "[net]\nwidth=32\nheight=32\nchannels=3\nbatch=2\n"


def conv(filters, size=3, stride=1, act="leaky", bn=1, groups=1):
    return (f"[convolutional]\nbatch_normalize={bn}\nfilters={filters}\nsize={size}\n"
            f"stride={stride}\npad=1\ngroups={groups}\nactivation={act}\n")


YOLO = "[yolo]\nmask={mask}\nanchors=4,5, 8,9, 12,14, 16,10, 20,24, 30,28\nclasses=3\nnum=6\n"

# pjreddie: 3x3 strides 1 and 2, 1x1, groups, maxpools 2/1 (same), 3/2 and 5/1, shortcut,
# upsample, route, relu / logistic / linear / leaky, [yolo]
PJREDDIE = (HEAD + conv(8) + conv(16, stride=2, act="relu") + "[maxpool]\nsize=2\nstride=1\n"
            + conv(16, size=1, act="logistic", bn=0) + "[maxpool]\nsize=3\nstride=2\n"
            + conv(16, act="linear", groups=2) + "[shortcut]\nfrom=-2\nactivation=leaky\n"
            + "[upsample]\nstride=2\n" + "[route]\nlayers=-1,-6\n" + "[maxpool]\nsize=5\nstride=1\n"
            + conv(24, size=1, act="linear", bn=0) + YOLO.format(mask="0,1,2"))
# AlexeyAB: mish, swish, route groups, scale_x_y with and without new_coords, its batch norm
ALEXEYAB = (HEAD + conv(8, stride=2, act="mish") + conv(8, act="swish")
            + "[route]\nlayers=-1\ngroups=2\ngroup_id=1\n" + conv(8) + "[route]\nlayers=-1,-3\n"
            + "[maxpool]\nsize=2\nstride=2\n" + conv(24, size=1, act="logistic", bn=0)
            + YOLO.format(mask="0,1,2") + "scale_x_y=1.05\nnew_coords=1\n"
            + "[route]\nlayers=-3\n" + conv(24, size=1, act="linear", bn=0)
            + YOLO.format(mask="3,4,5") + "scale_x_y=1.1\n")


def _net(tmp_path, text, dialect, exact=True):
    cfg = tmp_path / f"{dialect}.cfg"
    cfg.write_text(text)
    net = dn.load_network(cfg, None, batch=2, dialect=dialect, exact=exact)
    unit_rolling_variance(net)
    rng = np.random.default_rng(5)
    for l in net.layers:            # non-trivial batch-norm statistics and biases
        for name in ("biases", "scales", "rolling_mean"):
            a = getattr(l, name, None)
            if a is not None and a.size:
                a[:] = rng.normal(0, 0.5, a.size).astype(np.float32)
        if getattr(l, "rolling_variance", None) is not None and l.rolling_variance.size:
            l.rolling_variance[:] = rng.uniform(0.2, 2, l.rolling_variance.size)
    return net


@pytest.mark.parametrize("text,dialect", [(PJREDDIE, "pjreddie"), (ALEXEYAB, "alexeyab")])
def test_every_layer_matches_the_compiled_forward(tmp_path, text, dialect):
    net = _net(tmp_path, text, dialect)
    assert numpy_forward.unsupported(net) is None
    x = np.random.default_rng(1).uniform(0, 1, (2, 3, 32, 32)).astype(np.float32)
    net.forward(x)
    ref = [l.output[:l.batch * l.outputs].copy() for l in net.layers]
    for l in net.layers:
        l.output[:] = np.nan                    # every value written again
    numpy_forward.forward(net, x)
    for i, l in enumerate(net.layers):
        got = l.output[:l.batch * l.outputs]
        scale = max(1.0, float(np.abs(ref[i]).max()))
        np.testing.assert_allclose(got, ref[i], rtol=0, atol=2e-6 * scale,
                                   err_msg=f"layer {i} ({l.type})")


def test_unsupported_names_the_layer(tmp_path):
    net = _net(tmp_path, HEAD + conv(8) + "[avgpool]\n", "pjreddie")
    assert numpy_forward.unsupported(net) == "layer 1 (avgpool)"
    mixed = _net(tmp_path, HEAD + conv(8, act="tanh"), "pjreddie")
    assert numpy_forward.unsupported(mixed) == "layer 0 (convolutional)"


def test_a_real_detector_prints_the_same_lines_first_run_or_not(monkeypatch):
    """yolov3-tiny and yolov4-tiny on the sample photos: the numpy first run (here forced: a
    cache said cold, no background process) prints what the compiled path prints, and the
    detector goes over to the compiled path once the background compile is done."""
    images = sample_photos()[:3]
    for cfg, weights in (("yolov3-tiny", tiny_weights()), ("yolov4-tiny", v4tiny_weights())):
        compiled = Detector(ROOT / "cfg" / f"{cfg}.cfg", weights, log=lambda m: None)
        want = [p.lines() for p in compiled.run(images)]
        started = []
        monkeypatch.setattr(compile_ahead, "cold_forward", lambda net: ["im2col_batch_cpu"])
        monkeypatch.setattr(compile_ahead, "start_background",
                            lambda *a, **k: started.append(a[0]) or [])
        monkeypatch.setattr(compile_ahead, "background_running", lambda: True)
        logs = []
        first = Detector(ROOT / "cfg" / f"{cfg}.cfg", weights, log=logs.append,
                         first_run="numpy")
        got = [p.lines() for p in first.run(images[:2])]
        assert first.cold_start.numpy_forward and started == [first.net]
        assert "numpy computes the forward pass" in logs[0]
        monkeypatch.setattr(compile_ahead, "background_running", lambda: False)
        monkeypatch.setattr(compile_ahead, "cold_forward", lambda net: [])
        got += [p.lines() for p in first.run(images[2:])]
        assert not first.cold_start.numpy_forward                  # the compiled path took over
        assert got == want
        monkeypatch.undo()


def test_numpy_first_run_only_where_it_applies(tmp_path, monkeypatch):
    net = _net(tmp_path, PJREDDIE, "pjreddie")
    monkeypatch.setattr(compile_ahead, "cold_forward", lambda net: [])
    d = Detector(net, log=lambda m: None, first_run="numpy")
    d.warm_up()
    assert not d.cold_start.numpy_forward                          # a warm cache: compiled at once
    with pytest.raises(ValueError, match="first_run"):
        Detector(net, first_run="interpreted")


def test_in_cache_tells_a_compiled_kernel_from_a_new_one(tmp_path):
    src = tmp_path / "fresh_kernel_mod.py"
    src.write_text("from numba import njit\n\n@njit(cache=True)\ndef twice(x):\n"
                   "    return 2 * x\n")
    spec = importlib.util.spec_from_file_location("fresh_kernel_mod", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert not compile_ahead.in_cache(mod.twice)
    assert mod.twice(3) == 6
    assert compile_ahead.in_cache(mod.twice)
    assert compile_ahead.in_cache(object()) is True     # cannot tell: assumed cached


def test_background_lock_follows_the_process(tmp_path, monkeypatch):
    lock = tmp_path / "lock.pid"
    monkeypatch.setattr(compile_ahead, "_lock_path", lambda: str(lock))
    assert compile_ahead._lock_free()        # no lock file
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        compile_ahead._write_lock([os.getpid(), p.pid])       # its own pid does not count
        assert not compile_ahead._lock_free() and compile_ahead.background_running()
        p.kill()
        for _ in range(200):        # ended, not yet reaped: a zombie counts as ended
            if not compile_ahead._alive(p.pid):
                break
            time.sleep(0.02)
        assert not compile_ahead._alive(p.pid)
        assert compile_ahead._lock_free()
    finally:
        p.kill()
        p.wait()
    lock.write_text("garbage")
    assert compile_ahead._lock_free()


def test_the_second_background_helper_starts_at_exit_from_the_other_end(tmp_path, monkeypatch):
    class Running:
        pid = 12345

        def poll(self):
            return None
    net = _net(tmp_path, PJREDDIE, "pjreddie")
    net.cfg_path = str(tmp_path / "pjreddie.cfg")
    calls = []
    monkeypatch.setattr(compile_ahead, "cold_forward", lambda net: ["im2col_batch_cpu"])
    monkeypatch.setattr(compile_ahead, "start_background",
                        lambda *a, joining=None, **k: calls.append((a[5:], joining))
                        or [*(joining or []), Running()])
    registered = []
    monkeypatch.setattr("atexit.register", lambda f, *a: registered.append((f, a)))
    monkeypatch.setattr("darknumba.runtime.launcher.usable_cores", lambda: 2)
    d = Detector(net, log=lambda m: None, first_run="numpy")
    d.warm_up()
    assert d.cold_start.numpy_forward and len(calls) == 1 and calls[0][1] is None   # one helper now
    (f, args), = registered
    f(*args)                                                 # what runs at exit
    assert calls[1][0] == ("forwards",) and len(calls[1][1]) == 1 and len(d.cold_start._background) == 2
    args[0].remove()                                         # the claims folder


def test_the_cache_probe_asks_each_layer_for_its_kernels(tmp_path):
    """forward_kernels names what the layers' forward passes call: maxpools by their own
    forward_kernel (the 5x5 one its two-pass rows kernel), convolutions by their path."""
    from darknumba.kernels import pool
    net = _net(tmp_path, PJREDDIE, "pjreddie")
    pools = [compile_ahead.forward_kernels(l, net) for l in net.layers if l.type == "maxpool"]
    assert pools == [[pool.forward_maxpool2_same_cpu], [pool.forward_maxpool_cpu],
                     [pool.forward_maxpool_rows_cpu]]
    assert [l.forward_path(net) for l in net.layers
            if l.type == "convolutional"] == ["direct", "direct-s2", "1x1", "im2col", "1x1"]
