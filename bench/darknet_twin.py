"""A Darknet network as a PyTorch module, read from the .cfg and .weights files by this file
alone: no darknumba object and no darknumba import, so a PyTorch process measured by
bench/peers.py holds PyTorch's memory and threads only.

    cfg = read_cfg("cfg/yolov3-tiny.cfg", size=416)
    convs = read_weights("weights/yolov3-tiny.weights", cfg)
    model = build(cfg, convs, train=False, bn_eps="pjreddie")      # batch norm folded
    heads = model(x)                                               # the [yolo] outputs

Layers: [convolutional] (groups, batch_normalize, activations linear / leaky / relu / mish /
logistic), [maxpool] (Darknet's padding: padding // 2 before, the rest after), [upsample],
[route] (groups, group_id), [shortcut] (unweighted), [yolo] (scale_x_y). Anything else stops
with NotImplementedError naming the section.

Inference (train=False): batch norm folded into the convolutions the way the dialect
normalises: pjreddie (x - mean) / (sqrt(var) + 1e-6), AlexeyAB (x - mean) / sqrt(var + 1e-5);
each [yolo] returns its output as Darknet's forward leaves it (logistic on x, y, objectness,
classes; scale_x_y on x, y), so it can be compared with darknumba's and the ONNX file's.

Training (train=True): convolutions + nn.BatchNorm2d in train mode (batch statistics), each
[yolo] returns its raw input; YoloLoss is Darknet's yolo loss written with PyTorch's ops: its
gradient with respect to the raw outputs is minus the delta forward_yolo_layer writes
(pjreddie's, mse coordinates): for the cell and anchor each truth is assigned to (best anchor
by shape among all anchors, kept when it is one of the layer's mask), logistic cross-entropy on
x, y (weight 2 - w*h), objectness (target 1) and classes (one-hot), (2 - w*h) / 2 times the
squared error of the raw w, h (its gradient: Darknet's (t - x) * (2 - w*h)); every other cell
and anchor: logistic cross-entropy on objectness towards 0 unless its decoded box overlaps a
truth by more than ignore_thresh (IoU computed densely, every position against every truth, as
Darknet does). Truth boxes are fixed (the same ones every step), so the assignment is built once.
"""
from __future__ import annotations

import numpy as np

SUPPORTED = ("convolutional", "maxpool", "upsample", "route", "shortcut", "yolo")


# -- the .cfg ----------------------------------------------------------------------------------
def read_cfg(path, size: int = 0) -> list[dict]:
    """The sections of a Darknet .cfg as dicts (with 'type', the shapes worked out: 'c', 'h',
    'w' in and 'out_c', 'out_h', 'out_w'); [net] first. `size`: input width and height instead
    of the cfg's."""
    sections = []
    with open(path) as f:
        for ln in f:
            ln = ln.split("#", 1)[0].split(";", 1)[0].strip()
            if not ln:
                continue
            if ln.startswith("["):
                sections.append({"type": ln.strip("[]").strip()})
            elif "=" in ln and sections:
                k, v = ln.split("=", 1)
                sections[-1][k.strip()] = v.strip()
    net = sections[0]
    if net["type"] not in ("net", "network"):
        raise ValueError(f"{path}: the first section is [{net['type']}], not [net]")
    h = size or int(net.get("height", 0))
    w = size or int(net.get("width", 0))
    c = int(net.get("channels", 3))
    net.update(h=h, w=w, c=c)
    layers = sections[1:]
    for i, l in enumerate(layers):
        t = l["type"]
        if t not in SUPPORTED:
            raise NotImplementedError(f"[{t}] (layer {i}) in the PyTorch twin")
        l.update(c=c, h=h, w=w)
        if t == "convolutional":
            l["filters"] = int(l.get("filters", 1))
            l["size"] = int(l.get("size", 1))
            l["stride"] = int(l.get("stride", 1))
            l["groups"] = int(l.get("groups", 1))
            l["padding"] = l["size"] // 2 if int(l.get("pad", 0)) else int(l.get("padding", 0))
            l["batch_normalize"] = int(l.get("batch_normalize", 0))
            l.setdefault("activation", "logistic")
            c = l["filters"]
            h = (h + 2 * l["padding"] - l["size"]) // l["stride"] + 1
            w = (w + 2 * l["padding"] - l["size"]) // l["stride"] + 1
        elif t == "maxpool":
            l["stride"] = int(l.get("stride", 1))
            l["size"] = int(l.get("size", l["stride"]))
            l["padding"] = int(l.get("padding", l["size"] - 1))
            h = (h + l["padding"] - l["size"]) // l["stride"] + 1
            w = (w + l["padding"] - l["size"]) // l["stride"] + 1
        elif t == "upsample":
            l["stride"] = int(l.get("stride", 2))
            h, w = h * l["stride"], w * l["stride"]
        elif t == "route":
            l["inputs"] = [int(v) + (i if int(v) < 0 else 0) for v in l["layers"].split(",")]
            l["groups"] = int(l.get("groups", 1))
            l["group_id"] = int(l.get("group_id", 0))
            c = sum(layers[j]["out_c"] // l["groups"] for j in l["inputs"])
            h, w = layers[l["inputs"][0]]["out_h"], layers[l["inputs"][0]]["out_w"]
        elif t == "shortcut":
            if "weights_type" in l or "," in l["from"]:
                raise NotImplementedError(f"weighted or multi-input [shortcut] (layer {i})")
            f = int(l["from"])
            l["input"] = f + i if f < 0 else f
            l.setdefault("activation", "linear")
        elif t == "yolo":
            l["classes"] = int(l.get("classes", 20))
            anchors = [float(v) for v in l.get("anchors", "").split(",") if v.strip()]
            l["anchors"] = np.array(anchors, np.float32).reshape(-1, 2)
            l["num"] = int(l.get("num", len(l["anchors"])))
            l["mask"] = [int(v) for v in l.get("mask", ",".join(map(str, range(l["num"])))).split(",")]
            l["n"] = len(l["mask"])
            l["scale_x_y"] = float(l.get("scale_x_y", 1.0))
            l["ignore_thresh"] = float(l.get("ignore_thresh", 0.5))
            if c != l["n"] * (5 + l["classes"]):
                raise ValueError(f"[yolo] layer {i}: {c} channels in, {l['n']} x (5 + "
                                 f"{l['classes']}) expected")
        l.update(out_c=c, out_h=h, out_w=w)
    return [net] + layers


# -- the .weights ------------------------------------------------------------------------------
def read_weights(path, cfg) -> list[dict]:
    """Each [convolutional]'s arrays from a Darknet .weights file, in order: biases, scales,
    rolling_mean, rolling_variance (with batch_normalize), weights (n, c / groups, size, size)."""
    data = open(path, "rb").read()
    major, minor, _revision = np.frombuffer(data, np.int32, 3)
    pos = 12 + (8 if major * 10 + minor >= 2 and major < 1000 and minor < 1000 else 4)
    floats = np.frombuffer(data, np.float32, offset=pos)
    k = 0

    def take(n):
        nonlocal k
        if k + n > floats.size:
            raise ValueError(f"{path} ends after {floats.size} floats; the cfg needs more")
        k += n
        return floats[k - n:k].copy()

    out = []
    for l in cfg[1:]:
        if l["type"] != "convolutional":
            continue
        n = l["filters"]
        conv = {"biases": take(n)}
        if l["batch_normalize"]:
            conv.update(scales=take(n), rolling_mean=take(n), rolling_variance=take(n))
        shape = (n, l["c"] // l["groups"], l["size"], l["size"])
        conv["weights"] = take(int(np.prod(shape))).reshape(shape)
        out.append(conv)
    return out


def folded(conv: dict, bn_eps: str):
    """(weights, biases) with the batch norm folded in as the dialect normalises."""
    if "scales" not in conv:
        return conv["weights"], conv["biases"]
    var = conv["rolling_variance"].astype(np.float64)
    std = np.sqrt(var) + 1e-6 if bn_eps == "pjreddie" else np.sqrt(var + 1e-5)
    k = conv["scales"] / std
    w = conv["weights"] * k[:, None, None, None]
    b = conv["biases"] - conv["rolling_mean"] * k
    return w.astype(np.float32), b.astype(np.float32)


# -- the module --------------------------------------------------------------------------------
def build(cfg, convs, train: bool, bn_eps: str = "alexeyab"):
    import torch
    import torch.nn.functional as F
    from torch import nn

    acts = {"linear": lambda x: x, "leaky": lambda x: F.leaky_relu(x, 0.1), "relu": F.relu,
            "mish": F.mish, "logistic": torch.sigmoid}
    layers = cfg[1:]
    for i, l in enumerate(layers):
        if l.get("activation", "linear") not in acts:
            raise NotImplementedError(f"activation {l['activation']} (layer {i}) in the PyTorch twin")

    class Twin(nn.Module):
        def __init__(self):
            super().__init__()
            self.mods = nn.ModuleList()
            it = iter(convs)
            for l in layers:
                m = nn.Identity()
                if l["type"] == "convolutional":
                    p = next(it)
                    bn = bool(l["batch_normalize"]) and train
                    m = nn.Conv2d(l["c"], l["filters"], l["size"], l["stride"], l["padding"],
                                  groups=l["groups"], bias=not bn)
                    if bn:
                        m.weight.data = torch.from_numpy(p["weights"].copy())
                        norm = nn.BatchNorm2d(l["filters"], eps=1e-5, momentum=0.01)
                        norm.weight.data = torch.from_numpy(p["scales"].copy())
                        norm.bias.data = torch.from_numpy(p["biases"].copy())
                        norm.running_mean = torch.from_numpy(p["rolling_mean"].copy())
                        norm.running_var = torch.from_numpy(p["rolling_variance"].copy())
                        m = nn.Sequential(m, norm)
                    else:
                        w, b = folded(p, bn_eps)
                        m.weight.data = torch.from_numpy(w)
                        m.bias.data = torch.from_numpy(b)
                self.mods.append(m)

        def forward(self, x):
            outs, heads = [], []
            for l, m in zip(layers, self.mods):
                t = l["type"]
                if t == "convolutional":
                    x = acts[l["activation"]](m(x))
                elif t == "maxpool":
                    p = l["padding"] // 2
                    x = F.pad(x, (p, l["padding"] - p, p, l["padding"] - p), value=float("-inf"))
                    x = F.max_pool2d(x, l["size"], l["stride"])
                elif t == "upsample":
                    x = F.interpolate(x, scale_factor=l["stride"], mode="nearest")
                elif t == "route":
                    parts = []
                    for j in l["inputs"]:
                        c = outs[j].shape[1] // l["groups"]
                        parts.append(outs[j][:, c * l["group_id"]:c * (l["group_id"] + 1)])
                    x = torch.cat(parts, 1) if len(parts) > 1 else parts[0]
                elif t == "shortcut":
                    x = acts[l["activation"]](x + outs[l["input"]])
                elif t == "yolo":
                    heads.append(x if train else yolo_activate(x, l))
                outs.append(x)
            return heads

    return Twin()


def yolo_activate(x, l):
    """forward_yolo_layer's output: logistic on x, y, objectness, classes; scale_x_y on x, y."""
    import torch
    b = x.shape[0]
    y = x.reshape(b, l["n"], 5 + l["classes"], l["out_h"], l["out_w"])
    s = l["scale_x_y"]
    xy = torch.sigmoid(y[:, :, :2])
    if s != 1.0:
        xy = xy * s - (s - 1) / 2
    return torch.cat([xy, y[:, :, 2:4], torch.sigmoid(y[:, :, 4:])], 2).reshape(x.shape)


# -- Darknet's yolo loss -----------------------------------------------------------------------
def truths(batch: int, classes: int, boxes: int = 5, seed: int = 1) -> np.ndarray:
    """(batch, boxes, 5) fixed truth boxes: x, y, w, h (relative), class (drawn in 0..79, then
    modulo `classes`): the ones bench/peers.py gives darknumba too."""
    rng = np.random.default_rng(seed)
    t = np.zeros((batch, boxes, 5), np.float32)
    for b in range(batch):
        for k in range(boxes):
            t[b, k] = [rng.uniform(.1, .9), rng.uniform(.1, .9), rng.uniform(.05, .4),
                       rng.uniform(.05, .4), rng.integers(0, 80) % classes]
    return t


class YoloLoss:
    """Darknet's yolo loss over every [yolo] head (see the module docstring): call it on the
    model's training outputs; returns the summed loss."""

    def __init__(self, cfg, truth: np.ndarray):
        import torch
        net = cfg[0]
        self.heads = []
        B, T = truth.shape[:2]
        for l in (l for l in cfg[1:] if l["type"] == "yolo"):
            n, h, w, C = l["n"], l["out_h"], l["out_w"], l["classes"]
            match = np.zeros((B, n, h, w), np.float32)
            txy = np.zeros((B, n, 2, h, w), np.float32)
            twh = np.zeros((B, n, 2, h, w), np.float32)
            scale = np.zeros((B, n, 1, h, w), np.float32)
            cls = np.zeros((B, n, C, h, w), np.float32)
            anchors = l["anchors"] / np.array([net["w"], net["h"]], np.float32)   # relative
            for b in range(B):
                for x, y, bw, bh, c in truth[b]:
                    inter = np.minimum(anchors[:, 0], bw) * np.minimum(anchors[:, 1], bh)
                    best = int(np.argmax(inter / (anchors[:, 0] * anchors[:, 1] + bw * bh - inter)))
                    if best not in l["mask"]:
                        continue
                    a = l["mask"].index(best)
                    i, j = int(y * h), int(x * w)
                    match[b, a, i, j] = 1
                    txy[b, a, :, i, j] = [x * w - j, y * h - i]
                    twh[b, a, :, i, j] = np.log([bw / anchors[best, 0], bh / anchors[best, 1]])
                    scale[b, a, 0, i, j] = 2 - bw * bh
                    cls[b, a, int(c), i, j] = 1
            gy, gx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
            t = {k: torch.from_numpy(v) for k, v in dict(
                match=match, txy=txy, twh=twh, scale=scale, cls=cls,
                grid=np.stack([gx, gy]).astype(np.float32)[None, None],
                anchors=anchors[l["mask"]].reshape(1, n, 2, 1, 1).copy(),
                truth=truth[:, :, :4].copy()).items()}
            t.update(n=n, C=C, h=h, w=w, ignore=l["ignore_thresh"])
            self.heads.append(t)

    def __call__(self, outputs):
        import torch
        import torch.nn.functional as F
        total = 0.0
        for x, t in zip(outputs, self.heads):
            B = x.shape[0]
            y = x.reshape(B, t["n"], 5 + t["C"], t["h"], t["w"])
            with torch.no_grad():                  # which cells Darknet leaves alone
                size = torch.tensor([t["w"], t["h"]], dtype=torch.float32).view(1, 1, 2, 1, 1)
                xy = (torch.sigmoid(y[:, :, :2]) + t["grid"]) / size
                wh = torch.exp(y[:, :, 2:4]) * t["anchors"]
                box = torch.cat([xy, wh], 2).permute(0, 1, 3, 4, 2).reshape(B, -1, 1, 4)
                tr = t["truth"].view(B, 1, -1, 4)
                lo = torch.maximum(box[..., :2] - box[..., 2:] / 2, tr[..., :2] - tr[..., 2:] / 2)
                hi = torch.minimum(box[..., :2] + box[..., 2:] / 2, tr[..., :2] + tr[..., 2:] / 2)
                inter = (hi - lo).clamp(min=0).prod(-1)
                union = box[..., 2:].prod(-1) + tr[..., 2:].prod(-1) - inter
                best = (inter / union).amax(-1).view(B, t["n"], t["h"], t["w"])
                noobj = ((best <= t["ignore"]) & (t["match"] == 0)).float()
            bce = F.binary_cross_entropy_with_logits
            m = t["match"].unsqueeze(2)
            obj = y[:, :, 4]
            total = total + (bce(obj, torch.zeros_like(obj), reduction="none") * noobj).sum() \
                + (bce(obj, torch.ones_like(obj), reduction="none") * t["match"]).sum() \
                + (bce(y[:, :, :2], t["txy"], reduction="none") * t["scale"] * m).sum() \
                + (0.5 * (y[:, :, 2:4] - t["twh"]) ** 2 * t["scale"] * m).sum() \
                + (bce(y[:, :, 5:], t["cls"], reduction="none") * m).sum()
        return total
