"""Darknet's .weights layout: byte-identical round trips, clear errors for files that don't fit."""

import numpy as np
import pytest

import darknumba as dn
from darknumba.errors import WeightsError
from conftest import ROOT, golden_dir, tiny_weights

FIXTURES = ["det-small", "cls-small", "cls-small-fc", "act-mix"]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_round_trip_is_byte_identical(fixture, tmp_path):
    d = golden_dir(fixture)
    net = dn.load_network(d / f"{fixture}.cfg", d / "init.weights")
    out = tmp_path / "out.weights"
    dn.save_weights(net, out)
    assert out.read_bytes() == (d / "init.weights").read_bytes()


def test_official_yolov3_tiny_round_trip(tmp_path):
    w = tiny_weights()
    net = dn.load_network(ROOT / "cfg" / "yolov3-tiny.cfg", w, batch=1)
    assert net.seen == 32013312
    out = tmp_path / "tiny.weights"
    dn.save_weights(net, out)
    assert out.read_bytes() == w.read_bytes()


def test_connected_bn_records_come_after_weights(tmp_path):
    d = golden_dir("cls-small-fc")
    net = dn.load_network(d / "cls-small-fc.cfg", d / "init.weights")
    fc = net.layers[5]
    assert fc.type == "connected" and fc.batch_normalize
    names = [n for n, _ in fc.weight_records()]
    assert names == ["biases", "weights", "scales", "rolling_mean", "rolling_variance"]
    conv = net.layers[0]
    assert [n for n, _ in conv.weight_records()] == ["biases", "scales", "rolling_mean", "rolling_variance", "weights"]


def _cfg(tmp_path, text):
    p = tmp_path / "t.cfg"
    p.write_text(text)
    return p


SMALL = """[net]
batch=1
width=8
height=8
channels=3
[convolutional]
batch_normalize=1
filters=4
size=3
pad=1
activation=leaky
[connected]
output=5
activation=linear
"""


def _small(tmp_path):
    net = dn.parse_network_cfg(_cfg(tmp_path, SMALL))
    rng = np.random.default_rng(0)
    for l in net.layers:
        for _, a in l.weight_records():
            a[:] = rng.standard_normal(a.size)
    net.seen = 1234
    return net


def test_too_short_names_layer_and_byte_counts(tmp_path):
    net = _small(tmp_path)
    full = tmp_path / "full.weights"
    dn.save_weights(net, full)
    data = full.read_bytes()
    short = tmp_path / "short.weights"
    short.write_bytes(data[:-10])
    with pytest.raises(WeightsError, match=r"holds 1 of the 2 layers t\.cfg needs \(%d bytes; %d "
                                           r"needed\): the file ends inside layer 1 \(connected\) "
                                           r"weights" % (len(data) - 10, len(data))):
        dn.load_weights(dn.parse_network_cfg(_cfg(tmp_path, SMALL)), short)


def test_too_long_is_an_error(tmp_path):
    net = _small(tmp_path)
    p = tmp_path / "long.weights"
    dn.save_weights(net, p)
    p.write_bytes(p.read_bytes() + b"\0" * 8)
    with pytest.raises(WeightsError, match="8 bytes left over"):
        dn.load_weights(dn.parse_network_cfg(_cfg(tmp_path, SMALL)), p)


def test_bad_header_and_old_header(tmp_path):
    p = tmp_path / "bad.weights"
    p.write_bytes(b"\x01\x02")
    with pytest.raises(WeightsError, match="too short"):
        dn.load_weights(dn.parse_network_cfg(_cfg(tmp_path, SMALL)), p)
    p.write_bytes(np.array([-5, 0, 0, 0], "<i4").tobytes())
    with pytest.raises(WeightsError, match="bad header"):
        dn.load_weights(dn.parse_network_cfg(_cfg(tmp_path, SMALL)), p)
    # version 0.1: `seen` is a 4-byte int
    net = _small(tmp_path)
    body = dn.weights.weights_bytes(net)[20:]
    p.write_bytes(np.array([0, 1, 0, 77], "<i4").tobytes() + body)
    net2 = dn.load_weights(dn.parse_network_cfg(_cfg(tmp_path, SMALL)), p)
    assert net2.seen == 77
    np.testing.assert_array_equal(net2.layers[1].weights, net.layers[1].weights)


def test_transposed_connected_weights(tmp_path):
    net = _small(tmp_path)
    fc = net.layers[1]
    parts = [np.array([0, 1001, 0, 5], "<i4").tobytes()]     # minor > 1000: transposed layout
    for l in net.layers:
        for name, a in l.weight_records():
            if l is fc and name == "weights":
                a = a.reshape(fc.outputs, fc.inputs).T
            parts.append(np.ascontiguousarray(a, "<f4").tobytes())
    p = tmp_path / "t.weights"
    p.write_bytes(b"".join(parts))
    net2 = dn.load_weights(dn.parse_network_cfg(_cfg(tmp_path, SMALL)), p)
    np.testing.assert_array_equal(net2.layers[1].weights, fc.weights)


def test_save_is_atomic_and_keeps_old_file_on_failure(tmp_path, monkeypatch):
    net = _small(tmp_path)
    p = tmp_path / "ckpt.weights"
    dn.save_weights(net, p)
    before = p.read_bytes()
    import darknumba.weights as W

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(W.os, "fsync", boom)
    net.layers[1].weights[:] = 0
    with pytest.raises(OSError):
        dn.save_weights(net, p)
    assert p.read_bytes() == before
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".tmp-")] == []


def test_cutoff_loads_a_prefix(tmp_path):
    net = _small(tmp_path)
    p = tmp_path / "part.weights"
    dn.save_weights(net, p, cutoff=1)
    net2 = dn.parse_network_cfg(_cfg(tmp_path, SMALL), seed=None)
    dn.load_weights(net2, p, cutoff=1)
    np.testing.assert_array_equal(net2.layers[0].weights, net.layers[0].weights)
    assert not net2.layers[1].weights.any()


def test_networks_without_weights_start_from_darknets_random_init(tmp_path):
    net = dn.load_network(_cfg(tmp_path, SMALL))
    conv, fc = net.layers
    assert abs(conv.weights.std() - np.sqrt(2 / 27)) < 0.1 * np.sqrt(2 / 27)    # N(0, 2/(k*k*c))
    assert np.abs(fc.weights).max() <= np.sqrt(2 / fc.inputs)                  # U(-s, s)
    assert not conv.biases.any() and (conv.scales == 1).all()
    again = dn.load_network(_cfg(tmp_path, SMALL))
    np.testing.assert_array_equal(again.layers[0].weights, conv.weights)      # seeded


# -- files that are not weights, or do not fit -------------------------------------------------

@pytest.mark.parametrize("header,shown", [
    ([1000000, 0, 0, 0], "1000000.0.0"), ([0, 5000, 0, 0], "0.5000.0"),
    ([0, 2, -1, 0], "0.2.-1"), ([0x474E5089, 0x0A1A0A0D, 0, 0], "1196314761.169478669.0")])
def test_an_absurd_version_is_a_bad_header(tmp_path, header, shown):
    """Not "bytes left over": the header says the file is no Darknet weights (the last is a
    PNG's first bytes)."""
    p = tmp_path / "x.weights"
    p.write_bytes(np.array(header, "<i4").tobytes() + b"\0" * 400)
    with pytest.raises(WeightsError, match=rf"x\.weights: bad header: version {shown} is not one "
                                           r"Darknet writes"):
        dn.load_weights(dn.parse_network_cfg(_cfg(tmp_path, SMALL)), p)


def test_special_files_get_their_own_message(tmp_path):
    import os
    net = dn.parse_network_cfg(_cfg(tmp_path, SMALL))
    fifo = tmp_path / "pipe.weights"
    os.mkfifo(fifo)                                  # opening it for reading would block
    (tmp_path / "empty.weights").write_bytes(b"")
    (tmp_path / "dir.weights").mkdir()
    for path, what in [("/dev/zero", "is a character device"),
                       (fifo, r"is a named pipe \(FIFO\)"),
                       (tmp_path / "dir.weights", "is a directory"),
                       (tmp_path / "empty.weights", r"is empty \(0 bytes\)"),
                       (tmp_path / "missing.weights", "cannot read weights file: No such file")]:
        with pytest.raises(WeightsError, match=what):
            dn.load_weights(net, path)


def test_a_file_that_does_not_fit_changes_nothing(tmp_path):
    net = _small(tmp_path)
    p = tmp_path / "full.weights"
    dn.save_weights(net, p)
    p.write_bytes(p.read_bytes()[:-4])
    before = [a.copy() for l in net.layers for _, a in l.weight_records()]
    with pytest.raises(WeightsError):
        dn.load_weights(net, p)
    for a, b in zip(before, [a for l in net.layers for _, a in l.weight_records()]):
        np.testing.assert_array_equal(a, b)
    assert net.seen == 1234


def test_a_file_cut_after_a_layer_needs_a_partial_load(tmp_path):
    """Layer 0 only: refused by default with the counts (Darknet would leave layer 1 random);
    partial=True loads layer 0; a cut inside a layer is an error even then."""
    net = _small(tmp_path)
    p = tmp_path / "cut.weights"
    dn.save_weights(net, p, cutoff=1)
    size = p.stat().st_size
    full = len(dn.weights.weights_bytes(net))
    fresh = dn.parse_network_cfg(_cfg(tmp_path, SMALL), seed=None)
    with pytest.raises(WeightsError, match=rf"holds 1 of the 2 layers t\.cfg needs \({size} "
                                           rf"bytes; {full} needed\): the file ends inside layer 1 "
                                           r"\(connected\) biases\. A truncated file\?"):
        dn.load_weights(fresh, p)
    assert dn.weights.plan_weights(fresh, p, partial=True).layers == 1
    dn.load_weights(fresh, p, partial=True)
    np.testing.assert_array_equal(fresh.layers[0].weights, net.layers[0].weights)
    assert not fresh.layers[1].weights.any()
    p.write_bytes(p.read_bytes()[:-8])
    with pytest.raises(WeightsError, match=r"the file ends inside layer 0 \(convolutional\) "
                                           r"weights .* a partial weights file ends after a whole"):
        dn.load_weights(fresh, p, partial=True)
    p.write_bytes(dn.weights.weights_bytes(net) + b"\0" * 4)
    with pytest.raises(WeightsError, match="4 bytes left over"):
        dn.load_weights(fresh, p, partial=True)


def test_resuming_from_a_truncated_checkpoint_is_refused(tmp_path):
    """A checkpoint (seen > 0) holding fewer layers than the cfg is a file cut short, unless
    the caller asks for a partial start; a file from `partial` (seen 0) loads as it is."""
    from darknumba.train.detector import load_partial_weights
    net = _small(tmp_path)
    ckpt = tmp_path / "t.backup"
    dn.save_weights(net, ckpt, cutoff=1)                 # seen = 1234
    with pytest.raises(WeightsError, match=r"holds 1 of 2 layers .* has seen 1234 images.* "
                                           r"checkpoint cut short\?"):
        load_partial_weights(dn.parse_network_cfg(_cfg(tmp_path, SMALL)), ckpt,
                             allow_partial=False)
    assert load_partial_weights(dn.parse_network_cfg(_cfg(tmp_path, SMALL)), ckpt) == 1
    net.seen = 0
    cut = tmp_path / "t.conv.1"
    dn.save_weights(net, cut, cutoff=1)
    assert load_partial_weights(dn.parse_network_cfg(_cfg(tmp_path, SMALL)), cut,
                                allow_partial=False) == 1
    dn.save_weights(net, ckpt)
    assert load_partial_weights(dn.parse_network_cfg(_cfg(tmp_path, SMALL)), ckpt,
                                allow_partial=False) == 2


def test_nonfinite_weights_are_named_once(tmp_path):
    import warnings
    from darknumba.errors import WeightsWarning
    from darknumba.weights import nonfinite_layers
    net = _small(tmp_path)
    net.layers[0].weights[3] = np.nan
    net.layers[1].biases[:2] = [np.inf, -np.inf]
    assert nonfinite_layers(net) == [(0, "convolutional", 1), (1, "connected", 2)]
    p = tmp_path / "nan.weights"
    dn.save_weights(net, p)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        loaded = dn.load_network(_cfg(tmp_path, SMALL), p)
    msgs = [str(x.message) for x in w if issubclass(x.category, WeightsWarning)]
    assert msgs == [f"{p}: NaN or Inf weights in layers 0 (convolutional: 1 value), "
                    f"1 (connected: 2 values): outputs will be NaN (saved by a diverged run?)"]
    assert np.isnan(loaded.layers[0].weights[3])
    assert nonfinite_layers(_small(tmp_path)) == []
