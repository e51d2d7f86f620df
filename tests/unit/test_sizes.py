"""Sizes refused before anything is allocated: outputs without pixels, and buffers beyond the
memory limits (per layer and per network), each a CfgError naming file:line, section, layer
and the bytes; sizes that are merely large (a 10^9 maxpool window) build and run."""
import warnings

import numpy as np
import pytest

import darknumba as dn
from darknumba.errors import CfgError
from darknumba.layers import memory

NET = "[net]\nbatch=1\nwidth=16\nheight=16\nchannels=3\n"


def build(tmp_path, text, **kw):
    p = tmp_path / "s.cfg"
    p.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dn.parse_network_cfg(p, **kw)


@pytest.mark.parametrize("body,line,section,shape", [
    ("[maxpool]\nsize=20\nstride=1\npadding=0\n", 6, "maxpool", "-3 x -3 x 3"),
    ("[upsample]\nstride=-32\n", 6, "upsample", "0 x 0 x 3"),
    ("[upsample]\nstride=-2\n" * 5, 14, "upsample", "0 x 0 x 3"),
])
def test_an_output_without_pixels_is_refused(tmp_path, body, line, section, shape):
    with pytest.raises(CfgError, match=rf"s\.cfg:{line}: \[{section}\]: layer \d+: the output "
                                       rf"has no pixels: .* gives {shape}"):
        build(tmp_path, NET + body)


def test_a_convolution_without_output_pixels(tmp_path):
    with pytest.raises(CfgError, match=r"s\.cfg:6: \[convolutional\]: .*has no output pixels"):
        build(tmp_path, NET + "[convolutional]\nsize=17\n")


@pytest.mark.parametrize("text,section,what", [
    ("[net]\nbatch=1\nwidth=1000000\nheight=1000000\nchannels=3\n[convolutional]\nfilters=16\n"
     "size=3\npad=1\n", "convolutional", r"output and delta \(1 x 16000000000000 values each\)"),
    ("[net]\nbatch=100000000\nwidth=416\nheight=416\nchannels=3\n[convolutional]\nfilters=16\n"
     "size=3\npad=1\n", "convolutional", r"output and delta \(100000000 x 2768896 values each\)"),
    (NET + "[convolutional]\nfilters=16\nsize=100000\n", "convolutional", "weights"),
    (NET + "[convolutional]\nfilters=16\nsize=3\npadding=100000\n", "convolutional",
     "output and delta"),
    (NET + "[upsample]\nstride=100000\n", "upsample", "output and delta"),
    (NET + "[connected]\noutput=2000000000\n", "connected", "weights"),
    (NET + "[convolutional]\nfilters=6\n[yolo]\nclasses=1\nnum=2000000000\nmask=0\n", "yolo",
     "anchors"),
    (NET + "[local]\nfilters=64\nsize=3\nstride=1\npad=1\n[local]\nfilters=100000\nsize=16\n",
     "local", "weights"),
])
def test_a_layer_beyond_the_limit_is_refused_before_allocation(tmp_path, text, section, what):
    """Each of these would ask for terabytes (or be killed by the OS half-way)."""
    with pytest.raises(CfgError, match=rf"s\.cfg:\d+: \[{section}\]: layer \d+: {what}.* need "
                                       rf"[\d,.]+ GiB \([\d,]+ bytes\).*a layer may take at most "
                                       rf"4\.0 GiB"):
        build(tmp_path, text)


def test_the_network_total_is_limited(tmp_path):
    """Layers of 2 x 4 x 16x16x16 bytes = 32 KiB of output and delta each, plus weights and
    biases (33,280 bytes for the first, 34,944 for the others): a 140,000-byte network allows
    35,000 per layer, and runs out at the fifth layer's weight updates (its weights, allocated
    first, bring it to 139,136)."""
    body = "[convolutional]\nfilters=16\nsize=1\n" * 5
    with pytest.raises(CfgError, match=r"s\.cfg:18: \[convolutional\]: layer 4: weight updates "
                                       r"need 0\.0 GiB \(1,024 bytes\), which brings the network "
                                       r"to 0\.0 GiB \(140,160 bytes\); it may take at most "
                                       r"0\.0 GiB \(140,000 bytes\)"):
        build(tmp_path, NET + body, max_bytes=140_000)
    net = build(tmp_path, NET + body, max_bytes=1 << 20)
    assert net.n == 5


def test_the_workspace_counts(tmp_path):
    """A 3x3 convolution of 64 channels at 16x16 needs 16*16*9*64 floats (576 KiB) of im2col
    columns, more than a quarter of a 2 MiB limit, though its own buffers are small."""
    body = "[convolutional]\nfilters=64\nsize=1\n[convolutional]\nfilters=8\nsize=3\npad=1\n"
    with pytest.raises(CfgError, match=r"s\.cfg:9: \[convolutional\]: layer 1: its workspace "
                                       r"\(im2col columns\) need 0\.0 GiB \(589,824 bytes\)"):
        build(tmp_path, NET + body, max_bytes=2 << 20)


def test_the_limit_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DARKNUMBA_MAX_GIB", "0.0001")         # 107 KB
    with pytest.raises(CfgError, match="a layer may take at most 0.0 GiB \\(26,843 bytes\\)"):
        build(tmp_path, NET + "[convolutional]\nfilters=64\nsize=1\n")
    monkeypatch.setenv("DARKNUMBA_MAX_GIB", "lots")
    with pytest.raises(CfgError, match="DARKNUMBA_MAX_GIB='lots': expected a positive number"):
        build(tmp_path, NET + "[maxpool]\n")


def test_stock_networks_fit_the_default_limit():
    net = dn.parse_network_cfg(dn.__path__[0] + "/resources/cfg/yolov3.cfg", seed=None)
    assert net.batch == 4 and net.n == 107


def test_a_billion_wide_maxpool_builds_and_runs(tmp_path):
    """size=10^9 with the default padding (size-1) keeps a 16x16 map: each window covers the
    whole image, so every output is its plane's maximum (Darknet loops 10^18 times)."""
    net = build(tmp_path, NET + "[maxpool]\nsize=1000000000\n")
    assert (net.layers[0].out_w, net.layers[0].out_h) == (16, 16)
    x = np.random.default_rng(0).normal(0, 1, 3 * 16 * 16).astype(np.float32)
    out = net.predict(x)
    np.testing.assert_array_equal(out.reshape(3, -1), np.repeat(x.reshape(3, -1).max(1)[:, None],
                                                                 256, axis=1))


@pytest.mark.parametrize("key", ["width", "height", "channels", "inputs"])
def test_negative_input_sizes(tmp_path, key):
    text = NET.replace(f"{key}=", f"{key}=-") if key != "inputs" else NET + "inputs=-5\n"
    with pytest.raises(CfgError, match=rf"s\.cfg:\d: \[net\] {key}: expected at least 0, found -"):
        build(tmp_path, text + "[maxpool]\n")


def test_layers_made_directly_are_held_to_the_layer_limit():
    from darknumba.layers.convolutional import ConvolutionalLayer
    with pytest.raises(memory.SizeError, match="weights need .* a layer may take at most 4.0 GiB"):
        ConvolutionalLayer(1, 8, 8, 3, 100000, 1, 100, 1, 0, "linear")
    with pytest.raises(memory.SizeError, match="a negative size"):
        memory.zeros(-3, "a test buffer")


def test_maxpool_indexes_stay_within_int32(tmp_path, monkeypatch):
    """Above 2^31 input values (possible with a raised limit) the int32 indexes would wrap
    negative, and backward would write before the delta buffer."""
    monkeypatch.setenv("DARKNUMBA_MAX_GIB", "1000")
    with pytest.raises(CfgError, match=r"s\.cfg:6: \[maxpool\]: layer 0: the winners' indexes "
                                       r"are int32"):
        build(tmp_path, "[net]\nbatch=2\nwidth=32768\nheight=32768\nchannels=1\n"
                        "[maxpool]\nsize=2\nstride=2\n")
