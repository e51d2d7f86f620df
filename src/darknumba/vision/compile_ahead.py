"""A first run's compile shared by two processes. On a cold numba cache the detector starts a
second process; both walk the detector's work as tasks (each layer's forward, the decoding and
NMS of the boxes), the first process from the input on, the second from the end backwards, and
each takes a task only after claiming it in a folder both see (a file created exclusively), so
no kernel is compiled twice: tasks are keyed by the kernels they compile (kernel_key), and a
task whose key the other process claimed is skipped. The first process then waits for the
other's tasks and runs the detector once more, every kernel now loaded from numba's cache. On
two idle cores a first run compiles in about half the time. The helper only fills the cache:
nothing depends on it, and it is stopped once the first process has every kernel.

    python -m darknumba.vision.compile_ahead CFG BATCH WIDTH HEIGHT DIALECT THRESH HIER NMS EXACT [CLAIMS]
"""
from __future__ import annotations

import os
import subprocess
import sys


class Claims:
    """The folder in which the two processes claim tasks: `take(key)` creates the file `key`
    exclusively (True for the process that made it, and again for it later), `finish(key)`
    writes `key.done` once the task's kernels are in numba's cache."""

    def __init__(self, folder: str | None = None):
        import tempfile
        self.own = folder is None
        self.folder = tempfile.mkdtemp(prefix="darknumba-compile-") if folder is None else folder
        self.mine: set[str] = set()
        self.theirs: set[str] = set()

    def _path(self, key: str) -> str:
        import hashlib
        return os.path.join(self.folder, hashlib.sha1(key.encode()).hexdigest()[:16])

    def take(self, key: str) -> bool:
        if key in self.mine:
            return True
        if key in self.theirs:
            return False
        try:
            os.close(os.open(self._path(key), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            self.theirs.add(key)
            return False
        except OSError:             # the folder went away: work as if alone
            pass
        self.mine.add(key)
        return True

    def finish(self, key: str):
        try:
            os.close(os.open(self._path(key) + ".done", os.O_CREAT | os.O_WRONLY))
        except OSError:
            pass

    def wait_for_theirs(self, helper: subprocess.Popen | None, poll: float = 0.05,
                        limit: float = 600.0):
        """Until every task the other process claimed is done, or it has stopped, or `limit`
        seconds have passed (then this process compiles what is missing itself)."""
        import time
        pending = set(self.theirs)
        end = time.monotonic() + limit
        while pending and helper is not None and helper.poll() is None \
                and time.monotonic() < end:
            pending = {k for k in pending if not os.path.exists(self._path(k) + ".done")}
            if pending:
                time.sleep(poll)

    def remove(self):
        if self.own:
            import shutil
            shutil.rmtree(self.folder, ignore_errors=True)


def kernel_key(l, net) -> str:
    """What decides the kernels a layer's forward compiles at inference: its type and, for the
    layers with several paths, the path and the fused parts. Two layers with the same key
    compile nothing new for each other (a key too fine only costs a task run from the cache)."""
    from ..layers.conv_winograd import use_winograd
    parts = [l.type, str(getattr(l, "activation", ""))]
    if l.type == "convolutional":
        path = ("direct" if l._direct_thin(False) else "winograd" if use_winograd(l, net)
                else "1x1" if l._direct_1x1() else "gemm")
        # size and stride change no kernel: im2col takes them as values
        parts += [path, str(l.batch_normalize), str(l.groups > 1)]
    elif l.type == "maxpool":
        parts += [str(l.size), str(l.stride), str((l.out_w, l.out_h) == (l.w, l.h))]
    return "/".join(parts)


def run_layer(net, i, x):
    """Layer i's test-mode forward on whatever its input buffer holds (only the compiled code
    matters when tasks are skipped)."""
    net.index = i
    net.input = net.layers[i - 1].output if i else x
    net.layers[i].forward(net)


def boxes_task(net, w, h, thresh, hier, nms, letterbox=True):
    from .box import get_network_boxes
    from .box_ab import network_nms
    dets = get_network_boxes(net, w, h, thresh, hier, True, 0, letterbox)
    if nms:
        network_nms(net, dets, nms)


def compile_forwards(net, image, claims: Claims, thresh: float, hier: float, nms: float,
                     letterbox: bool = True) -> bool:
    """The first process's share: the detector on `image` task by task from the input, each
    task only if claimed here. True when every task ran here, i.e. it was a whole detection;
    False when some were the other process's (then wait_for_theirs and detect again)."""
    from .box import detection_layers, network_input
    detection_layers(net)
    x = network_input(net, [image], letterbox).reshape(-1)
    net.train, net.truth = False, None
    net._input0 = x
    whole = True
    for i, l in enumerate(net.layers):
        key = kernel_key(l, net)
        if claims.take(key):
            run_layer(net, i, x)
            claims.finish(key)
        else:
            whole = False
    if claims.take("boxes"):
        boxes_task(net, image.shape[2], image.shape[1], thresh, hier, nms, letterbox)
        claims.finish("boxes")
    else:
        whole = False
    return whole


def start(net, thresh: float, hier: float, nms: float,
          claims: Claims | None = None) -> subprocess.Popen | None:
    """The helper process for `net`, claiming its tasks in `claims` (None when there is one
    core, or no cfg file to build it from)."""
    from ..launcher import usable_cores
    cfg = getattr(net, "cfg_path", None)
    if usable_cores() < 2 or not cfg or not os.path.isfile(cfg):
        return None
    args = [str(cfg), str(net.batch), str(net.w), str(net.h), net.quirks.dialect,
            repr(float(thresh)), repr(float(hier)), repr(float(nms)),
            str(int(net.exact or net.quirks.compat is not None))]
    if claims is not None:
        args.append(claims.folder)
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
                      hier: float, nms: float, exact: bool = False, claims: Claims | None = None):
    """The helper's share: every task of the detector from the end, each only if claimed
    here: the outputs' decoding and NMS, the layers other than convolutions from the last one,
    the first Winograd layer, then the convolutions from the last one; each layer's forward on
    whatever its buffers hold (only the compiled code matters here), on the detector's path
    (Winograd or `exact`)."""
    import numpy as np

    from ..layers.conv_winograd import use_winograd
    from ..parser import load_network
    net = load_network(cfg, None, batch=batch, dialect=dialect, exact=exact)
    if (net.w, net.h) != (w, h):
        net.resize(w, h)
    net.train, net.truth = False, None
    x = np.zeros(net.batch * net.inputs, np.float32)
    net._input0 = x
    claims = Claims() if claims is None else claims

    def task(key, run):
        if claims.take(key):
            run()
            claims.finish(key)
    # the boxes and the layers without an activation sweep first: the first process starts
    # with a convolution, which compiles the batch norm / bias and activation kernels every
    # convolution calls; taken here at the same time they would be compiled twice
    order = list(reversed(range(len(net.layers))))
    convolutions = [i for i in order if net.layers[i].type == "convolutional"]
    winograd = [i for i in convolutions if use_winograd(net.layers[i], net)]
    task("boxes", lambda: boxes_task(net, w, h, thresh, hier, nms))
    for i in [i for i in order if i not in convolutions] + winograd[-1:] + convolutions:
        task(kernel_key(net.layers[i], net), lambda i=i: run_layer(net, i, x))
    claims.remove()


if __name__ == "__main__":
    a = sys.argv[1:]
    compile_backwards(a[0], int(a[1]), int(a[2]), int(a[3]), a[4], float(a[5]), float(a[6]),
                      float(a[7]), a[8] == "1", Claims(a[9]) if len(a) > 9 else None)
