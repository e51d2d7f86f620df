"""darknumba against its peers on the same networks and inputs, interleaved, on this CPU.

    pip install -e '.[bench]'          # opencv-python-headless<5, torch (CPU)
    python bench/peers.py [--cfg cfg/yolov3-tiny.cfg,cfg/yolov4-tiny.cfg,cfg/yolov3.cfg]
                          [--size 416] [--rounds 5] [--reps 10] [--train-batch 8]
                          [--import-numpy-first] [--exact | --winograd]
                          [--darknet PATH/TO/darknet]

Each peer runs in its own subprocess (so no two thread pools share a process); rounds
alternate between peers; per network and mode the table gives min and median ms per image,
images/s, effective GFLOPS, peak RSS, and the ratio to darknumba; a summary ends the run with
darknumba's time over OpenCV's and PyTorch's per network (< 1: darknumba is faster). Weights
are weights/<cfg name>.weights when present (`darknumba weights fetch yolov3-tiny|yolov4-tiny`),
else random weights that every peer loads (said in the table: fine for timing).

PyTorch runs the identical network: built from our parsed cfg (convolutions with batch norm
fused for inference, route with groups, Darknet's maxpool padding, upsample, shortcut,
leaky / linear / mish / logistic / relu, yolo heads with scale_x_y), channels-last, as many
threads as cores, our weights copied in; its output is checked against ours before it is timed.
--import-numpy-first has the darknumba worker import numpy before darknumba (as most scripts
do). C darknet is timed when --darknet points to a built `darknet` binary (its
`detector test` prints 'Predicted in X seconds').
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

# the environment as this script found it: every peer's process starts from it, not from what
# `import darknumba` here (for the random weights) adds (its thread-pool settings would reach
# PyTorch's and OpenCV's OpenMP runtimes too)
CLEAN_ENV = dict(os.environ)

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# workers: each runs in a fresh process and prints one JSON line
# ---------------------------------------------------------------------------------------------
def _input(net_c, h, w, batch, seed=0):
    import numpy as np
    return np.random.default_rng(seed).uniform(0, 1, (batch, net_c, h, w)).astype(np.float32)


def _yolo_truth(net, batch):
    import numpy as np
    rng = np.random.default_rng(1)
    t = np.zeros((batch, net.truths), np.float32)
    # values per box: 5 (x, y, w, h, class); AlexeyAB's [yolo] keeps a sixth (track id)
    per = next(getattr(l, "truth_size", 5) for l in net.layers if l.type == "yolo")
    for b in range(batch):
        for k in range(5):
            t[b, per * k:per * k + 5] = [rng.uniform(.1, .9), rng.uniform(.1, .9), rng.uniform(.05, .4),
                                     rng.uniform(.05, .4), rng.integers(0, 80)]
    return t


def work_darknumba(args):
    if args.import_numpy_first:
        import numpy  # noqa: F401
    import darknumba  # noqa: F401
    batch = args.batch
    net = _load(args, batch)
    x = _input(net.c, net.h, net.w, batch)
    if args.mode == "infer":
        step = lambda: net.forward(x)       # noqa: E731
    else:
        net.learning_rate = 1e-6
        truth = _yolo_truth(net, batch)
        net.subdivisions = 1
        step = lambda: net.train_datum(x, truth)    # noqa: E731
    return _time(step, args)


def _load(args, batch, weights=True):
    """The network at --size (if given); random weights when the weights file is missing."""
    import darknumba as dn
    w = args.weights if weights and os.path.exists(args.weights) else None
    exact = True if args.exact else False if args.winograd else None
    net = dn.load_network(args.cfg, w, batch=batch, exact=exact)
    if w is None:
        from darknumba.train.timing import unit_rolling_variance
        unit_rolling_variance(net)
    if args.size:
        net.resize(args.size, args.size)
    return net


def _time(step, args):
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.reps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return {"times": times, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def work_opencv(args):
    import cv2
    cv2.setNumThreads(os.cpu_count())
    net = cv2.dnn.readNetFromDarknet(args.cfg, args.weights)
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
    names = net.getUnconnectedOutLayersNames()
    d = _load(args, 1, weights=False)
    x = _input(d.c, d.h, d.w, args.batch)

    def step():
        net.setInput(x)
        net.forward(names)
    return _time(step, args)


def torch_model(net):
    """The parsed darknumba network as a torch.nn.Module class (its argument: train mode) with
    the same weights."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    acts = {"linear": lambda x: x, "leaky": lambda x: F.leaky_relu(x, 0.1), "mish": F.mish,
            "logistic": torch.sigmoid, "relu": F.relu}
    # the batch norm's epsilon: AlexeyAB's sqrt(var + 1e-5); pjreddie's sqrt(var) + 1e-6
    eps = 1e-5 if net.quirks.dialect == "alexeyab" else 1e-6

    def act(name):
        if name not in acts:
            raise NotImplementedError(f"activation {name} in the PyTorch twin")
        return acts[name]

    class Dark(nn.Module):
        def __init__(self, train_mode):
            super().__init__()
            self.mods = nn.ModuleList()
            self.net = net
            for l in net.layers:
                m = nn.Identity()
                if l.type == "convolutional":
                    conv = nn.Conv2d(l.c, l.n, l.size, l.stride, l.pad, groups=l.groups,
                                     bias=not l.batch_normalize)
                    conv.weight.data = torch.from_numpy(l.weights.reshape(conv.weight.shape).copy())
                    if l.batch_normalize:
                        bn = nn.BatchNorm2d(l.n, eps=eps, momentum=0.01)
                        bn.weight.data = torch.from_numpy(l.scales.copy())
                        bn.bias.data = torch.from_numpy(l.biases.copy())
                        bn.running_mean = torch.from_numpy(l.rolling_mean.copy())
                        bn.running_var = torch.from_numpy(l.rolling_variance.copy())
                        m = nn.Sequential(conv, bn)
                        if not train_mode:
                            m = torch.nn.utils.fusion.fuse_conv_bn_eval(conv.eval(), bn.eval())
                    else:
                        conv.bias.data = torch.from_numpy(l.biases.copy())
                        m = conv
                self.mods.append(m)

        def forward(self, x):
            outs, ys = [], []
            for l, m in zip(self.net.layers, self.mods):
                if l.type == "convolutional":
                    x = act(l.activation)(m(x))
                elif l.type == "maxpool":
                    # Darknet pads pad // 2 before and the rest after (size 2 stride 1: 0, 1)
                    p = l.pad // 2
                    x = F.pad(x, (p, l.pad - p, p, l.pad - p), value=float("-inf"))
                    x = F.max_pool2d(x, l.size, l.stride)
                elif l.type == "upsample":
                    x = F.interpolate(x, scale_factor=l.stride, mode="nearest")
                elif l.type == "route":
                    parts = []
                    for i in l.input_layers:
                        c = outs[i].shape[1] // l.groups
                        parts.append(outs[i][:, c * l.group_id:c * (l.group_id + 1)])
                    x = torch.cat(parts, 1) if len(parts) > 1 else parts[0]
                elif l.type == "shortcut":
                    if len(l.input_layers) != 1 or getattr(l, "weights_type", 0):
                        raise NotImplementedError("weighted [shortcut] in the PyTorch twin")
                    x = act(l.activation)(x + outs[l.index])
                elif l.type == "yolo":
                    b = x.shape[0]
                    y = x.view(b, l.n, 5 + l.classes, l.h, l.w)
                    s = getattr(l, "scale_x_y", 1.0)
                    xy = torch.sigmoid(y[:, :, :2])
                    if s != 1.0:
                        xy = xy * s - (s - 1) / 2
                    y = torch.cat([xy, y[:, :, 2:4], torch.sigmoid(y[:, :, 4:])], 2)
                    x = y.view(b, -1, l.h, l.w)
                    ys.append(x)
                else:
                    raise NotImplementedError(f"[{l.type}] in the PyTorch twin")
                outs.append(x)
            return ys
    return Dark


def work_torch(args):
    import numpy as np
    import torch
    torch.set_num_threads(os.cpu_count())
    net = _load(args, args.batch)
    x = _input(net.c, net.h, net.w, args.batch)
    train = args.mode == "train"
    model = torch_model(net)(train)
    xt = torch.from_numpy(x).contiguous(memory_format=torch.channels_last)
    model = model.to(memory_format=torch.channels_last)
    if not train:
        model.eval()
        with torch.no_grad():
            ys = model(xt)
        net.forward(x)
        # relative to the head's largest value: random weights give raw w, h entries ~1e5
        worst = max(float(np.abs(y.numpy().ravel() - l.output).max())
                    / max(1.0, float(np.abs(l.output).max()))
                    for y, l in zip(ys, [l for l in net.layers if l.type == "yolo"]))
        if not worst <= 1e-3:                       # NaN fails too
            raise SystemExit(f"torch and darknumba outputs differ by {worst:g} of their largest "
                             f"value: not the same network")

        def step():
            with torch.no_grad():
                model(xt)
    else:
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=1e-6, momentum=0.9, weight_decay=5e-4)
        targets = None

        def step():
            nonlocal targets
            ys = model(xt)
            if targets is None:
                targets = [torch.zeros_like(y) for y in ys]
            loss = sum(((y - t) ** 2).sum() for y, t in zip(ys, targets))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return _time(step, args)


def work_darknet(args):
    """C darknet: its own timing line of `detector test` (batch 1 inference only)."""
    exe = Path(args.darknet)
    times = []
    img = str(ROOT.parent / "shared" / "data" / "dog.jpg")
    for _ in range(args.reps):
        out = subprocess.run([str(exe), "detector", "test", str(ROOT / "cfg" / "coco.data"), args.cfg,
                              args.weights, img, "-thresh", "0.5"], cwd=exe.parent,
                             capture_output=True, text=True)
        m = re.search(r"Predicted in ([0-9.]+) seconds", out.stdout + out.stderr)
        if not m:
            raise SystemExit("darknet printed no timing:\n" + out.stderr[-2000:])
        times.append(float(m.group(1)))
    return {"times": times, "rss_mb": float("nan")}


WORKERS = {"darknumba": work_darknumba, "opencv": work_opencv, "torch": work_torch, "darknet": work_darknet}


# ---------------------------------------------------------------------------------------------
def run_worker(peer, mode, batch, args):
    cmd = [sys.executable, __file__, "--worker", peer, "--mode", mode, "--batch", str(batch),
           "--size", str(args.size),
           "--cfg", args.cfg, "--weights", args.weights, "--reps", str(args.reps),
           "--warmup", str(args.warmup)]
    if args.darknet:
        cmd += ["--darknet", args.darknet]
    if args.import_numpy_first:
        cmd += ["--import-numpy-first"]
    if args.winograd:
        cmd += ["--winograd"]
    if args.exact:
        cmd += ["--exact"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=CLEAN_ENV)
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def available(peer):
    mod = {"opencv": "cv2", "torch": "torch"}.get(peer)
    if mod is None:
        return True
    import importlib.util
    return importlib.util.find_spec(mod) is not None     # not imported here: see thread_policy


def network_weights(cfg, given):
    """(weights path, whether random): the given file, else weights/<cfg name>.weights, else
    random weights saved once for every peer to load."""
    import darknumba as dn
    path = given or str(ROOT / "weights" / (Path(cfg).stem + ".weights"))
    if os.path.exists(path):
        return path, False
    path = str(Path(os.environ.get("TMPDIR", "/tmp")) / f"{Path(cfg).stem}-random.weights")
    net = dn.load_network(cfg, None, batch=1)
    from darknumba.train.timing import unit_rolling_variance
    unit_rolling_variance(net)
    dn.save_weights(net, path)
    return path, True


def bench_network(args, summary):
    """Every mode for args.cfg: one table each, the medians into `summary`."""
    import numpy as np
    gflop = sum(l.bflops for l in _load(args, 1, weights=False).layers)
    name = Path(args.cfg).stem + (f" at {args.size}" if args.size else "")
    for mode in args.modes.split(","):
        batch = 1 if mode == "infer" else args.train_batch
        peers = ["darknumba", "opencv", "torch"] if mode == "infer" else ["darknumba", "torch"]
        if mode == "infer" and args.darknet:
            peers.append("darknet")
        peers = [p for p in peers if available(p)]
        results = {p: {"times": [], "rss_mb": 0.0} for p in peers}
        for _ in range(args.rounds):
            for p in peers:
                r = run_worker(p, mode, batch, args)
                if "error" in r:
                    results[p]["error"] = r["error"]
                    continue
                results[p]["times"] += r["times"]
                results[p]["rss_mb"] = max(results[p]["rss_mb"], r["rss_mb"])
        label = "inference, batch 1" if mode == "infer" else f"training step, batch {batch}"
        flops = gflop * (1 if mode == "infer" else 3)
        print(f"\n{name} {label} ({args.rounds} rounds x {args.reps} reps, interleaved"
              f"{', random weights' if args.random_weights else ''}"
              f"{', numpy imported first' if args.import_numpy_first else ''})")
        print(f"{'peer':<11}{'min ms/img':>11}{'median':>9}{'images/s':>10}{'GFLOPS':>8}{'peak RSS':>10}"
              f"{'ratio':>8}")
        base = None
        for p in peers:
            r = results[p]
            if not r["times"]:
                print(f"{p:<11} failed: {r.get('error')}")
                continue
            t = np.array(r["times"]) * 1000 / batch
            med = float(np.median(t))
            base = base or med
            summary[(name, mode, p)] = (med, r["rss_mb"])
            print(f"{p:<11}{t.min():11.1f}{med:9.1f}{1000 / med:10.1f}{flops / med * 1000:8.0f}"
                  f"{r['rss_mb']:9.0f}M{med / base:8.2f}")
        print("ratio = median time / darknumba's median time (> 1: darknumba is faster)")


def print_summary(summary, names, modes):
    """darknumba's median time over each peer's, per network and mode (< 1: darknumba faster)."""
    print("\nsummary: darknumba median time / peer median time (< 1: darknumba is faster); "
          "peak RSS darknumba / peer")
    for name in names:
        for mode in modes:
            ours = summary.get((name, mode, "darknumba"))
            cells = []
            for peer, label in (("opencv", "OpenCV"), ("torch", "PyTorch")):
                theirs = summary.get((name, mode, peer))
                if ours and theirs:
                    cells.append(f"darknumba/{label} {ours[0] / theirs[0]:.2f} (RSS {ours[1] / theirs[1]:.2f})")
            if ours:
                print(f"  {name:<22}{mode:<7}{ours[0]:8.1f} ms/img  " + "  ".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cfg", action="append", default=None,
                    help="a network; repeat it or give a comma list (default: cfg/yolov3-tiny.cfg)")
    ap.add_argument("--weights", default=None, help="with one --cfg: its weights (default: "
                    "weights/<cfg name>.weights, else random weights shared by every peer)")
    ap.add_argument("--size", type=int, default=0, help="input size (default: each cfg's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--train-batch", type=int, default=8)
    ap.add_argument("--modes", default="infer,train")
    path = ap.add_mutually_exclusive_group()
    path.add_argument("--exact", action="store_true",
                      help="darknumba's inference with im2col + GEMM for every convolution "
                           "(default: the library's, Winograd for the larger 3x3 ones)")
    path.add_argument("--winograd", action="store_true",
                      help="darknumba's inference with Winograd for the larger 3x3 "
                           "convolutions, whatever the environment")
    ap.add_argument("--import-numpy-first", action="store_true",
                    help="the darknumba worker imports numpy before darknumba")
    ap.add_argument("--darknet", default=None, help="path to a built C darknet executable")
    ap.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="infer", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    cfgs = [c for arg in (args.cfg or [str(ROOT / "cfg" / "yolov3-tiny.cfg")])
            for c in arg.split(",") if c]
    if args.worker:
        args.cfg = cfgs[0]
        print(json.dumps(WORKERS[args.worker](args)))
        return
    if args.weights and len(cfgs) > 1:
        ap.error("--weights goes with a single --cfg")
    given = args.weights
    summary, names = {}, []
    for cfg in cfgs:
        args.cfg = cfg
        args.weights, args.random_weights = network_weights(cfg, given)
        names.append(Path(cfg).stem + (f" at {args.size}" if args.size else ""))
        bench_network(args, summary)
    print_summary(summary, names, args.modes.split(","))


if __name__ == "__main__":
    main()
