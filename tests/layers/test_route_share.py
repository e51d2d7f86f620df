"""[route] at batch 1 without copies (route.share_outputs): the sources write into the route's
output, a one-source groups route views its slice. Checked bit for bit against the same
network with every route copying (share_outputs switched off), in test mode, after a resize
and through training steps; the parts forward copies and backward adds against numpy."""
import copy
import pickle
from pathlib import Path

import numpy as np
import pytest

from darknumba.network import Network
from darknumba.parser import parse_network_cfg

CFGS = Path(__file__).resolve().parents[2] / "cfg"


def conv(filters, size=3, stride=1, activation="leaky", extra=""):
    return (f"[convolutional]\nfilters={filters}\nsize={size}\nstride={stride}\npad=1\n"
            f"{extra}activation={activation}\n\n")


# every case the sharing has to get right, layer by layer:
BODY = (
    conv(8, extra="batch_normalize=1\n")                          # 0
    + conv(4)                                                     # 1
    + "[route]\nlayers=-1\ngroups=2\ngroup_id=1\n\n"              # 2  views half of 1
    + conv(4, 1, activation="logistic")                           # 3
    + "[maxpool]\nsize=2\nstride=1\n\n"                           # 4
    + "[route]\nlayers=4,3,1\n\n"                                 # 5  three sources
    + conv(4, activation="linear")                                # 6
    + "[dropout]\nprobability=0.3\n\n"                            # 7  aliases 6: 6 copies
    + "[route]\nlayers=6,3\n\n"                                   # 8  3 is also in 5 and 18
    + "[route]\nlayers=8,5\n\n"                                   # 9  a route of routes
    + "[upsample]\nstride=2\n\n"                                  # 10
    + conv(4, stride=2)                                           # 11
    + "[shortcut]\nfrom=3\nactivation=linear\n\n"                 # 12
    + "[route]\nlayers=12,0\n\n"                                  # 13
    + "[route]\nlayers=13\ngroups=3\ngroup_id=0\n\n"              # 14 views a third of 13
    + "[route]\nlayers=14\ngroups=2\ngroup_id=1\n\n"              # 15 views half of 14
    + "[route]\nlayers=6\ngroups=2\ngroup_id=1\n\n"               # 16 6 is aliased: copies
    + "[route]\nlayers=15,16\n\n"                                 # 17
    + "[route]\nlayers=3\n\n"                                     # 18 lent on to 19: hosts 3
    + "[route]\nlayers=17,18\n\n"                                 # 19
    + "[route]\nlayers=3\n\n"                                     # 20 views 3
    + conv(12, 1, activation="linear")                            # 21
    + "[yolo]\nmask=0,1\nanchors=3,4, 6,5, 9,9\nclasses=1\nnum=3\n")  # 22


def build(tmp_path, share, body=BODY, batch=1, w=12, h=10, name="share.cfg"):
    cfg = tmp_path / name
    cfg.write_text(f"[net]\nbatch={batch}\nwidth={w}\nheight={h}\nchannels=3\n"
                   f"learning_rate=0.01\nmomentum=0.9\ndecay=0.0005\n\n{body}")
    with pytest.MonkeyPatch.context() as mp:
        if not share:
            mp.setattr(Network, "share_outputs", lambda self: None)
        net = parse_network_cfg(cfg, seed=3)
    for l in net.layers:             # test mode reads them: 0 blows the outputs up
        if getattr(l, "batch_normalize", 0):
            l.rolling_variance[:] = 1
    return net


def pairs(a, b, names=("output",)):
    for i, (la, lb) in enumerate(zip(a.layers, b.layers)):
        for name in names:
            x, y = getattr(la, name, None), getattr(lb, name, None)
            if isinstance(x, np.ndarray):
                yield f"layer {i} ({la.type}) {name}", x, y


def assert_same(a, b, names=("output",)):
    for what, x, y in pairs(a, b, names):
        assert x.shape == y.shape and np.array_equal(x, y), \
            f"{what}: max |diff| {np.max(np.abs(x - y)) if x.shape == y.shape else x.shape}"


def shared(net, i, j):
    return np.shares_memory(net.layers[i].output, net.layers[j].output)


def shares_nothing(net):
    """No two layers' outputs overlap, but for the [dropout] that is its predecessor's."""
    return not any(shared(net, i, j) for i in range(net.n) for j in range(i)
                   if net.layers[i].output is not net.layers[j].output)


def test_the_routes_copy_only_what_they_must(tmp_path):
    net = build(tmp_path, True)
    L = net.layers
    assert L[2].viewed is L[1].output and shared(net, 2, 1)
    assert L[5].lent == [L[4].output, None, L[1].output]          # 3 lends itself once
    assert L[8].lent == [None, None] and L[7].output is L[6].output  # 6: the dropout's too
    assert L[9].lent == [L[8].output, L[5].output]
    assert shared(net, 8, 9) and shared(net, 5, 9) and not shared(net, 6, 8)
    assert L[14].viewed is L[13].output and L[15].viewed is L[14].output
    assert np.shares_memory(L[15].output, L[13].output[L[15].outputs:2 * L[15].outputs])
    assert L[16].viewed is None and not shared(net, 16, 6)
    assert L[18].lent == [L[3].output] and L[19].lent == [L[17].output, L[18].output]
    assert L[20].viewed is L[3].output and shared(net, 3, 19)


def test_batch_1_outputs_match_the_copying_network(tmp_path):
    a, b = build(tmp_path, True), build(tmp_path, False)
    assert shares_nothing(b)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, a.inputs).astype(np.float32)
    np.testing.assert_array_equal(a.forward(x), b.forward(x))
    assert_same(a, b)
    for net in (a, b):
        net.resize(20, 14)
    assert shared(a, 8, 9) and a.layers[14].viewed is a.layers[13].output
    x = rng.uniform(0, 1, a.inputs).astype(np.float32)
    a.forward(x)
    b.forward(x)
    assert_same(a, b)


def test_copies_of_a_sharing_network_compute_the_same(tmp_path):
    """copy.deepcopy and pickle keep the arrays' identities but not their shared memory: the
    routes see it and copy again."""
    a, b = build(tmp_path, True), build(tmp_path, False)
    copies = [copy.deepcopy(a), pickle.loads(pickle.dumps(a))]
    x = np.random.default_rng(4).uniform(0, 1, a.inputs).astype(np.float32)
    b.forward(x)
    for c in copies:
        c.forward(x)
        assert_same(c, b)


def truth_for(net):
    """Three boxes (x, y, w, h, class) for the one image, in the yolo layer's truth layout."""
    step = getattr(net.layers[-1], "truth_size", 5)
    t = np.zeros((net.truths // step, step), np.float32)
    t[:3, :5] = [(0.3, 0.4, 0.2, 0.3, 0), (0.7, 0.6, 0.4, 0.2, 0), (0.5, 0.2, 0.1, 0.1, 0)]
    return t.ravel()


TRAIN_FIELDS = ("output", "delta", "weights", "weight_updates", "biases", "bias_updates",
                "scales", "scale_updates", "rolling_mean", "rolling_variance")


def test_batch_1_training_matches_the_copying_network(tmp_path):
    a, b = build(tmp_path, True), build(tmp_path, False)
    rng = np.random.default_rng(1)
    for step in range(3):
        if step == 2:
            for net in (a, b):
                net.resize(16, 12)
        x = rng.uniform(0, 1, a.inputs).astype(np.float32)
        t = truth_for(a)
        ca, cb = a.train_datum(x, t), b.train_datum(x, t)
        assert ca == cb or (np.isnan(ca) and np.isnan(cb))
        assert_same(a, b, TRAIN_FIELDS)


def test_yolov4_tiny_at_batch_1_matches_the_copying_network(tmp_path):
    body = (CFGS / "yolov4-tiny.cfg").read_text()
    body = body[body.index("[convolutional]"):]
    a = build(tmp_path, True, body, w=96, h=64, name="v4t.cfg")
    b = build(tmp_path, False, body, w=96, h=64, name="v4t.cfg")
    routes = [l for l in a.layers if l.type == "route"]
    copying = [i for i, l in enumerate(a.layers) if l.type == "route"
               and l.viewed is None and any(v is None for v in l.lent)]
    assert len(routes) == 11 and copying == [24]     # layer 23 lends its output to 34
    x = np.random.default_rng(2).uniform(0, 1, a.inputs).astype(np.float32)
    a.forward(x)
    b.forward(x)
    assert_same(a, b)


def test_no_sharing_beyond_batch_1(tmp_path):
    net = build(tmp_path, True, batch=2)
    assert shares_nothing(net)
    assert all(l.viewed is None and l.lent == [None] * len(l.input_layers)
               for l in net.layers if l.type == "route")


@pytest.mark.parametrize("batch", [1, 3])
def test_route_parts_against_numpy(tmp_path, batch):
    """Forward: each image's parts side by side (a source's group_id-th of `groups` channel
    slices); backward: the route's delta added back into those slices, at batch 1 (shared)
    and 3 (copied)."""
    body = (conv(4) + conv(6) + "[route]\nlayers=0,1,0\n\n"
            + "[route]\nlayers=1\ngroups=3\ngroup_id=1\n\n"
            + "[route]\nlayers=0,1\ngroups=2\ngroup_id=1\n\n")
    net = build(tmp_path, True, body, batch=batch, w=5, h=3)
    assert (net.layers[3].viewed is not None) == (batch == 1)
    assert [v is not None for v in net.layers[2].lent] == [batch == 1] * 2 + [False]
    rng = np.random.default_rng(batch)
    net.forward(rng.uniform(0, 1, batch * net.inputs).astype(np.float32))
    o0, o1 = (l.output.reshape(l.output_shape()) for l in net.layers[:2])
    want = {2: [o0, o1, o0], 3: [o1[:, 2:4]], 4: [o0[:, 2:], o1[:, 3:]]}
    for i, parts in want.items():
        r = net.layers[i]
        np.testing.assert_array_equal(r.output.reshape(r.output_shape()),
                                      np.concatenate(parts, axis=1))
    d0, d1 = (rng.normal(size=l.output_shape()).astype(np.float32) for l in net.layers[:2])
    w0, w1 = d0.copy(), d1.copy()
    for i in (2, 3, 4):
        r = net.layers[i]
        r.delta[:] = rng.normal(size=r.delta.size)
        net.layers[0].delta[:], net.layers[1].delta[:] = d0.ravel(), d1.ravel()
        r.backward(net)
        g = r.delta.reshape(r.output_shape())
        if i == 2:
            w0, w1 = d0 + g[:, :4] + g[:, 10:], d1 + g[:, 4:10]
        elif i == 3:
            w0, w1 = d0, d1.copy()
            w1[:, 2:4] += g
        else:
            w0, w1 = d0.copy(), d1.copy()
            w0[:, 2:] += g[:, :2]
            w1[:, 3:] += g[:, 2:]
        np.testing.assert_array_equal(net.layers[0].delta.reshape(d0.shape), w0)
        np.testing.assert_array_equal(net.layers[1].delta.reshape(d1.shape), w1)
