"""A first run's compile shared by two processes. On a cold numba cache the detector starts a
second process; both walk the detector's work as tasks (each layer's forward, the decoding and
NMS of the boxes), the first process from the input on, the second from the end backwards, and
each takes a task only after claiming it in a folder both see (a file created exclusively), so
no kernel is compiled twice: tasks are keyed by the kernels they compile (kernel_key), and a
task whose key the other process claimed is skipped. The first process then waits for the
other's tasks and runs the detector once more, every kernel now loaded from numba's cache. On
two idle cores a first run compiles in about half the time. The helper only fills the cache:
nothing depends on it, and it is stopped once the first process has every kernel.

    python -m darknumba.runtime.compile_ahead CFG BATCH WIDTH HEIGHT DIALECT THRESH HIER NMS EXACT
        [CLAIMS [background [forwards|backwards]]]

A numpy first run (Detector(first_run="numpy")) leaves the compile to background helpers
instead: they outlive the first process, at a lower priority, and fill the cache for later
runs (start_background). The detector's side of both: cold_start.py.
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
    parts = [l.type, str(getattr(l, "activation", ""))]
    if l.type == "convolutional":
        # size and stride change no kernel: im2col takes them as values
        parts += [l.forward_path(net).value, str(l.batch_normalize), str(l.groups > 1)]
    elif l.type == "maxpool":
        parts += [str(l.size), str(l.stride), str((l.out_w, l.out_h) == (l.w, l.h))]
    return "/".join(parts)


def forward_kernels(l, net) -> list:
    """The main compiled kernels (numba dispatchers) layer `l`'s test-mode forward calls (a
    convolution's: those of its path, as the planner names them, layers/conv_plan.py)."""
    from ..kernels import blas, yolo, yolo_ab
    from ..layers import conv_plan
    from ..layers.yolo_ab import AbYoloLayer
    t = l.type
    if t == "convolutional":
        return conv_plan.forward_kernels(l, l.forward_path(net))
    if t == "maxpool":
        return [l.forward_kernel()]
    if t == "upsample":
        return [blas.upsample_cpu]
    if t == "route":                # its copies at batch > 1 (at batch 1 numpy's, or none)
        return [blas.copy_parts_cpu] if l.batch > 1 else []
    if t == "shortcut":
        return [blas.shortcut_same_cpu]
    if t == "yolo":
        return [yolo_ab.activate_yolo_output_ab if isinstance(l, AbYoloLayer)
                else yolo.activate_yolo_output]
    return []


def in_cache(dispatcher) -> bool:
    """Whether numba's cache holds a compiled version of `dispatcher` for this CPU (its index
    is fresh and has an entry with this machine's target features). True when that cannot be
    told (another numba's internals): then nothing is assumed missing."""
    from ..kernels.cache_stamp import stamp_dependencies
    try:
        stamp_dependencies(dispatcher._cache)   # as the load would (kernels/cache_stamp.py)
        index = dispatcher._cache._cache_file._load_index()
        magic = dispatcher.targetctx.codegen().magic_tuple()
        return any(key[1] == magic for key in index)
    except Exception:           # noqa: BLE001 - numba internals: assume cached
        return True


def cold_forward(net) -> list[str]:
    """The names of the kernels `net`'s forward pass would compile (empty on a warm cache)."""
    seen, cold = set(), []
    for l in net.layers:
        for d in forward_kernels(l, net):
            if d not in seen:
                seen.add(d)
                if not in_cache(d):
                    cold.append(d.py_func.__name__)
    return cold


def run_layer(net, i, x):
    """Layer i's test-mode forward on whatever its input buffer holds (only the compiled code
    matters when tasks are skipped)."""
    net.index = i
    net.input = net.layers[i - 1].output if i else x
    net.layers[i].forward(net)


def boxes_task(net, w, h, thresh, hier, nms, letterbox=True):
    from ..vision.box import get_network_boxes
    from ..vision.box_ab import network_nms
    dets = get_network_boxes(net, w, h, thresh, hier, True, 0, letterbox)
    if nms:
        network_nms(net, dets, nms)


def compile_forwards(net, image, claims: Claims, thresh: float, hier: float, nms: float,
                     letterbox: bool = True) -> bool:
    """The first process's share: the detector on `image` task by task from the input, each
    task only if claimed here. True when every task ran here, i.e. it was a whole detection;
    False when some were the other process's (then wait_for_theirs and detect again)."""
    from ..vision.box import detection_layers, network_input
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


def _helper_args(net, thresh, hier, nms, claims) -> list[str]:
    return [str(net.cfg_path), str(net.batch), str(net.w), str(net.h), net.quirks.dialect,
            repr(float(thresh)), repr(float(hier)), repr(float(nms)),
            str(int(net.exact or net.quirks.compat is not None)),
            claims.folder if claims is not None else ""]


def has_cfg(net) -> bool:
    """Whether `net` was read from a cfg file that is still there (a helper rebuilds it)."""
    cfg = getattr(net, "cfg_path", None)
    return bool(cfg) and os.path.isfile(cfg)


def start(net, thresh: float, hier: float, nms: float,
          claims: Claims | None = None) -> subprocess.Popen | None:
    """The helper process for `net`, claiming its tasks in `claims` (None when there is one
    core, or no cfg file to build it from)."""
    from .launcher import usable_cores
    if usable_cores() < 2 or not has_cfg(net):
        return None
    try:
        return subprocess.Popen([sys.executable, "-m", __name__,
                                 *_helper_args(net, thresh, hier, nms, claims)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError:             # no process to spare: the first one compiles everything
        return None


def start_background(net, thresh: float, hier: float, nms: float, claims: Claims,
                     direction: str = "backwards",
                     joining: list | None = None) -> list[subprocess.Popen]:
    """A helper left to compile `net`'s kernels after this process ends, at a lower priority,
    walking the tasks `direction` ("backwards" from the boxes, "forwards" from the input;
    the last helper to finish removes the claims folder). None while an earlier background
    compile still runs (the lock file holds its pids), or without a cfg file to build the
    network from. `joining`: the helpers already started for this compile, which this one
    joins (no lock check; the lock then holds every pid). Returns joining + the new helper."""
    joining = list(joining or [])
    if not has_cfg(net) or (not joining and not _lock_free()):
        return joining
    try:
        helper = subprocess.Popen(
            [sys.executable, "-m", __name__, *_helper_args(net, thresh, hier, nms, claims),
             "background", direction],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
    except OSError:
        return joining
    _write_lock([h.pid for h in joining] + [helper.pid])
    return joining + [helper]


def stop(helper: subprocess.Popen | None):
    if helper is not None:
        helper.kill()
        helper.wait()


def _lock_path() -> str:
    import tempfile
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"darknumba-background-compile-{uid}.pid")


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:             # someone else's process: alive
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _lock_free() -> bool:
    """True unless another background compile (a pid in the lock file) is running."""
    try:
        with open(_lock_path()) as f:
            pids = [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return True
    return not any(pid > 0 and pid != os.getpid() and _alive(pid) for pid in pids)


def _write_lock(pids: list[int]):
    try:
        tmp = f"{_lock_path()}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(" ".join(map(str, pids)))
        os.replace(tmp, _lock_path())
    except OSError:
        pass


def background_running() -> bool:
    """Whether a background compile started by some darknumba process is still running."""
    return not _lock_free()


def compile_backwards(cfg, batch: int, w: int, h: int, dialect: str, thresh: float,
                      hier: float, nms: float, exact: bool = False, claims: Claims | None = None,
                      forwards: bool = False):
    """The helper's share: every task of the detector from the end, each only if claimed
    here: the outputs' decoding and NMS, the layers other than convolutions from the last one,
    the first Winograd layer, then the convolutions from the last one; each layer's forward on
    whatever its buffers hold (only the compiled code matters here), on the detector's path
    (Winograd or `exact`). `forwards`: the layers from the first on, then the boxes (the
    second of two background helpers)."""
    import numpy as np

    from ..layers.conv_plan import use_winograd
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
    winograd = [i for i in convolutions if use_winograd(net.layers[i], net.train, net.exact)]
    if forwards:
        for i in range(len(net.layers)):
            task(kernel_key(net.layers[i], net), lambda i=i: run_layer(net, i, x))
        task("boxes", lambda: boxes_task(net, w, h, thresh, hier, nms))
    else:
        task("boxes", lambda: boxes_task(net, w, h, thresh, hier, nms))
        for i in [i for i in order if i not in convolutions] + winograd[-1:] + convolutions:
            task(kernel_key(net.layers[i], net), lambda i=i: run_layer(net, i, x))
    claims.remove()


if __name__ == "__main__":
    from . import configure
    configure()                 # as the process that started it: the thread policy before numpy
    #                             loads, a damaged cache file moved aside
    a = sys.argv[1:]
    background = len(a) > 10 and a[10] == "background"
    if background and hasattr(os, "nice"):
        try:
            os.nice(10)         # left to fill the cache: yield to what the user runs next
        except OSError:
            pass
    shared = Claims(a[9]) if len(a) > 9 and a[9] else None
    if shared is not None and background:
        # the first process has gone: the helpers remove the folder (the first to finish;
        # the other then works alone, loading what is already compiled from the cache)
        shared.own = True
    compile_backwards(a[0], int(a[1]), int(a[2]), int(a[3]), a[4], float(a[5]), float(a[6]),
                      float(a[7]), a[8] == "1", shared, forwards=len(a) > 11 and a[11] == "forwards")
