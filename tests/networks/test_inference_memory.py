"""A network built for inference allocates what a forward pass needs (issue 32), as AlexeyAB's
parse_network_cfg_custom(cfg, batch > 0) builds with `train = 0`: no delta, weight gradients or
batch norm's kept input until training first needs them (Network.prepare_training), all then at
once within the same memory limit. Training such a network takes the same steps, bit for bit,
as one built for training; aliases ([dropout], [empty], an antialiased layer's blur) stay
aliases."""
import warnings

import numpy as np
import pytest
from tiny_nets import cfg_text, conv, maxpool, section

import darknumba as dn
from darknumba.errors import CfgError
from darknumba.layers import memory
from darknumba.network import _with_inner

CFG = cfg_text(dict(batch=2, subdivisions=1, width=32, height=32, channels=3,
                    learning_rate=0.01, momentum=0.9, decay=0.0005),
               conv(8), maxpool(), conv(8, stride=2, activation="mish", antialiasing=1),
               section("dropout", probability=0.2), section("empty"),
               conv(8, size=1, bn=False), section("shortcut", **{"from": -4}, activation="linear"),
               section("route", layers="-1,3"), conv(21, size=1, bn=False, activation="linear"),
               section("yolo", mask="0,1,2", anchors="4,5, 8,9, 14,12", classes=2, num=3))
TRAINING_ONLY = {"delta", "weight_updates", "x", "rand"}


def _cfg(tmp_path):
    path = tmp_path / "net.cfg"
    path.write_text(CFG)
    return path


def _load(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dn.load_network(path, dialect="alexeyab", **kw)


def _truth(net):
    t = np.zeros((net.batch, net.truths), np.float32)
    t[:, :6] = [0.4, 0.55, 0.3, 0.25, 1, 0]
    t[:, 6:12] = [0.7, 0.3, 0.2, 0.4, 0, 0]
    return t


def test_a_network_built_for_inference_leaves_training_buffers_out(tmp_path):
    net = _load(_cfg(tmp_path), batch=1)
    trained = _load(_cfg(tmp_path), batch=1, train=True)
    assert net.inference_only and not trained.inference_only
    layers = _with_inner(net.layers)
    for l in layers:
        assert not TRAINING_ONLY & set(vars(l)), (l.type, TRAINING_ONLY & set(vars(l)))
    pending = sum(l.pending_bytes() for l in layers)
    # what the build counted is the training build's less the deferred buffers
    assert net.built_bytes == trained.built_bytes - pending and pending > 0
    x = np.random.default_rng(1).random(net.inputs, dtype=np.float32)
    np.testing.assert_array_equal(net.predict(x), trained.predict(x))
    for l in layers:                    # nothing a forward pass runs reads them
        assert not TRAINING_ONLY & set(vars(l)), (l.type, TRAINING_ONLY & set(vars(l)))


def test_training_a_network_built_for_inference_takes_the_same_steps(tmp_path):
    """load_network at a given batch, then train_datum: the deferred buffers come at the
    first training forward; costs and every parameter equal a training build's."""
    lazy = _load(_cfg(tmp_path), batch=2)
    eager = _load(_cfg(tmp_path), batch=2, train=True)
    assert lazy.inference_only and not eager.inference_only
    rng = np.random.default_rng(2)
    for _ in range(3):
        x = rng.random(lazy.batch * lazy.inputs, dtype=np.float32)
        assert lazy.train_datum(x, _truth(lazy)) == eager.train_datum(x, _truth(eager))
    assert not lazy.inference_only
    for a, b in zip(lazy.layers, eager.layers):
        for (name, wa), (_, wb) in zip(a.weight_records(), b.weight_records()):
            np.testing.assert_array_equal(wa, wb, err_msg=f"{a.type} {name}")
        np.testing.assert_array_equal(a.delta, b.delta, err_msg=a.type)
    dropout, empty, aa = lazy.layers[3], lazy.layers[4], lazy.layers[2]
    assert dropout.delta is aa.delta and empty.delta is aa.delta and aa.delta is aa.blur.delta
    for l in _with_inner(lazy.layers):
        assert not l.pending(), l.type


def test_the_budget_counts_what_the_mode_needs(tmp_path):
    """A limit between inference's need and training's: the inference build fits, the training
    build is refused naming the layer, and training the inference build is refused before it
    allocates anything, naming the bytes."""
    path = _cfg(tmp_path)
    need_infer = _load(path, batch=2).built_bytes
    need_train = _load(path, batch=2, train=True).built_bytes
    limit = (need_infer + need_train) // 2
    net = dn.parse_network_cfg(path, batch=2, dialect="alexeyab", max_bytes=limit)
    with pytest.raises(CfgError, match=r"net\.cfg:\d+: \[\w+\]: layer \d+: .*may take at most"):
        dn.parse_network_cfg(path, batch=2, dialect="alexeyab", max_bytes=limit, train=True)
    x = np.zeros(net.batch * net.inputs, np.float32)
    with pytest.raises(memory.SizeError, match=r"net\.cfg: training needs [\d.]+ GiB \([\d,]+ "
                                               r"bytes\) more \(deltas, weight gradients\)"):
        net.train_datum(x, _truth(net))
    assert net.inference_only and "delta" not in vars(net.layers[0])


def test_resize_keeps_the_mode(tmp_path):
    net = _load(_cfg(tmp_path), batch=1)
    net.resize(64, 64)
    assert "delta" not in vars(net.layers[0]) and net.layers[0].pending()["delta"][0] == 64 * 64 * 8
    net.prepare_training()
    net.resize(32, 32)
    assert net.layers[0].delta.size == 32 * 32 * 8 and net.layers[3].delta is net.layers[2].delta


def test_a_layer_reads_a_deferred_buffer_on_first_use(tmp_path):
    """Code that reads a deferred buffer directly (a tool, a replay) gets it allocated then."""
    net = _load(_cfg(tmp_path), batch=1)
    l = net.layers[0]
    assert "x" not in vars(l)
    assert l.x.size == l.outputs and "x" in vars(l) and "x" not in l.pending()
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        l.nothing
