"""A second process that compiles a detector's kernels from its end backwards (the box decoding
and NMS, then the layers from the last to the first) while the first process compiles them in
the order it runs them. Both write into numba's cache and a kernel the other one finished is
loaded instead of compiled, so on two idle cores a first run compiles in about half the time.
The helper only fills the cache: nothing depends on it, and it is stopped once the first
process has every kernel.

    python -m darknumba.vision.compile_ahead CFG BATCH WIDTH HEIGHT DIALECT THRESH HIER NMS EXACT
"""
from __future__ import annotations

import os
import subprocess
import sys


def start(net, thresh: float, hier: float, nms: float) -> subprocess.Popen | None:
    """The helper process for `net` (None when there is one core, or no cfg file to build it
    from)."""
    from ..launcher import usable_cores
    cfg = getattr(net, "cfg_path", None)
    if usable_cores() < 2 or not cfg or not os.path.isfile(cfg):
        return None
    args = [str(cfg), str(net.batch), str(net.w), str(net.h), net.quirks.dialect,
            repr(float(thresh)), repr(float(hier)), repr(float(nms)),
            str(int(net.exact or net.quirks.compat is not None))]
    try:
        return subprocess.Popen([sys.executable, "-m", __name__, *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError:             # no process to spare: the first one compiles everything
        return None


def stop(helper: subprocess.Popen | None):
    if helper is not None:
        helper.kill()
        helper.wait()


def compile_backwards(cfg, batch: int, w: int, h: int, dialect: str, thresh: float,
                      hier: float, nms: float, exact: bool = False):
    """Call every kernel the detector calls, in the reverse order: the outputs' decoding and
    NMS, then each layer's forward from the last one (on whatever its buffers hold: only the
    compiled code matters here), on the detector's path (Winograd or `exact`). One Winograd
    layer goes first of all: the first process needs its two kernels from its first 3x3
    layers on, and would otherwise compile them at the same time as this one."""
    import numpy as np

    from ..layers.conv_winograd import use_winograd
    from ..parser import load_network
    from .box import get_network_boxes
    from .box_ab import network_nms
    net = load_network(cfg, None, batch=batch, dialect=dialect, exact=exact)
    if (net.w, net.h) != (w, h):
        net.resize(w, h)
    net.train, net.truth = False, None
    x = np.zeros(net.batch * net.inputs, np.float32)
    net._input0 = x

    def forward(i):
        net.index = i
        net.input = net.layers[i - 1].output if i else x
        net.layers[i].forward(net)
    order = list(reversed(range(len(net.layers))))
    winograd = [i for i in order if net.layers[i].type == "convolutional"
                and use_winograd(net.layers[i], net)]
    if winograd:
        order.remove(winograd[-1])
        forward(winograd[-1])
    dets = get_network_boxes(net, w, h, thresh, hier, True, 0, True)
    if nms:
        network_nms(net, dets, nms)
    for i in order:
        forward(i)


if __name__ == "__main__":
    a = sys.argv[1:]
    compile_backwards(a[0], int(a[1]), int(a[2]), int(a[3]), a[4], float(a[5]), float(a[6]),
                      float(a[7]), a[8] == "1")
