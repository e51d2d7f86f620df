"""The processes bench/peers.py starts: one peer, one mode, one network each, printing one JSON
line (per-iteration times, its own peak RSS, what it ran).

    python bench/peer_workers.py PEER '{"cfg": ..., "weights": ..., "onnx": ..., "mode": ...}'

Only the darknumba worker (and `prepare`, which writes the random weights and darknumba's
reference outputs) imports darknumba. PyTorch builds its model from the .cfg and .weights with
bench/darknet_twin.py; onnxruntime and OpenVINO run the ONNX file `darknumba export onnx`
wrote; OpenCV DNN reads the .cfg and .weights itself; C darknet is timed by its own
`detector test` line. Each sets its thread count through its own API to job["threads"].
"""
from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import peak_rss_mb  # noqa: E402


def _input(shape, seed=0):
    import numpy as np
    return np.random.default_rng(seed).uniform(0, 1, shape).astype(np.float32)


def _time(step, job) -> dict:
    for _ in range(job["warmup"]):
        step()
    times = []
    for _ in range(job["iters"]):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return {"times": times}


def _save_heads(job, heads):
    """The outputs of the first run, for the parent to compare with darknumba's."""
    if job.get("heads_out"):
        import numpy as np
        np.savez(job["heads_out"], *[np.asarray(h, np.float32) for h in heads])


# -- darknumba ---------------------------------------------------------------------------------
def _net(job, batch):
    if job.get("import_numpy_first"):
        import numpy  # noqa: F401
    import darknumba as dn
    dn.configure()              # the thread policy the command and a Detector set (runtime/)
    exact = {"exact": True, "winograd": False}.get(job.get("path"))
    return dn.load_network(job["cfg"], job["weights"], batch=batch, exact=exact)


def _yolo_heads(net):
    return [l.output.reshape(net.batch, l.out_c, l.out_h, l.out_w) for l in net.layers
            if l.type == "yolo"]


def work_prepare(job):
    """Random weights when there are none (rolling variance 1, so inference stays finite), the
    network's dialect and GFLOP, and darknumba's outputs on the input every peer gets."""
    import darknumba as dn
    import numpy as np
    if job["weights"] is None:
        from darknumba.train.timing import unit_rolling_variance
        net = dn.load_network(job["cfg"], None, batch=1)
        unit_rolling_variance(net)
        dn.save_weights(net, job["random_weights"])
        job["weights"] = job["random_weights"]
    net = dn.load_network(job["cfg"], job["weights"], batch=1)
    net.forward(_input((1, net.c, net.h, net.w)))
    np.savez(job["heads_out"], *_yolo_heads(net))
    return {"weights": job["weights"], "dialect": net.dialect, "c": net.c, "h": net.h, "w": net.w,
            "gflop": float(sum(l.bflops for l in net.layers))}


def work_darknumba(job):
    b = job["batch"]
    net = _net(job, b)                  # darknumba first (unless import_numpy_first), then numpy
    import numpy as np
    from darknet_twin import truths
    x = _input((b, net.c, net.h, net.w))
    if job["mode"] == "infer":
        net.forward(x)
        _save_heads(job, _yolo_heads(net))
        step = lambda: net.forward(x)       # noqa: E731
    else:
        net.learning_rate = 1e-6
        net.subdivisions = 1
        per = next(getattr(l, "truth_size", 5) for l in net.layers if l.type == "yolo")
        truth = np.zeros((b, net.truths), np.float32)
        classes = next(l.classes for l in net.layers if l.type == "yolo")
        for i, boxes in enumerate(truths(b, classes)):
            for k, box in enumerate(boxes):
                truth[i, per * k:per * k + 5] = box
        step = lambda: net.train_datum(x, truth)    # noqa: E731
    return _time(step, job)


# -- PyTorch -----------------------------------------------------------------------------------
def work_torch(job, legacy=False):
    """PyTorch on the twin. legacy: training as peers.py did up to 1f89e4a, to measure what
    that cost: darknumba imported and its network built in this process (after torch), and
    the loss sum(y^2) over every activated head output instead of Darknet's yolo loss."""
    import torch
    from darknet_twin import YoloLoss, build, read_cfg, read_weights, truths, yolo_activate
    torch.set_num_threads(job["threads"])
    if legacy:
        import darknumba as dn
        kept = dn.load_network(job["cfg"], job["weights"], batch=job["batch"])  # noqa: F841
    cfg = read_cfg(job["cfg"])
    net = cfg[0]
    b = job["batch"]
    train = job["mode"] == "train"
    model = build(cfg, read_weights(job["weights"], cfg), train=train, bn_eps=job["dialect"])
    model = model.to(memory_format=torch.channels_last)
    xt = torch.from_numpy(_input((b, net["c"], net["h"], net["w"]))).contiguous(
        memory_format=torch.channels_last)
    if not train:
        model.eval()
        with torch.inference_mode():
            _save_heads(job, [y.contiguous().numpy() for y in model(xt)])

        def step():
            with torch.inference_mode():
                model(xt)
    else:
        model.train()
        heads = [l for l in cfg[1:] if l["type"] == "yolo"]
        loss_fn = YoloLoss(cfg, truths(b, heads[0]["classes"]))
        if legacy:
            def loss_fn(ys):
                return sum((yolo_activate(y, l) ** 2).sum() for y, l in zip(ys, heads))
        opt = torch.optim.SGD(model.parameters(), lr=1e-6, momentum=0.9, weight_decay=5e-4)

        def step():
            loss = loss_fn(model(xt))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return _time(step, job)


# -- OpenCV DNN --------------------------------------------------------------------------------
def work_opencv(job):
    import cv2
    cv2.setNumThreads(job["threads"])
    net = cv2.dnn.readNetFromDarknet(job["cfg"], job["weights"])
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
    names = net.getUnconnectedOutLayersNames()
    x = _input((job["batch"], job["c"], job["h"], job["w"]))

    def step():
        net.setInput(x)
        net.forward(names)
    return _time(step, job)


# -- onnxruntime and OpenVINO on darknumba's ONNX export ---------------------------------------
def _order(names):
    """Output names layer_<i> by layer index: the order of the [yolo] heads."""
    return sorted(names, key=lambda n: int(n.rsplit("_", 1)[1]))


def work_onnxruntime(job):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = job["threads"]
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(job["onnx"], so, providers=["CPUExecutionProvider"])
    names = _order([o.name for o in sess.get_outputs()])
    feed = {sess.get_inputs()[0].name: _input((job["batch"], job["c"], job["h"], job["w"]))}
    _save_heads(job, sess.run(names, feed))
    out = _time(lambda: sess.run(names, feed), job)
    out["detail"] = f"onnxruntime {ort.__version__}"
    return out


def work_openvino(job, f32=True):
    import openvino as ov
    core = ov.Core()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": job["threads"]}
    if f32:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    compiled = core.compile_model(core.read_model(job["onnx"]), "CPU", config)
    req = compiled.create_infer_request()
    x = _input((job["batch"], job["c"], job["h"], job["w"]))
    outs = {o.get_any_name(): o for o in compiled.outputs}
    names = _order(outs)
    res = req.infer({0: x})
    _save_heads(job, [res[outs[n]] for n in names])
    out = _time(lambda: req.infer({0: x}), job)
    precision = compiled.get_property("INFERENCE_PRECISION_HINT")
    out["detail"] = (f"OpenVINO {ov.get_version().split('-')[0]}, precision "
                     f"{getattr(precision, 'get_type_name', lambda: precision)()}")
    return out


def work_torch_legacy(job):
    return work_torch(job, legacy=True)


def work_openvino_default(job):
    return work_openvino(job, f32=False)


# -- C darknet ---------------------------------------------------------------------------------
def work_darknet(job):
    """C darknet's own timing line of `detector test` (batch 1 inference only), one process per
    iteration; its peak RSS from the children's rusage."""
    exe = Path(job["darknet"]).resolve()
    root = HERE.parent
    img = job.get("image") or str(root.parent / "shared" / "data" / "dog.jpg")
    times = []
    for _ in range(job["iters"]):
        out = subprocess.run([str(exe), "detector", "test", str(root / "cfg" / "coco.data"),
                              job["cfg"], job["weights"], img, "-thresh", "0.5", "-dont_show"],
                             cwd=exe.parent, capture_output=True, text=True)
        m = re.search(r"Predicted in ([0-9.]+) (milli-)?seconds", out.stdout + out.stderr)
        if not m:
            raise SystemExit("darknet printed no timing:\n" + out.stderr[-2000:])
        times.append(float(m.group(1)) / (1000 if m.group(2) else 1))
    return {"times": times,
            "rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


WORKERS = {"prepare": work_prepare, "darknumba": work_darknumba, "torch": work_torch,
           "torch-legacy": work_torch_legacy,
           "opencv": work_opencv, "onnxruntime": work_onnxruntime, "openvino": work_openvino,
           "openvino-default": work_openvino_default, "darknet": work_darknet}


def main():
    peer, job = sys.argv[1], json.loads(sys.argv[2])
    out = WORKERS[peer](job)
    out.setdefault("rss_mb", peak_rss_mb())
    out["darknumba_imported"] = "darknumba" in sys.modules
    print(json.dumps(out))


if __name__ == "__main__":
    main()
