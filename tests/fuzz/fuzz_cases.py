"""Hypothesis strategies that build fuzz cases (fuzz_runner.Case): mutated cfgs, weights,
images, label and .data files, and odd option values, each with the command lines that read
them. Generation runs in the test process and touches no engine code; the cases run in
drivers (fuzz_runner.py).

Mutations are drawn as data (an operation, a position in [0, 1), a value) and applied by plain
functions, so a case is a pure function of what hypothesis drew."""
from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from fuzz_fixtures import ROOT, small_cfg
from fuzz_runner import Case
from hypothesis import strategies as st

# numbers a user (or a broken generator) might write, Unicode digits included
NUMBERS = ["0", "-1", "1", "2", "3", "7", "64", "65536", "2147483647", "-2147483648",
           "99999999999", "1e9", "1e-45", "nan", "NaN", "inf", "-inf", "0.5", "-0.5", "\uff13",
           "\u0661", "1\u066b5", "", "0x10", "1,2", "1e999", "+1", "3 # note", "  4  "]
WEIRD = ["", " ", "\t", "\x00", "leaky#x", "LEAKY", "nope", "-", "[", "]", "=", "==1", "\ufeff",
         "\u00e9", "a" * 300]
BYTES = [b"\xff\xfe", b"\x00", b"\xe9", b"\xc3", b"\xef\xbb\xbf", b"\r", b"\x1a", b"\x80\x80"]
TRAIN = ["--no-progress", "--no-chart", "--workers", "1", "--backup", "bk"]
PHOTO = "{FIX}/ds/images/train/00000.jpg"
DET, DATA = "{FIX}/det.cfg", "{FIX}/ds/shapes.data"

cfg_bases = sorted(p.name for p in (ROOT / "cfg").glob("*.cfg"))
SIDES = {"alexnet.cfg": 96, "yolov1-tiny.cfg": 448}       # the smallest size each one builds at
TRAINABLE = ("shapes-tiny.cfg", "shapes-yolov3-tiny.cfg")   # 3 classes, as {FIX}/ds


def _at(seq_len: int, pos: float) -> int:
    return min(int(pos * seq_len), max(seq_len - 1, 0))


# -- cfg files -----------------------------------------------------------------------------------
def mutate_lines(lines: list[str], op: str, pos: float, pick: int) -> list[str]:
    """One cfg mutation; `pos` chooses the line, `pick` the value."""
    i = _at(len(lines), pos)
    line = lines[i] if lines else ""
    key, eq, value = line.partition("=")
    if op == "number" and eq:
        parts = value.split(",")
        parts[pick % len(parts)] = NUMBERS[pick % len(NUMBERS)]
        lines[i] = key + "=" + ",".join(parts)
    elif op == "string" and eq:
        lines[i] = key + "=" + WEIRD[pick % len(WEIRD)]
    elif op == "delete" and lines:
        del lines[i]
    elif op == "duplicate" and eq:
        lines.insert(i + 1, key + "=" + NUMBERS[pick % len(NUMBERS)])
    elif op == "move" and lines:
        lines.insert(_at(len(lines), (pos * 7919) % 1), lines.pop(i))
    elif op == "unknown":
        junk = ["foo=1", "[bogus]", "[]", "[net", "key", "=3", "[yolo]", "[route]"]
        lines.insert(i, junk[pick % len(junk)])
    elif op == "comment":
        lines[i] = line + [" # note", " ;x", "#", " # 5"][pick % 4]
    elif op == "section":
        starts = [k for k, s in enumerate(lines) if s.startswith("[")]
        if starts:
            a = starts[pick % len(starts)]
            b = next((k for k in starts if k > a), len(lines))
            lines[b:b] = lines[a:b]
    return lines


@st.composite
def cfg_case(draw, fix_ds=DATA):
    base = draw(st.sampled_from(cfg_bases))
    lines = small_cfg(base, SIDES.get(base, 64)).split("\n")
    ops = draw(st.lists(st.tuples(st.sampled_from(["number", "number", "number", "string",
                                                   "delete", "duplicate", "move", "unknown",
                                                   "comment", "section"]),
                                  st.floats(0, 1, exclude_max=True), st.integers(0, 10 ** 6)),
                        min_size=1, max_size=4))
    for op, pos, pick in ops:
        lines = mutate_lines(lines, op, pos, pick)
    text = ("\r\n" if draw(st.integers(0, 9)) == 0 else "\n").join(lines).encode()
    extra = draw(st.sampled_from(["", "", "", "bom", "bytes", "truncate"]))
    if extra == "bom":
        text = b"\xef\xbb\xbf" + text
    elif extra == "bytes":
        k = _at(len(text), draw(st.floats(0, 1, exclude_max=True)))
        text = text[:k] + draw(st.sampled_from(BYTES)) + text[k:]
    elif extra == "truncate":
        text = text[:_at(len(text), draw(st.floats(0, 1, exclude_max=True)))]
    steps = [["summary", "net.cfg"], ["bench", "net.cfg", "--reps", "1"]]
    if base in TRAINABLE:
        steps += [["detector", "train", fix_ds, "net.cfg", "--max-batches", "1", *TRAIN],
                  ["detect", "net.cfg", "bk/net_final.weights", PHOTO],
                  ["detector", "map", fix_ds, "net.cfg", "bk/net_final.weights"]]
    elif base == "shapes5-classifier.cfg":
        steps += [["classifier", "train", "{FIX}/cls/shapes5.data", "net.cfg", "--max-batches",
                   "1", "--workers", "1", "--backup", "bk"]]
    elif draw(st.booleans()):
        steps += [["bench", "net.cfg", "--reps", "1", "--train"]]
    note = f"{base}: {ops}" + (f" + {extra}" if extra else "")
    return Case("cfg", note, {"net.cfg": text}, steps)


# -- weights files -------------------------------------------------------------------------------
def mutate_weights(data: bytes, op: str, pos: float, pick: int) -> bytes:
    n = len(data)
    if op == "truncate":
        return data[:_at(n, pos)]
    if op == "extend":
        return data + (data[:_at(n, pos) + 1] if pick % 2 else bytes(4 * (pick % 300 + 1)))
    if op == "header":
        field = pick % 4
        value = [0, 1, 2, -1, 1000, 1001, 2 ** 31 - 1, -2 ** 31, pick][(pick >> 2) % 9]
        out = bytearray(data)
        if field < 3:
            out[4 * field:4 * field + 4] = struct.pack("<i", value)
        else:
            out[12:20] = struct.pack("<q", value)
        return bytes(out)
    if op == "values":
        a = bytearray(data)
        vals = [np.nan, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, 0.0][pick % 7]
        for k in range(1 + pick % 64):
            off = 20 + 4 * _at((n - 20) // 4, (pos + k * 0.618) % 1)
            a[off:off + 4] = struct.pack("<f", vals)
        return bytes(a)
    if op == "fill":                            # a run of floats: a whole layer gone bad
        start = 20 + 4 * _at((n - 20) // 4, pos)
        end = n if pick % 2 else min(n, start + 4 * (1 + pick % 5000))
        value = struct.pack("<f", [np.nan, np.inf, -np.inf, 1e30][(pick >> 1) % 4])
        return data[:start] + value * ((end - start) // 4) + data[start + 4 * ((end - start) // 4):]
    if op == "zeros":
        return bytes(n)
    return b""


@st.composite
def weights_case(draw, originals: dict):
    net = draw(st.sampled_from(sorted(originals)))
    data = originals[net]
    ops = draw(st.lists(st.tuples(st.sampled_from(["truncate", "extend", "header", "values",
                                                   "values", "fill", "fill", "zeros", "empty"]),
                                  st.floats(0, 1, exclude_max=True), st.integers(0, 10 ** 6)),
                        min_size=1, max_size=2))
    for op, pos, pick in ops:
        data = mutate_weights(data, op, pos, pick)
    cfg = f"{{FIX}}/{net}.cfg"
    steps = [["detect", cfg, "w.weights", PHOTO, "--thresh", "0.05"],
             ["partial", cfg, "w.weights", "cut.weights", str(draw(st.integers(0, 6)))]]
    if net != "cls":
        steps += [["detector", "map", DATA, cfg, "w.weights"],
                  ["detector", "train", DATA, cfg, "w.weights", "--max-batches", "1",
                   *(["--clear"] if draw(st.booleans()) else []), *TRAIN]]
    else:
        steps[0] = ["classifier", "predict", "{FIX}/cls/shapes5.data", cfg, "w.weights",
                    "{FIX}/cls/train/00003_cross.png"]
    return Case("weights", f"{net}.weights: {ops}", {"w.weights": data}, steps)


# -- images --------------------------------------------------------------------------------------
MODES = ["1", "L", "LA", "P", "RGB", "RGBA", "CMYK", "I;16", "I", "F", "YCbCr"]
FORMATS = ["png", "jpeg", "bmp", "gif", "tiff", "webp", "ppm", "tga"]


def encode_image(w: int, h: int, mode: str, fmt: str, seed: int) -> bytes:
    """An image file; a mode the format cannot hold is converted to one it can."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    if mode in ("I;16", "I", "F"):
        a = rng.integers(0, 65536, (h, w)).astype({"I;16": np.uint16, "I": np.int32,
                                                    "F": np.float32}[mode])
        img = Image.fromarray(a)
    else:
        img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).convert(mode)
    buf = io.BytesIO()
    for candidate in (img, img.convert("RGBA"), img.convert("RGB")):
        try:
            candidate.save(buf, format=fmt)
            return buf.getvalue()
        except (OSError, ValueError, KeyError):
            buf = io.BytesIO()
    raise AssertionError(f"cannot encode {mode} as {fmt}")


def png_with_size(w: int, h: int) -> bytes:
    """A PNG whose header claims w x h (a decompression bomb when large), one grey pixel row."""
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" + bytes(min(w, 1 << 16)))) + chunk(b"IEND", b""))


@st.composite
def image_file(draw, max_pixels: int):
    how = draw(st.sampled_from(["plain", "plain", "truncate", "flip", "junk", "bomb", "empty"]))
    w = draw(st.integers(1, 3000))
    h = draw(st.integers(1, max(1, min(3000, max_pixels // w))))
    mode, fmt = draw(st.sampled_from(MODES)), draw(st.sampled_from(FORMATS))
    if how == "bomb":
        return f"bomb {w * 40000}x{h * 40000}", ".png", png_with_size(w * 40000, h * 40000)
    if how == "empty":
        return "empty file", f".{fmt}", b""
    data = encode_image(w, h, mode, fmt, draw(st.integers(0, 2 ** 16)))
    pos = draw(st.floats(0, 1, exclude_max=True))
    if how == "truncate":
        data = data[:_at(len(data), pos)]
    elif how == "flip":
        a = bytearray(data)
        for k in range(draw(st.integers(1, 16))):
            off = _at(len(a), (pos + k * 0.618) % 1)
            a[off] ^= 1 << (k % 8)
        data = bytes(a)
    elif how == "junk":
        data = draw(st.sampled_from(BYTES)) * 8 + data
    ext = {"jpeg": ".jpg", "tiff": ".tif"}.get(fmt, f".{fmt}")
    return f"{w}x{h} {mode} {fmt} {how}", ext, data


@st.composite
def images_case(draw, max_pixels: int = 2_000_000):
    images = draw(st.lists(image_file(max_pixels), min_size=1, max_size=4))
    files, names = {}, []
    for k, (_, ext, data) in enumerate(images):
        name = f"images/im{k}{ext}"
        files[name] = data
        files[f"labels/im{k}.txt"] = b"0 0.5 0.5 0.4 0.4\n1 0.2 0.3 0.1 0.2\n"
        names.append(name)
    files["list.txt"] = "".join(n + "\n" for n in names).encode()
    files["d.data"] = b"classes = 3\ntrain = list.txt\nvalid = list.txt\n"
    steps = [["detect", DET, "{FIX}/det.weights", *names, "--out", "drawn", "--decoder", "stb"],
             ["detect", "{FIX}/grey.cfg", "{FIX}/grey.weights", names[0]],
             ["detect", "{FIX}/region.cfg", "{FIX}/region.weights", "--resize", *names],
             ["data", "check", "d.data"],
             ["detector", "train", "d.data", DET, "--max-batches", "1", *TRAIN],
             ["classifier", "predict", "{FIX}/cls/shapes5.data", "{FIX}/cls.cfg",
              "{FIX}/cls.weights", *names]]
    return Case("images", "; ".join(d for d, _, _ in images), files, steps)


# -- labels, lists and .data files ---------------------------------------------------------------
LABEL_VALUES = ["nan", "inf", "-1", "1e30", "\uff10", "", "0x1", "1e999", "3", "-0", "0.5",
                "1.0000001", "5", "a"]


def mutate_label(text: str, op: str, pos: float, pick: int) -> str:
    """One label-file mutation (bytes that are not UTF-8 ride along as surrogates)."""
    lines = text.splitlines() or ["0 0.5 0.5 0.1 0.1"]
    i = _at(len(lines), pos)
    tok = lines[i].split()
    if op == "value" and tok:
        tok[pick % len(tok)] = LABEL_VALUES[pick % len(LABEL_VALUES)]
        lines[i] = " ".join(tok)
    elif op == "fields":
        lines[i] = " ".join(tok[:pick % 7] + ["0.1"] * max(0, pick % 7 - len(tok)))
    elif op == "many":
        lines = lines * (1 + pick % 400)
    elif op == "blank":
        lines.insert(i, ["", "   ", "\t", "#c"][pick % 4])
    out = "\n".join(lines)
    if op == "bytes":
        bad = BYTES[pick % len(BYTES)].decode("utf-8", "surrogateescape")
        out = out[:_at(len(out), pos)] + bad + out[_at(len(out), pos):]
    if op == "crlf":
        out = out.replace("\n", "\r\n")
    return out


DATA_KEYS = ["classes", "train", "valid", "names", "backup", "eval"]


@st.composite
def labels_case(draw, photos: list[bytes]):
    files = {}
    n = draw(st.integers(1, 4))
    for k in range(n):
        files[f"images/p{k}.jpg"] = photos[k % len(photos)]
        text = "0 0.5 0.5 0.3 0.3\n2 0.25 0.75 0.2 0.1\n"
        for op, pos, pick in draw(st.lists(st.tuples(
                st.sampled_from(["value", "value", "fields", "many", "blank", "bytes", "crlf",
                                 "none"]),
                st.floats(0, 1, exclude_max=True), st.integers(0, 10 ** 6)), max_size=3)):
            text = mutate_label(text, op, pos, pick)
        files[f"labels/p{k}.txt"] = text.encode("utf-8", "surrogateescape")
    if draw(st.integers(0, 5)) == 0:
        del files[f"labels/p{n - 1}.txt"]
    paths = [f"images/p{k}.jpg" for k in range(n)]
    lst = draw(st.sampled_from(["plain", "plain", "missing-entry", "nul", "bytes", "empty",
                                "blank-lines", "dir-entry"]))
    listing = {"plain": paths, "missing-entry": paths + ["images/nope.jpg"],
               "nul": paths + ["images/a\x00b.jpg"], "bytes": paths,
               "empty": [], "blank-lines": ["", *paths, "  "], "dir-entry": paths + ["images"]}[lst]
    files["list.txt"] = "".join(p + "\n" for p in listing).encode()
    if lst == "bytes":
        files["list.txt"] += b"\xff\n"
    names = draw(st.sampled_from(["a\nb\nc\n", "a\nb\n", "a\nb\nc\nd\n", "", "\xe9\n\x00\n..\n"]))
    files["n.names"] = names.encode("latin-1" if draw(st.booleans()) else "utf-8")
    entries = {"classes": "3", "train": "list.txt", "valid": "list.txt", "names": "n.names",
               "backup": "bk", "eval": "voc"}
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(DATA_KEYS))
        entries[key] = draw(st.sampled_from([None, *NUMBERS[:8], "nope.txt", "images", "/dev/null",
                                             "n.names", "list.txt", "coco", "\xe9", "a b"]))
    files["d.data"] = "".join(f"{k} = {v}\n" for k, v in entries.items() if v is not None).encode()
    bad = draw(st.sampled_from(["skip", "stop"]))
    steps = [["data", "check", "d.data"],
             ["detector", "train", "d.data", DET, "--max-batches", "1", "--bad-data", bad, *TRAIN],
             ["detector", "valid", "d.data", DET, "{FIX}/det.weights", "--out", "res"],
             ["detector", "map", "d.data", DET, "{FIX}/det.weights"],
             ["detector", "recall", "d.data", DET, "{FIX}/det.weights"],
             ["detector", "test", "d.data", DET, "{FIX}/det.weights", "images/p0.jpg", "-out", "t"]]
    note = f"{n} images, list {lst}, names {names!r}, data {entries}, bad-data {bad}"
    return Case("labels", note, files, steps)


# -- option values ---------------------------------------------------------------------------------
INTS = ["0", "-1", "1", "2", "3", "1000", "99999999999999999999"]
FLOATS = ["0", "-1", "1", "0.5", "-0.5", "nan", "inf", "-inf", "1e-30", "1e9"]
I, F = INTS, FLOATS
COMMANDS = [
    (["detect", DET, "{FIX}/det.weights", PHOTO],
     {"--thresh": F, "--nms": F, "--hier": F, "--batch": I}),
    (["detector", "train", DATA, DET, *TRAIN],
     {"--checkpoint-every": I, "--checkpoint-until": I, "--checkpoint-every-after": I,
      "--backup-every": I, "--stats-every": I, "--map-every": I, "--workers": I, "--seed": I}),
    (["detector", "map", DATA, DET, "{FIX}/det.weights"], {"--thresh": F, "--iou-thresh": F}),
    (["detector", "recall", DATA, DET, "{FIX}/det.weights"],
     {"--thresh": F, "--iou-thresh": F, "--nms": F}),
    (["detector", "valid", DATA, DET, "{FIX}/det.weights", "--out", "res"],
     {"--thresh": F, "--nms": F}),
    (["detector", "test", DATA, DET, "{FIX}/det.weights", PHOTO], {"-thresh": F, "-hier": F}),
    (["bench", DET], {"--batch": ["1", "2", "0", "-1"], "--reps": ["1", "2", "0", "-1"]}),
    (["classifier", "valid", "{FIX}/cls/shapes5.data", "{FIX}/cls.cfg", "{FIX}/cls.weights"],
     {"--top": I, "--batch": I}),
    (["classifier", "predict", "{FIX}/cls/shapes5.data", "{FIX}/cls.cfg", "{FIX}/cls.weights",
      "{FIX}/cls/train/00003_cross.png"], {"--top": I}),
    (["classifier", "train", "{FIX}/cls/shapes5.data", "{FIX}/cls.cfg", "--max-batches", "1",
      "--backup", "bk"], {"--workers": I, "--log-every": I, "--seed": I}),
    (["partial", DET, "{FIX}/det.weights", "cut.weights"], {"": I}),
    (["compare", DET, "{FIX}/det.weights", "--npz", "nope.npz"], {"--tol": F, "--seed": I}),
]


@st.composite
def options_case(draw):
    """A command with one to three options set to edge values (one in ten not a number)."""
    base, options = draw(st.sampled_from(COMMANDS))
    argv = list(base)
    if base[:2] == ["detector", "train"]:
        argv += ["--max-batches", draw(st.sampled_from(["0", "-1", "1", "2"]))]
    chosen = draw(st.lists(st.sampled_from(sorted(options)), min_size=1, max_size=3, unique=True))
    for opt in chosen:
        value = "abc" if draw(st.integers(0, 9)) == 7 else draw(st.sampled_from(options[opt]))
        argv += [opt, value] if opt else [value]
    return Case("options", " ".join(argv[len(base):]), {}, [argv])
