"""The layers a Caffe import adds: [caffe_batchnorm] (Caffe's BatchNorm + Scale), [eltwise]
(PROD, MAX), [prelu]. Forward against plain numpy written from Caffe's documented math
(batch_norm_layer.cpp: biased batch variance, eps inside the square root, running sums with
the scale factor and the m / (m - 1) correction), in training and at inference; backward
against finite differences (tests/gradcheck.py) in both modes; .weights round trips."""
import numpy as np
import pytest
from gradcheck import build_cfg, check_network

from darknumba.weights import load_weights, save_weights

CONV = "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=linear\n\n"


def caffe_bn_reference(x, mean_sum, variance_sum, factor, gamma, beta, eps, fraction, train):
    """(y, new mean_sum, new variance_sum, new factor) of BatchNorm + Scale in float64."""
    x = x.astype(np.float64)
    if train:
        mean = x.mean(axis=(0, 2, 3))
        variance = x.var(axis=(0, 2, 3))                  # biased: / m
        m = x.shape[0] * x.shape[2] * x.shape[3]
        factor = factor * fraction + 1
        mean_sum = fraction * mean_sum + mean
        variance_sum = fraction * variance_sum + m / (m - 1) * variance
    else:
        inv = 0.0 if factor == 0 else 1.0 / factor
        mean, variance = mean_sum * inv, variance_sum * inv
    shape = (1, -1, 1, 1)
    xhat = (x - mean.reshape(shape)) / np.sqrt(variance.reshape(shape) + eps)
    return gamma.reshape(shape) * xhat + beta.reshape(shape), mean_sum, variance_sum, factor


def bn_net(tmp_path, extra="", batch=3, w=5, h=4, c=3):
    net, rng = build_cfg(tmp_path, f"[caffe_batchnorm]\neps=0.001\nmoving_average_fraction=0.9"
                                   f"\n{extra}\n", batch=batch, w=w, h=h, c=c)
    return net, net.layers[0], rng


def test_caffe_batchnorm_forward_matches_caffe_math(tmp_path):
    net, l, rng = bn_net(tmp_path)
    l.scales[:] = rng.uniform(0.5, 1.5, 3)
    l.biases[:] = rng.normal(0, 0.3, 3)
    state = (np.zeros(3), np.zeros(3), 0.0)             # Caffe's blobs start at 0
    for step in range(3):                               # training: batch statistics, sums
        x = rng.normal(1.0 + step, 2.0, (3, 3, 4, 5)).astype(np.float32)
        y, *state = caffe_bn_reference(x, *state, l.scales, l.biases, 1e-3, 0.9, True)
        out = net.forward(x.ravel(), train=True).reshape(x.shape)
        np.testing.assert_allclose(out, y, rtol=0, atol=2e-6)
        np.testing.assert_allclose(l.mean_sum, state[0], rtol=2e-6)
        np.testing.assert_allclose(l.variance_sum, state[1], rtol=2e-6)
        assert l.scale_factor[0] == pytest.approx(state[2], rel=1e-7)
    x = rng.normal(0, 3.0, (3, 3, 4, 5)).astype(np.float32)
    y, *_ = caffe_bn_reference(x, *state, l.scales, l.biases, 1e-3, 0.9, False)
    np.testing.assert_allclose(net.forward(x.ravel()).reshape(x.shape), y, rtol=0, atol=2e-6)


def test_bias_correction_after_one_step(tmp_path):
    """From zero sums one training step leaves the inference statistics equal to the batch's
    mean and unbiased variance (the factor divides the moving average's start-up bias out),
    where Darknet's rolling average would hold 1 % of them."""
    net, l, rng = bn_net(tmp_path, batch=2, w=3, h=2)
    x = rng.normal(2.0, 3.0, (2, 3, 2, 3)).astype(np.float32)
    net.forward(x.ravel(), train=True)
    np.testing.assert_allclose(l.mean_sum / l.scale_factor[0], x.mean(axis=(0, 2, 3)),
                               rtol=1e-6)
    np.testing.assert_allclose(l.variance_sum / l.scale_factor[0],
                               x.astype(np.float64).var(axis=(0, 2, 3), ddof=1), rtol=1e-5)


def test_use_global_stats_freezes_the_statistics(tmp_path):
    net, l, rng = bn_net(tmp_path, "use_global_stats=1")
    l.mean_sum[:], l.variance_sum[:], l.scale_factor[:] = [2.0, -1.0, 0.5], [4.0, 1.0, 9.0], 2.0
    x = rng.normal(0, 1.0, (3, 3, 4, 5)).astype(np.float32)
    y, *_ = caffe_bn_reference(x, l.mean_sum.astype(np.float64), l.variance_sum.astype(np.float64),
                               2.0, l.scales, l.biases, 1e-3, 0.9, False)
    out = net.forward(x.ravel(), train=True).reshape(x.shape)
    np.testing.assert_allclose(out, y, rtol=0, atol=2e-6)
    assert l.scale_factor[0] == 2.0 and list(l.mean_sum) == [2.0, -1.0, 0.5]


@pytest.mark.parametrize("extra", ["", "use_global_stats=1"], ids=["batch-stats", "global"])
def test_caffe_batchnorm_gradients(tmp_path, extra):
    """Caffe's backward is the gradient of its forward (biased variance, eps inside the root):
    exact, unlike Darknet's (tests/gradcheck.py), so a small batch is checked as tightly. (It
    comes first: a bias before it has no gradient with batch statistics, only rounding.)"""
    net, rng = build_cfg(tmp_path, f"[caffe_batchnorm]\n{extra}\n\n" + CONV, batch=2, w=5, h=4)
    l = net.layers[0]
    l.mean_sum[:], l.variance_sum[:], l.scale_factor[:] = rng.normal(0, 1, 3), 2.0, 1.5
    check = check_network(net, rng)
    check.assert_ok(extra)
    check.assert_catches_one_percent(extra)


@pytest.mark.parametrize("operation", ["prod", "max"])
def test_eltwise(tmp_path, operation):
    body = CONV + CONV + CONV + f"[eltwise]\nfrom=-2,-3\noperation={operation}\n\n"
    net, rng = build_cfg(tmp_path, body, batch=2, w=4, h=3)
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    out = net.forward(x)
    a, b, c = (net.layers[i].output.astype(np.float64) for i in (2, 1, 0))
    ref = a * b * c if operation == "prod" else np.maximum(np.maximum(a, b), c)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7)
    check = check_network(net, rng, h=1e-2 if operation == "prod" else 1e-3)
    check.assert_ok(operation)
    check.assert_catches_one_percent(operation)


def test_eltwise_refuses_other_shapes(tmp_path):
    from darknumba.errors import CfgError
    body = CONV + "[maxpool]\nsize=2\nstride=2\n\n[eltwise]\nfrom=-2\noperation=max\n"
    with pytest.raises(CfgError, match=r"g.cfg:\d+: \[eltwise\] from: layer 0 outputs 5x5x4"):
        build_cfg(tmp_path, body, w=5, h=5)


@pytest.mark.parametrize("shared", [0, 1])
def test_prelu(tmp_path, shared):
    net, rng = build_cfg(tmp_path, CONV + f"[prelu]\nchannel_shared={shared}\n", batch=2,
                         w=4, h=3)
    l = net.layers[1]
    l.weights[:] = rng.uniform(-0.5, 0.8, l.weights.size)
    x = rng.uniform(-1, 1, net.batch * net.inputs).astype(np.float32)
    out = net.forward(x).reshape(2, 4, 3, 4)
    v = net.layers[0].output.reshape(2, 4, 3, 4).astype(np.float64)
    a = np.broadcast_to(l.weights if shared else l.weights.reshape(1, 4, 1, 1), v.shape)
    np.testing.assert_allclose(out, np.where(v > 0, v, a * v), rtol=1e-6, atol=1e-7)
    check = check_network(net, rng, h=1e-3)
    check.assert_ok()
    check.assert_catches_one_percent()


def test_weights_round_trip(tmp_path):
    body = CONV + "[caffe_batchnorm]\n\n[prelu]\n\n" + CONV + "[eltwise]\nfrom=-3\noperation=max\n"
    net, rng = build_cfg(tmp_path, body, batch=1, w=4, h=4)
    for name in ("mean_sum", "variance_sum", "scale_factor"):
        arr = getattr(net.layers[1], name)
        arr[:] = rng.uniform(0.5, 2, arr.size)
    net.layers[2].weights[:] = rng.uniform(-1, 1, 4)
    save_weights(net, tmp_path / "a.weights")
    again, _ = build_cfg(tmp_path, body, batch=1, w=4, h=4, seed=5)
    load_weights(again, tmp_path / "a.weights")
    save_weights(again, tmp_path / "b.weights")
    assert (tmp_path / "a.weights").read_bytes() == (tmp_path / "b.weights").read_bytes()
    assert again.layers[1].scale_factor[0] == net.layers[1].scale_factor[0]


def test_an_imported_network_trains_as_caffe(tmp_path):
    """A Caffe model imported with --keep-bn (Convolution, BatchNorm + Scale, ReLU, PReLU,
    MAX pooling rounded up, Eltwise PROD, InnerProduct): its training backward against finite
    differences, the running sums updated. The convolutions' biases before a batch-statistics
    BatchNorm have no gradient (the batch mean takes them out) and are left out of the check:
    their analytic gradient is rounding, ~1e-7."""
    from caffe_files import bn_blobs, input_layer, layer, write_model

    import darknumba as dn
    from darknumba.export.caffe import import_caffe
    rng = np.random.default_rng(7)
    proto = (input_layer(3, 7, 6)
             + layer("c1", "Convolution", "data", params="convolution_param { num_output: 4 "
                     "kernel_size: 3 pad: 1 }")
             + layer("bn1", "BatchNorm", "c1", "c1", "batch_norm_param { use_global_stats: "
                     "false }")
             + layer("s1", "Scale", "c1", "c1", "scale_param { bias_term: true }")
             + layer("r1", "ReLU", "c1", "c1")
             + layer("p1", "Pooling", "c1", params="pooling_param { pool: MAX kernel_size: 2 "
                     "stride: 2 }")
             + layer("c2", "Convolution", "p1", params="convolution_param { num_output: 4 "
                     "kernel_size: 1 }")
             + layer("pr", "PReLU", "c2", "c2")
             + layer("e", "Eltwise", ["c2", "p1"], params="eltwise_param { operation: PROD }")
             + layer("fc", "InnerProduct", "e", params="inner_product_param { num_output: 3 }"))
    blobs = {"c1": ("Convolution", [rng.normal(0, 0.5, (4, 3, 3, 3)), rng.normal(0, 0.1, 4)]),
             "bn1": ("BatchNorm", bn_blobs(rng, 4)),
             "s1": ("Scale", [rng.uniform(0.5, 1.5, 4), rng.normal(0, 0.2, 4)]),
             "c2": ("Convolution", [rng.normal(0, 0.5, (4, 4, 1, 1)), rng.normal(0, 0.1, 4)]),
             "pr": ("PReLU", [rng.uniform(0.1, 0.4, 4)]),
             "fc": ("InnerProduct", [rng.normal(0, 0.5, (3, 4 * 4 * 3)), rng.normal(0, 0.1, 3)])}
    p, m = write_model(tmp_path, proto, blobs)
    res = import_caffe(p, m, tmp_path / "o.cfg", tmp_path / "o.weights", keep_bn=True)
    assert [q.section for q in res.plan.layers] == [
        "convolutional", "caffe_batchnorm", "activation", "maxpool", "convolutional", "prelu",
        "eltwise", "connected"]
    net = dn.load_network(tmp_path / "o.cfg", tmp_path / "o.weights", batch=2)
    bn = net.layers[1]
    factor = float(bn.scale_factor[0])
    check = check_network(net, rng, h=1e-3)
    del check["L0 biases"]
    check.assert_ok("imported")
    check.assert_catches_one_percent("imported")
    assert bn.scale_factor[0] > factor            # training forwards moved the running sums


def test_resized_networks(tmp_path):
    """resize_network through the three sections: the new size's outputs are numpy's."""
    body = (CONV + "[caffe_batchnorm]\n\n[prelu]\n\n" + CONV
            + "[eltwise]\nfrom=-2\noperation=prod\n")
    net, rng = build_cfg(tmp_path, body, batch=1, w=4, h=4)
    net.resize(6, 5)
    x = rng.uniform(-1, 1, 3 * 5 * 6).astype(np.float32)
    out = net.forward(x)
    assert out.size == 4 * 5 * 6
    a, b = (net.layers[i].output.astype(np.float64) for i in (3, 2))
    np.testing.assert_allclose(out, a * b, rtol=1e-6)
    v = net.layers[1].output.reshape(4, 5, 6).astype(np.float64)
    np.testing.assert_allclose(b.reshape(4, 5, 6), np.where(v > 0, v, 0.25 * v), rtol=1e-6)
