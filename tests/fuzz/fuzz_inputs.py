"""Hypothesis strategies for the inputs beside cfgs, weights, images and labels (fuzz_cases.py):
the .npz `compare --npz` reads, the texts of the character RNN, video files, and networks
exported to ONNX (onnxruntime runs each file written). Mutations are drawn as data and applied
by plain functions, as in fuzz_cases.py, so a case is a pure function of what was drawn."""
from __future__ import annotations

import io
import json

import numpy as np
from fuzz_cases import BYTES, DATA, DET, _at, mutate_weights
from fuzz_fixtures import NPZ
from fuzz_runner import Case
from hypothesis import strategies as st

# -- compare --npz ---------------------------------------------------------------------------------
JSON_VALUES = [None, 0, -1, 2 ** 40, 1.5, float("nan"), "", "x", "trainstep", [], [1, 2], {},
               {"a": 1}, True, [{"index": 99, "bwd_dests": [1000]}]]


def _recorded() -> dict:
    with np.load(NPZ / "forward_test" / "data.npz") as data:
        return {k: data[k] for k in data.files}


def mutate_npz(arrays: dict, op: str, pick: int) -> dict:
    """One structural change to a recorded run's members."""
    keys = sorted(arrays)
    key = keys[pick % len(keys)]
    if op == "drop":
        arrays.pop(key)
    elif op == "object":
        arrays[key] = np.array([{"a": 1}, None], dtype=object)
    elif op == "dtype":
        try:                                # a text member does not convert to every kind
            arrays[key] = arrays[key].astype([np.complex64, np.str_, np.float16, np.int8,
                                              np.bool_][pick % 5])
        except (ValueError, TypeError):
            arrays[key] = np.array(b"\x00\xffnot-a-number")
    elif op == "size":
        a = arrays[key].reshape(-1)
        arrays[key] = a[:pick % max(a.size, 1)] if pick % 2 else np.concatenate([a, a[:3]])
    elif op == "values" and arrays[key].dtype.kind in "biuf":
        a = arrays[key].astype(np.float32).reshape(-1).copy()
        a[pick % max(a.size, 1):] = [np.nan, np.inf, -np.inf, 3e38][pick % 4]
        arrays[key] = a
    elif op in ("manifest", "run"):
        name = f"{op}_json"
        try:                                # an earlier mutation may have garbled it
            meta = json.loads(str(arrays.get(name, "{}")))
        except ValueError:
            meta = None
        if isinstance(meta, dict) and meta and pick % 5:
            field = sorted(meta)[pick % len(meta)]
            layers = meta[field] if field == "layers" and isinstance(meta[field], list) else []
            layer = layers[pick % len(layers)] if layers else None
            if isinstance(layer, dict) and layer and pick % 3:      # one layer's field
                layer[sorted(layer)[pick % len(layer)]] = JSON_VALUES[pick % len(JSON_VALUES)]
            else:
                meta[field] = JSON_VALUES[pick % len(JSON_VALUES)]
            arrays[name] = np.array(json.dumps(meta))
        else:
            arrays[name] = np.array(["{", "[]", "null", "1", '"x"', "\ud800"][pick % 6])
    return arrays


@st.composite
def npz_case(draw):
    how = draw(st.sampled_from(["members", "members", "members", "bytes", "empty", "npy"]))
    notes = []
    if how == "members":
        arrays = _recorded()
        for op, pick in draw(st.lists(st.tuples(
                st.sampled_from(["drop", "object", "dtype", "size", "values", "manifest",
                                 "manifest", "run", "run"]), st.integers(0, 10 ** 6)),
                min_size=1, max_size=3)):
            arrays = mutate_npz(arrays, op, pick)
            notes.append((op, pick))
        buf = io.BytesIO()
        try:
            (np.savez_compressed if draw(st.booleans()) else np.savez)(buf, **arrays)
        except (ValueError, UnicodeEncodeError):        # a lone surrogate: not storable
            buf = io.BytesIO(b"")
        data = buf.getvalue()
    elif how == "bytes":
        data = bytearray((NPZ / "forward_test" / "data.npz").read_bytes())
        pos, flips = draw(st.floats(0, 1, exclude_max=True)), draw(st.integers(0, 3))
        data = bytes(data[:_at(len(data), pos)]) if flips == 0 else data
        for k in range(flips):
            data[_at(len(data), (pos + 0.37 * k) % 1)] ^= 0xA5
        data = bytes(data)
        notes.append(("bytes", pos, flips))
    elif how == "npy":
        buf = io.BytesIO()
        np.save(buf, np.zeros(3, np.float32))
        data = buf.getvalue()
    else:
        data = b""
    steps = [["compare", "{FIX}/npz/cls-small.cfg", "{FIX}/npz/init.weights", "--npz", "r.npz"]]
    return Case("npz", f"{how}: {notes}", {"r.npz": data}, steps)


# -- the character RNN's texts ---------------------------------------------------------------------
@st.composite
def rnn_text(draw) -> tuple[str, bytes]:
    how = draw(st.sampled_from(["words", "one-run", "binary", "nul", "empty", "spaces",
                                "unicode", "one-byte"]))
    n = draw(st.integers(1, 20000))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    text = {"words": lambda: b" ".join(b"ab" * (k % 7 + 1) for k in range(n // 4 + 1)),
            "one-run": lambda: bytes([draw(st.integers(0x21, 0xFF))]) * n,   # no whitespace
            "binary": lambda: rng.integers(1, 256, n, dtype=np.uint8).tobytes(),
            "nul": lambda: b"abc\0def" * (n // 7 + 1),
            "empty": lambda: b"",
            "spaces": lambda: b" \n\t" * (n // 3 + 1),
            "unicode": lambda: ("\u00e9\u4e2d\U0001f600" * (n // 3 + 1)).encode(),
            "one-byte": lambda: b"x"}[how]()
    return f"{how} ({len(text)} bytes)", text


@st.composite
def rnn_case(draw):
    note, text = draw(rnn_text())
    seed = text[:draw(st.integers(0, 40))].decode("latin-1") or "\n"
    steps = [["rnn", "train", "{FIX}/rnn.cfg", "t.txt", "--max-batches", "1", "--backup", "bk"],
             ["rnn", "valid", "{FIX}/rnn.cfg", "{FIX}/rnn.weights", "t.txt", "--log-every",
              "100000"],
             ["rnn", "generate", "{FIX}/rnn.cfg", "{FIX}/rnn.weights", "--seed", seed, "--len",
              draw(st.sampled_from(["1", "50", "0"])), "--temp",
              draw(st.sampled_from(["0.7", "1e-30", "1e30", "nan"])), "--srand", "1"]]
    return Case("rnn", f"{note}, seed {seed[:12]!r}", {"t.txt": text}, steps)


# -- video files -----------------------------------------------------------------------------------
CONTAINERS = [("mp4", "mpeg4", ".mp4"), ("avi", "mjpeg", ".avi"), ("matroska", "libx264", ".mkv")]


def encode_video(fmt: str, codec: str, w: int, h: int, frames: int, seed: int) -> bytes:
    import av
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as c:
        s = c.add_stream(codec, rate=5)
        s.width, s.height = w, h
        s.pix_fmt = "yuvj420p" if codec == "mjpeg" else "yuv420p"
        for _ in range(frames):
            f = av.VideoFrame.from_ndarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
                                           format="rgb24")
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return buf.getvalue()


@st.composite
def video_case(draw):
    fmt, codec, ext = draw(st.sampled_from(CONTAINERS))
    w, h = draw(st.integers(1, 40)) * 2, draw(st.integers(1, 30)) * 2
    frames = draw(st.integers(0, 4))
    data = encode_video(fmt, codec, w, h, frames, draw(st.integers(0, 2 ** 16)))
    how = draw(st.sampled_from(["plain", "truncate", "flip", "junk", "empty", "other-ext"]))
    pos = draw(st.floats(0, 1, exclude_max=True))
    if how == "truncate":
        data = data[:_at(len(data), pos)]
    elif how == "flip" and data:            # a video of no frames can encode to no bytes
        a = bytearray(data)
        for k in range(draw(st.integers(1, 32))):
            a[_at(len(a), (pos + k * 0.618) % 1)] ^= 1 << (k % 8)
        data = bytes(a)
    elif how == "junk":
        data = draw(st.sampled_from(BYTES)) * 16 + data
    elif how == "empty":
        data = b""
    elif how == "other-ext":
        ext = draw(st.sampled_from([".avi", ".mp4", ".webm", ".mov"]))
    name = f"v{ext}"
    steps = [["detect", DET, "{FIX}/det.weights", name, "--out", f"o{ext}", "--json", "o.jsonl"],
             ["detector", "demo", DATA, DET, "{FIX}/det.weights", name, "-dont_show"]]
    return Case("video", f"{fmt}/{codec} {w}x{h} {frames} frames, {how} as {ext}",
                {name: data}, steps)


# -- networks exported to ONNX ---------------------------------------------------------------------
@st.composite
def export_case(draw, originals: dict):
    net = draw(st.sampled_from(sorted(originals)))
    data = originals[net]
    ops = draw(st.lists(st.tuples(st.sampled_from(["values", "fill", "truncate", "extend",
                                                   "none", "none"]),
                                  st.floats(0, 1, exclude_max=True), st.integers(0, 10 ** 6)),
                        max_size=2))
    for op, pos, pick in ops:
        data = data if op == "none" else mutate_weights(data, op, pos, pick)
    options = draw(st.lists(st.sampled_from([["--decode"], ["--dynamic"], ["--no-fuse-bn"],
                                             ["--batch", "2"], ["--no-check"]]),
                            max_size=2, unique_by=lambda o: o[0]))
    cfg = f"{{FIX}}/{net}.cfg"
    folded = (["summary", "f.cfg"] if net == "cls" else       # the folded network runs too
              ["detect", "f.cfg", "f.weights", "{FIX}/ds/images/train/00000.jpg"])
    steps = [["export", "onnx", cfg, "w.weights", "n.onnx", *[a for o in options for a in o]],
             ["export", "weights", cfg, "w.weights", "f.weights", "--fuse-bn"], folded]
    return Case("export", f"{net}: {ops}, {options}", {"w.weights": data}, steps)
