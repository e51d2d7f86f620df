"""A layer answers what services ask of it (layers/base.py's capabilities), and the services
(train, vision, export, parity, cli, the engine) ask it instead of switching on l.type."""
import re
from pathlib import Path

import pytest

import darknumba as dn
from darknumba.layers.base import Layer
from darknumba.layers.connected import ConnectedLayer
from darknumba.layers.convolutional import ConvolutionalLayer
from darknumba.layers.cost import CostLayer
from darknumba.layers.crnn import CRNNLayer
from darknumba.layers.crop import CropLayer
from darknumba.layers.detection import DetectionLayer
from darknumba.layers.dropout import DropoutLayer
from darknumba.layers.gru import GRULayer
from darknumba.layers.lstm import LSTMLayer
from darknumba.layers.region import RegionLayer
from darknumba.layers.rnn import RNNLayer
from darknumba.layers.yolo import YoloLayer
from darknumba.layers.yolo_ab import AbYoloLayer

SRC = Path(dn.__file__).parent
# issue 30's grep: a layer's type or a probed attribute, outside layers/. 69 on 2026-12-03
# before the capabilities; only ever lower it
TYPE_SWITCH = re.compile(r'\.type ==|\.type in|l\.type\b|hasattr\(l')
MAX_TYPE_SWITCHES = 47


def test_capabilities_of_the_layer_classes():
    assert (Layer.detector_head, Layer.makes_detections, Layer.recurrent) == (False,) * 3
    for cls in (YoloLayer, AbYoloLayer, RegionLayer):
        assert cls.detector_head and cls.makes_detections
    assert DetectionLayer.makes_detections and not DetectionLayer.detector_head
    assert DropoutLayer.draws_random and CropLayer.draws_random and DetectionLayer.draws_random
    assert CostLayer.is_cost_layer and not Layer.is_cost_layer and not Layer.draws_random
    assert ConvolutionalLayer.bn_foldable and ConnectedLayer.bn_foldable
    assert not (Layer.bn_foldable or RNNLayer.bn_foldable)
    for cls in (RNNLayer, GRULayer, LSTMLayer, CRNNLayer):
        assert cls.recurrent


def test_a_layer_without_detections_says_so():
    with pytest.raises(NotImplementedError, match=r"\[none\] makes no detections"):
        Layer().detections(None, 1, 1, 0.5, 0.5, True, 0, True)
    assert Layer().sublayers() == [] and Layer().reset_state(0) is None
    assert Layer().forward_path(None) == ""


def test_services_switch_on_layer_types_no_more_than_before():
    hits = [f"{p.relative_to(SRC)}:{k}" for p in sorted(SRC.rglob("*.py"))
            if "layers" not in p.relative_to(SRC).parts[:1]
            for k, line in enumerate(p.read_text().splitlines(), 1) if TYPE_SWITCH.search(line)]
    assert len(hits) <= MAX_TYPE_SWITCHES, "\n".join(hits)


def test_convolution_load_records_and_after_load(tmp_path):
    """numload=, dontloadscales= and flipped=1 of a [convolutional], asked of the layer by
    load_weights (Layer.load_records, Layer.after_load)."""
    import numpy as np
    from darknumba.parser import parse_network_cfg
    from darknumba.weights import load_weights, save_weights
    conv = "[net]\nwidth=4\nheight=4\nchannels=2\n[convolutional]\nfilters=3\nsize=1\n" \
           "batch_normalize=1\nactivation=linear\n"
    (tmp_path / "a.cfg").write_text(conv)
    (tmp_path / "b.cfg").write_text(conv + "numload=2\ndontloadscales=1\nflipped=1\n")
    a = parse_network_cfg(tmp_path / "a.cfg", seed=1)
    save_weights(a, tmp_path / "a.weights")
    b = parse_network_cfg(tmp_path / "b.cfg", seed=2)
    la, lb = a.layers[0], b.layers[0]
    before = {name: arr.copy() for name, arr in lb.weight_records()}
    assert [name for name, _ in lb.load_records()] == ["biases", "weights"]
    load_weights(b, tmp_path / "a.weights", cutoff=1)     # numload leaves the rest unread
    # read in turn, as load_convolutional_weights does: 2 biases, then 2 filters (where the
    # file's scales begin: dontloadscales reads past nothing), then flipped
    f = np.fromfile(tmp_path / "a.weights", "<f4", offset=20)
    per = la.nweights // la.n
    want_b = before["biases"].copy()
    want_b[:2] = f[:2]
    w = before["weights"].copy()
    w[:2 * per] = f[2:2 + 2 * per]
    assert np.array_equal(lb.biases, want_b)
    assert np.array_equal(lb.weights, w.reshape(per, 3).T.reshape(-1))
    for name in ("scales", "rolling_mean", "rolling_variance"):
        assert np.array_equal(getattr(lb, name), before[name])
