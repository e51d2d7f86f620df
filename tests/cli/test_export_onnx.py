"""ONNX export checked with onnxruntime against darknumba's own forward pass: official
yolov3-tiny weights, random-weight networks of every exportable layer type in both dialects,
folded and unfolded batch norm, decoded heads against the engine's detections, dynamic shapes,
and OpenCV DNN reading the file."""
import re
import warnings

import cv2
import numpy as np
import onnx  # noqa: F401  (the [test] extra brings onnx and onnxruntime)
import onnxruntime as ort
import pytest

import darknumba as dn
from darknumba.errors import CfgWarning
from darknumba.export import ExportError
from darknumba.export.onnx import build_onnx, export_onnx, run_onnxruntime

from conftest import ROOT, tiny_weights, v4tiny_weights
from tiny_nets import cfg_text, conv, maxpool, section

TOL = 1e-4


def within_tol(net, diffs):
    """Every head within TOL of ours, relative to the head's largest value when that is over
    1: float32 rounding grows through a deep random network (relative differences 2e-6 after
    the first layers, 1.7e-5 at yolov3's heads, smoothly, layer after layer), so a head whose
    values reach 50 differs by 5e-4."""
    for name, d in diffs.items():
        l = net.layers[int(name[len("layer_"):])]
        scale = max(1.0, float(np.abs(l.output).max()))
        if not d < TOL * scale:
            return False
    return True


def randomize(net, seed=0, small_variances=False):
    """Random biases and batch-norm statistics (Darknet starts the rolling variance at 0,
    which a test-mode forward divides by). small_variances puts 1e-4 in every 5th channel,
    where the two dialects' normalisers differ by 5 %."""
    rng = np.random.default_rng(seed)
    for l in net.layers:
        if l.type not in ("convolutional", "connected"):
            continue
        n = l.biases.size
        l.biases[:] = rng.normal(0, 0.1, n)
        if l.batch_normalize:
            l.scales[:] = rng.uniform(0.5, 1.5, n)
            l.rolling_mean[:] = rng.normal(0, 0.2, n)
            l.rolling_variance[:] = rng.uniform(0.5, 2.0, n)
            if small_variances:
                l.rolling_variance[::5] = 1e-4
    return net


def calibrate(net, seed=2):
    """Rolling statistics set to the batch statistics of one random batch, so that deep
    random networks keep their activations near 1 (with Darknet's random weights and unit
    variances they grow layer after layer)."""
    net.forward(image_batch(net, seed), train=True)
    for l in net.layers:
        if getattr(l, "batch_normalize", False):
            l.rolling_mean[:] = l.mean
            l.rolling_variance[:] = l.variance
    return net


def net_from_text(tmp_path, text, name="net.cfg", **kw):
    p = tmp_path / name
    p.write_text(text)
    return dn.parse_network_cfg(p, **kw)


def head_diffs(net, model, x):
    """{output: max |ours - onnxruntime|} for the raw outputs layer_<i>."""
    net.forward(x)
    got = run_onnxruntime(model, x)
    out = {}
    for name, val in got.items():
        l = net.layers[int(name[len("layer_"):])]
        ours = l.output[:l.batch * l.outputs].reshape(val.shape)
        out[name] = float(np.max(np.abs(ours.astype(np.float64) - val)))
    return out


def image_batch(net, seed=1):
    return np.random.default_rng(seed).random((net.batch, net.c, net.h, net.w), np.float32)


def test_yolov3_tiny_official_weights():
    net = dn.load_network(ROOT / "cfg/yolov3-tiny.cfg", tiny_weights(), batch=1)
    x = image_batch(net)
    for fuse in (True, False):
        d = head_diffs(net, build_onnx(net, fuse_bn=fuse), x)
        assert set(d) == {"layer_16", "layer_23"}
        assert max(d.values()) < TOL, (fuse, d)


ZOO = cfg_text(dict(batch=2, width=40, height=32, channels=3),
               conv(8), maxpool(),
               conv(16, groups=2, activation="relu"), maxpool(stride=1),
               conv(16, size=1, bn=False, activation="tanh"),
               section("shortcut", **{"from": -3}, alpha=0.5, beta=2, activation="logistic"),
               maxpool(size=5, stride=1),
               conv(12, stride=2, activation="elu"),
               section("upsample", stride=2, scale=0.5),
               section("route", layers="-1,-3"),
               conv(8, size=1, bn=False, activation="selu"),
               section("maxpool", size=3, stride=2, padding=1),
               section("upsample", stride=-2),
               section("route", layers=-1),
               conv(6, size=1, bn=False, activation="ramp"))


@pytest.mark.parametrize("dialect", ["pjreddie", "alexeyab"])
@pytest.mark.parametrize("fuse", [True, False])
def test_layer_zoo_both_dialects(tmp_path, dialect, fuse):
    """conv (+BN, groups), every maxpool padding case, shortcut with alpha/beta, upsample with
    scale and downsampling, route of one and of two layers, six activations."""
    net = randomize(net_from_text(tmp_path, ZOO, dialect=dialect))
    model = build_onnx(net, fuse_bn=fuse)
    d = head_diffs(net, model, image_batch(net))
    assert list(d) == [f"layer_{net.n - 1}"]
    assert d[f"layer_{net.n - 1}"] < TOL


ONE_CONV = cfg_text(dict(batch=1, width=12, height=10, channels=3),
                    conv(10, activation="linear"))


@pytest.mark.parametrize("dialect", ["pjreddie", "alexeyab"])
def test_batchnorm_normaliser_of_each_dialect(tmp_path, dialect):
    """Variances of 1e-4 in every 5th channel, where sqrt(v) + 1e-6 and sqrt(v + 1e-5) differ
    by 5 %: folded or as a node, the export divides as the dialect's forward pass does."""
    net = randomize(net_from_text(tmp_path, ONE_CONV, dialect=dialect), small_variances=True)
    x = image_batch(net)
    for fuse in (True, False):
        d = head_diffs(net, build_onnx(net, fuse_bn=fuse), x)["layer_0"]
        assert d < TOL * np.abs(net.layers[0].output).max(), (fuse, d)


CLASSIFIER = cfg_text(dict(batch=3, width=16, height=16, channels=3), conv(8, stride=2),
                      section("avgpool"), section("dropout", probability=".5"),
                      section("connected", output=10, batch_normalize=1, activation="logistic"),
                      section("connected", output=6, activation="linear"),
                      section("softmax", groups=2, temperature=2), section("cost"))


def test_classifier_layers(tmp_path):
    net = randomize(net_from_text(tmp_path, CLASSIFIER))
    for fuse in (True, False):
        model = build_onnx(net, fuse_bn=fuse)
        dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
        assert dims == [3, 6, 1, 1]
        d = head_diffs(net, model, image_batch(net))
        assert list(d) == ["layer_5"] and d["layer_5"] < 1e-6


def small_yolo(extra="", classes=3, activation="linear"):
    """Two convolutions and a [yolo] head of three of six anchors; `extra`: lines added to the
    [yolo] section."""
    return cfg_text(dict(batch=2, width=64, height=48, channels=3), conv(16, stride=2),
                    conv(3 * (5 + classes), size=1, bn=False, activation=activation),
                    section("yolo", mask="3,4,5",
                            anchors="4,5, 8,9, 14,12, 20,22, 30,28, 40,44", classes=classes,
                            num=6)) + extra


def decoded_reference(net, b):
    """The engine's detections of image b at threshold 0 (every box), as rows x, y, w, h in
    input pixels, objectness, objectness * class score: the image is the network's size, so
    correct_yolo_boxes leaves the boxes where they are."""
    rows = []
    for l in net.layers:
        if l.type == "yolo":
            d = l.get_detections(net.w, net.h, net.w, net.h, 0.0, relative=True, b=b)
            rows.append(np.column_stack([d.bbox * [net.w, net.h, net.w, net.h],
                                         d.objectness, d.prob]))
    return np.concatenate(rows)


@pytest.mark.parametrize("extra,act,dialect", [
    ("", "linear", "pjreddie"),
    ("scale_x_y=1.05", "linear", "alexeyab"),
    ("scale_x_y=2.0\nnew_coords=1", "logistic", "alexeyab"),
])
def test_yolo_heads_raw_and_decoded(tmp_path, extra, act, dialect):
    net = randomize(net_from_text(tmp_path, small_yolo(extra, activation=act), dialect=dialect))
    x = image_batch(net)
    assert head_diffs(net, build_onnx(net), x)["layer_2"] < TOL
    for dynamic in (False, True):
        det = run_onnxruntime(build_onnx(net, decode=True, dynamic=dynamic), x)["detections"]
        assert det.shape == (2, 24 * 32 * 3, 8)
        for b in range(2):
            ref = decoded_reference(net, b)
            got = det[b].astype(np.float64)
            got[:, 5:] *= got[:, 4:5]
            np.testing.assert_allclose(got[:, :4] / [64, 48, 64, 48], ref[:, :4] / [64, 48, 64, 48],
                                       atol=TOL, rtol=0)
            np.testing.assert_allclose(got[:, 4:], ref[:, 4:], atol=TOL, rtol=0)


def test_yolov3_random_weights_small_input(tmp_path):
    text = (ROOT / "cfg/yolov3.cfg").read_text()
    text = re.sub(r"(?m)^width=\d+", "width=96", re.sub(r"(?m)^height=\d+", "height=96", text))
    net = calibrate(randomize(net_from_text(tmp_path, text, batch=1)))
    d = head_diffs(net, build_onnx(net), image_batch(net))
    assert len(d) == 3 and within_tol(net, d), d


def ab_net_or_skip(path, **kw):
    """An AlexeyAB network, or a skip naming what this build does not implement (a CfgError,
    or a key the parser leaves unread, such as [route] groups)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CfgWarning)
        try:
            return dn.parse_network_cfg(path, **kw)
        except (dn.CfgError, CfgWarning) as e:
            pytest.skip(f"{path.name} cannot be built yet: {e}")


@pytest.mark.parametrize("name,size", [("yolov4-tiny", 128), ("yolov4", 96)])
def test_alexeyab_networks_random_weights(tmp_path, name, size):
    text = (ROOT / f"cfg/{name}.cfg").read_text()
    text = re.sub(r"(?m)^width=\d+", f"width={size}",
                  re.sub(r"(?m)^height=\d+", f"height={size}", text))
    (tmp_path / f"{name}.cfg").write_text(text)
    net = calibrate(randomize(ab_net_or_skip(tmp_path / f"{name}.cfg", batch=1)))
    d = head_diffs(net, build_onnx(net), image_batch(net))
    assert within_tol(net, d), d


def test_yolov4_tiny_official_weights():
    weights = v4tiny_weights()
    net = ab_net_or_skip(ROOT / "cfg/yolov4-tiny.cfg", batch=1)
    dn.load_weights(net, weights)
    for fuse in (True, False):
        d = head_diffs(net, build_onnx(net, fuse_bn=fuse), image_batch(net))
        assert max(d.values()) < TOL, (fuse, d)


def test_region_head(tmp_path):
    text = cfg_text(dict(batch=1, width=64, height=64, channels=3), conv(8, stride=2), maxpool(),
                    conv(40, size=1, bn=False, activation="linear"),
                    section("region", anchors="1,1, 2,2, 3,3, 4,4, 5,5", classes=3, coords=4,
                            num=5, softmax=1))
    net = randomize(net_from_text(tmp_path, text))
    assert head_diffs(net, build_onnx(net), image_batch(net))["layer_3"] < TOL
    with pytest.raises(ExportError, match="--decode needs"):
        build_onnx(net, decode=True)


def test_dynamic_batch_and_size():
    """One file exported at 416 x 416, batch 1, run at batch 3 on 320 x 256 images."""
    net = dn.load_network(ROOT / "cfg/yolov3-tiny.cfg", tiny_weights(), batch=1)
    model = build_onnx(net, dynamic=True)
    big = dn.load_network(ROOT / "cfg/yolov3-tiny.cfg", tiny_weights(), batch=3)
    big.resize(320, 256)
    d = head_diffs(big, model, image_batch(big))
    assert max(d.values()) < TOL, d


def test_unexportable_layer_is_named(tmp_path):
    text = cfg_text(dict(batch=1, width=8, height=8, channels=3),
                    conv(4, bn=False, activation="stair"), section("reorg", stride=2))
    net = net_from_text(tmp_path, text)
    with pytest.raises(ExportError, match=r"net.cfg: layer 1 \[reorg\].*not exportable"):
        build_onnx(net)


def test_opencv_dnn_reads_the_file(tmp_path):
    net = dn.load_network(ROOT / "cfg/yolov3-tiny.cfg", tiny_weights(), batch=1)
    x = image_batch(net)
    net.forward(x)
    for kw in ({}, {"fuse_bn": False}):
        export_onnx(net, tmp_path / "y.onnx", **kw)
        cv = cv2.dnn.readNetFromONNX(str(tmp_path / "y.onnx"))
        cv.setInput(x)
        names = list(cv.getUnconnectedOutLayersNames())
        assert sorted(names) == ["layer_16", "layer_23"]
        for name, val in zip(names, cv.forward(names)):
            l = net.layers[int(name[len("layer_"):])]
            assert np.max(np.abs(l.output.reshape(val.shape) - val)) < 1e-3
    export_onnx(net, tmp_path / "d.onnx", decode=True)
    cv = cv2.dnn.readNetFromONNX(str(tmp_path / "d.onnx"))
    cv.setInput(x)
    det = cv.forward("detections")
    ref = decoded_reference(net, 0)
    det = det.reshape(ref.shape).astype(np.float64)
    det[:, 5:] *= det[:, 4:5]
    assert np.max(np.abs(det[:, 4:] - ref[:, 4:])) < 1e-3
    assert np.max(np.abs(det[:, :4] - ref[:, :4]) / 416) < 1e-3


def _run_activation(name, x):
    import onnx
    from darknumba.export.activations import activation
    from darknumba.export.graph import Graph
    g = Graph()
    g.op("Identity", [activation(g, "input", name, "test")], name="y")
    info = lambda n: onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, list(x.shape))  # noqa: E731
    model = g.model([info("input")], [info("y")])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["y"], {"input": x})[0]


def _ab_reference(name, x):
    """AlexeyAB's activations.c formulas, in float64."""
    x = x.astype(np.float64)
    sig = 1 / (1 + np.exp(-x))
    softplus = np.where(x > 20, x, np.where(x < -20, np.exp(x), np.log1p(np.exp(x))))
    if name == "relu6":
        return np.clip(x, 0, 6)
    if name == "revleaky":
        return np.where(x > 0, x, 0.1 * x)
    if name == "gelu":
        return 0.5 * x * (1 + np.tanh(0.797885 * x + 0.035677 * x ** 3))
    if name == "swish":
        return x * sig
    if name == "mish":
        return x * np.tanh(softplus)
    if name == "hard_mish":
        return np.where(x > 0, x, np.where(x > -2, x * x / 2 + x, 0))
    pos = np.maximum(x, 0)
    if name == "normalize_channels":
        return pos / (1e-4 + pos.sum(axis=1, keepdims=True))
    shift = x.max(axis=1, keepdims=True) if name.endswith("maxval") else 0
    e = np.exp(x - shift)
    return e / (1e-4 + e.sum(axis=1, keepdims=True))


def test_every_activation_builder():
    """Each builder against Darknet's formula: pjreddie's 14 against the engine's kernel,
    AlexeyAB's 9 against their formulas (the normalize_channels family across channels)."""
    from darknumba.export.activations import ACTIVATION_BUILDERS
    from darknumba.kernels.activations import ACTIVATIONS, RELU6, activate_array
    grid = np.concatenate([np.linspace(-8, 8, 97), np.arange(-6, 7) + 0.5, [-25, -21, 21, 25]])
    x = np.resize(grid, 6 * 4 * 5).reshape(1, 6, 4, 5).astype(np.float32)
    assert set(ACTIVATION_BUILDERS) >= set(ACTIVATIONS)
    for name in ACTIVATION_BUILDERS:
        got = _run_activation(name, x)
        if ACTIVATIONS[name] < RELU6:               # pjreddie's: the engine's own kernel
            ref = x.reshape(-1).copy()
            activate_array(ref, ref.size, ACTIVATIONS[name])
            ref = ref.reshape(x.shape)
        else:
            ref = _ab_reference(name, x)
        np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5, err_msg=name)


def test_batchnorm_activation_and_logistic_layers(tmp_path):
    text = cfg_text(dict(batch=2, width=10, height=8, channels=3),
                    conv(6, bn=False, activation="linear"), section("batchnorm"),
                    section("activation", activation="relie"), section("logistic"))
    for dialect in ("pjreddie", "alexeyab"):
        net = net_from_text(tmp_path, text, dialect=dialect)
        rng = np.random.default_rng(3)
        bn = net.layers[1]
        bn.scales[:] = rng.uniform(0.5, 1.5, 6)
        bn.biases[:] = rng.normal(0, 0.1, 6)
        bn.rolling_mean[:] = rng.normal(0, 0.2, 6)
        bn.rolling_variance[:] = rng.uniform(1e-4, 2.0, 6)
        d = head_diffs(net, build_onnx(net), image_batch(net))
        assert list(d) == ["layer_3"] and d["layer_3"] < TOL


def test_cli_export_onnx(tmp_path):
    from typer.testing import CliRunner
    from darknumba.cli import app
    net = randomize(net_from_text(tmp_path, small_yolo()))
    dn.save_weights(net, tmp_path / "n.weights")
    r = CliRunner().invoke(app, ["export", "onnx", str(tmp_path / "net.cfg"), str(tmp_path / "n.weights"),
                                 str(tmp_path / "n.onnx"), "--decode", "--dynamic", "--batch", "2"])
    assert r.exit_code == 0, r.output
    assert "outputs detections" in r.output
    diff = float(re.search(r"layer_2 ([0-9.e+-]+)", r.output).group(1))
    assert diff < TOL
    x = np.random.default_rng(0).random((3, 3, 96, 64), np.float32)     # other batch and size
    assert run_onnxruntime(tmp_path / "n.onnx", x)["detections"].shape == (3, 48 * 32 * 3, 8)


def test_decode_needs_yolo_heads(tmp_path):
    net = net_from_text(tmp_path, CLASSIFIER)
    with pytest.raises(ExportError, match=r"--decode needs \[yolo\] heads.*\[softmax\]"):
        build_onnx(net, decode=True)
