"""AlexeyAB's update_network (CPU and GPU) passes over every layer whose make_*_layer left
l.train = 0: [connected], [deconvolutional], [local], [rnn], [gru], [lstm] never learn there.
darknumba reproduces that bug under compat="darknet-cpu" with AlexeyAB's dialect only."""
import numpy as np
import pytest
from tiny_nets import cfg_text, conv, section

import darknumba as dn
from darknumba.layers.base import Layer
from darknumba.layers.connected import ConnectedLayer
from darknumba.layers.convolutional import ConvolutionalLayer
from darknumba.layers.deconvolutional import DeconvolutionalLayer
from darknumba.layers.gru import GRULayer
from darknumba.layers.local import LocalLayer
from darknumba.layers.lstm import LSTMLayer
from darknumba.layers.rnn import RNNLayer

CFG = cfg_text(dict(batch=2, subdivisions=1, width=8, height=8, channels=3, learning_rate=0.1,
                    momentum=0.9, decay=0.0005),
               conv(4, bn=False), section("connected", output=3, activation="linear"),
               section("softmax"))


def test_the_layers_alexeyab_leaves_untrained():
    assert not Layer.ab_train_unset and not ConvolutionalLayer.ab_train_unset
    for cls in (ConnectedLayer, DeconvolutionalLayer, LocalLayer, RNNLayer, GRULayer,
                LSTMLayer):
        assert cls.ab_train_unset, cls


@pytest.mark.parametrize("dialect, compat, learns", [("alexeyab", "darknet-cpu", False),
                                                     ("alexeyab", None, True),
                                                     ("pjreddie", "darknet-cpu", True)])
def test_connected_learns_unless_alexeyab_compat(tmp_path, dialect, compat, learns):
    cfg = tmp_path / "n.cfg"
    cfg.write_text(CFG)
    net = dn.load_network(cfg, None, dialect=dialect, compat=compat)
    before = [l.weights.copy() for l in net.layers[:2]]
    rng = np.random.default_rng(0)
    x = rng.random((2, 3, 8, 8), dtype=np.float32)
    truth = np.eye(3, dtype=np.float32)[[0, 2]]
    net.train_datum(x, truth)
    conv_moved = not np.array_equal(before[0], net.layers[0].weights)
    fc_moved = not np.array_equal(before[1], net.layers[1].weights)
    assert conv_moved                       # the convolution learns in every mode
    assert fc_moved == learns
    if not learns:                          # its gradient is there, only the update is not
        assert np.any(net.layers[1].weight_updates != 0)
