"""`darknumba import caffe` end to end: small Caffe models written by tests/caffe_files.py,
one for each row of docs/caffe.md's layer table, imported and run by darknumba beside OpenCV
DNN's own Caffe importer (cv2.dnn.readNetFromCaffe) on the same files and input; the refused
layers' one-line errors; the command; and a real model nobody here made, Yahoo's open_nsfw
ResNet-50 (fetched sha256-checked as `darknumba weights fetch open-nsfw` does), against OpenCV,
through `classifier predict` and `export onnx`."""
import cv2
import numpy as np
import pytest

import darknumba as dn
from darknumba.export.caffe import import_caffe
from darknumba.export.caffe.prototxt import PrototxtError

from caffe_files import bn_blobs, input_layer, layer, write_model
from conftest import ROOT, sample_photos

TOL = 1e-5          # small nets: float32 rounding only (both sum the same products)


def conv_blobs(rng, n, c, k, bias=True):
    w = rng.normal(0, 1.0 / np.sqrt(c * k * k), (n, c, k, k))
    return [w, rng.normal(0, 0.1, n)] if bias else [w]


def run_both(tmp_path, rng, proto, blobs, shape, keep_bn=False, onnx=False):
    """(darknumba's output, OpenCV's output, the import) for one random input; onnx: also
    the ONNX export of the imported network, run by onnxruntime, within TOL of darknumba."""
    tmp_path.mkdir(exist_ok=True)
    p, m = write_model(tmp_path, proto, blobs)
    res = import_caffe(p, m, tmp_path / "o.cfg", tmp_path / "o.weights", keep_bn=keep_bn)
    net = dn.load_network(tmp_path / "o.cfg", tmp_path / "o.weights", batch=1)
    x = rng.uniform(-1, 1, (1, *shape)).astype(np.float32)
    cv = cv2.dnn.readNetFromCaffe(str(p), str(m))
    cv.setInput(x)
    ref = cv.forward()
    ours = net.forward(x.ravel()).reshape(ref.shape).copy()
    if onnx:
        from darknumba.export.onnx import build_onnx, run_onnxruntime
        (got,) = run_onnxruntime(build_onnx(net), x).values()
        assert np.abs(got.reshape(ref.shape) - ours).max() < TOL
    return ours, ref, res


def convs_and_activations(rng):
    """Convolution (bias, none, groups, dilation), BatchNorm + Scale folded, BatchNorm alone,
    ReLU, leaky ReLU, Sigmoid, TanH, PReLU, MAX pooling rounded up, InnerProduct, Softmax, on
    a 9 x 11 input (not square)."""
    proto = (input_layer(3, 9, 11)
             + layer("c1", "Convolution", "data", params="convolution_param { num_output: 8 "
                     "kernel_size: 3 stride: 2 pad: 1 }")
             + layer("bn1", "BatchNorm", "c1", "c1", "batch_norm_param { eps: 0.001 }")
             + layer("sc1", "Scale", "c1", "c1", "scale_param { bias_term: true }")
             + layer("r1", "ReLU", "c1", "c1")
             + layer("c2", "Convolution", "c1", params="convolution_param { num_output: 8 "
                     "kernel_size: 3 pad: 2 dilation: 2 group: 2 bias_term: false }")
             + layer("bn2", "BatchNorm", "c2", "c2")
             + layer("s2", "Sigmoid", "c2", "c2")
             + layer("p1", "Pooling", "c2", params="pooling_param { pool: MAX kernel_size: 3 "
                     "stride: 2 }")
             + layer("c3", "Convolution", "p1", params="convolution_param { num_output: 6 "
                     "kernel_size: 1 }")
             + layer("t3", "TanH", "c3", "c3")
             + layer("c4", "Convolution", "c3", params="convolution_param { num_output: 6 "
                     "kernel_size: 1 }")
             + layer("l4", "ReLU", "c4", "c4", "relu_param { negative_slope: 0.1 }")
             + layer("pr", "PReLU", "c4", "c4")
             + layer("fc", "InnerProduct", "c4", params="inner_product_param { num_output: 5 }")
             + layer("prob", "Softmax", "fc"))
    blobs = {"c1": ("Convolution", conv_blobs(rng, 8, 3, 3)),
             "bn1": ("BatchNorm", bn_blobs(rng, 8)),
             "sc1": ("Scale", [rng.uniform(0.5, 1.5, 8), rng.normal(0, 0.2, 8)]),
             "c2": ("Convolution", conv_blobs(rng, 8, 4, 3, bias=False)),
             "bn2": ("BatchNorm", bn_blobs(rng, 8, factor=1.0)),
             "c3": ("Convolution", conv_blobs(rng, 6, 8, 1)),
             "c4": ("Convolution", conv_blobs(rng, 6, 6, 1)),
             "pr": ("PReLU", [rng.uniform(-0.5, 0.5, 6)]),
             "fc": ("InnerProduct", [rng.normal(0, 0.3, (5, 6 * 2 * 3)), rng.normal(0, 0.1, 5)])}
    return proto, blobs, (3, 9, 11)


def branches(rng):
    """Eltwise SUM with coefficients, PROD of three, MAX; Concat; a blob read by several
    layers (a [route] before the ones that do not follow it); AVE pooling rounded up, BatchNorm
    and Scale after a pooling (a depthwise 1x1 convolution), MAX pooling with a pad, Dropout,
    Flatten, InnerProduct, Softmax."""
    proto = (input_layer(4, 8, 8)
             + layer("c0", "Convolution", "data", params="convolution_param { num_output: 6 "
                     "kernel_size: 3 pad: 1 }")
             + layer("c1", "Convolution", "c0", params="convolution_param { num_output: 6 "
                     "kernel_size: 1 }")
             + layer("pr1", "PReLU", "c1", "c1", "prelu_param { channel_shared: true }")
             + layer("c2", "Convolution", "c0", params="convolution_param { num_output: 6 "
                     "kernel_size: 3 pad: 1 }")
             + layer("e1", "Eltwise", ["c1", "c2"], params="eltwise_param { operation: SUM "
                     "coeff: 0.5 coeff: -1.5 }")
             + layer("e2", "Eltwise", ["c1", "c2", "e1"], params="eltwise_param { operation: "
                     "PROD }")
             + layer("e3", "Eltwise", ["e2", "c0"], params="eltwise_param { operation: MAX }")
             + layer("cat", "Concat", ["e3", "c1"])
             + layer("p1", "Pooling", "cat", params="pooling_param { pool: AVE kernel_size: 3 "
                     "stride: 2 }")
             + layer("bn", "BatchNorm", "p1", "p1")
             + layer("sc", "Scale", "p1", "p1")
             + layer("p2", "Pooling", "p1", params="pooling_param { pool: MAX kernel_size: 2 "
                     "stride: 2 pad: 1 }")
             + layer("drop", "Dropout", "p2", "p2", "dropout_param { dropout_ratio: 0.3 }")
             + layer("flat", "Flatten", "p2")
             + layer("fc", "InnerProduct", "flat", params="inner_product_param { num_output: 7 }")
             + layer("prob", "Softmax", "fc"))
    blobs = {"c0": ("Convolution", conv_blobs(rng, 6, 4, 3)),
             "c1": ("Convolution", conv_blobs(rng, 6, 6, 1)),
             "pr1": ("PReLU", [np.array([0.2])]),
             "c2": ("Convolution", conv_blobs(rng, 6, 6, 3)),
             "bn": ("BatchNorm", bn_blobs(rng, 12)),
             "sc": ("Scale", [rng.uniform(0.5, 1.5, 12)]),
             "fc": ("InnerProduct", [rng.normal(0, 0.3, (7, 12 * 3 * 3)), rng.normal(0, 0.1, 7)])}
    return proto, blobs, (4, 8, 8)


def global_pools(rng, transpose=False):
    """Global AVE and MAX pooling (global_pooling, and a kernel the size of the map), an
    Eltwise SUM of the two, InnerProduct (transpose: its weights stored inputs x outputs)."""
    proto = (input_layer(3, 6, 6)
             + layer("c0", "Convolution", "data", params="convolution_param { num_output: 5 "
                     "kernel_size: 3 pad: 1 }")
             + layer("ga", "Pooling", "c0", params="pooling_param { pool: AVE "
                     "global_pooling: true }")
             + layer("gm", "Pooling", "c0", params="pooling_param { pool: MAX kernel_size: 6 }")
             + layer("sum", "Eltwise", ["ga", "gm"])
             + layer("fc", "InnerProduct", "sum", params="inner_product_param { num_output: 4 "
                     f"transpose: {str(transpose).lower()} }}"))
    fc = rng.normal(0, 0.3, (4, 5))
    blobs = {"c0": ("Convolution", conv_blobs(rng, 5, 3, 3)),
             "fc": ("InnerProduct", [fc.T if transpose else fc, rng.normal(0, 0.1, 4)])}
    return proto, blobs, (3, 6, 6)


@pytest.mark.parametrize("model", [convs_and_activations, branches, global_pools])
@pytest.mark.parametrize("keep_bn", [False, True], ids=["folded", "keep-bn"])
def test_small_models_equal_opencv(model, keep_bn, tmp_path, rng):
    """darknumba's forward pass of the import within TOL of OpenCV's of the Caffe files, and
    the import's ONNX export within TOL of darknumba's."""
    ours, ref, res = run_both(tmp_path, rng, *model(rng), keep_bn=keep_bn, onnx=True)
    d = float(np.abs(ours - ref).max())
    assert d < TOL, (d, [p.section for p in res.plan.layers])
    sections = {p.section for p in res.plan.layers}
    assert ("caffe_batchnorm" in sections) == (keep_bn and model is not global_pools)


def test_transposed_inner_product(tmp_path):
    """Caffe's transpose: true stores the same weights as inputs x outputs (inner_product_
    layer.cpp multiplies by them untransposed); OpenCV's importer does not read the flag, so the
    import is checked against the same model stored the usual way."""
    outs = []
    for transpose in (False, True):
        rng = np.random.default_rng(3)
        ours, ref, _ = run_both(tmp_path / str(transpose), rng, *global_pools(rng, transpose))
        outs.append(ours)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_v1_files(tmp_path):
    """A V1 prototxt (`layers { type: CONVOLUTION }`, the input named at the top) and a V1
    caffemodel give the same network as the current format."""
    rng = np.random.default_rng(4)
    proto, blobs, shape = global_pools(rng)
    ours, ref, _ = run_both(tmp_path / "v2", np.random.default_rng(5), proto, blobs, shape)
    v1 = ('input: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 6\ninput_dim: 6\n'
          + "".join(line.replace("layer {", "layers {", 1) for line in
                    proto.splitlines(keepends=True)[1:]))
    for new, old in (("CONVOLUTION", "Convolution"), ("POOLING", "Pooling"),
                     ("ELTWISE", "Eltwise"), ("INNER_PRODUCT", "InnerProduct")):
        v1 = v1.replace(f'type: "{old}"', f"type: {new}")
    p, m = write_model(tmp_path, v1, blobs, stem="v1", v1=True)
    import_caffe(p, m, tmp_path / "v1.cfg", tmp_path / "v1.weights")
    net = dn.load_network(tmp_path / "v1.cfg", tmp_path / "v1.weights", batch=1)
    x = np.random.default_rng(5).uniform(-1, 1, (1, *shape)).astype(np.float32)
    np.testing.assert_array_equal(net.forward(x.ravel()).reshape(ours.shape), ours)


@pytest.mark.parametrize("mode, size, padding", [("CEIL", 4, 1), ("FLOOR", 3, 0)])
def test_pooling_round_mode(mode, size, padding, tmp_path, rng):
    """round_mode FLOOR (newer Caffe) sizes the output as Darknet does; CEIL, the default,
    needs one more cell of padding on the far side."""
    proto = (input_layer(3, 9, 9) + layer("c0", "Convolution", "data", params=(
        "convolution_param { num_output: 2 kernel_size: 2 }"))
        + layer("p", "Pooling", "c0", params="pooling_param { pool: MAX kernel_size: 3 "
                f"stride: 2 round_mode: {mode} }}"))
    p, m = write_model(tmp_path, proto, {"c0": ("Convolution", conv_blobs(rng, 2, 3, 2))})
    res = import_caffe(p, m, tmp_path / "o.cfg", tmp_path / "o.weights")
    assert res.plan.layers[-1].out == (2, size, size)
    assert res.plan.layers[-1].keys == {"size": 3, "stride": 2, "padding": padding}
    net = dn.load_network(tmp_path / "o.cfg", tmp_path / "o.weights", batch=1)
    x = rng.uniform(-1, 1, 3 * 81).astype(np.float32)
    net.forward(x)
    c0 = net.layers[0].output.reshape(2, 8, 8)
    # Caffe's windows: from 0 every 2 cells, clipped at the map's edge
    want = np.array([[[c0[k, i:i + 3, j:j + 3].max() for j in range(0, 2 * size, 2)]
                      for i in range(0, 2 * size, 2)] for k in range(2)])
    assert np.array_equal(net.layers[1].output.reshape(2, size, size), want)


def test_what_the_mapping_writes(tmp_path, rng):
    """The sections of the first two models: BatchNorm and Scale folded (no section of their
    own), activations folded into the convolutions, a [route] where a layer reads an earlier
    blob, the pooling's padding that gives Caffe's windows."""
    proto, blobs, _ = branches(rng)
    p, m = write_model(tmp_path, proto, blobs)
    res = import_caffe(p, m, tmp_path / "o.cfg", tmp_path / "o.weights")
    assert [q.section for q in res.plan.layers] == [
        "convolutional", "convolutional", "prelu", "route", "convolutional", "shortcut",
        "route", "eltwise", "eltwise", "route", "local_avgpool", "convolutional", "maxpool",
        "dropout", "connected", "softmax"]
    text = (tmp_path / "o.cfg").read_text()
    assert "[maxpool]\nsize=2\nstride=2\npadding=2\n" in text
    assert "[local_avgpool]\nsize=3\nstride=2\npadding=1\n" in text
    # c2 is the last layer: it is the shortcut's previous layer, c1 (the prelu) its `from`
    assert "[shortcut]\nfrom=2\nactivation=linear\nalpha=-1.5\nbeta=0.5\n" in text
    proto, blobs, _ = convs_and_activations(rng)
    p, m = write_model(tmp_path, proto, blobs, stem="a")
    res = import_caffe(p, m, tmp_path / "a.cfg", tmp_path / "a.weights")
    acts = [q.keys.get("activation") for q in res.plan.layers]
    assert [q.section for q in res.plan.layers] == [
        "convolutional", "convolutional", "maxpool", "convolutional", "convolutional", "prelu",
        "connected", "softmax"]
    assert acts[:2] == ["relu", "logistic"] and acts[3:5] == ["tanh", "leaky"]
    assert "dilation=2\n" in (tmp_path / "a.cfg").read_text()


REFUSED = [
    ('layer { name: "n1" type: "LRN" bottom: "c0" top: "n1" }', "layer type 'LRN' is not "
     "supported"),
    (layer("p", "Pooling", "c0", params="pooling_param { pool: STOCHASTIC kernel_size: 2 }"),
     "pool: STOCHASTIC"),
    (layer("p", "Pooling", "c0", params="pooling_param { pool: MAX kernel_size: 2 stride: 3 }"),
     "no Darknet padding"),
    (layer("p", "Pooling", "c0", params="pooling_param { pool: AVE kernel_size: 3 pad: 1 }"),
     "include the padding"),
    (layer("r", "ReLU", "c0", params="relu_param { negative_slope: 0.2 }"), "negative_slope"),
    (layer("s", "Softmax", "c0"), "each pixel"),
    (layer("k", "Convolution", "c0", params="convolution_param { num_output: 2 kernel_h: 3 "
                                            "kernel_w: 1 }"), "square"),
    (layer("c", "Concat", ["c0", "c0"], params="concat_param { axis: 2 }"), "axis 2"),
    (layer("x", "Convolution", "nothing", params="convolution_param { num_output: 2 "
                                                 "kernel_size: 1 }"), "bottom 'nothing'"),
]


@pytest.mark.parametrize("extra, message", REFUSED, ids=[m for _, m in REFUSED])
def test_refused_layers_name_the_line(extra, message, tmp_path, rng):
    head = input_layer(3, 8, 8) + layer("c0", "Convolution", "data", params=(
        "convolution_param { num_output: 4 kernel_size: 3 }"))
    proto = head + "\n" + extra
    p, m = write_model(tmp_path, proto, {"c0": ("Convolution", conv_blobs(rng, 4, 3, 3))})
    with pytest.raises(PrototxtError) as e:
        import_caffe(p, m, tmp_path / "o.cfg", tmp_path / "o.weights")
    line = head.count("\n") + 2
    assert str(e.value).startswith(f"{p}:{line}: layer ") and message in str(e.value), e.value
    assert "\n" not in str(e.value) and not (tmp_path / "o.cfg").exists()


def test_a_section_darknet_refuses_names_the_caffe_layer(tmp_path, rng):
    """A window larger than the map (Caffe has no output for it either): Darknet's parser
    refuses the section, and the error names the Caffe layer first, then the cfg's line."""
    proto = (input_layer(3, 8, 8) + layer("c0", "Convolution", "data", params=(
        "convolution_param { num_output: 4 kernel_size: 3 }"))
        + layer("p", "Pooling", "c0", params="pooling_param { pool: MAX kernel_size: 9 }"))
    p, m = write_model(tmp_path, proto, {"c0": ("Convolution", conv_blobs(rng, 4, 3, 3))})
    with pytest.raises(dn.CfgError) as e:
        import_caffe(p, m, tmp_path / "o.cfg", tmp_path / "o.weights")
    assert str(e.value).startswith(f"{p}:3: layer 'p' (Pooling): Darknet refuses the section "
                                   f"it maps to: {tmp_path / 'o.cfg'}:"), e.value
    assert "no pixels" in str(e.value) and not (tmp_path / "o.cfg").exists()


def test_blobs_that_do_not_fit(tmp_path, rng):
    proto = input_layer(3, 7, 7) + layer("c0", "Convolution", "data", params=(
        "convolution_param { num_output: 4 kernel_size: 3 }"))
    p, m = write_model(tmp_path, proto, {"c0": ("Convolution", conv_blobs(rng, 4, 3, 5))})
    with pytest.raises(PrototxtError, match=r"m.prototxt:2: layer 'c0' \(Convolution\): blob 0 "
                                            r"in the caffemodel has shape \(4, 3, 5, 5\)"):
        import_caffe(p, m, tmp_path / "o.cfg", tmp_path / "o.weights")
    p, m = write_model(tmp_path, proto, {"other": ("Convolution", conv_blobs(rng, 4, 3, 3))})
    with pytest.raises(PrototxtError, match="has no blobs in the caffemodel"):
        import_caffe(p, m, tmp_path / "o.cfg", tmp_path / "o.weights")


def test_the_command(tmp_path, rng, capsys):
    from darknumba.cli import run
    proto, blobs, _ = global_pools(rng)
    p, m = write_model(tmp_path, proto, blobs)
    cfg, w = tmp_path / "g.cfg", tmp_path / "g.weights"
    assert run(["import", "caffe", str(p), str(m), str(cfg), str(w)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {cfg} (6 layers: 1 convolutional, 1 avgpool, 1 route, 1 maxpool, " \
           f"1 shortcut, 1 connected) and {w}; input 6x6x3" in out, out
    assert run(["import", "caffe", str(p), str(m), str(p), str(w)]) == 2
    assert "would replace an input" in capsys.readouterr().err
    assert run(["import", "caffe", str(p), str(m), str(cfg), str(cfg)]) == 2
    assert "would be the same file" in capsys.readouterr().err


# -- a real model: Yahoo's open_nsfw (ResNet-50 1by2), BSD 2-Clause ---------------------------
def open_nsfw():
    """(prototxt, caffemodel) in weights/, fetched sha256-checked when missing; a download
    that fails fails the test."""
    from darknumba.data.fetch import fetch_caffe_model
    from darknumba.errors import DarknumbaError
    try:
        return fetch_caffe_model("open-nsfw", ROOT / "weights", log=lambda msg: None)
    except DarknumbaError as e:
        pytest.fail(f"open-nsfw could not be fetched ({e}); run `darknumba weights fetch "
                    f"open-nsfw` where the network is up")


def caffe_input(path) -> np.ndarray:
    """open_nsfw's preprocessing: 224 x 224, BGR, 0-255, less the per-channel mean."""
    im = cv2.imread(str(path), cv2.IMREAD_COLOR)
    im = cv2.resize(im, (224, 224)).astype(np.float32) - np.float32([104, 117, 123])
    return np.ascontiguousarray(im.transpose(2, 0, 1)[None])


@pytest.mark.slow
def test_open_nsfw_equals_opencv(tmp_path, capsys):
    """Probabilities and logits within 1e-4 of OpenCV's on two photos, and a blob inside
    (the first stage's output), BatchNorm folded and kept; the cfg runs in `classifier
    predict` and exports to ONNX."""
    dn.configure()          # the thread policy: unset, a forward takes several times longer
    prototxt, caffemodel = open_nsfw()
    cfg, weights = tmp_path / "nsfw.cfg", tmp_path / "nsfw.weights"
    res = import_caffe(prototxt, caffemodel, cfg, weights)
    net = dn.load_network(cfg, weights, batch=1)
    cv = cv2.dnn.readNetFromCaffe(str(prototxt), str(caffemodel))
    photos = sample_photos()[:2]
    inner = "relu_stage0_block2"      # the first stage's output (after the in-place ReLU)
    for photo in photos:
        x = caffe_input(photo)
        cv.setInput(x)
        prob, logits, stage0 = cv.forward(["prob", "fc_nsfw", inner])
        ours = net.forward(x.ravel()).reshape(prob.shape).copy()
        assert np.abs(ours - prob).max() < 1e-4, (photo, ours, prob)
        got = net.layers[res.plan.tops["fc_nsfw"]].output.reshape(logits.shape)
        assert np.abs(got - logits).max() < 1e-4, (photo, got, logits)
        got = net.layers[res.plan.tops["relu_stage0_block2"]].output.reshape(stage0.shape)
        assert np.abs(got - stage0).max() < 1e-4 * max(1.0, float(np.abs(stage0).max()))
    # BatchNorm kept as [caffe_batchnorm] (Caffe's arithmetic, not folded): the same output
    keep = import_caffe(prototxt, caffemodel, tmp_path / "k.cfg", tmp_path / "k.weights",
                        keep_bn=True)
    assert sum(p.section == "caffe_batchnorm" for p in keep.plan.layers) == 53
    kept = dn.load_network(tmp_path / "k.cfg", tmp_path / "k.weights", batch=1)
    assert np.abs(kept.forward(x.ravel()).reshape(prob.shape) - prob).max() < 1e-4
    # the converted files through Darknet's classifier command
    from darknumba.cli import run
    (tmp_path / "nsfw.names").write_text("sfw\nnsfw\n")
    data = tmp_path / "nsfw.data"
    data.write_text(f"classes=2\nlabels={tmp_path / 'nsfw.names'}\ntop=2\n")
    assert run(["classifier", "predict", str(data), str(cfg), str(weights), str(photos[0])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and {ln.split(": ")[1] for ln in lines} == {"sfw", "nsfw"}, lines
    # and through ONNX, run by onnxruntime
    from darknumba.export.onnx import export_onnx, run_onnxruntime
    export_onnx(net, tmp_path / "nsfw.onnx")
    (onnx_prob,) = run_onnxruntime(str(tmp_path / "nsfw.onnx"), x).values()   # the last photo
    assert np.abs(onnx_prob.ravel() - ours.ravel()).max() < 1e-4, (onnx_prob, ours)
