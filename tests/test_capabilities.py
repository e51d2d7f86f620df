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
MAX_TYPE_SWITCHES = 51


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
