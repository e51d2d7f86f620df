"""The layer types beyond the yolov3 family, one by one: forward against numpy references
written from Darknet's definitions, backward where Darknet's is not the true gradient against
Darknet's formula, weights round trips. Their backward against finite differences is in
test_gradcheck.py (one checker for every layer)."""
from types import SimpleNamespace

import naive
import numpy as np
import pytest

import darknumba as dn
from darknumba.cfg import parse_cfg_text
from darknumba.layers import LAYER_TYPES
from darknumba.layers.base import SizeParams, UpdateArgs
from darknumba.weights import load_weights, save_weights
from darknumba.dialect import quirks_for

def rand(rng, *shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def build(section_text, batch, h, w, c, inputs=None, compat=None, time_steps=1):
    """One layer from a cfg section, with a minimal network as its builder sees it."""
    s = parse_cfg_text(section_text)[0]
    net = SimpleNamespace(layers=[], quirks=quirks_for(compat=compat), time_steps=time_steps, adam=False)
    params = SizeParams(batch=batch, h=h, w=w, c=c, inputs=inputs or h * w * c, index=0, net=net)
    return LAYER_TYPES[s.type].from_cfg(s, params)


def run_net(l, x, train=True, truth=None, seen=0, want_delta=True, compat=None):
    ws = np.zeros(max(getattr(l, "workspace_size", 0), 1), np.float32)
    return SimpleNamespace(input=np.ascontiguousarray(x, np.float32).ravel(), train=train,
                           truth=truth, seen=seen, workspace=ws, index=0, quirks=quirks_for(compat=compat),
                           delta=np.zeros(x.size, np.float32) if want_delta else None)


def forward(l, x, train=True, truth=None, seen=0):
    net = run_net(l, x, train, truth, seen)
    for key in ("state", "h_state", "c_state"):        # recurrent layers: start from h = 0
        if hasattr(l, key):
            getattr(l, key).fill(0)
    l.delta.fill(0)
    l.forward(net)
    return net, l.output.copy()


def backward_with(l, x, g, train=True):
    """net.delta after backward with the layer's delta seeded to g: the gradient of
    sum(g * output) w.r.t. the input (Darknet's sign convention: delta = -dLoss/d.)."""
    net, _ = forward(l, x, train)
    l.delta[:] = g.ravel()
    l.backward(net)
    return net.delta.copy()


# -- activation, logistic, l2norm ------------------------------------------------------------

def test_activation_forward_backward(rng):
    l = build("[activation]\nactivation=leaky\n", 2, 3, 4, 5)
    x = rand(rng, 2, 5, 3, 4)
    x += np.sign(x) * 0.05                             # finite differences stay off the kink
    _, y = forward(l, x)
    np.testing.assert_allclose(y, np.where(x > 0, x, 0.1 * x).ravel(), rtol=1e-6)
    assert "Activation Layer: 60 inputs" == l.describe()


def test_activation_compat_overwrites_previous_delta(rng):
    l = build("[activation]\n", 1, 2, 2, 1, compat="darknet-cpu")
    x = rand(rng, 1, 1, 2, 2)
    net, _ = forward(l, x)
    net.delta[:] = 5
    l.delta[:] = 1
    l.backward(net)
    np.testing.assert_array_equal(net.delta, 1)       # linear: copied, not added


def test_logistic_cross_entropy(rng):
    l = build("[logistic]\n", 3, 1, 1, 4, inputs=4)
    x = rand(rng, 3, 4, lo=-3, hi=3)
    t = (rng.uniform(size=(3, 4)) > 0.5).astype(np.float32)
    net, y = forward(l, x, truth=t.ravel())
    p = naive.sigmoid(x).ravel()
    np.testing.assert_allclose(y, p, rtol=1e-6)
    np.testing.assert_allclose(l.delta, t.ravel() - p, atol=1e-6)
    ce = -(t.ravel() * np.log(p) + (1 - t.ravel()) * np.log(1 - p)).sum()
    assert l.cost == pytest.approx(ce, rel=1e-5)
    net.delta[:] = 0
    l.backward(net)
    np.testing.assert_allclose(net.delta, t.ravel() - p, atol=1e-6)    # BCE w.r.t. the logit


def test_l2norm_forward_and_passthrough_backward(rng):
    l = build("[l2norm]\n", 2, 3, 3, 4)
    x = rand(rng, 2, 4, 3, 3)
    _, y = forward(l, x)
    ref = x / np.sqrt((x.astype(np.float64) ** 2).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(y, ref.ravel(), rtol=1e-5)
    g = rand(rng, l.output.size)
    np.testing.assert_array_equal(backward_with(l, x, g), g)     # Darknet: delta unchanged


# -- normalization (LRN) ---------------------------------------------------------------------

def test_lrn_window_quirk(rng):
    """Past the first `size` channels the window is the textbook one minus channel size/2."""
    x = rand(rng, 1, 9, 1, 1)
    _, norms = naive.lrn_forward(x, 3, 1.0, 0.75, 1.0)
    sq = x.ravel().astype(np.float64) ** 2
    assert norms.ravel()[5] == pytest.approx(1 + sq[4:7].sum() - sq[1])


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_normalization_forward_and_darknet_backward(rng, size):
    l = build(f"[lrn]\nsize={size}\nalpha=0.5\nbeta=0.75\nkappa=2\n", 2, 3, 2, 6)
    x = rand(rng, 2, 6, 3, 2, lo=-2, hi=2)
    _, y = forward(l, x)
    ref, norms = naive.lrn_forward(x, size, 0.5, 0.75, 2.0)
    np.testing.assert_allclose(y, ref.ravel(), rtol=1e-5)
    g = rand(rng, l.output.size)
    # Darknet's approximate backward: delta * norms^-beta (cross-channel terms dropped)
    np.testing.assert_allclose(backward_with(l, x, g), g * (norms ** -0.75).ravel(), rtol=1e-5)
    assert l.describe() == f"Local Response Normalization Layer: 2 x 3 x 6 image, {size} size"


# -- batchnorm -------------------------------------------------------------------------------

def test_batchnorm_train_and_test_forward_backward_and_update(rng):
    l = build("[batchnorm]\n", 3, 2, 3, 4)
    l.scales[:] = rand(rng, 4, lo=0.5, hi=1.5)
    l.biases[:] = rand(rng, 4)
    l.rolling_mean[:] = rand(rng, 4)
    l.rolling_variance[:] = rand(rng, 4, lo=0.5, hi=2)
    rm, rv = l.rolling_mean.copy(), l.rolling_variance.copy()
    x = rand(rng, 3, 4, 2, 3, lo=-2, hi=2)
    _, y = forward(l, x, train=False)
    ref = (x - rm[None, :, None, None]) / (np.sqrt(rv)[None, :, None, None] + 1e-6)
    ref = ref * l.scales[None, :, None, None] + l.biases[None, :, None, None]
    np.testing.assert_allclose(y, ref.ravel(), rtol=1e-5, atol=1e-6)
    _, y = forward(l, x, train=True)
    mu = x.mean(axis=(0, 2, 3))
    var = x.var(axis=(0, 2, 3), ddof=1)                                 # unbiased, as Darknet
    ref = (x - mu[None, :, None, None]) / (np.sqrt(var)[None, :, None, None] + 1e-6)
    ref = ref * l.scales[None, :, None, None] + l.biases[None, :, None, None]
    np.testing.assert_allclose(y, ref.ravel(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(l.rolling_mean, 0.99 * rm + 0.01 * mu, rtol=1e-5, atol=1e-6)
    g = rand(rng, l.output.size)
    backward_with(l, x, g)
    bias_updates = g.reshape(3, 4, 6).astype(np.float64).sum(axis=(0, 2))   # backward_bias
    np.testing.assert_allclose(l.bias_updates, bias_updates, rtol=1e-5, atol=1e-6)
    b0 = l.biases.copy()
    l.update(UpdateArgs(batch=3, learning_rate=0.1, momentum=0.9, decay=0.0005))
    np.testing.assert_allclose(l.biases, b0 + 0.1 / 3 * bias_updates, rtol=1e-5, atol=1e-6)
    assert [n for n, _ in l.weight_records()] == ["scales", "rolling_mean", "rolling_variance"]


# -- reorg -----------------------------------------------------------------------------------

@pytest.mark.parametrize("reverse", [0, 1])
def test_reorg_permutation_and_adjoint(rng, reverse):
    if reverse:
        l = build("[reorg]\nstride=2\nreverse=1\n", 2, 3, 3, 8)
        x = rand(rng, 2, 8, 3, 3)
    else:
        l = build("[reorg]\nstride=2\n", 2, 4, 6, 4)
        x = rand(rng, 2, 4, 4, 6)
    _, y = forward(l, x)
    np.testing.assert_array_equal(y, naive.reorg(x, 2, 1 if reverse else 0))
    assert sorted(y) == sorted(x.ravel())
    g = rand(rng, l.output.size)
    dx = backward_with(l, x, g)
    assert np.dot(g, y) == pytest.approx(np.dot(dx, x.ravel()), rel=1e-5)   # adjoint


def test_reorg_shapes_like_yolov2():
    l = build("[reorg]\nstride=2\n", 1, 26, 26, 64)
    assert (l.out_w, l.out_h, l.out_c) == (13, 13, 256)
    assert l.describe() == "reorg              / 2    26 x  26 x  64   ->    13 x  13 x 256"


# -- crop ------------------------------------------------------------------------------------

def test_crop_test_mode_centre_and_train_flip(rng):
    l = build("[crop]\ncrop_height=3\ncrop_width=4\nflip=1\n", 2, 5, 6, 3)
    x = rand(rng, 2, 3, 5, 6, lo=0, hi=1)
    _, y = forward(l, x, train=False)
    np.testing.assert_allclose(y, (x[:, :, 1:4, 1:5] * 2 - 1).ravel(), rtol=1e-6)
    seen = set()
    for _ in range(30):
        _, y = forward(l, x, train=True)
        y = y.reshape(2, 3, 3, 4)
        found = False
        for dh in range(3):
            for dw in range(3):
                win = x[:, :, dh:dh + 3, dw:dw + 4] * 2 - 1
                for flip in (0, 1):
                    ref = win[..., ::-1] if flip else win
                    if np.allclose(y, ref):
                        found = True
                        seen.add(flip)
        assert found
    assert seen == {0, 1}


# -- local -----------------------------------------------------------------------------------

@pytest.mark.parametrize("size,stride,pad", [(3, 1, 1), (3, 2, 0), (1, 1, 0), (2, 2, 0)])
def test_local_forward_backward(rng, size, stride, pad):
    l = build(f"[local]\nfilters=3\nsize={size}\nstride={stride}\npad={pad}\nactivation=linear\n",
              2, 5, 4, 2)
    l.weights[:] = rand(rng, l.nweights)
    l.biases[:] = rand(rng, l.outputs)
    x = rand(rng, 2, 2, 5, 4)
    _, y = forward(l, x)
    ref = naive.local_forward(x, l.weights, l.biases, 3, size, stride, pad)
    np.testing.assert_allclose(y, ref.ravel(), rtol=1e-5, atol=1e-5)


def test_local_weights_round_trip(rng, tmp_path):
    cfg = tmp_path / "loc.cfg"
    cfg.write_text("[net]\nbatch=1\nwidth=5\nheight=5\nchannels=2\n\n"
                   "[local]\nfilters=2\nsize=3\nstride=1\npad=1\nactivation=leaky\n")
    net = dn.parse_network_cfg(cfg)
    l = net.layers[0]
    assert l.weights.size == 5 * 5 * 2 * 3 * 3 * 2 and l.biases.size == 5 * 5 * 2
    l.weights[:] = rand(rng, l.weights.size)
    l.biases[:] = rand(rng, l.biases.size)
    save_weights(net, tmp_path / "a.weights")
    data = (tmp_path / "a.weights").read_bytes()
    assert len(data) == 20 + 4 * (l.biases.size + l.weights.size)
    np.testing.assert_array_equal(np.frombuffer(data[20:20 + 4 * l.biases.size], "<f4"), l.biases)
    net2 = dn.parse_network_cfg(cfg)
    load_weights(net2, tmp_path / "a.weights")
    np.testing.assert_array_equal(net2.layers[0].weights, l.weights)


# -- deconvolutional -------------------------------------------------------------------------

@pytest.mark.parametrize("size,stride,pad", [(2, 2, 0), (3, 1, 1), (4, 2, 1), (3, 2, 0)])
def test_deconvolutional_forward_backward(rng, size, stride, pad):
    l = build(f"[deconvolutional]\nfilters=3\nsize={size}\nstride={stride}\npadding={pad}\n"
              f"activation=linear\n", 2, 3, 4, 2)
    l.weights[:] = rand(rng, l.nweights)
    l.biases[:] = rand(rng, 3)
    x = rand(rng, 2, 2, 3, 4)
    _, y = forward(l, x)
    np.testing.assert_allclose(y, naive.deconv_forward(x, l.weights, l.biases, 3, size, stride, pad).ravel(),
                               rtol=1e-5, atol=1e-5)


def test_deconvolutional_batchnorm_records():
    l = build("[deconv]\nfilters=2\nsize=2\nstride=2\nbatch_normalize=1\nactivation=leaky\n",
              2, 2, 2, 3)
    assert [n for n, _ in l.weight_records()] == ["biases", "scales", "rolling_mean",
                                                  "rolling_variance", "weights"]


# -- recurrent -------------------------------------------------------------------------------

def _randomise(rng, layers):
    for sub in layers:
        sub.weights[:] = rand(rng, sub.weights.size, lo=-0.5, hi=0.5)
        sub.biases[:] = rand(rng, sub.biases.size, lo=-0.5, hi=0.5)


def test_rnn_matches_numpy_recurrence(rng):
    steps, batch, inputs, outputs = 4, 2, 3, 5
    l = build(f"[rnn]\noutput={outputs}\nactivation=tanh\n", batch * steps, 1, 1, inputs,
              inputs=inputs, time_steps=steps)
    _randomise(rng, l.sublayers())
    x = rand(rng, steps, batch, inputs)
    _, y = forward(l, x)
    Wi, Ws, Wo = (s.weights.reshape(outputs, -1).astype(np.float64) for s in l.sublayers())
    bi, bs, bo = (s.biases.astype(np.float64) for s in l.sublayers())
    h = np.zeros((batch, outputs))
    for t in range(steps):
        h = np.tanh(x[t] @ Wi.T + bi) + np.tanh(h @ Ws.T + bs)
        np.testing.assert_allclose(y.reshape(steps, batch, outputs)[t], np.tanh(h @ Wo.T + bo),
                                   rtol=1e-4, atol=1e-5)


def test_lstm_matches_numpy_and_carries_state(rng):
    steps, batch, inputs, outputs = 3, 2, 3, 4
    l = build(f"[lstm]\noutput={outputs}\n", batch * steps, 1, 1, inputs, inputs=inputs,
              time_steps=steps)
    _randomise(rng, l.sublayers())
    x = rand(rng, steps, batch, inputs)
    _, y = forward(l, x)
    W = {n: getattr(l, n).weights.reshape(outputs, -1).astype(np.float64) for n in
         ("wf", "wi", "wg", "wo", "uf", "ui", "ug", "uo")}
    B = {n: getattr(l, n).biases.astype(np.float64) for n in W}
    h, c = np.zeros((batch, outputs)), np.zeros((batch, outputs))
    for t in range(steps):
        pre = {g: h @ W["w" + g].T + B["w" + g] + x[t] @ W["u" + g].T + B["u" + g] for g in "figo"}
        f, i, o = naive.sigmoid(pre["f"]), naive.sigmoid(pre["i"]), naive.sigmoid(pre["o"])
        c = f * c + i * np.tanh(pre["g"])
        h = o * np.tanh(c)
        np.testing.assert_allclose(y.reshape(steps, batch, outputs)[t], h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(l.h_state, h.ravel(), rtol=1e-4, atol=1e-5)
    assert [n.split(".")[0] for n, _ in l.weight_records()][::2] == \
        ["wi", "wf", "wo", "wg", "ui", "uf", "uo", "ug"]


def test_crnn_shape_and_weights_layout():
    steps, batch = 2, 1
    l = build("[crnn]\nhidden_filters=3\noutput_filters=2\nactivation=leaky\n", batch * steps,
              4, 3, 2, time_steps=steps)
    assert (l.out_c, l.out_h, l.out_w) == (2, 4, 3)
    assert [n for n, _ in l.weight_records()] == [
        "input.biases", "input.weights", "self.biases", "self.weights", "output.biases",
        "output.weights"]


def test_gru_weights_round_trip(rng, tmp_path):
    cfg = tmp_path / "gru.cfg"
    cfg.write_text("[net]\nbatch=4\ntime_steps=2\ninputs=6\n\n[gru]\noutput=3\n\n"
                   "[connected]\noutput=6\nactivation=linear\n\n[softmax]\n")
    net = dn.parse_network_cfg(cfg)
    _randomise(rng, net.layers[0].sublayers())
    save_weights(net, tmp_path / "g.weights")
    size = (tmp_path / "g.weights").stat().st_size
    assert size == 20 + 4 * (3 * (3 + 3 * 3) + 3 * (3 + 6 * 3) + 6 + 3 * 6)
    net2 = dn.parse_network_cfg(cfg)
    load_weights(net2, tmp_path / "g.weights")
    for a, b in zip(net.layers[0].sublayers(), net2.layers[0].sublayers(), strict=True):
        np.testing.assert_array_equal(a.weights, b.weights)
    x = rand(rng, 8, 6)                      # net.batch = batch x time_steps rows, step-major
    t = np.eye(6, dtype=np.float32)[rng.integers(6, size=8)]
    assert np.isfinite(net.train_datum(x, t))


# -- region (YOLOv2) -------------------------------------------------------------------------

@pytest.mark.parametrize("seen,rescore", [(0, 0), (20000, 1)])
def test_region_forward_deltas_and_backward(rng, seen, rescore):
    n, classes, w, h = 3, 4, 5, 4
    anchors = [0.8, 1.2, 2.0, 1.5, 3.1, 3.3]
    text = (f"[region]\nanchors={','.join(map(str, anchors))}\nclasses={classes}\nnum={n}\n"
            f"softmax=1\ncoord_scale=1.5\nobject_scale=5\nnoobject_scale=0.5\nclass_scale=2\n"
            f"thresh=.6\nrescore={rescore}\n")
    l = build(text, 2, h, w, n * (5 + classes))
    x = rand(rng, 2, n * (5 + classes), h, w, lo=-2, hi=2)
    truth = np.zeros((2, 30 * 5), np.float32)
    truth[0, :10] = [0.31, 0.42, 0.2, 0.3, 2, 0.77, 0.13, 0.5, 0.25, 0]
    truth[1, :5] = [0.55, 0.66, 0.6, 0.7, 3]
    net, y = forward(l, x, truth=truth.ravel(), seen=seen)
    xr = x.reshape(2, n, 5 + classes, h, w).astype(np.float64)
    ref = xr.copy()
    ref[:, :, [0, 1, 4]] = naive.sigmoid(xr[:, :, [0, 1, 4]])
    e = np.exp(xr[:, :, 5:] - xr[:, :, 5:].max(axis=2, keepdims=True))
    ref[:, :, 5:] = e / e.sum(axis=2, keepdims=True)
    np.testing.assert_allclose(y, ref.ravel(), rtol=1e-5, atol=1e-6)
    want = naive.region_deltas(y, truth, anchors, n, w, h, classes, 0.6, seen,
                             (1.5, 5.0, 0.5, 2.0), rescore)
    np.testing.assert_allclose(l.delta, want, rtol=1e-4, atol=1e-5)
    assert l.cost == pytest.approx(float((want ** 2).sum()), rel=1e-4)
    assert l.stats["count"] == 3
    net.delta[:] = 0
    l.backward(net)
    grad = want.reshape(2, n, 5 + classes, h, w).copy()
    yr = y.reshape(grad.shape)
    grad[:, :, [0, 1, 4]] *= yr[:, :, [0, 1, 4]] * (1 - yr[:, :, [0, 1, 4]])
    np.testing.assert_allclose(net.delta, grad.ravel(), rtol=1e-4, atol=1e-6)


def test_region_compat_cpu_backward_is_empty_and_detections(rng):
    l = build("[region]\nanchors=1,1,2,2\nclasses=2\nnum=2\nsoftmax=1\n", 1, 2, 2, 14,
              compat="darknet-cpu")
    x = rand(rng, 1, 14, 2, 2)
    truth = np.zeros(150, np.float32)
    truth[:5] = [0.3, 0.3, 0.2, 0.2, 1]
    net, y = forward(l, x, truth=truth)
    l.backward(net)
    assert not net.delta.any()
    dets = l.get_detections(2, 2, 2, 2, thresh=0.0, letterbox=False)
    assert len(dets) == 8
    yr = y.reshape(2, 7, 2, 2)
    # cell (col 1, row 0), anchor 1 is row 1*2 + 1 = 3 in Darknet's order (cell, then anchor)
    np.testing.assert_allclose(dets.bbox[3], [(1 + yr[1, 0, 0, 1]) / 2, yr[1, 1, 0, 1] / 2,
                                              np.exp(yr[1, 2, 0, 1]) * 2 / 2,
                                              np.exp(yr[1, 3, 0, 1]) * 2 / 2], rtol=1e-5)
    np.testing.assert_allclose(dets.prob[3], yr[1, 4, 0, 1] * yr[1, 5:, 0, 1], rtol=1e-5)


# -- detection (YOLOv1) ----------------------------------------------------------------------

def test_detection_deltas(rng):
    side, n, classes = 2, 2, 3
    inputs = side * side * (classes + n * 5)
    l = build(f"[detection]\nclasses={classes}\ncoords=4\nrescore=1\nside={side}\nnum={n}\n"
              f"softmax=0\nsqrt=1\nobject_scale=1\nnoobject_scale=.5\nclass_scale=1\n"
              f"coord_scale=5\n", 1, 1, 1, inputs, inputs=inputs)
    x = rand(rng, 1, inputs, lo=0.1, hi=0.9)
    truth = np.zeros((side * side, 1 + classes + 4), np.float32)
    truth[3] = [1, 0, 1, 0, 0.4, 0.6, 0.3, 0.5]          # cell 3: class 1, in-cell offset, size
    _, y = forward(l, x, truth=truth.ravel())
    d = l.delta
    L = side * side
    conf = d[L * classes:L * (classes + n)].reshape(L, n)
    np.testing.assert_allclose(conf[:3], -0.5 * x[0, L * classes:L * classes + 3 * n].reshape(3, n),
                               rtol=1e-6)
    np.testing.assert_allclose(d[3 * classes:4 * classes], [0 - x[0, 9], 1 - x[0, 10], 0 - x[0, 11]],
                               rtol=1e-6)
    boxes = x[0, L * (classes + n):].reshape(L, n, 4).astype(np.float64)
    tb = np.array([0.4 / side, 0.6 / side, 0.3, 0.5])

    def iou(p):
        p = [p[0] / side, p[1] / side, p[2] ** 2, p[3] ** 2]
        ix = min(p[0] + p[2] / 2, tb[0] + tb[2] / 2) - max(p[0] - p[2] / 2, tb[0] - tb[2] / 2)
        iy = min(p[1] + p[3] / 2, tb[1] + tb[3] / 2) - max(p[1] - p[3] / 2, tb[1] - tb[3] / 2)
        inter = 0 if ix < 0 or iy < 0 else ix * iy
        return inter / (p[2] * p[3] + tb[2] * tb[3] - inter)
    ious = [iou(boxes[3, j]) for j in range(n)]
    best = int(np.argmax(ious))
    assert conf[3, best] == pytest.approx(ious[best] - y[L * classes + 3 * n + best], rel=1e-4)
    want = 5 * (np.array([0.4, 0.6, np.sqrt(0.3), np.sqrt(0.5)]) - boxes[3, best])
    np.testing.assert_allclose(d[L * (classes + n) + (3 * n + best) * 4:][:4], want, rtol=1e-5)
    assert l.cost == pytest.approx(float((d.astype(np.float64) ** 2).sum()), rel=1e-5)


# -- iseg ------------------------------------------------------------------------------------

def test_iseg_deltas(rng):
    classes, ids, h, w = 2, 3, 3, 4
    wh = h * w
    l = build(f"[iseg]\nclasses={classes}\nids={ids}\n", 1, h, w, classes + ids)
    x = rand(rng, 1, classes + ids, h, w)
    truth = np.full((90, wh + 1), 0, np.float32)
    truth[2:, 0] = -1                                         # two instances
    truth[0, 0], truth[1, 0] = 1, 0
    m0 = np.zeros(wh, np.float32)
    m0[[0, 1, 5]] = 1
    m1 = np.zeros(wh, np.float32)
    m1[[7, 10, 11]] = 1
    truth[0, 1:], truth[1, 1:] = m0, m1
    _, y = forward(l, x, truth=truth.ravel())
    y = y.reshape(classes + ids, wh).astype(np.float64)
    np.testing.assert_allclose(y[:classes], naive.sigmoid(x.reshape(classes + ids, wh)[:classes]),
                               rtol=1e-6)
    want = np.concatenate([-y[:classes], -0.1 * y[classes:]])
    want[1, m0 == 1] = 1 - y[1, m0 == 1]
    want[0, m1 == 1] = 1 - y[0, m1 == 1]
    emb = y[classes:]
    means = [emb[:, m == 1].mean(axis=1) for m in (m0, m1)]
    for i, m in enumerate((m0, m1)):
        for k in np.flatnonzero(m):
            for j, mu in enumerate(means):
                step = np.where(mu - emb[:, k] < 0, -0.1, 0.1)
                want[classes:, k] += step if i == j else -step
    want[classes:] *= 0.01
    np.testing.assert_allclose(l.delta, want.ravel(), rtol=1e-4, atol=1e-6)


def _tree_layer(tmp_path, batch=1):
    (tmp_path / "t.tree").write_text("a -1\nb -1\na1 0\na2 0\na3 0\nb1 1\nb2 1\n")
    text = (f"[region]\nanchors=1,1.5,2,2\nclasses=7\nnum=2\nsoftmax=1\nthresh=.6\n"
            f"tree={tmp_path / 't.tree'}\n")
    return build(text, batch, 3, 3, 2 * (5 + 7))


def test_region_tree_softmax_and_hierarchical_deltas(rng, tmp_path):
    l = _tree_layer(tmp_path)
    t = l.tree
    assert list(t.group_offset) == [0, 2, 5] and list(t.group_size) == [2, 3, 2]
    assert list(t.child[:2]) == [1, 2] and list(t.leaf) == [0, 0, 1, 1, 1, 1, 1]
    x = rand(rng, 1, 2 * 12, 3, 3, lo=-2, hi=2)
    truth = np.zeros(150, np.float32)
    truth[:5] = [0.5, 0.5, 0.4, 0.5, 3]                         # class a2, child of a
    _, y = forward(l, x, truth=truth, seen=20000)
    cls = y.reshape(2, 12, 9)[:, 5:]
    xr = x.reshape(2, 12, 9)[:, 5:].astype(np.float64)
    for o, s in ((0, 2), (2, 3), (5, 2)):                      # a softmax per sibling group
        e = np.exp(xr[:, o:o + s] - xr[:, o:o + s].max(axis=1, keepdims=True))
        np.testing.assert_allclose(cls[:, o:o + s], e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    d = l.delta.reshape(2, 12, 9)
    a = int(np.abs(d[:, 0, 4]).argmax())                        # the anchor the truth went to
    want = np.zeros(7)
    want[[0, 3]] = 1                                            # path a2 -> a; siblings to 0
    for c in (0, 1, 2, 3, 4):
        assert d[a, 5 + c, 4] == pytest.approx(want[c] - cls[a, c, 4], rel=1e-5)
    assert d[a, 5 + 5, 4] == 0 and d[a, 5 + 6, 4] == 0           # b's group is off the path
    assert l.stats["class"] == pytest.approx(cls[a, 3, 4] * cls[a, 0, 4], rel=1e-5)


def test_region_tree_classification_only_truth_and_top_prediction(rng, tmp_path):
    l = _tree_layer(tmp_path)
    x = rand(rng, 1, 2 * 12, 3, 3, lo=-2, hi=2)
    truth = np.zeros(150, np.float32)
    truth[:5] = [200000, 200000, 1, 1, 6]                       # class b2, no box
    _, y = forward(l, x, truth=truth, seen=20000)
    yr, d = y.reshape(2, 12, 9), l.delta.reshape(2, 12, 9)
    score = yr[:, 4] * yr[:, 5 + 6] * yr[:, 5 + 1]              # obj * P(b2 | b) * P(b)
    a, k = np.unravel_index(int(score.argmax()), score.shape)
    assert d[a, 4, k] == 0
    others = np.ones((2, 9), bool)
    others[a, k] = False
    np.testing.assert_allclose(d[:, 4][others], -yr[:, 4][others], rtol=1e-6)
    assert not d[:, :4].any()                                   # no box deltas
    assert d[a, 5 + 6, k] == pytest.approx(1 - yr[a, 5 + 6, k], rel=1e-5)
    dets = l.get_detections(3, 3, 3, 3, thresh=0.0, letterbox=False, hier=0.0)
    i = k * 2 + a
    p = yr[a, 5:, k].astype(np.float64).copy()
    p[2:5] *= p[0]
    p[5:7] *= p[1]
    best_root = int(np.argmax(p[:2]))
    kids = slice(2, 5) if best_root == 0 else slice(5, 7)
    top = (2 if best_root == 0 else 5) + int(np.argmax(p[kids]))
    assert int(np.flatnonzero(dets.prob[i])[0]) == top
    assert dets.prob[i, top] == pytest.approx(yr[a, 4, k])


def test_random_init_covers_every_layer_with_weights(tmp_path):
    from darknumba.parser import init_weights as random_init
    cfg = tmp_path / "all.cfg"
    cfg.write_text("[net]\nbatch=2\ntime_steps=2\nwidth=6\nheight=6\nchannels=2\n\n"
                   "[local]\nfilters=2\nsize=3\nstride=1\npad=1\n\n"
                   "[deconvolutional]\nfilters=2\nsize=2\nstride=2\n\n"
                   "[crnn]\nhidden_filters=2\noutput_filters=2\n\n"
                   "[rnn]\noutput=3\n\n[gru]\noutput=3\n\n[lstm]\noutput=3\n")
    net = dn.parse_network_cfg(cfg, seed=None)
    random_init(net, seed=3)
    for l in net.layers:
        for name, a in l.weight_records():
            if name.endswith("weights"):
                assert np.count_nonzero(a) == a.size, (l.type, name)


def test_softmax_tree_is_one_softmax_per_sibling_group(tmp_path):
    tree = tmp_path / "t.tree"
    tree.write_text("a -1\nb -1\nc 0\nd 0\ne 0\nf 1\n")
    cfg = tmp_path / "s.cfg"
    cfg.write_text(f"[net]\nbatch=3\ninputs=6\n[softmax]\ntree={tree}\ntemperature=2\n")
    net = dn.parse_network_cfg(cfg)
    x = np.random.default_rng(0).normal(0, 3, (3, 6)).astype(np.float32)
    y = net.forward(x).reshape(3, 6)
    for lo, hi in [(0, 2), (2, 5), (5, 6)]:
        z = x[:, lo:hi].astype(np.float64) / 2
        e = np.exp(z - z.max(1, keepdims=True))
        np.testing.assert_allclose(y[:, lo:hi], e / e.sum(1, keepdims=True), rtol=1e-5)
    cfg.write_text(f"[net]\nbatch=1\ninputs=7\n[softmax]\ntree={tree}\n")
    with pytest.raises(dn.CfgError, match="the tree has 6 classes, the layer has 7 inputs"):
        dn.parse_network_cfg(cfg)
