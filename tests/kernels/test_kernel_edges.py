"""Kernels at their edges: a 10^9 maxpool window, the spans im2col and pooling index with,
divisions numba would raise on where C gives inf or NaN, and shapes whose kernels would index
outside their maps (refused when the cfg is read)."""
import math

import numpy as np
import pytest

from darknumba.kernels.im2col import valid_span
from darknumba.kernels.pool import forward_maxpool_cpu, forward_maxpool_rows_cpu

f32 = np.float32


# -- pooling and spans ------------------------------------------------------------------------------

def test_maxpool_window_of_a_billion_is_a_plane_maximum():
    """size=10^9 (padding size-1, stride 1) used to loop 10^18 times; every window now covers
    the image, so each output is its plane's maximum, the first in scan order winning."""
    b, c, h, w, size = 2, 3, 5, 4, 10 ** 9
    x = np.random.default_rng(5).normal(0, 1, b * c * h * w).astype(f32)
    x[7] = x.reshape(b * c, -1)[0].max()                      # a tie in plane 0
    pad = size - 1
    oh, ow = (h + pad - size) + 1, (w + pad - size) + 1
    out = np.zeros(b * c * oh * ow, f32)
    idx = np.zeros(out.size, np.int32)
    forward_maxpool_cpu(x, b, c, h, w, size, 1, pad, oh, ow, out, idx)
    planes = x.reshape(b * c, h * w)
    want = np.repeat(planes.max(1), oh * ow)
    want_idx = np.repeat(planes.argmax(1) + np.arange(b * c) * h * w, oh * ow)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(idx, want_idx)
    out[:] = 0                                                   # the two-pass kernel too
    idx[:] = 0
    forward_maxpool_rows_cpu(x, b, c, h, w, size, 1, pad, oh, ow, out, idx, 2,
                             np.zeros(2 * h * ow, f32), np.zeros(2 * h * ow, np.int32))
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(idx, want_idx)


def test_valid_span_against_brute_force():
    rng = np.random.default_rng(6)
    for _ in range(2000):
        col0 = int(rng.integers(-40, 40))
        stride = int(rng.integers(1, 6))
        n_out = int(rng.integers(1, 20))
        width = int(rng.integers(1, 30))
        lo, hi = valid_span(col0, stride, n_out, width)
        inside = [j for j in range(n_out) if 0 <= col0 + j * stride < width]
        assert 0 <= lo <= hi <= n_out
        assert list(range(lo, hi)) == inside


# -- divisions numba would raise on where C gives inf or NaN ----------------------------------------

def test_batch_variance_of_a_single_value_is_nan():
    """batch 1 on a 1x1 map: Darknet's 1/(n-1) is inf and the variance 0*inf = NaN; numba
    raised ZeroDivisionError."""
    from darknumba.kernels.blas import variance_cpu
    from darknumba.kernels.fused import mean_variance_cpu
    x = np.array([1.5, -2.0], f32)                        # batch 1, 2 channels, 1x1
    mean, var = np.zeros(2, f32), np.zeros(2, f32)
    mean_variance_cpu(x, 1, 2, 1, mean, var)
    np.testing.assert_array_equal(mean, x)
    assert np.all(np.isnan(var))
    var[:] = 0
    variance_cpu(x, mean, 1, 2, 1, var)
    assert np.all(np.isnan(var))


@pytest.mark.parametrize("body", [
    "[convolutional]\nsize=3\npad=1\nfilters=2\nbatch_normalize=1\n",      # direct kernel
    "[convolutional]\nsize=1\nfilters=2\nbatch_normalize=1\n",              # 1x1 direct
    ("[convolutional]\nsize=3\npad=1\nfilters=2\nbatch_normalize=1\n"
     "[convolutional]\nsize=3\npad=1\nfilters=2\nbatch_normalize=1\n"),
    "[connected]\noutput=3\nbatch_normalize=1\n",
])
def test_batch_norm_training_on_one_value_per_channel(tmp_path, body):
    """A cfg that trains batch norm on 1 image of 1x1 pixels: NaN outputs (as Darknet), which
    training reports as a NaN loss, not a ZeroDivisionError from inside a kernel."""
    from darknumba import parse_network_cfg
    p = tmp_path / "one.cfg"
    p.write_text("[net]\nbatch=1\nwidth=1\nheight=1\nchannels=20\n" + body)
    net = parse_network_cfg(p)
    out = net.forward(np.ones(20, f32), train=True)
    assert np.all(np.isnan(out))
    net.backward()


def test_batch_norm_backward_through_a_zero_divisor():
    """rolling_variance = -1e-5 (a hostile weights file) makes sqrt(var + 1e-5) zero in the
    test-mode backward: 1/0 = inf, as in C."""
    from darknumba.kernels.blas import mean_delta_cpu
    from darknumba.kernels.fused import batchnorm_backward
    var = np.array([-0.00001, 1.0], f32)
    delta = np.ones(4, f32)
    md = np.zeros(2, f32)
    mean_delta_cpu(delta, var, 1, 2, 2, md)
    assert md[0] == -np.inf and md[1] == pytest.approx(-2 / math.sqrt(1.00001), rel=1e-6)
    z = np.zeros(2, f32)
    batchnorm_backward(delta, np.ones(4, f32), z, var, np.ones(2, f32), 1, 2, 2, z.copy(),
                       z.copy(), z.copy(), z.copy(), z.copy(), np.ones(2, f32), False)
    assert not np.any(np.isfinite(delta[:2])) and np.all(np.isfinite(delta[2:]))


def test_l2norm_of_an_all_zero_pixel_is_nan():
    from darknumba.kernels.lrn import l2normalize_cpu
    x = np.array([0, 3, 0, 4], f32)                       # 2 channels x 2 pixels
    dx = np.zeros(4, f32)
    l2normalize_cpu(x, dx, 1, 2, 2)
    assert np.isnan(x[0]) and np.isnan(x[2])
    np.testing.assert_allclose(x[[1, 3]], [.6, .8], rtol=1e-6)


def test_softmax_of_all_minus_infinity_is_nan():
    from darknumba.kernels.softmax import softmax_cpu, softmax_cpu_one
    x = np.array([-np.inf, -np.inf, -np.inf, 0, 1, 2], f32)
    out = np.zeros(6, f32)
    softmax_cpu(x, 3, 1, 6, 2, 3, 1, 1.0, out)
    assert np.all(np.isnan(out[:3]))
    e = np.exp(np.arange(3.0))
    np.testing.assert_allclose(out[3:], e / e.sum(), rtol=1e-6)
    one = np.zeros(3, f32)
    softmax_cpu_one(x[:3], 3, 1.0, one)
    assert np.all(np.isnan(one))


# -- shapes whose kernels would index outside their maps ------------------------------------------

NET = "[net]\nbatch=1\nwidth=16\nheight=8\nchannels=3\n"


def cfg(tmp_path, body, name="s.cfg"):
    p = tmp_path / name
    p.write_text(NET + body)
    return p


def test_shortcut_needs_one_scale_in_both_directions(tmp_path):
    """16x8 onto 8x8 is 2 across but 1 down: shortcut_cpu would read rows 8..14 of an 8-row
    map (Darknet asserts it; the check allowed it when each side divided the other)."""
    from darknumba import parse_network_cfg
    from darknumba.errors import CfgError
    body = "[maxpool]\n[crop]\ncrop_height=8\ncrop_width=8\n[shortcut]\nfrom=0\n"
    with pytest.raises(CfgError, match=r"s\.cfg:11: \[shortcut\] from: layer 0 \(16x8\) and the "
                                       r"previous layer \(8x8\) do not differ by one integer scale"):
        parse_network_cfg(cfg(tmp_path, body))


@pytest.mark.parametrize("body,pattern", [
    ("[convolutional]\nfilters=6\n[reorg]\nstride=2\n", r"reorg needs channels \(6\) divisible by stride² \(4\)"),
    ("[reorg]\nextra=-5\n", r"\[reorg\] extra: expected at least 0, found -5"),
])
def test_reorg_shapes(tmp_path, body, pattern):
    from darknumba import parse_network_cfg
    from darknumba.errors import CfgError
    with pytest.raises(CfgError, match=pattern):
        parse_network_cfg(cfg(tmp_path, body))


@pytest.mark.parametrize("text,pattern", [
    ("a -1\nb 0\nc 5\n", r":3: class 2 \(c\) has parent 5; a parent is -1 or an earlier class "
                         r"\(0\.\.1\)"),
    ("a 1\nb 0\n", r":1: class 0 \(a\) has parent 1; a parent is -1"),      # a cycle
    ("a -1\nb x\n", r":2: expected `name parent` \(parent an integer, -1 for a root\), found 'b x'"),
    ("a -1\nb ٠\n", r":2: expected `name parent` .* found 'b ٠'"),
    ("\n\n", r"the class tree has no classes \(expected `name parent` lines\)"),
])
def test_class_tree_indexes(tmp_path, text, pattern):
    from darknumba.errors import CfgError
    from darknumba.tree import read_tree
    p = tmp_path / "t.tree"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(CfgError, match=pattern):
        read_tree(p)


def test_class_tree_that_is_not_text(tmp_path):
    from darknumba.errors import CfgError
    from darknumba.tree import read_tree
    p = tmp_path / "t.tree"
    p.write_bytes(b"a -1\nb \xff\xfe 0\n")
    with pytest.raises(CfgError, match=r"t\.tree: class tree is not UTF-8 text: byte 0xff at offset 7 "
                                       r"\(line 2\)"):
        read_tree(p)


def test_region_class_map_outside_the_classes(tmp_path):
    from darknumba import parse_network_cfg
    from darknumba.errors import CfgError
    (tmp_path / "m.map").write_text("0\n1\n7\n")
    body = ("[convolutional]\nfilters=16\n[region]\nclasses=3\ncoords=4\nnum=2\nmap=" +
            str(tmp_path / "m.map") + "\n")
    with pytest.raises(CfgError, match=r"\[region\] map: the class map sends ids to 7, outside "
                                       r"the layer's classes 0\.\.2"):
        parse_network_cfg(cfg(tmp_path, body))
