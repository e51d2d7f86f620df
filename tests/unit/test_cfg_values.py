"""Numbers out of range are CfgErrors naming file:line, [section], key and what was expected
(Darknet takes them silently and fails later: a segfault for negative [region] classes, a
ZeroDivisionError for time_steps=0, NaN weights for a NaN learning rate)."""
import warnings

import pytest

import darknumba as dn
from darknumba.errors import CfgError

NET = "[net]\nbatch=2\nwidth=16\nheight=16\nchannels=3\n"


def build(tmp_path, text):
    p = tmp_path / "v.cfg"
    p.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dn.parse_network_cfg(p)


def net_with(line):
    return NET + line + "\n[maxpool]\n"


@pytest.mark.parametrize("line,key,expected", [
    ("learning_rate=nan", "learning_rate", "expected a finite number, found 'nan'"),
    ("learning_rate=-0.001", "learning_rate", "expected 0 <= learning_rate, found -0.001"),
    ("learning_rate=inf", "learning_rate", "expected a finite number, found 'inf'"),
    ("momentum=-0.9", "momentum", "expected 0 <= momentum < 1, found -0.9"),
    ("momentum=1.5", "momentum", "expected 0 <= momentum < 1, found 1.5"),
    ("momentum=nan", "momentum", "expected a finite number"),
    ("decay=-1", "decay", "expected 0 <= decay, found -1"),
    ("decay=NaN", "decay", "expected a finite number"),
    ("time_steps=0", "time_steps", "expected at least 1, found 0"),
    ("time_steps=-3", "time_steps", "expected at least 1, found -3"),
    ("subdivisions=0", "subdivisions", "expected at least 1, found 0"),
    ("max_batches=-1", "max_batches", "expected at least 0, found -1"),
    ("burn_in=-5", "burn_in", "expected at least 0, found -5"),
    ("policy=step\nstep=0", "step", "expected at least 1, found 0"),
    ("policy=steps\nsteps=10,20\nscales=.1,-1", "scales", r"expected scales >= 0, found \[0\.1, -1\.0\]"),
    ("saturation=0", "saturation", "expected 0 < saturation, found 0"),
    ("exposure=-1.5", "exposure", "expected 0 < exposure, found -1.5"),
    ("aspect=0", "aspect", "expected 0 < aspect, found 0"),
    ("adam=1\nB1=1", "B1", "expected 0 <= B1 < 1, found 1"),
    ("adam=1\nB2=0.99999999", "B2", "0.99999999 rounds to 1 in float32"),
    ("adam=1\neps=0", "eps", "expected 0 < eps, found 0"),
    ("adam=1\neps=1e-60", "eps", "1e-60 rounds to 0 in float32"),
    ("max_batches=99999999999", "max_batches", "99999999999 does not fit a C int"),
])
def test_net_numbers(tmp_path, line, key, expected):
    n = NET.count("\n") + 1 + line.count("\n")
    with pytest.raises(CfgError, match=rf"v\.cfg:{n}: \[net\] {key}: {expected}"):
        build(tmp_path, net_with(line))


CONV6 = "[convolutional]\nfilters=6\n"


@pytest.mark.parametrize("body,section,key,expected", [
    ("[convolutional]\nfilters=-4\n", "convolutional", "filters", "expected at least 1, found -4"),
    ("[convolutional]\nsize=0\n", "convolutional", "size", "expected at least 1, found 0"),
    ("[convolutional]\nstride=-1\n", "convolutional", "stride", "expected at least 1, found -1"),
    ("[convolutional]\npadding=-2\n", "convolutional", "padding", "expected at least 0, found -2"),
    ("[convolutional]\ngroups=0\n", "convolutional", "groups", "expected at least 1, found 0"),
    ("[convolutional]\nfilters=4\ngroups=2\n", "convolutional", "groups",
     r"input channels \(3\) and filters \(4\) must both be divisible by groups=2"),
    ("[deconvolutional]\nfilters=-1\n", "deconvolutional", "filters", "expected at least 1"),
    ("[deconvolutional]\npadding=-1\n", "deconvolutional", "padding", "expected at least 0"),
    ("[local]\nsize=-3\n", "local", "size", "expected at least 1, found -3"),
    ("[maxpool]\nsize=3\nstride=2\npadding=-20\n", "maxpool", "padding", "expected at least 0, found -20"),
    ("[maxpool]\nstride=0\n", "maxpool", "stride", "expected at least 1, found 0"),
    ("[connected]\noutput=-10\n", "connected", "output", "expected at least 1, found -10"),
    ("[rnn]\noutput=-5\n", "rnn", "output", "expected at least 1, found -5"),
    ("[gru]\noutput=0\n", "gru", "output", "expected at least 1, found 0"),
    ("[lstm]\noutput=-1\n", "lstm", "output", "expected at least 1, found -1"),
    ("[crnn]\nhidden_filters=0\n", "crnn", "hidden_filters", "expected at least 1, found 0"),
    ("[crop]\ncrop_width=-3\n", "crop", "crop_width", "expected at least 1, found -3"),
    ("[normalization]\nkappa=0\n", "normalization", "kappa", "expected 0 < kappa, found 0"),
    ("[softmax]\ntemperature=0\n", "softmax", "temperature", "expected 0 < temperature, found 0"),
    ("[softmax]\ntemperature=nan\n", "softmax", "temperature", "expected a finite number"),
    ("[softmax]\ngroups=5\n", "softmax", "groups", "768 inputs cannot be split into 5 groups"),
    ("[maxpool]\n[shortcut]\nfrom=-1\nalpha=inf\n", "shortcut", "alpha", "expected a finite number"),
    (CONV6 + "[yolo]\nclasses=-4\nnum=1\n", "yolo", "classes", "expected at least 1, found -4"),
    (CONV6 + "[yolo]\nclasses=0\nnum=1\n", "yolo", "classes", "expected at least 1, found 0"),
    (CONV6 + "[yolo]\nclasses=1\nnum=-1\n", "yolo", "num", "expected at least 1, found -1"),
    (CONV6 + "[yolo]\nclasses=1\nnum=3\nmask=-1\n", "yolo", "mask",
     r"mask \[-1\] names a negative anchor \(num=3\)"),
    (CONV6 + "[yolo]\nclasses=1\nnum=1\nanchors=10,nan\n", "yolo", "anchors",
     r"expected a list of finite numbers, found 'nan'"),
    (CONV6 + "[yolo]\nclasses=1\nnum=1\nanchors=10,-14\n", "yolo", "anchors",
     r"expected values > 0, found '-14'"),
    (CONV6 + "[yolo]\nclasses=1\nnum=1\nanchors=0,14\n", "yolo", "anchors", "expected values > 0"),
    (CONV6 + "[yolo]\nclasses=1\nnum=1\nmax=-1\n", "yolo", "max", "expected at least 0"),
    (CONV6 + "[yolo]\nclasses=1\nnum=1\nignore_thresh=nan\n", "yolo", "ignore_thresh",
     "expected a finite number"),
    # num=-1, classes=-10 made num*(classes+coords+1) = 5 match a 5-filter layer: a segfault
    ("[convolutional]\nfilters=5\n[region]\nclasses=-10\nnum=-1\n", "region", "classes",
     "expected at least 1, found -10"),
    ("[convolutional]\nfilters=5\n[region]\nclasses=1\nnum=-1\n", "region", "num",
     "expected at least 1, found -1"),
    ("[convolutional]\nfilters=5\n[region]\nclasses=1\ncoords=2\nnum=1\n", "region", "coords",
     "expected at least 4, found 2"),
    ("[convolutional]\nfilters=12\n[region]\nclasses=1\nnum=2\nanchors=1,1,-2,2\n", "region",
     "anchors", "expected values > 0"),
    ("[connected]\noutput=10\n[detection]\nclasses=-1\nside=1\n", "detection", "classes",
     "expected at least 1, found -1"),
    ("[connected]\noutput=10\n[detection]\nclasses=1\nside=0\n", "detection", "side",
     "expected at least 1, found 0"),
    ("[connected]\noutput=10\n[detection]\nclasses=1\nnum=0\nside=1\n", "detection", "num",
     "expected at least 1, found 0"),
    ("[convolutional]\nfilters=4\n[iseg]\nclasses=0\nids=4\n", "iseg", "classes",
     "expected at least 1, found 0"),
    ("[maxpool]\nnumload=-1\n", "maxpool", "numload", "expected at least 0, found -1"),
    ("[maxpool]\nlearning_rate=nan\n", "maxpool", "learning_rate", "expected a finite number"),
    ("[dropout]\n", "dropout", "", "a dropout layer cannot be the first layer"),
])
def test_layer_numbers(tmp_path, body, section, key, expected):
    where = rf"\[{section}\] {key}: " if key else rf"\[{section}\]: "
    with pytest.raises(CfgError, match=rf"v\.cfg:\d+: {where}{expected}"):
        build(tmp_path, NET + body)


def test_values_in_range_still_build(tmp_path):
    net = build(tmp_path, NET + "learning_rate=0\nmomentum=0\ndecay=0\nadam=1\nB1=0\nB2=0.5\n"
                "[convolutional]\nfilters=18\npadding=0\n[yolo]\nclasses=1\nnum=3\nmask=0,1,2\n"
                "anchors=1,2,3,4,5,6\nmax=0\n")
    assert net.learning_rate == 0 and net.layers[1].max_boxes == 0


def test_loss_layers_must_read_the_same_truth(tmp_path):
    """One truth buffer feeds every [yolo] layer: AlexeyAB's truth length follows max= (6
    values per box), and different lengths would read past it."""
    head = "[net]\nwidth=32\nheight=32\nchannels=3\n"
    yolo = ("[convolutional]\nfilters=21\nsize=1\nactivation=linear\n"
            "[yolo]\nmask=0,1,2\nanchors=4,5,8,9,14,12\nclasses=2\nnum=3\nmax={}\n")
    p = tmp_path / "two.cfg"
    p.write_text(head + yolo.format(90) + "[route]\nlayers=-2\n" + yolo.format(30))
    with pytest.raises(dn.CfgError, match=r"two\.cfg:\d+: \[yolo\] max: layer 4 reads 180 truth "
                                          r"values per image, layer 1 540"):
        dn.parse_network_cfg(p, dialect="alexeyab")
