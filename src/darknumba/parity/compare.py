"""`darknumba compare`: the same network, weights and input through darknumba and through C
darknet (a user's own build, see darknet_ref.py, or tensors recorded in an .npz), compared
tensor by tensor in the order they are computed (tensordiff.py says which and how).

Run modes are the golden fixtures' own: ``forward_test`` (forward_network, train=0, no truth),
``forward_train`` (train=1 with truth), ``trainstep`` (train_network_datum: seen += batch,
forward, backward, update_network when a full batch is done).
"""
from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np

from ..dialect import DEFAULT_DIALECT
from ..errors import DarknumbaError
from ..inputs import read_bytes
from ..textfile import read_text
from ..outputs import atomic_output
from .darknet_ref import GRAD_FIELDS, MODES, TRAIN_FORWARD_FIELDS
from .npz import check_layers, read_npz
from .replay import final_delta, replay
from .report import Report
from .roundoff import LayerBounds
from .tensordiff import AFTER_FIELDS, DEFAULT_TOL, KEY, STEP_PARAMS, compare_tensors, scalar_rows


# --------------------------------------------------------------------------------------------
# darknumba's side

def perturb_weight(net, spec: str) -> str:
    """--perturb LAYER[:INDEX[:SIZE]]: add SIZE (default 0.1) times the layer's largest
    |weight| (with SIZE 0.1: at least 0.1) to one weight. A self-test: the comparison must then
    name LAYER."""
    try:
        parts = spec.split(":")
        if not 1 <= len(parts) <= 3:
            raise ValueError
        i, j = int(parts[0]), (int(parts[1]) if len(parts) > 1 else 0)
        size = float(parts[2]) if len(parts) > 2 else 0.1
        if not 0 < size < math.inf:
            raise ValueError
    except ValueError:
        raise DarknumbaError(f"--perturb {spec!r}: expected LAYER, LAYER:INDEX or "
                             f"LAYER:INDEX:SIZE (integers, SIZE a positive number)") from None
    if not 0 <= i < net.n:
        raise DarknumbaError(f"--perturb {spec}: the network has layers 0..{net.n - 1}")
    w = getattr(net.layers[i], "weights", None)
    if w is None or w.size == 0:
        raise DarknumbaError(f"--perturb {spec}: layer {i} ({net.layers[i].type}) has no weights")
    if not 0 <= j < w.size:
        raise DarknumbaError(f"--perturb {spec}: layer {i} has weights 0..{w.size - 1}")
    delta = size * float(np.max(np.abs(w)))
    if len(parts) < 3:
        delta = max(delta, 0.1)
    w[j] += np.float32(delta)
    return f"layer {i} weight {j} += {delta:.3g} (darknumba side only)"


def _layer_value(l, f: str):
    if f == "cost":
        return None if l.cost is None else np.array([l.cost], np.float32)
    a = final_delta(l) if f == "delta" else getattr(l, f, None)
    return a.copy() if isinstance(a, np.ndarray) and a.size else None


def _snapshot(net, fields, prefix: str, out: dict):
    for i, l in enumerate(net.layers):
        for f in fields:
            a = _layer_value(l, f)
            if a is not None:
                out[f"{prefix}L{i:03d}_{f}"] = a


def _backward_reading_deltas(net, out: dict):
    """net.backward(), keeping each weighted layer's delta as its own backward starts
    (``L###_delta_in``: the terms its bias / weight gradients sum)."""
    def reading(i, l, backward):
        def run(n):
            out[f"L{i:03d}_delta_in"] = l.delta.copy()
            backward(n)
        return run
    hooked = [(i, l) for i, l in enumerate(net.layers) if getattr(l, "weights", None) is not None]
    for i, l in hooked:
        l.backward = reading(i, l, l.backward)
    try:
        net.backward()
    finally:
        for _, l in hooked:
            del l.backward


def run_darknumba(net, mode: str, x, truth=None) -> dict:
    """Run `net` once the way darknet_ref runs C darknet; the same keys come back."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    out = {"input": np.ascontiguousarray(x, np.float32).reshape(-1)}
    if truth is not None:
        out["truth"] = np.ascontiguousarray(truth, np.float32).reshape(-1)
    run = {"mode": mode, "seen_before": net.seen}
    if mode == "forward_test":
        net.forward(x, train=False)
        _snapshot(net, ("output",), "", out)
    elif mode == "forward_train":
        net.forward(x, train=True, truth=truth)
        run["cost"] = net.cost
        _snapshot(net, TRAIN_FORWARD_FIELDS, "", out)
    else:   # train_network_datum, read between backward and update
        _snapshot(net, STEP_PARAMS, "before_", out)
        net.seen += net.batch
        net.forward(x, train=True, truth=truth)
        _backward_reading_deltas(net, out)
        run["cost"] = net.cost
        _snapshot(net, GRAD_FIELDS + ("rolling_mean", "rolling_variance"), "", out)
        run["rate"] = net.current_rate()
        run["did_update"] = int((net.seen // net.batch) % net.subdivisions == 0)
        if run["did_update"]:
            net.update()
        _snapshot(net, AFTER_FIELDS, "after_", out)
    run["seen_after"] = net.seen
    if "cost" in run:
        out["cost"] = np.array([run["cost"]], np.float32)
    out["meta"] = {"run": run, "net": {"batch": net.batch, "inputs": net.inputs,
                                       "truths": net.truths, "w": net.w, "h": net.h, "c": net.c},
                   "layers": [{"index": i, "type": l.type} for i, l in enumerate(net.layers)]}
    return out


def scalars(ours: dict, ref_run: dict) -> dict:
    o = ours["meta"]["run"]
    s = {}
    names = {"forward_test": (), "forward_train": ("cost",)}.get(
        o["mode"], ("cost", "rate", "did_update", "seen_after"))
    for k in names:
        if k in o or k in ref_run:
            s[k] = {"darknumba": o.get(k), "darknet": ref_run.get(k)}
    return s


def save_dump(path: Path, tensors: dict, mode: str, meta: dict):
    """An .npz in the golden layout, readable back with --npz (written through a temporary
    file, outputs.atomic_output)."""
    arrays = {k: v for k, v in tensors.items() if isinstance(v, np.ndarray)}
    manifest = {"mode": mode, "net": meta.get("net", {}), "layers": meta.get("layers", [])}
    with atomic_output(path) as f:
        np.savez_compressed(f, **arrays, manifest_json=np.array(json.dumps(manifest)),
                            run_json=np.array(json.dumps(meta.get("run", {"mode": mode}))))


# --------------------------------------------------------------------------------------------
# Inputs, truths and the two kinds of run

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tga", ".gif", ".ppm", ".pgm")


def read_floats(path, what: str) -> np.ndarray:
    """A float32 tensor from .npy, or raw little-endian float32 (.f32, anything else)."""
    path = Path(path)
    raw = read_bytes(path, f"{what} file", DarknumbaError, 4 << 30)     # a regular file
    if path.suffix == ".npy":
        try:                    # no pickled objects (allow_pickle is off), numbers only
            a = np.load(io.BytesIO(raw))
            if a.dtype.kind not in "biuf":
                raise ValueError(f"{a.dtype} values, not numbers")
        except (ValueError, OSError, EOFError) as e:
            raise DarknumbaError(f"{path}: not a .npy array of numbers: {e}") from None
        return a.astype(np.float32).reshape(-1)
    if len(raw) % 4:
        raise DarknumbaError(f"{path}: {len(raw)} bytes is not a whole number of float32 values")
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def _fit(a: np.ndarray, per_image: int, batch: int, path, what: str) -> np.ndarray:
    if a.size == per_image * batch:
        return a
    if a.size == per_image:
        return np.tile(a, batch)
    raise DarknumbaError(f"{path}: {a.size} values; the network's {what} needs {per_image} per "
                         f"image x batch {batch} = {per_image * batch} (or {per_image})")


def read_truth(path, net) -> np.ndarray:
    """--truth: raw float32 / .npy (batch x truths, or one image's truths), or for a yolo or
    region net a Darknet label file (`class x y w h` per line, relative to the network input)."""
    path = Path(path)
    if path.suffix == ".txt":
        heads = [l for l in net.layers if l.detector_head]
        last = heads[-1] if heads else net.layers[-1]     # a [contrastive] loss may follow
        if not last.detector_head:     # both read (x, y, w, h, class) per box
            raise DarknumbaError(f"{path}: label .txt files are read for [yolo] and [region] "
                                 f"networks only; give the truth as raw float32 or .npy")
        size = getattr(last, "truth_size", 5)   # AlexeyAB's yolo: x y w h class track_id
        t = np.zeros(net.truths, np.float32)
        rows = [ln.split() for ln in read_text(path, "truth labels").splitlines() if ln.strip()]
        for k, row in enumerate(rows[: net.truths // size]):
            try:
                cls, x, y, w, h = int(row[0]), *map(float, row[1:5])
            except (ValueError, IndexError):
                raise DarknumbaError(f"{path}:{k + 1}: expected `class x y w h`") from None
            t[k * size:k * size + 5] = (x, y, w, h, cls)
        return np.tile(t, net.batch)
    return _fit(read_floats(path, "truth"), net.truths, net.batch, path, "truth")


def _load(cfg, weights, batch, perturb, log, dialect=DEFAULT_DIALECT):
    from ..parser import load_network
    net = load_network(cfg, weights, batch=batch, compat="darknet-cpu", dialect=dialect,
                       exact=True)
    if perturb:
        msg = perturb_weight(net, perturb)
        if log:
            log(f"perturbed: {msg}")
    return net


def compare_darknet(darknet_dir, cfg, weights, *, image=None, random_input=False, seed=0,
                    train=False, truth=None, batch=None, tol=DEFAULT_TOL, perturb=None,
                    log=None, timeout=None):
    """darknumba vs the C darknet built in `darknet_dir`. image: a picture (letterboxed by
    darknet; our letterbox is compared as the `input` row) or a float32 tensor file (.npy/.f32).
    Returns (report, ours, ref): the last two are tensor dicts in the golden layout."""
    from ..parser import parse_network_cfg
    from .darknet_ref import DarknetTree, run_darknet
    tree = DarknetTree.locate(darknet_dir)
    if (image is None) == (not random_input):
        raise DarknumbaError("give an IMAGE (or input tensor file) or --random-input, not both")
    if train and truth is None:
        raise DarknumbaError("--train needs --truth FILE (raw float32, .npy, or labels .txt)")
    probe = parse_network_cfg(cfg, dialect=tree.kind, seed=None, allocate=False)  # shapes only
    x = None
    is_image = image is not None and Path(image).suffix.lower() in IMAGE_SUFFIXES
    if image is not None and not is_image:
        x = read_floats(image, "input")
        if batch is None and not train and x.size % probe.inputs == 0:
            batch = max(x.size // probe.inputs, 1)
    if batch is None:
        batch = probe.batch if train else 1
    net = _load(cfg, weights, batch, perturb, log, tree.kind)
    if x is not None:
        x = _fit(x, net.inputs, net.batch, image, "input")
    elif random_input:
        x = np.random.default_rng(seed).random(net.batch * net.inputs, dtype=np.float32)
    t = read_truth(truth, net) if truth is not None else None
    mode = "trainstep" if train else "forward_test"
    ref = run_darknet(tree, cfg, weights, mode, x=x, image=image if is_image else None,
                      truth=t, batch=net.batch, log=log, timeout=timeout)
    ours = run_darknumba(net, mode, ref["input"], t)
    if is_image:
        ours["letterbox"] = _our_letterbox(image, net)
    meta = ref.pop("meta")
    replayed = _load(cfg, weights, net.batch, perturb, None, tree.kind)
    report = _report(f"{tree.title} darknet at {tree.root}", cfg, weights, mode, tol, ours, ref, meta, net,
                     replayed, t)
    ref["meta"] = meta
    return report, ours, ref


def _our_letterbox(image, net) -> np.ndarray:
    """What our detector feeds the network (as the shim does darknet's): pjreddie letterboxes;
    AlexeyAB resizes unless [net] letter_box=1. Loaded with the network's channels, a JPEG by
    the stb_image port (the C build's own decoder: its pixels)."""
    from ..vision.image import letterbox_image, load_image, resize_image
    letterbox = net.quirks.defaults.letterbox or net.letter_box
    fit = letterbox_image if letterbox else resize_image
    one = fit(load_image(image, c=net.c, decoder="stb"), net.w, net.h).reshape(-1)
    return np.tile(one, net.batch)


def compare_npz(npz, cfg, weights, *, tol=DEFAULT_TOL, perturb=None, log=None):
    """darknumba vs tensors recorded in an .npz (golden layout, with its input, truth and
    manifest_json/run_json saying the run mode and batch)."""
    npz = Path(npz)
    ref, manifest, run = read_npz(npz)
    mode = run.get("mode") or manifest.get("mode") or "forward_test"
    if mode == "detect":
        mode = "forward_test"
    if mode not in MODES:
        raise DarknumbaError(f"--npz {npz}: run mode {mode!r} is not one of {', '.join(MODES)}")
    if "input" not in ref:
        raise DarknumbaError(f"--npz {npz}: no `input` tensor to run darknumba on")
    batch = manifest.get("net", {}).get("batch") or run.get("batch")
    dialect = run.get("dialect", DEFAULT_DIALECT)
    net = _load(cfg, weights, batch, perturb, log, dialect)
    check_layers(npz, manifest, net.n)
    truth = ref.get("truth") if mode != "forward_test" else None
    if truth is not None:
        truth = _fit(truth.astype(np.float32).reshape(-1), net.truths, net.batch, npz, "truth")
    if mode == "forward_test":      # test mode computes no cost
        ref = {k: v for k, v in ref.items() if not k.endswith("cost")}
    x = _fit(ref["input"].astype(np.float32).reshape(-1), net.inputs, net.batch, npz, "input")
    ours = run_darknumba(net, mode, x, truth)
    steps = run.get("steps") or [{}]
    ref_run = {**steps[0], **{k: v for k, v in run.items() if k != "steps"}}
    ref_run.setdefault("seen_after", None)
    meta = {"run": ref_run, "layers": manifest.get("layers", []), "net": manifest.get("net", {})}
    replayed = _load(cfg, weights, batch, perturb, None, dialect)
    report = _report(str(npz), cfg, weights, mode, tol, ours, ref, meta, net, replayed, truth)
    return report, ours, ref


def _bounds(net, ref: dict, mode: str):
    """bounds(layer, field) -> (tau, K) for tensordiff, from roundoff.LayerBounds; the
    network's cost (layer None) gets the mean of its loss layers' tolerances."""
    cache = {}

    def bounds(i, field):
        if i is None:
            got = [bounds(k, "cost") for k, l in enumerate(net.layers)
                   if f"L{k:03d}_cost" in ref]
            got = [b for b in got if b is not None]
            return (sum(b[0] for b in got) / len(got), max(b[1] for b in got)) if got else None
        if not 0 <= i < net.n:
            return None
        if i not in cache:
            cache[i] = LayerBounds(i, net.layers[i], net, ref, mode)
        return cache[i].get(field)
    return bounds


def _report(reference, cfg, weights, mode, tol, ours, ref, meta, net, replayed=None,
            truth=None) -> Report:
    ref_types = [l.get("type") for l in meta.get("layers", [])] or None
    if ref_types and len(ref_types) != net.n:
        raise DarknumbaError(f"{reference} has {len(ref_types)} layers, darknumba built {net.n} "
                             f"from {cfg}")
    ours_t = {k: v for k, v in ours.items() if k != "meta"}
    run = meta.get("run", {})
    factors = {"after": net.momentum, "decay_batch": net.decay * net.batch * net.subdivisions,
               "step": run["rate"] / (net.batch * net.subdivisions) if run.get("rate") else None}
    own = bounds = None
    if replayed is not None:
        own = replay(replayed, ref, meta, mode, truth)
        costs = [own[k] for k in own if KEY.match(k) and k.endswith("_cost")]
        if costs and mode != "forward_test":
            own["cost"] = np.array([np.float32(sum(float(c[0]) for c in costs) / len(costs))])
        bounds = _bounds(replayed, ref, mode)
    rows, missing = compare_tensors(ours_t, ref, net.layers, tol, ref_types, factors, own, bounds)
    sc = scalars(ours, meta.get("run", {}))
    rows += scalar_rows(sc, tol)
    return Report(reference, str(cfg), str(weights or ""), mode, tol, rows, sc, missing)
