"""The C darknet side of `darknumba compare`: a user's own pjreddie or AlexeyAB darknet build,
driven through our shim (`compare_shim.c`, or `compare_shim_ab.c` for AlexeyAB's API), compiled
at run time against their `include/darknet.h` and linked to their `libdarknet.so`, cached under
~/.cache/darknumba by the hashes of both. hank-ai's builds (an opaque public header) are
refused.

C darknet calls ``exit()`` on bad input (``file_error``, ``error``), so it always runs in a
child process (``python -m darknumba.parity.darknet_ref JOB.json``) that writes its tensors to an
.npz in the golden fixtures' layout (``input``, ``truth``, ``L###_output``, ``after_L###_weights``,
...). A child that dies is reported with darknet's last words.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data.fetch import cache_dir
from ..dialect import ALEXEYAB, DEFAULT_DIALECT, PJREDDIE
from ..errors import DarknumbaError
from .ab_contrastive import build_stand_ins, classifier_stand_ins

SHIM_SOURCE = Path(__file__).with_name("compare_shim.c")
SHIM_SOURCES = {PJREDDIE: SHIM_SOURCE, ALEXEYAB: Path(__file__).with_name("compare_shim_ab.c")}
HANK_AI = "hank-ai"     # a tree kind compare refuses (Darknet V3 and later)
TITLES = {PJREDDIE: "C", ALEXEYAB: "AlexeyAB"}     # "<title> darknet at DIR" in reports
# trees whose parser cannot build a classifier [contrastive] (AlexeyAB's reads the missing
# [yolo] through a null pointer): compare hands it stand-ins (ab_contrastive.py)
CONTRASTIVE_STAND_INS = {PJREDDIE: False, ALEXEYAB: True}
# Fields read from each layer, by run mode (names of darknet's `layer` struct members).
FORWARD_FIELDS = ("output",)
TRAIN_FORWARD_FIELDS = ("mean", "variance", "output", "delta", "cost", "rolling_mean",
                        "rolling_variance")
GRAD_FIELDS = ("mean", "variance", "output", "delta", "cost", "weight_updates", "bias_updates",
               "scale_updates", "x_norm")
PARAM_FIELDS = ("weights", "biases", "scales", "rolling_mean", "rolling_variance")
# read in train mode for the per-layer replay (replay.py): batch norm's input, which its
# backward and the tolerance of its batch statistics need, and what AlexeyAB's swish, mish and
# hard_mish keep for their gradient (its shim alone has the field)
REPLAY_FIELDS = ("x", "activation_input")
MAX_DESTS = 64
MODES = ("forward_test", "forward_train", "trainstep")
# Characters a darknet folder may have: a comma would split -Wl,-rpath,DIR into linker options,
# a colon separates rpath entries, a dollar starts a loader token ($ORIGIN).
SAFE_PATH_CHARS = r"[A-Za-z0-9_./+@~ -]"
SAFE_PATH = re.compile(SAFE_PATH_CHARS + "+")
COMPILE_TIMEOUT = 300.0     # seconds for the shim's compile and link


def _sha256(*blobs: bytes) -> str:
    h = hashlib.sha256()
    for b in blobs:
        h.update(hashlib.sha256(b).digest())
    return h.hexdigest()


@dataclass
class DarknetTree:
    """A built darknet: DIR/include/darknet.h and DIR/libdarknet.so; kind "pjreddie" or
    "alexeyab" (the dialect its numbers follow)."""
    root: Path
    header: Path
    library: Path
    gpu: bool = False
    cudnn: bool = False
    kind: str = DEFAULT_DIALECT

    @property
    def shim_source(self) -> Path:
        return SHIM_SOURCES[self.kind]

    @property
    def title(self) -> str:
        return TITLES[self.kind]

    @property
    def needs_contrastive_stand_ins(self) -> bool:
        return CONTRASTIVE_STAND_INS[self.kind]

    @classmethod
    def locate(cls, root) -> "DarknetTree":
        root = Path(os.path.abspath(Path(root).expanduser()))
        if not SAFE_PATH.fullmatch(str(root)):
            bad = sorted(set(re.sub(SAFE_PATH_CHARS, "", str(root))))
            raise DarknumbaError(
                f"--darknet {str(root)!r}: the path holds {''.join(bad)!r}, which the compiler, "
                f"linker or loader would read as syntax (the folder goes into -Wl,-rpath,DIR); "
                f"use a path of letters, digits, spaces and ._+@~/- (a symlink will do)")
        if not root.is_dir():
            raise DarknumbaError(f"--darknet {root}: no such directory (give the folder of a "
                                 f"pjreddie darknet checkout built with `make`)")
        header = root / "include" / "darknet.h"
        if not header.is_file():
            raise DarknumbaError(f"--darknet {root}: no include/darknet.h; this is not a darknet "
                                 f"source tree (clone https://github.com/pjreddie/darknet, run "
                                 f"`make` in it and pass that folder)")
        text = header.read_text(errors="replace")
        kind = tree_kind(root, text)
        if kind == HANK_AI:
            raise DarknumbaError(
                f"--darknet {root}: this is hank-ai's Darknet (V3 and later), whose public "
                f"darknet.h keeps the network opaque, so compare cannot read its layers; it is "
                f"not supported. Use an AlexeyAB/darknet or pjreddie/darknet build, or record "
                f"tensors in an .npz and use --npz")
        if kind is None:
            raise DarknumbaError(f"--darknet {root}: include/darknet.h does not declare "
                                 f"pjreddie's network API (train_network_datum, struct layer)")
        library = root / "libdarknet.so"
        if not library.is_file():
            hint = (" (libdarknet.a is there: the shared library is built by the stock "
                    "Makefile's default target)") if (root / "libdarknet.a").is_file() else ""
            raise DarknumbaError(f"--darknet {root}: no libdarknet.so; build it with `make` in "
                                 f"that folder{hint}")
        blob = library.read_bytes()
        return cls(root, header, library, gpu=b"forward_network_gpu\x00" in blob,
                   cudnn=b"cudnn_convolutional_setup\x00" in blob, kind=kind)

    def key(self) -> str:
        return _sha256(self.library.read_bytes(), self.header.read_bytes(),
                       self.shim_source.read_bytes())[:20]


def tree_kind(root: Path, header_text: str) -> str | None:
    """Which darknet DIR is: HANK_AI (an opaque public header: DarknetNetworkPtr, no layer
    struct), ALEXEYAB (LIB_API, load_network_custom, its network_state struct), PJREDDIE
    (train_network_datum and struct layer), or None (neither's network API)."""
    if "DarknetNetworkPtr" in header_text or "Darknet::" in header_text or (
            "struct layer" not in header_text and (root / "src-lib").is_dir()):
        return HANK_AI
    if "load_network_custom" in header_text or "struct network_state" in header_text:
        return ALEXEYAB
    if "train_network_datum" in header_text and "struct layer" in header_text:
        return PJREDDIE
    return None


def find_compiler() -> str:
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand and shutil.which(cand):
            return shutil.which(cand)
    raise DarknumbaError("no C compiler found (looked for $CC, cc, gcc, clang): compare builds "
                         "a small shim against your darknet; install one (e.g. `apt-get install "
                         "gcc`) or set CC")


def compile_shim(tree: DarknetTree, log=None) -> Path:
    """The shim library for this darknet build: compiled once, then reused from the cache."""
    out = cache_dir() / f"compare-shim-{tree.key()}.so"
    if out.is_file():
        return out
    cc = find_compiler()
    out.parent.mkdir(parents=True, exist_ok=True)
    flags = ["-shared", "-fPIC", "-O2", f"-I{tree.root / 'include'}"]
    if tree.gpu:   # the structs have extra members in a GPU build: compile with the same view
        flags += ["-DGPU", "-I/usr/local/cuda/include"] + (["-DCUDNN"] if tree.cudnn else [])
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    cmd = [cc, *flags, str(tree.shim_source), "-o", tmp, f"-L{tree.root}", "-ldarknet",
           f"-Wl,-rpath,{tree.root}", "-lm", "-pthread"]
    if log:
        log(f"compiling the darknet shim: {' '.join(cmd)}")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.unlink(tmp)
        raise DarknumbaError(f"compiling the compare shim against {tree.header} took more than "
                             f"{COMPILE_TIMEOUT:.0f} s; stopped") from None
    if r.returncode != 0:
        os.unlink(tmp)
        tail = "\n".join(r.stderr.strip().splitlines()[-8:])
        raise DarknumbaError(f"could not compile the compare shim against {tree.header} "
                             f"({cc} exited {r.returncode}); is it a pjreddie darknet tree?\n{tail}")
    os.replace(tmp, out)
    return out


def run_darknet(tree: DarknetTree, cfg, weights, mode: str, *, x=None, image=None, truth=None,
                batch: int | None = None, log=None, timeout: float | None = None) -> dict:
    """Run C darknet once in a child process. Returns {key: array} in the golden layout plus
    "meta" (layers, net fields, rate, cost, seen). x: float32 input, or image: a path that
    darknet letterboxes itself (its tensor comes back as "input")."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    for p, what in ((cfg, "cfg"), (weights, "weights"), (image, "image")):
        if p is not None and not Path(p).is_file():
            raise DarknumbaError(f"{what} file not found: {p}")
    shim = compile_shim(tree, log=log)
    with tempfile.TemporaryDirectory(prefix="darknumba-compare-") as tmp:
        tmp = Path(tmp)
        c_cfg, stand_ins = Path(cfg).resolve(), []
        if tree.needs_contrastive_stand_ins:
            text, stand_ins = classifier_stand_ins(cfg)
            if stand_ins:
                c_cfg = tmp / f"stand-in-{c_cfg.name}"
                c_cfg.write_text(text)
        job = {"shim": str(shim), "cfg": str(c_cfg), "contrastive": stand_ins,
               "weights": str(Path(weights).resolve()) if weights else "",
               "mode": mode, "batch": batch, "out": str(tmp / "out.npz"),
               "image": str(Path(image).resolve()) if image else None, "x": None, "truth": None}
        if x is not None:
            np.save(tmp / "x.npy", np.ascontiguousarray(x, np.float32).reshape(-1))
            job["x"] = str(tmp / "x.npy")
        if truth is not None:
            np.save(tmp / "truth.npy", np.ascontiguousarray(truth, np.float32).reshape(-1))
            job["truth"] = str(tmp / "truth.npy")
        (tmp / "job.json").write_text(json.dumps(job))
        try:
            r = subprocess.run([sys.executable, "-m", "darknumba.parity.darknet_ref", str(tmp / "job.json")],
                               capture_output=True, text=True, timeout=timeout, cwd=tmp,
                               env=_child_env(tree))
        except subprocess.TimeoutExpired as e:
            raise DarknumbaError(f"C darknet did not finish within {timeout} s") from e
        if r.returncode != 0 or not (tmp / "out.npz").is_file():
            raise DarknumbaError(_child_failure(r, cfg, weights))
        with np.load(tmp / "out.npz") as data:
            out = {k: data[k] for k in data.files}
    meta = json.loads(str(out.pop("meta_json")))
    meta["run"]["dialect"] = tree.kind
    meta["stdout"] = r.stdout
    meta["stderr_tail"] = r.stderr.strip().splitlines()[-5:]
    out["meta"] = meta
    return out


def _child_env(tree: DarknetTree) -> dict:
    """libdarknet.so preloaded: darknet defines its own `error()`, which glibc's `error()` would
    otherwise shadow in a process that loads darknet with dlopen (its messages would be lost).
    The folder this darknumba was imported from goes first on the child's PYTHONPATH, so that
    both sides of a comparison run the same darknumba (not another install the child would
    find first)."""
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(filter(None, [str(tree.library), env.get("LD_PRELOAD")]))
    ours = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ours, env.get("PYTHONPATH")]))
    return env


def _child_failure(r, cfg, weights) -> str:
    err = r.stderr.strip().splitlines()
    said = next((s for s in reversed(err) if s.startswith("darknumba:")), None)
    if said:
        return said.removeprefix("darknumba:").strip()
    words = [s.strip().removesuffix(": Success") for s in err + r.stdout.strip().splitlines()
             if s.strip() and not re.match(r"\s*(\d+ |layer +filters|mask_scale)", s)
             and "Assertion `0' failed" not in s]
    why = "; ".join(words[-3:]) or "nothing"
    how = (f"exited with status {r.returncode}" if r.returncode >= 0
           else f"was killed by signal {-r.returncode}")
    return (f"C darknet rejected cfg {cfg} / weights {weights or '(none)'}: it {how} before "
            f"finishing; darknet said: {why}")


# --------------------------------------------------------------------------------------------
# The child process: load the shim with ctypes and run one job.

def _bind(shim_path: str):
    lib = ctypes.CDLL(shim_path)
    P, I, F, LL = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_longlong
    sig = {
        "dnc_load": (P, [ctypes.c_char_p, ctypes.c_char_p, I]),
        "dnc_net_info": (None, [P, ctypes.POINTER(I)]),
        "dnc_set_batch": (None, [P, I]),
        "dnc_get_seen": (LL, [P]),
        "dnc_set_seen": (None, [P, LL]),
        "dnc_rate": (F, [P]),
        "dnc_cost": (F, [P]),
        "dnc_layer_type": (ctypes.c_char_p, [P, I]),
        "dnc_layer_info": (None, [P, I, ctypes.POINTER(I)]),
        "dnc_field": (LL, [P, I, ctypes.c_char_p, ctypes.POINTER(P)]),
        "dnc_set_input": (None, [P, ctypes.POINTER(F), ctypes.POINTER(F)]),
        "dnc_forward": (F, [P, I, I]),
        "dnc_backward_layer": (None, [P, I]),
        "dnc_backward_dests": (I, [P, I, ctypes.POINTER(I), I]),
        "dnc_update": (I, [P, ctypes.POINTER(F)]),
        "dnc_letterbox": (I, [P, ctypes.c_char_p, ctypes.POINTER(F), ctypes.POINTER(I)]),
    }
    if getattr(lib, "dnc_contrastive_classifier", None) is not None:    # AlexeyAB's shim only
        sig["dnc_contrastive_classifier"] = (I, [P, I, I, F, F, F, I])
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


LAYER_INFO = ("batch", "w", "h", "c", "out_w", "out_h", "out_c", "inputs", "outputs", "n",
              "size", "stride", "pad", "groups", "batch_normalize", "nweights", "nbiases",
              "stopbackward")
NET_INFO = ("n", "batch", "w", "h", "c", "inputs", "outputs", "truths", "subdivisions",
            "time_steps")


def _fptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def _read(lib, net, i: int, field: str) -> np.ndarray | None:
    ptr = ctypes.c_void_p()
    n = lib.dnc_field(net, i, field.encode(), ctypes.byref(ptr))
    if n <= 0 or not ptr.value:
        return None
    ctype = ctypes.c_int if field == "indexes" else ctypes.c_float
    return np.ctypeslib.as_array((ctype * n).from_address(ptr.value)).copy()


def _snapshot(lib, net, nlayers: int, fields, prefix: str, out: dict):
    for i in range(nlayers):
        for f in fields:
            a = _read(lib, net, i, f)
            if a is not None:
                out[f"{prefix}L{i:03d}_{f}"] = a


def _delta_front(lib, net, i: int):
    """Layer i's delta as the layers after it see it: an antialiased AlexeyAB layer's delta
    has its stride-1 size, of which the next layer's backward fills the start (the shim's
    ``delta_front``; the pjreddie shim has no such field: its delta is the whole)."""
    d = _read(lib, net, i, "delta_front")
    return d if d is not None else _read(lib, net, i, "delta")


def _backward_reading(lib, net, layers: list, out: dict):
    """backward_network, one layer at a time, keeping what the per-layer replay feeds our
    layers: each layer's delta as its backward starts (``L###_delta_in``), and the deltas of
    the layers its backward adds into (layers[i]["bwd_dests"]) before it, when not all zero
    (``L###_bwd_in_###``), and after it (``L###_bwd_out_###``; for the previous layer that is
    its own ``_delta_in``)."""
    dests = (ctypes.c_int * MAX_DESTS)()
    for i in range(len(layers) - 1, -1, -1):
        d = _delta_front(lib, net, i)
        if d is not None:
            out[f"L{i:03d}_delta_in"] = d
        if layers[i]["stopbackward"]:
            break
        k = lib.dnc_backward_dests(net, i, dests, MAX_DESTS)
        layers[i]["bwd_dests"] = list(dests[:min(k, MAX_DESTS)])
        for j in layers[i]["bwd_dests"]:
            before = _delta_front(lib, net, j)
            if before is not None and before.any():
                out[f"L{i:03d}_bwd_in_{j:03d}"] = before
        lib.dnc_backward_layer(net, i)
        for j in layers[i]["bwd_dests"]:
            after = _delta_front(lib, net, j)
            if j != i - 1 and after is not None:
                out[f"L{i:03d}_bwd_out_{j:03d}"] = after


def _fail(msg: str):
    print(f"darknumba: {msg}", file=sys.stderr)
    sys.exit(3)


def _child(job_path: str):
    job = json.loads(Path(job_path).read_text())
    lib = _bind(job["shim"])
    net = lib.dnc_load(job["cfg"].encode(), job["weights"].encode(), 0)
    if not net:
        _fail(f"C darknet could not load {job['cfg']}")
    if job.get("contrastive"):
        why = build_stand_ins(lib, net, job["contrastive"])
        if why:
            _fail(why)
    info = (ctypes.c_int * len(NET_INFO))()
    lib.dnc_net_info(net, info)
    netinfo = dict(zip(NET_INFO, info))
    cfg_batch = netinfo["batch"]
    batch = job["batch"] or cfg_batch
    if batch > cfg_batch:
        _fail(f"batch {batch} is larger than the cfg's batch/subdivisions = {cfg_batch}, which "
              f"C darknet allocates its buffers for; use --batch <= {cfg_batch} or raise batch "
              f"in the cfg")
    if batch != cfg_batch:
        lib.dnc_set_batch(net, batch)
    netinfo["batch"] = batch
    n, inputs, truths = netinfo["n"], netinfo["inputs"], netinfo["truths"]
    out: dict = {}
    if job["image"]:
        one = np.zeros(inputs, np.float32)
        wh = (ctypes.c_int * 2)()
        lib.dnc_letterbox(net, job["image"].encode(), _fptr(one), wh)
        netinfo["image_wh"] = [wh[0], wh[1]]
        x = np.tile(one, batch)
    else:
        x = np.load(job["x"]).astype(np.float32)
    if x.size != batch * inputs:
        _fail(f"input has {x.size} values; C darknet expects batch x inputs = "
              f"{batch} x {inputs} = {batch * inputs}")
    truth = np.load(job["truth"]).astype(np.float32) if job["truth"] else None
    if truth is not None and truth.size != batch * truths:
        _fail(f"truth has {truth.size} values; C darknet expects batch x truths = "
              f"{batch} x {truths} = {batch * truths}")
    out["input"] = x
    if truth is not None:
        out["truth"] = truth
    lib.dnc_set_input(net, _fptr(x), _fptr(truth) if truth is not None else None)
    layers = []
    for i in range(n):
        li = (ctypes.c_int * len(LAYER_INFO))()
        lib.dnc_layer_info(net, i, li)
        layers.append({"index": i, "type": lib.dnc_layer_type(net, i).decode(),
                       **dict(zip(LAYER_INFO, li))})
    mode = job["mode"]
    run = {"mode": mode, "seen_before": lib.dnc_get_seen(net)}
    if mode == "forward_test":
        lib.dnc_forward(net, 0, 0)
        _snapshot(lib, net, n, FORWARD_FIELDS, "", out)
    elif mode == "forward_train":
        run["cost"] = lib.dnc_forward(net, 1, truth is not None)
        _snapshot(lib, net, n, TRAIN_FORWARD_FIELDS + REPLAY_FIELDS, "", out)
    else:   # trainstep: train_network_datum, with reads between backward and update
        _snapshot(lib, net, n, PARAM_FIELDS, "before_", out)
        lib.dnc_set_seen(net, lib.dnc_get_seen(net) + batch)
        lib.dnc_forward(net, 1, truth is not None)
        _snapshot(lib, net, n, REPLAY_FIELDS, "", out)
        _backward_reading(lib, net, layers, out)
        run["cost"] = lib.dnc_cost(net)
        _snapshot(lib, net, n, GRAD_FIELDS, "", out)
        rate = ctypes.c_float()
        run["did_update"] = lib.dnc_update(net, ctypes.byref(rate))
        run["rate"] = rate.value
        _snapshot(lib, net, n, PARAM_FIELDS, "after_", out)
    run["seen_after"] = lib.dnc_get_seen(net)
    if "cost" in run:
        out["cost"] = np.array([run["cost"]], np.float32)
    meta = {"net": netinfo, "layers": layers, "run": run}
    out["meta_json"] = np.array(json.dumps(meta))
    sys.stdout.flush()
    np.savez(job["out"], **out)


if __name__ == "__main__":
    _child(sys.argv[1])
