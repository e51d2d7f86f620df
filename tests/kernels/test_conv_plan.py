"""The convolution planner (layers/conv_plan.py): the one place that picks a convolution's path
and names its kernels. Pins the paths of the official networks, a few thresholds at their
edges, and that no other module defines a threshold."""
import re

import pytest
from conftest import ROOT

from darknumba.dialect import quirks_for
from darknumba.errors import CfgError
from darknumba.layers import conv_plan
from darknumba.layers.conv_plan import ConvPath, plan
from darknumba.layers.convolutional import ConvolutionalLayer

NETS = [("yolov3-tiny", ()), ("yolov4-tiny", ()), ("yolov7-tiny", ()), ("yolov3", (416,)),
        ("yolov4", ())]


def conv(h, c, n, size=3, stride=1, pad=1, compat=None):
    return ConvolutionalLayer(1, h, h, c, n, 1, size, stride, pad, "leaky", True,
                              quirks_for(None, compat))


def test_every_path_names_its_kernels():
    """Each path's forward and backward kernels are compiled kernels (numba dispatchers); the
    forward list compile_ahead compiles adds the bias / batch-norm sweep, but on the direct
    path, which fuses it."""
    for path in ConvPath:
        for backward in (False, True):
            ks = conv_plan.kernels(path, backward)
            assert isinstance(ks, tuple)
            assert all(hasattr(k, "py_func") for k in ks), (path, backward)
        assert conv_plan.kernels(path, backward=True), path
    assert conv_plan.kernels(ConvPath.ONE_BY_ONE) == ()         # the GEMM is numpy's
    assert conv_plan.kernels(ConvPath.IM2COL) and conv_plan.kernels(ConvPath.WINOGRAD2X2)
    thin, wide = conv(20, 16, 16), conv(20, 64, 64)
    assert conv_plan.forward_kernels(thin, ConvPath.DIRECT) == \
        list(conv_plan.kernels(ConvPath.DIRECT))
    assert conv_plan.forward_kernels(wide, "im2col")[-1].py_func.__name__ == \
        "batchnorm_bias_activate"


def test_paths_are_the_names_bench_prints():
    assert [p.value for p in ConvPath] == ["direct", "direct-s2", "winograd4x4", "winograd2x2",
                                            "1x1", "im2col", "xnorbits"]
    assert ConvPath.ONE_BY_ONE == "1x1" and f"{ConvPath.IM2COL:<8}|" == "im2col  |"
    assert str(ConvPath.WINOGRAD2X2) == "winograd2x2" and ConvPath("direct") is ConvPath.DIRECT


@pytest.mark.parametrize("name,sizes", NETS)
def test_forward_path_is_the_plan_in_every_mode(name, sizes):
    """Every convolution of the official networks (at the cfg's size and those in `sizes`):
    the layer's forward_path is plan()'s answer, in training and at inference, exact or not
    (batch changes no path)."""
    import darknumba as dn
    net = dn.load_network(str(ROOT / "cfg" / f"{name}.cfg"), batch=1, exact=False)
    convs = [l for l in net.layers if l.type == "convolutional"]
    assert convs
    for size in (None, *sizes):
        if size:
            net.resize(size, size)
        for train in (False, True):
            for exact in (False, True):
                net.train, net.exact = train, exact
                assert [l.forward_path(net) for l in convs] == \
                    [plan(l, train, exact) for l in convs]
                if exact:
                    assert not {ConvPath.WINOGRAD4X4, ConvPath.WINOGRAD2X2} & \
                        {l.forward_path(net) for l in convs}


def short(net):
    ab = {ConvPath.DIRECT: "D", ConvPath.DIRECT_S2: "D2", ConvPath.WINOGRAD4X4: "W4", ConvPath.WINOGRAD2X2: "W2",
          ConvPath.IM2COL: "I"}
    return " ".join(f"{i}:{ab[l.forward_path(net)]}" for i, l in enumerate(net.layers)
                    if l.type == "convolutional" and l.forward_path(net) != ConvPath.ONE_BY_ONE)


@pytest.mark.parametrize("name,infer,train", [
    ("yolov3-tiny", "0:D 2:D 4:W4 6:W4 8:W4 10:W2 12:W2 14:W2 21:W4",
     "0:D 2:D 4:W4 6:W4 8:I 10:I 12:I 14:I 21:W4"),
    ("yolov4-tiny", "0:D2 1:D2 2:W4 4:D 5:D 10:W4 12:W4 13:W4 18:W4 20:W4 21:W4 26:W2 28:W2 35:W4",
     "0:I 1:I 2:W4 4:D 5:D 10:W4 12:W4 13:W4 18:W4 20:I 21:I 26:I 28:I 35:W4")])
def test_official_paths_as_recorded(name, infer, train):
    """The paths recorded before the planner existed (at 9d2b488; the 1x1 layers left out):
    moving the thresholds changed none; since 2026-12-04 yolov4-tiny's first layer takes the
    stride-2 direct kernel at inference (and its second, without full-width AVX-512, since
    2026-12-07), and in training the layers whose passes pipeline take
    Winograd (yolov3-tiny's 4 and 6, yolov4-tiny's 12 and 13)."""
    import darknumba as dn
    net = dn.load_network(str(ROOT / "cfg" / f"{name}.cfg"), batch=1, exact=False)
    assert short(net) == infer
    net.train = True
    assert short(net) == train


@pytest.mark.parametrize("name,infer", [
    ("yolov3-tiny", "0:D 2:D 4:W4 6:W4 8:W4 10:I 12:I 14:I 21:W4"),
    ("yolov4-tiny", "0:D2 1:I 2:W4 4:D 5:D 10:W4 12:W4 13:W4 18:W4 20:W4 21:W4 26:I 28:I 35:W4")])
def test_avx512_leaves_the_small_maps_to_im2col(monkeypatch, name, infer):
    """With AVX-512 (conv_plan.wide_vectors) inference takes no Winograd below
    WIDE_VECTORS_MIN_TILES tiles (the 13x13 maps: im2col instead of F(2x2)); the larger maps,
    and training, as without it."""
    import darknumba as dn
    monkeypatch.setattr(conv_plan, "_WIDE_VECTORS", True)
    assert conv_plan.wide_vectors()
    net = dn.load_network(str(ROOT / "cfg" / f"{name}.cfg"), batch=1, exact=False)
    assert short(net) == infer
    assert plan(conv(13, 256, 512), False) is ConvPath.IM2COL
    assert plan(conv(19, 256, 512), False) is ConvPath.WINOGRAD4X4
    assert plan(conv(26, 256, 512), True) is ConvPath.WINOGRAD4X4
    # what the host says, read once (the suite pins it off: tests/conftest.py avx2_plan)
    monkeypatch.setattr(conv_plan, "_WIDE_VECTORS", None)
    from llvmlite import binding
    assert conv_plan.wide_vectors() == conv_plan.full_width_avx512(
        binding.get_host_cpu_name(), binding.get_host_cpu_features())


def test_half_width_avx512_takes_the_avx2_rules():
    """Zen 4 (LLVM's "znver4") splits each 512-bit operation in two: the AVX2 rules there; a
    Sapphire Rapids or a Skylake-X with AVX-512 the wide ones; no AVX-512, the AVX2 ones."""
    avx512 = {"avx512f": True, "avx2": True}
    assert not conv_plan.full_width_avx512("znver4", avx512)
    assert conv_plan.full_width_avx512("sapphirerapids", avx512)
    assert conv_plan.full_width_avx512("skylake-avx512", avx512)
    assert not conv_plan.full_width_avx512("znver3", {"avx2": True})
    assert not conv_plan.full_width_avx512("sapphirerapids", {"avx512f": False})


def test_thresholds_at_their_edges(monkeypatch):
    # a 13x13 map (16 4x4 tiles < WINOGRAD_F2_BELOW) takes F(2x2) at inference; in training
    # it has too few tiles (TRAIN_MIN_TILES) and runs im2col; 19x19 (25 tiles) takes F(4x4)
    small = conv(13, 256, 512)
    assert plan(small, False) is ConvPath.WINOGRAD2X2
    assert plan(small, True) is ConvPath.IM2COL
    assert plan(small, False, exact=True) is ConvPath.IM2COL
    assert plan(conv(19, 256, 512), False) is ConvPath.WINOGRAD4X4
    # training keeps its own rule: 0.6 BFLOPs from 26x26 on
    mid = conv(26, 128, 128)                    # 0.2 BFLOPs
    assert (plan(mid, False), plan(mid, True)) == (ConvPath.WINOGRAD4X4, ConvPath.IM2COL)
    big = conv(26, 256, 512)                    # 1.6 BFLOPs
    assert plan(big, True) is ConvPath.WINOGRAD4X4
    # ... or what inference takes where both training passes pipeline: 169 tiles (52x52) from
    # PIPELINE_MIN_TILES = 128 on, no more channels than tiles either way
    assert plan(conv(52, 64, 64), True) is ConvPath.WINOGRAD4X4         # 0.2 BFLOPs
    assert plan(conv(52, 64, 170), True) is ConvPath.IM2COL              # n > tiles
    assert plan(conv(44, 64, 64), True) is ConvPath.IM2COL               # 121 tiles
    assert conv_plan.train_pipelined(conv(52, 64, 64))
    # 1x1: the input is the column matrix, but strided (Darknet's misread only under compat=)
    assert plan(conv(20, 64, 32, size=1, pad=0), False) is ConvPath.ONE_BY_ONE
    assert plan(conv(20, 64, 32, size=1, stride=2, pad=0), False) is ConvPath.IM2COL
    # direct: K = c * 9 up to DIRECT_MAX_K; up to DIRECT_MAX_K_FEW_FILTERS with <= 32 filters,
    # not under compat=; in training and at inference alike
    assert {plan(conv(52, 17, 64), t) for t in (False, True)} == {ConvPath.DIRECT}
    assert plan(conv(52, 18, 64), False) is not ConvPath.DIRECT
    assert plan(conv(104, 32, 32), False) is ConvPath.DIRECT
    assert plan(conv(104, 32, 33), False) is not ConvPath.DIRECT
    assert plan(conv(104, 32, 32, compat="darknet-cpu"), False) is ConvPath.IM2COL
    assert plan(conv(104, 33, 32), False) is not ConvPath.DIRECT
    # stride 2, at inference only: K up to DIRECT_S2_MAX_K_NARROW (the suite plans as without
    # full-width AVX-512: conftest.py), up to DIRECT_MAX_K with it
    assert (plan(conv(416, 3, 32, stride=2), False), plan(conv(416, 3, 32, stride=2), True)) \
        == (ConvPath.DIRECT_S2, ConvPath.IM2COL)
    assert plan(conv(52, 32, 64, stride=2), False) is ConvPath.DIRECT_S2
    assert plan(conv(52, 33, 16, stride=2), False) is ConvPath.IM2COL
    assert plan(conv(52, 3, 16, size=5, stride=2, pad=2), False) is ConvPath.IM2COL
    monkeypatch.setattr(conv_plan, "_WIDE_VECTORS", True)
    assert plan(conv(52, 17, 64, stride=2), False) is ConvPath.DIRECT_S2
    assert plan(conv(52, 18, 16, stride=2), False) is ConvPath.IM2COL


def test_only_the_planner_defines_a_threshold():
    """The thresholds that pick a path are defined in conv_plan.py and nowhere else in src."""
    src = ROOT / "src" / "darknumba"
    assert conv_plan.THRESHOLDS
    assert all(hasattr(conv_plan, name) for name in conv_plan.THRESHOLDS)
    defines = re.compile(r"^\s*(%s)\s*(:[^=]*)?=(?!=)" % "|".join(conv_plan.THRESHOLDS), re.M)
    # and the paths' names are spelt out only there (everyone else says ConvPath.X)
    names = re.compile(r"""["'](%s)["']""" % "|".join(p.value for p in ConvPath))
    elsewhere = []
    for path in src.rglob("*.py"):
        if path.name == "conv_plan.py":
            continue
        text = path.read_text()
        elsewhere += [f"{path.relative_to(src)}: {m.group(0).strip()}"
                      for m in (*defines.finditer(text), *names.finditer(text))]
    assert not elsewhere, elsewhere


def test_winograd_filters_kept_smallest_first_within_the_budget(monkeypatch):
    """winograd_cached: of the layers that take Winograd at inference, the smallest transformed
    filters ((m + 2)^2 x c x n floats) first while their sum stays within the budget, the
    larger of WINOGRAD_CACHE_MIN_BYTES and WINOGRAD_CACHE_OF_WEIGHTS x the weights' bytes."""
    layers = [conv(26, 128, 128), conv(52, 3, 16), conv(52, 64, 64), conv(13, 256, 256),
              conv(52, 64, 64, size=1, pad=0), conv(52, 64, 64)]
    # F(4x4) at 26x26 and 52x52: 36 x c x n; F(2x2) at 13x13: 16 x c x n; the 3 -> 16 and the 1x1 none
    sizes = [36 * 128 * 128 * 4, None, 36 * 64 * 64 * 4, 16 * 256 * 256 * 4, None,
             36 * 64 * 64 * 4]
    assert [conv_plan.winograd_filter_bytes(l) if s else None
            for l, s in zip(layers, sizes)] == sizes
    monkeypatch.setattr(conv_plan, "WINOGRAD_CACHE_OF_WEIGHTS", 0.0)
    for budget, want in [(0, set()), (589823, set()), (589824, {2}), (2 * 589824, {2, 5}),
                         (2 * 589824 + 2359295, {2, 5}), (2 * 589824 + 2359296, {0, 2, 5}),
                         (1 << 40, {0, 2, 3, 5})]:
        monkeypatch.setattr(conv_plan, "WINOGRAD_CACHE_MIN_BYTES", budget)
        assert conv_plan.winograd_cache_budget(layers) == budget
        assert conv_plan.winograd_cached(layers) == want, budget
    # the budget from the weights: a share of their bytes when that is more than the minimum
    monkeypatch.setattr(conv_plan, "WINOGRAD_CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(conv_plan, "WINOGRAD_CACHE_OF_WEIGHTS", 0.5)
    weights = 4 * sum(l.c * l.n * l.size * l.size for l in layers)
    assert conv_plan.winograd_cache_budget(layers) == weights // 2 == 1631072
    assert conv_plan.winograd_cached(layers) == {2, 5}
    # under compat= nothing takes Winograd, so nothing is kept
    assert conv_plan.winograd_cached([conv(52, 64, 64, compat="darknet-cpu")]) == set()
    # DARKNUMBA_WINOGRAD_KEEP_MIB sets the budget instead
    for mib, want in [("0", set()), ("0.5625", {2}), ("3.375", {0, 2, 5}), ("1e6", {0, 2, 3, 5})]:
        monkeypatch.setenv("DARKNUMBA_WINOGRAD_KEEP_MIB", mib)
        assert conv_plan.winograd_cached(layers) == want, mib
    for bad in ("-1", "lots", "nan"):
        monkeypatch.setenv("DARKNUMBA_WINOGRAD_KEEP_MIB", bad)
        with pytest.raises(CfgError, match="DARKNUMBA_WINOGRAD_KEEP_MIB="):
            conv_plan.winograd_cached(layers)


@pytest.mark.parametrize("name,kept_all", [("yolov3-tiny", True), ("yolov4-tiny", True),
                                           ("yolov4", False)])
def test_networks_keep_the_planned_filters(name, kept_all):
    """The network marks the layers winograd_cached names (winograd_keep) at the build and
    again after a resize; the tiny networks keep every layer's, yolov4 at 608 only what fits
    in the budget (1.25 x its weights' bytes), the smallest first (its 512 -> 1024 layers' not);
    the layers it does not keep take im2col + GEMM at inference (Winograd in training)."""
    import darknumba as dn
    net = dn.load_network(str(ROOT / "cfg" / f"{name}.cfg"), batch=1, exact=False)
    for size in (None, 416):
        if size:
            net.resize(size, size)
        wino = {i for i, l in enumerate(net.layers) if l.type == "convolutional"
                and conv_plan.use_winograd(l, False) and not conv_plan.direct_thin(l)}
        kept = {i for i, l in enumerate(net.layers) if l.type == "convolutional"
                and l.winograd_keep}
        assert kept & wino == conv_plan.winograd_cached(net.layers)
        for i in wino:
            l = net.layers[i]
            assert (plan(l, False) in conv_plan.WINOGRAD_PATHS) == (i in kept)
            assert plan(l, True) == ConvPath.WINOGRAD4X4 or not conv_plan.use_winograd(l, True)
        assert (kept >= wino) == kept_all
        nbytes = {i: conv_plan.winograd_filter_bytes(net.layers[i]) for i in wino}
        assert sum(nbytes[i] for i in kept & wino) <= conv_plan.winograd_cache_budget(net.layers)
        if size is None and name == "yolov4":   # 608: its 512 -> 1024 layers' F(4x4), 72 MiB
            assert not net.layers[106].winograd_keep
        if not kept_all:
            left = wino - kept
            assert left and max(nbytes[i] for i in kept & wino) <= min(nbytes[i] for i in left)
            assert sum(nbytes[i] for i in kept & wino) + min(nbytes[i] for i in left) > \
                conv_plan.winograd_cache_budget(net.layers)
    if name == "yolov4":            # at 416 the 13x13 layers take F(2x2): 16 x 512 x 1024
        assert conv_plan.winograd_filter_bytes(net.layers[106]) == 16 * 512 * 1024 * 4
