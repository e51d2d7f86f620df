"""Two of AlexeyAB's cfgs that its parser builds at batch 1 (issue 32):

* [crnn] with time_steps > 1 (cfg/yolov3-tiny_occlusion_track.cfg): AlexeyAB's detector, demo,
  partial and load_network_custom call parse_network_cfg_custom(cfg, 1, 1), so time_steps is 1
  there, and its parse_crnn reads output, hidden, size, pad (pjreddie's: output_filters,
  hidden_filters, 3x3 pad 1). pjreddie's keeps the cfg's time_steps.
* a short anchors list (cfg/cspx-p7-mish_hp.cfg: 31 values for num=16): both parse_yolo read
  what is there over make_yolo_layer's 0.5s, and AlexeyAB's ignores values past num*2.
* a mask past num (cfg/cspx-p7-mish.cfg: mask=16,17,18,19, num=16, 40 anchor values): both
  forks build it and read those anchors past their buffer; here a warning, and the anchors
  list's values past num*2.
"""
import warnings

import numpy as np
import pytest

from darknumba.errors import CfgError, CfgWarning
from darknumba.parser import parse_network_cfg

NET = "[net]\nbatch=8\nsubdivisions=2\ntime_steps=4\nwidth=5\nheight=5\nchannels=2\n\n"
AB_CRNN = NET + "[crnn]\nbatch_normalize=1\nsize=3\npad=1\noutput=3\nhidden=2\nactivation=leaky\n"
PJ_CRNN = NET + "[crnn]\noutput_filters=3\nhidden_filters=2\nactivation=leaky\n"


def _cfg(tmp_path, text, name="net.cfg"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _build(path, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = parse_network_cfg(path, **kw)
    return net, [str(w.message) for w in caught if issubclass(w.category, CfgWarning)]


def test_alexeyab_crnn_at_batch_one_takes_one_time_step(tmp_path):
    net, unused = _build(_cfg(tmp_path, AB_CRNN), batch=1, dialect="alexeyab")
    assert unused == []
    l = net.layers[0]
    assert (net.batch, net.time_steps, l.steps, l.batch) == (1, 1, 1, 1)
    assert (l.out_w, l.out_h, l.out_c, l.outputs) == (5, 5, 3, 75)     # AlexeyAB's: output=3
    x = np.random.default_rng(0).random(net.inputs, dtype=np.float32)
    out = net.predict(x)
    assert out.size == 75 and np.isfinite(out).all()


def test_alexeyab_crnn_batch_below_time_steps_is_raised_to_it(tmp_path):
    """parse_network_cfg_custom(cfg, 1, 4): net.batch = max(batch, time_steps)."""
    net, _ = _build(_cfg(tmp_path, AB_CRNN), batch=1, time_steps=4, dialect="alexeyab",
                    allocate=False, seed=None)
    assert (net.batch, net.time_steps, net.layers[0].steps, net.layers[0].batch) == (4, 4, 4, 1)


def test_alexeyab_crnn_without_a_batch_keeps_the_cfgs(tmp_path):
    net, _ = _build(_cfg(tmp_path, AB_CRNN), dialect="alexeyab", allocate=False, seed=None)
    assert (net.batch, net.time_steps, net.layers[0].steps, net.layers[0].batch) == (16, 4, 4, 4)


def test_alexeyab_crnn_must_keep_its_state_shape(tmp_path):
    text = AB_CRNN.replace("pad=1\n", "")            # AlexeyAB's default: no padding
    with pytest.raises(CfgError, match=r"net.cfg:\d+: \[crnn\]: size=3 .* turns 5 x 5 into 3 x 3"):
        _build(_cfg(tmp_path, text), batch=1, dialect="alexeyab")


def test_pjreddie_crnn_keeps_the_cfgs_time_steps(tmp_path):
    path = _cfg(tmp_path, PJ_CRNN)
    with pytest.raises(CfgError, match="batch 1 is not a multiple of time_steps 4"):
        _build(path, batch=1, dialect="pjreddie")
    net, unused = _build(path, batch=1, time_steps=1, dialect="pjreddie")
    assert unused == [] and (net.batch, net.time_steps, net.layers[0].out_c) == (1, 1, 3)
    net, _ = _build(path, batch=4, dialect="pjreddie", allocate=False, seed=None)
    assert (net.batch, net.time_steps, net.layers[0].batch) == (4, 4, 1)


def test_pjreddie_crnn_reads_its_own_keys_only(tmp_path):
    net, unused = _build(_cfg(tmp_path, AB_CRNN), batch=4, dialect="pjreddie", allocate=False,
                         seed=None)
    assert net.layers[0].out_c == 1                          # output_filters' default
    assert any("unused field 'output = 3'" in m for m in unused)


YOLO = ("[net]\nwidth=64\nheight=64\nchannels=3\n\n[convolutional]\nfilters=21\nsize=1\n"
        "activation=linear\n\n[yolo]\nmask=0,1,2\nclasses=2\nnum=4\nanchors={}\n")


@pytest.mark.parametrize("dialect", ["pjreddie", "alexeyab"])
def test_short_anchor_list_warns_and_leaves_half(tmp_path, dialect):
    path = _cfg(tmp_path, YOLO.format("10,14, 23,27, 37,58, 81"))
    net, msgs = _build(path, batch=1, dialect=dialect)
    assert [m for m in msgs if "anchors" in m] == [
        f"{path}:15: [yolo] anchors: num=4 needs 8 anchor values, found 7; the anchors past "
        f"value 7 stay 0.5, as Darknet leaves them"]
    np.testing.assert_array_equal(net.layers[1].biases,
                                  np.float32([10, 14, 23, 27, 37, 58, 81, .5]))


@pytest.mark.parametrize("dialect", ["pjreddie", "alexeyab"])
def test_long_anchor_list_warns_and_is_cut(tmp_path, dialect):
    path = _cfg(tmp_path, YOLO.format("1,2,3,4,5,6,7,8,9,10"))
    net, msgs = _build(path, batch=1, dialect=dialect)
    assert any("num=4 needs 8 anchor values, found 10; values past 8 are ignored" in m
               for m in msgs)
    np.testing.assert_array_equal(net.layers[1].biases, np.arange(1, 9, dtype=np.float32))


@pytest.mark.parametrize("dialect", ["pjreddie", "alexeyab"])
def test_full_anchor_list_gives_no_warning(tmp_path, dialect):
    _, msgs = _build(_cfg(tmp_path, YOLO.format("1,2,3,4,5,6,7,8")), batch=1, dialect=dialect)
    assert not [m for m in msgs if "anchors" in m]


@pytest.mark.parametrize("dialect", ["pjreddie", "alexeyab"])
def test_mask_past_num_warns_and_takes_the_lists_anchors(tmp_path, dialect):
    path = _cfg(tmp_path, YOLO.replace("mask=0,1,2", "mask=3,4,5")
                .format("1,2,3,4,5,6,7,8,9,10,11,12"))
    net, msgs = _build(path, batch=1, dialect=dialect)
    assert [m for m in msgs if "anchor" in m] == [
        f"{path}:12: [yolo] mask: mask names anchors up to 5, past num=4; Darknet reads them "
        f"past its 8 anchor values (whatever memory holds there), darknumba from the anchors "
        f"list"]
    l = net.layers[1]
    np.testing.assert_array_equal(l.biases, np.arange(1, 13, dtype=np.float32))
    assert l.total == 4 and list(l.mask) == [3, 4, 5]
    x = np.random.default_rng(0).random(net.inputs, dtype=np.float32)
    assert np.isfinite(net.predict(x)).all()


def test_mask_past_a_short_list_leaves_half(tmp_path):
    path = _cfg(tmp_path, YOLO.replace("mask=0,1,2", "mask=3,4,5").format("1,2,3,4,5,6,7,8,9"))
    net, msgs = _build(path, batch=1, dialect="alexeyab")
    assert any(m.endswith("darknumba from the anchors list where it has them (9 values), else "
                          "0.5") for m in msgs)
    np.testing.assert_array_equal(net.layers[1].biases,
                                  np.float32([1, 2, 3, 4, 5, 6, 7, 8, 9, .5, .5, .5]))
