"""Winograd F(4x4, 3x3) (kernels/winograd.py, layers/conv_winograd.py) against a plain numpy
Winograd written from the three transform matrices, against the float64 convolution
(tests/naive), and the layer's Winograd path against its exact im2col + GEMM path: on random
weights, and on the official yolov3-tiny and yolov4-tiny weights with the sample photos
(detections identical)."""
from types import SimpleNamespace

import naive
import numpy as np
import pytest
from conftest import ROOT, guarded, guards_intact, sample_photos, tiny_weights

from darknumba.kernels.winograd import tiles_of
from darknumba.layers.conv_winograd import transformed_weights

# Lavin & Gray's F(4x4, 3x3), interpolation points 0, 1, -1, 2, -2, inf
BT = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
               [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64)
AT = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
               [0, 1, -1, 8, -8, 1]], np.float64)
GREF = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                 [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
# F(2x2, 3x3), interpolation points 0, 1, -1, inf
BT2 = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
AT2 = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
GREF2 = np.array([[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]])
MATRICES = {4: (BT, AT, GREF), 2: (BT2, AT2, GREF2)}

# (batch, c, h, w, n, pad): odd sizes (partial tiles in both directions), a 1x1 output, maps
# smaller than a tile, pads 0..3, rows of many tiles
SHAPES = [(2, 3, 7, 5, 4, 1), (1, 5, 6, 9, 7, 1), (3, 2, 5, 4, 9, 0), (2, 1, 3, 3, 1, 2),
          (1, 4, 1, 2, 5, 1), (2, 3, 4, 70, 8, 1), (1, 2, 9, 33, 6, 2), (1, 3, 13, 13, 5, 1),
          (1, 2, 3, 3, 2, 0), (2, 2, 2, 6, 3, 3), (1, 17, 26, 26, 16, 1)]


def winograd_reference(x, wts, b, c, h, w, n, pad, m=4):
    """F(m x m, 3x3) in float64 numpy, tile by tile from the matrices: out[b, f] cropped."""
    bt, at, g = MATRICES[m]
    a = m + 2
    oh, ow = h + 2 * pad - 2, w + 2 * pad - 2
    th, tw = -(-oh // m), -(-ow // m)
    xp = np.zeros((b, c, m * th + 2, m * tw + 2))
    xp[:, :, pad:pad + h, pad:pad + w] = x.reshape(b, c, h, w)[:, :, :m * th + 2 - pad,
                                                                 :m * tw + 2 - pad]
    U = np.einsum("ai,ncij,bj->abnc", g, wts.reshape(n, c, 3, 3).astype(np.float64), g)
    out = np.zeros((b, n, m * th, m * tw))
    for ty in range(th):
        for tx in range(tw):
            d = xp[:, :, m * ty:m * ty + a, m * tx:m * tx + a]               # b x c x a x a
            V = np.einsum("ai,bcij,dj->bcad", bt, d, bt)
            Mt = np.einsum("adnc,bcad->bnad", U, V)
            out[:, :, m * ty:m * ty + m, m * tx:m * tx + m] = np.einsum("pa,bnad,qd->bnpq",
                                                                          at, Mt, at)
    return out[:, :, :oh, :ow].reshape(-1)


def run_kernels(x, wts, b, c, h, w, n, pad, m=4):
    """The filter transform, the two kernels (each in two ranges) and the 36 (16) GEMMs of
    F(m x m, 3x3) as the layer runs them; the output in a guarded buffer."""
    from darknumba.layers.conv_winograd import VARIANTS
    _, input_kernel, output_kernel = VARIANTS[m]
    oh, ow = h + 2 * pad - 2, w + 2 * pad - 2
    th, tw = tiles_of(oh, ow, m)
    U = transformed_weights(SimpleNamespace(n=n, c=c, weights=wts, winograd_weights=None), m)
    V = np.full((b * th * tw, (m + 2) ** 2, c), np.nan, np.float32)
    rows = b * th
    for r0, r1 in ((0, rows // 2), (rows // 2, rows)):   # tile-row ranges, as threads take them
        input_kernel(x, c, h, w, pad, th, tw, V, r0, r1, 0)
    M = np.ascontiguousarray(np.matmul(V.transpose(1, 0, 2), U).transpose(1, 0, 2))
    out, big = guarded(b * n * oh * ow, fill=np.nan)
    for r0, r1 in ((0, rows // 3), (rows // 3, rows)):
        output_kernel(M, n, oh, ow, th, tw, out, r0, r1, False, 0)
    assert guards_intact(big)
    return out, U, V


def case(rng, b, c, h, w, n):
    x = rng.standard_normal(b * c * h * w).astype(np.float32)
    wts = rng.standard_normal(n * c * 9).astype(np.float32)
    return x, wts


@pytest.mark.parametrize("m", [4, 2])
@pytest.mark.parametrize("b,c,h,w,n,pad", SHAPES)
def test_reference_is_the_convolution(rng, b, c, h, w, n, pad, m):
    """The numpy Winograd (the matrices above) computes the float64 convolution."""
    x, wts = case(rng, b, c, h, w, n)
    ref = naive.conv_forward(x, wts, np.zeros(n), b, c, h, w, n, 3, 1, pad, 1).ravel()
    np.testing.assert_allclose(winograd_reference(x, wts, b, c, h, w, n, pad, m), ref,
                               rtol=1e-9, atol=1e-9 * np.abs(ref).max())


@pytest.mark.parametrize("m", [4, 2])
@pytest.mark.parametrize("b,c,h,w,n,pad", SHAPES)
def test_kernels_match_reference_and_convolution(rng, b, c, h, w, n, pad, m):
    x, wts = case(rng, b, c, h, w, n)
    out, U, V = run_kernels(x, wts, b, c, h, w, n, pad, m)
    g, a2 = MATRICES[m][2], (m + 2) ** 2
    U_ref = np.einsum("ai,ncij,bj->abnc", g, wts.reshape(n, c, 3, 3).astype(np.float64), g)
    np.testing.assert_allclose(U, U_ref.reshape(a2, n, c).transpose(0, 2, 1), rtol=1e-6,
                               atol=1e-7)
    assert np.isfinite(V).all()                                 # every tile and channel written
    ref = naive.conv_forward(x, wts, np.zeros(n), b, c, h, w, n, 3, 1, pad, 1).ravel()
    scale = np.abs(ref).max()
    np.testing.assert_allclose(out, winograd_reference(x, wts, b, c, h, w, n, pad, m), rtol=0,
                               atol=2e-5 * scale)
    np.testing.assert_allclose(out, ref, rtol=0, atol=2e-5 * scale)


@pytest.mark.parametrize("m", [4, 2])
@pytest.mark.parametrize("n, c", [(6, 11), (33, 2), (1, 70), (65, 3)])
def test_filter_transform_against_float64(rng, n, c, m):
    """The filter transform (winograd_filters_cpu) against the float64 G g G^T of every
    filter, within float32's rounding of it;
    the input gradient's (flipped) filters against rot180 of each filter, channels and filters
    swapped; a range of U's rows writes those rows and no other."""
    import darknumba.layers.conv_winograd as cw
    from darknumba.kernels.winograd import winograd_filters_cpu
    g = MATRICES[m][2]
    wts = rng.standard_normal(n * c * 9).astype(np.float32)
    layer = SimpleNamespace(n=n, c=c, weights=wts)
    w64 = wts.reshape(n, c, 3, 3).astype(np.float64)
    a2 = (m + 2) ** 2
    U_ref = np.einsum("ai,ncij,bj->abcn", g, w64, g).reshape(a2, c, n)
    U = cw.transform_filters(layer, cw.VARIANTS[m][0])
    np.testing.assert_allclose(U, U_ref, rtol=2 ** -23, atol=1e-30)
    F_ref = np.einsum("ai,ncij,bj->abnc", g, w64[:, :, ::-1, ::-1], g).reshape(a2, n, c)
    F = cw.transform_filters(layer, cw.VARIANTS[m][0], flip=True)
    np.testing.assert_allclose(F, F_ref, rtol=2 ** -23, atol=1e-30)
    part = np.full_like(U, np.nan)
    winograd_filters_cpu(wts, c, cw.VARIANTS[m][0], False, part, 1, c)
    assert np.isnan(part[:, 0]).all()
    np.testing.assert_array_equal(part[:, 1:], U[:, 1:])


@pytest.mark.parametrize("m", [4, 2])
@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("n, c", [(6, 11), (33, 2), (1, 70), (128, 64)])
def test_filter_transform_bit_for_bit_its_sums_in_order(rng, n, c, m, flip):
    """Each transformed value is 0 + kron[k, j] * g[j] + ... over kron's nonzero entries in
    the order of j, in float64, rounded once to float32: bit for bit the plain numpy sums in
    that order (elementwise products and additions, no fused multiply-add), also on zeros of
    either sign, subnormal and huge weights; a range of rows written on its own the same."""
    from darknumba.kernels.winograd import winograd_filters_cpu
    from darknumba.layers.conv_winograd import VARIANTS
    kron = VARIANTS[m][0]
    wts = rng.standard_normal(n * c * 9).astype(np.float32)
    wts[::5], wts[::7] = 0.0, -0.0
    wts[::11] *= np.float32(1e-40)
    wts[::13] *= np.float32(1e30)
    taps = wts.reshape(n, c, 9).astype(np.float64)
    taps = taps[:, :, ::-1] if flip else taps.transpose(1, 0, 2)
    ref = np.empty((kron.shape[0],) + taps.shape[:2], np.float32)      # k x o x p
    for k in range(kron.shape[0]):
        acc = np.zeros(taps.shape[:2])
        for j in range(9):
            if kron[k, j] != 0.0:
                acc = acc + kron[k, j] * taps[:, :, j]
        ref[k] = acc
    U = np.full(ref.shape, np.nan, np.float32)
    winograd_filters_cpu(wts, c, kron, flip, U, 1, U.shape[1])
    winograd_filters_cpu(wts, c, kron, flip, U, 0, 1)
    np.testing.assert_array_equal(U.view(np.int32), ref.view(np.int32))


def test_filter_transform_names_short_weights():
    """Fewer weights than n x c x 9: an error naming both counts, not a read past the end."""
    import darknumba.layers.conv_winograd as cw
    layer = SimpleNamespace(n=4, c=3, weights=np.zeros(4 * 3 * 9 - 1, np.float32))
    with pytest.raises(ValueError, match="need 108 weights, the layer has 107"):
        cw.transform_filters(layer, cw.G_KRON)


def test_check_can_fail(rng):
    """A one-tap error is caught by the same comparison."""
    b, c, h, w, n, pad = 1, 2, 7, 6, 4, 1
    x, wts = case(rng, b, c, h, w, n)
    out, _, _ = run_kernels(x, wts, b, c, h, w, n, pad)
    wrong = wts.copy()
    wrong[5] += 0.01
    ref = naive.conv_forward(x, wrong, np.zeros(n), b, c, h, w, n, 3, 1, pad, 1).ravel()
    assert not np.allclose(out, ref, rtol=0, atol=2e-5 * np.abs(ref).max())


def input_gradient(x, wts, delta, dx, b, c, h, w, n, pad):
    """backward_input_winograd on a stand-in layer: dx += the input gradient."""
    from darknumba.layers.conv_winograd import backward_input_winograd
    oh, ow = h + 2 * pad - 2, w + 2 * pad - 2
    l = SimpleNamespace(batch=b, c=c, h=h, w=w, n=n, out_h=oh, out_w=ow, pad=pad, weights=wts,
                        delta=delta)
    backward_input_winograd(l, SimpleNamespace(delta=dx, scratch=None))
    return l


@pytest.mark.parametrize("b,c,h,w,n,pad", [s for s in SHAPES if s[1] * s[4] * s[2] < 2000])
def test_input_gradient_is_the_convolution_backward(rng, monkeypatch, b, c, h, w, n, pad):
    """dx += W^T delta folded back (the float64 loops of tests/naive), added to what dx held,
    nothing written outside it; a changed rotated filter is caught by the same check."""
    import darknumba.layers.conv_winograd as cw
    x, wts = case(rng, b, c, h, w, n)
    oh, ow = h + 2 * pad - 2, w + 2 * pad - 2
    delta = rng.standard_normal(b * n * oh * ow).astype(np.float32)
    _, ref = naive.conv_backward(x, wts, delta, b, c, h, w, n, 3, 1, pad, 1)
    before = rng.standard_normal(b * c * h * w).astype(np.float32)
    dx, big = guarded(b * c * h * w, fill=0.0)
    dx[:] = before
    l = input_gradient(x, wts, delta, dx, b, c, h, w, n, pad)
    assert guards_intact(big)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(dx - before, ref, rtol=0, atol=2e-5 * scale)
    wrong = cw.transform_filters(l, cw.G_KRON, flip=True)
    wrong[7, n - 1, c - 1] += 0.05 * np.abs(wrong).max()
    monkeypatch.setattr(cw, "transformed_flipped_weights", lambda l, net: wrong)
    dx[:] = before
    input_gradient(x, wts, delta, dx, b, c, h, w, n, pad)
    assert not np.allclose(dx - before, ref, rtol=0, atol=2e-5 * scale)


@pytest.mark.parametrize("n,c,tiles", [(5, 7, 9), (24, 20, 64)])
def test_gemms_dealt_out_to_threads_equal_one_stacked_matmul(rng, monkeypatch, n, c, tiles):
    """winograd_gemms on threads (forced at any size) computes what numpy's stacked matmul
    does, every product written."""
    import darknumba.layers.conv_winograd as cw
    monkeypatch.setattr(cw, "SPLIT_GEMMS_FROM", 0)
    U = rng.standard_normal((36, c, n)).astype(np.float32)
    V = rng.standard_normal((tiles, 36, c)).astype(np.float32)
    M = np.full((tiles, 36, n), np.nan, np.float32)
    from darknumba.blas_threads import blas_thread_counts
    counts = [get_n() for _, get_n in blas_thread_counts()]
    cw.winograd_gemms(V, U, M)
    np.testing.assert_allclose(M.transpose(1, 0, 2), np.matmul(V.transpose(1, 0, 2), U),
                               rtol=1e-6, atol=1e-6)
    # OpenBLAS's (process-wide) thread count is given back: GEMMs after run on every thread
    assert [get_n() for _, get_n in blas_thread_counts()] == counts


@pytest.mark.parametrize("n", [0, 1, 2, 7, 36, 100])
def test_on_threads_covers_every_index_once(n):
    from darknumba.layers.conv_winograd import on_threads
    hits = np.zeros(n, np.int64)
    on_threads(lambda i0, i1: np.add.at(hits, np.arange(i0, i1), 1), n)
    assert (hits == 1).all()


# -- the layer: Winograd in test mode where eligible, the exact path otherwise ----------------

@pytest.fixture(autouse=True)
def small_layers_pay(request, monkeypatch):
    """The small test layers count as large enough (WINOGRAD_MIN_BFLOPS, WINOGRAD_MIN_CN),
    except for the official networks, which keep the real thresholds."""
    if "official" not in request.node.name and "threshold" not in request.node.name:
        import darknumba.layers.conv_plan as cp
        monkeypatch.setattr(cp, "WINOGRAD_MIN_BFLOPS", 0.0)
        monkeypatch.setattr(cp, "WINOGRAD_MIN_CN", 0)
        monkeypatch.setattr(cp, "TRAIN_MIN_BFLOPS", 0.0)


@pytest.mark.parametrize("name,want", [("yolov4-tiny", [2, 10, 12, 13, 18, 20, 21, 26, 28, 35]),
                                       ("yolov3-tiny", [4, 6, 8, 10, 12, 14, 21])])
def test_which_layers_take_winograd_at_the_real_threshold(name, want):
    """The 3x3 stride-1 layers from 64 channels (13x13 to 104x104) and 32 -> 64 take Winograd;
    yolov4-tiny's 32 -> 32 (4, 5: the direct kernel), yolov3-tiny's 16 -> 32 (2) and 3 -> 16
    (0), the strided and the 1x1 ones do not."""
    import darknumba as dn
    from darknumba.layers.conv_plan import winograd_eligible
    net = dn.load_network(str(ROOT / "cfg" / f"{name}.cfg"), batch=1)
    taken = [i for i, l in enumerate(net.layers)
             if l.type == "convolutional" and winograd_eligible(l)]
    assert taken == want
    # the 13x13 ones through F(2x2, 3x3), the others through F(4x4, 3x3)
    from darknumba.layers.conv_plan import winograd_tile
    assert [winograd_tile(net.layers[i]) for i in want] == \
        [2 if net.layers[i].out_w == 13 else 4 for i in want]
    assert {net.layers[i].out_w for i in want} >= {13, 26}


@pytest.mark.parametrize("bn", [0, 1])
def test_small_map_takes_f2_within_1e5_of_exact(rng, tmp_path, bn):
    """A 13x13 map (16 4x4 tiles) goes through F(2x2, 3x3) at inference: its transformed
    filters are 16 x c x n, the output within 1e-5 of the exact path's; in training the same
    layer is not eligible (TRAIN_MIN_TILES) and runs exact."""
    cfg = tmp_path / "f2.cfg"
    cfg.write_text("[net]\nbatch=2\nwidth=13\nheight=13\nchannels=24\n"
                   f"[convolutional]\nbatch_normalize={bn}\nfilters=40\nsize=3\nstride=1\n"
                   "pad=1\nactivation=leaky\n[cost]\ntype=sse\n")
    exact, fast = nets(cfg)
    x = rng.uniform(0, 1, (2, 24, 13, 13)).astype(np.float32)
    want = exact.predict(x)
    got = fast.predict(x)
    assert fast.layers[0].winograd_weights.shape == (16, 24, 40)
    assert exact.layers[0].winograd_weights is None
    assert rel_diff(got, want) < 1e-5
    from darknumba.layers.conv_plan import use_winograd
    assert not use_winograd(fast.layers[0], training=True)


@pytest.mark.parametrize("name,want", [("yolov4-tiny", [2, 10, 12, 13, 18, 35]),
                                       ("yolov3-tiny", [4, 6, 21])])
def test_training_threshold_takes_the_large_layers_only(name, want):
    """In training only the 0.6+ BFLOPs layers from 26x26 on take it, and those inference
    takes whose two training passes run pipelined (64 -> 64 at 52x52, 32 -> 64 at 104x104;
    conv_plan.train_pipelined); the other small ones made a training step slower. For the
    forward and the input gradient alike."""
    import darknumba as dn
    from darknumba.layers.conv_plan import use_winograd, winograd_eligible
    net = dn.load_network(str(ROOT / "cfg" / f"{name}.cfg"), batch=1, exact=False)
    taken = [i for i, l in enumerate(net.layers)
             if l.type == "convolutional" and winograd_eligible(l, train=True)]
    assert taken == want
    net.train = True
    assert [i for i in want if use_winograd(net.layers[i], net.train, net.exact)] == want
    assert not any(use_winograd(l, net.train, net.exact) for i, l in enumerate(net.layers)
                   if l.type == "convolutional" and i not in want)

def small_cfg(tmp_path, bn=1):
    """20 -> 40 (pad 1, 30x30: 64 tiles), 40 -> 36 (pad 0, 28x28: 49 tiles), a strided 3x3 and
    a 14x14 one over 8 channels (not eligible). More than 32 filters: fewer go to the direct kernel."""
    cfg = tmp_path / "w.cfg"
    conv = "[convolutional]\nbatch_normalize={bn}\nfilters={n}\nsize=3\nstride={s}\npad={p}\n" \
           "activation={a}\n"
    cfg.write_text("[net]\nbatch=2\nwidth=30\nheight=30\nchannels=20\nlearning_rate=0.01\n"
                   "momentum=0.9\ndecay=0.0005\n"
                   + conv.format(bn=bn, n=40, s=1, p=1, a="leaky")
                   + conv.format(bn=0, n=36, s=1, p=0, a="linear")
                   + conv.format(bn=bn, n=8, s=2, p=1, a="logistic")
                   + conv.format(bn=bn, n=4, s=1, p=1, a="leaky")
                   + "[cost]\ntype=sse\n")
    return cfg


def nets(cfg, **kw):
    import darknumba as dn
    from darknumba.train.timing import unit_rolling_variance
    out = []
    for exact in (True, False):
        net = dn.load_network(cfg, batch=2, exact=exact, **kw)
        unit_rolling_variance(net)
        out.append(net)
    return out


def rel_diff(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("bn", [0, 1])
def test_layer_winograd_within_1e4_of_exact(rng, tmp_path, bn):
    exact, fast = nets(small_cfg(tmp_path, bn))
    x = rng.uniform(0, 1, (2, 20, 30, 30)).astype(np.float32)
    want = exact.predict(x)
    got = fast.predict(x)
    assert [l.winograd_weights is not None for l in fast.layers[:4]] == [True, True, False, False]
    assert all(l.winograd_weights is None for l in exact.layers[:4])
    for le, lf in zip(exact.layers[:4], fast.layers[:4]):
        assert rel_diff(lf.output, le.output) < 1e-4
    assert rel_diff(got, want) < 1e-4


@pytest.mark.parametrize("bn", [0, 1])
def test_pipelined_layers_within_1e4_of_exact_whatever_the_threads(rng, tmp_path, monkeypatch, bn):
    """The pipelined inference pass (conv_winograd._pipelined: each chunk of tile rows
    transformed, multiplied and transformed back by one thread), taken here by both Winograd
    layers: within 1e-4 of the exact path and 1e-6 of the three-phase pass, and the same
    floats on helper threads as on this thread alone, at batch 2 as for each image alone."""
    import darknumba.layers.conv_winograd as cw
    from darknumba.layers import conv_plan
    x = rng.uniform(0, 1, (2, 20, 30, 30)).astype(np.float32)
    exact, phased = nets(small_cfg(tmp_path, bn))
    want, three_phase = exact.predict(x).copy(), phased.predict(x).copy()
    calls = []
    real = cw._pipelined
    monkeypatch.setattr(cw, "_pipelined", lambda *a: calls.append(a[-4]) or real(*a))
    monkeypatch.setattr(conv_plan, "PIPELINE_MIN_TILES", 0)
    fast = nets(small_cfg(tmp_path, bn))[1]
    got = fast.predict(x).copy()
    assert calls == [2, 2]                      # layers 0 and 1, each at batch 2
    assert rel_diff(got, want) < 1e-4
    assert rel_diff(got, three_phase) < 1e-6
    alone = [l.output.copy() for l in fast.layers[:2]]
    monkeypatch.setattr(cw, "_HELPERS", ())     # no helper threads: every chunk on this one
    assert cw._helpers() is None
    fast.predict(x)
    for i, l in enumerate(fast.layers[:2]):
        np.testing.assert_array_equal(l.output, alone[i], err_msg=f"layer {i}")
    one = nets(small_cfg(tmp_path, bn))[1]
    for slot in (0, 1):
        one.predict(np.repeat(x[slot:slot + 1], 2, axis=0))
        np.testing.assert_array_equal(one.layers[1].output.reshape(2, -1)[0],
                                      alone[1].reshape(2, -1)[slot])


def test_transforms_refuse_tile_rows_outside_their_buffer(rng):
    """A chunk's buffer holds tiles t0.. of its rows (t = row * tw + tx - t0): the same tiles as
    a whole-layer buffer there, and rows outside it an error before anything is written."""
    from darknumba.layers.conv_winograd import VARIANTS
    b, c, h, w, n, pad = 1, 3, 14, 10, 4, 1
    x = rng.standard_normal(b * c * h * w).astype(np.float32)
    for m in (4, 2):
        _, input_kernel, output_kernel = VARIANTS[m]
        th, tw = tiles_of(h, w, m)
        k2 = (m + 2) ** 2
        whole = np.zeros((th * tw, k2, c), np.float32)
        input_kernel(x, c, h, w, pad, th, tw, whole, 0, th, 0)
        part = np.full((2 * tw, k2, c), np.nan, np.float32)
        input_kernel(x, c, h, w, pad, th, tw, part, 1, 3, tw)        # rows 1 and 2
        np.testing.assert_array_equal(part, whole[tw:3 * tw])
        out = np.zeros(n * h * w, np.float32)
        M = np.zeros((2 * tw, k2, n), np.float32)
        for bad in ((0, 3, tw), (1, 4, tw), (2, 3, 3 * tw)):        # before, past, beyond
            with pytest.raises(ValueError, match="outside the tile buffer"):
                input_kernel(x, c, h, w, pad, th, tw, part, *bad)
            with pytest.raises(ValueError, match="outside the tile buffer"):
                output_kernel(M, n, h, w, th, tw, out, *bad[:2], False, bad[2])
        assert not out.any()


def test_pipelined_only_where_the_filters_are_no_larger_than_the_tiles():
    from darknumba.layers.conv_plan import PIPELINE_MIN_TILES, pipelined
    assert pipelined(676, 64) and pipelined(169, 128)        # yolov3-tiny's 104x104, 52x52
    assert not pipelined(49, 256) and not pipelined(49, 1024)  # its 26x26 and 13x13
    assert not pipelined(PIPELINE_MIN_TILES - 1, 1)


@pytest.mark.parametrize("bn", [0, 1])
def test_training_winograd_within_1e4_of_exact(rng, tmp_path, bn):
    """Train mode: the eligible layers' forward and input gradient through Winograd, their
    weight gradient exact; outputs, deltas and weight_updates within 1e-4 of the exact path's
    (layer 0's input gradient too: the network's delta is asked for)."""
    exact, fast = nets(small_cfg(tmp_path, bn))
    x = rng.uniform(0, 1, (2, 20, 30, 30)).astype(np.float32)
    truth = rng.uniform(0, 1, (2, fast.outputs)).astype(np.float32)
    dx = {}
    for net in (exact, fast):
        net.forward(x, train=True, truth=truth)
        dx[net] = np.zeros(x.size, np.float32)
        net.backward(dx[net])
    fast.train = exact.train = True
    assert [lf.forward_path(fast).startswith("winograd") for lf in fast.layers[:4]] == \
        [True, True, False, False]
    assert not any(le.forward_path(exact).startswith("winograd") for le in exact.layers[:4])
    # in training the transformed filters live in the network's scratch arena, one layer's at
    # a time, not on every layer (they change with every update)
    assert fast.scratch._arena.size >= max(36 * l.c * l.n for l in fast.layers[:2])
    assert all(lf.winograd_weights is None and not hasattr(lf, "winograd_weights_flipped")
               for lf in fast.layers[:4])
    for le, lf in zip(exact.layers[:4], fast.layers[:4]):
        for name in ("output", "delta", "weight_updates", "bias_updates"):
            assert rel_diff(getattr(lf, name), getattr(le, name)) < 1e-4, name
    assert rel_diff(dx[fast], dx[exact]) < 1e-4
    assert np.abs(dx[exact]).max() > 0


def test_exact_from_the_environment_and_compat(rng, tmp_path, monkeypatch):
    import darknumba as dn
    cfg = small_cfg(tmp_path)
    x = rng.uniform(0, 1, (2, 20, 30, 30)).astype(np.float32)
    monkeypatch.delenv("DARKNUMBA_EXACT", raising=False)
    monkeypatch.delenv("DARKNUMBA_WINOGRAD", raising=False)
    net = dn.load_network(cfg, batch=2)
    assert not net.exact                        # the default: Winograd at inference
    net.predict(x)
    assert net.layers[0].winograd_weights is not None
    monkeypatch.setenv("DARKNUMBA_EXACT", "1")
    net = dn.load_network(cfg, batch=2)
    assert net.exact
    net.predict(x)
    assert net.layers[0].winograd_weights is None
    monkeypatch.setenv("DARKNUMBA_WINOGRAD", "1")  # exact wins over the request for Winograd
    assert dn.load_network(cfg, batch=2).exact
    assert not dn.load_network(cfg, batch=2, exact=False).exact     # the argument wins
    monkeypatch.delenv("DARKNUMBA_EXACT")
    assert not dn.load_network(cfg, batch=2).exact
    monkeypatch.setenv("DARKNUMBA_WINOGRAD", "0")
    assert dn.load_network(cfg, batch=2).exact
    monkeypatch.delenv("DARKNUMBA_WINOGRAD")
    net = dn.load_network(cfg, batch=2, compat="darknet-cpu")
    net.predict(x)
    assert net.layers[0].winograd_weights is None


def test_transformed_filters_follow_the_weights(rng, tmp_path):
    """After a training step, a load_weights and an edit announced with weights_changed(), the
    Winograd output follows the new weights."""
    cfg = small_cfg(tmp_path)
    exact, fast = nets(cfg)
    x = rng.uniform(0, 1, (2, 20, 30, 30)).astype(np.float32)
    truth = rng.uniform(0, 1, (2, fast.outputs)).astype(np.float32)

    def agree():
        assert rel_diff(fast.predict(x), exact.predict(x)) < 1e-4

    change_weights_three_ways(tmp_path, exact, (fast,), (fast,), x, truth, agree)


def change_weights_three_ways(tmp_path, exact, others, told, x, truth, agree):
    """agree() before and after each way the weights change: a training step of every
    network, `others` loading the exact network's scaled weights from a file, and an edit in
    place announced (weights_changed) only to the networks in `told`."""
    from darknumba.weights import load_weights, save_weights
    agree()
    for net in (exact, *others):
        net.train_datum(x, truth)
    agree()
    other = tmp_path / "other.weights"
    for l in exact.layers:
        if l.type == "convolutional":
            l.weights *= -1.5
    save_weights(exact, other)
    for net in others:
        load_weights(net, other)
    agree()
    for net in (exact, *others):
        net.layers[0].weights[::7] = 0.25
    for net in told:
        net.weights_changed()
    agree()


def test_layers_outside_the_budget_take_im2col_at_inference(rng, tmp_path, monkeypatch,
                                                            darknet_epilogues):
    """A network whose budget keeps no transformed filters (conv_plan.winograd_cached) runs
    those layers on im2col + GEMM at inference (transforming 4x the weights at every forward
    cost more than Winograd saves: yolov3's 512 -> 1024 layers at 608 took 1.6x im2col's time):
    the exact network's outputs bit for bit, layer by layer, no filters kept; in training they
    take Winograd, their filters made in the scratch arena at each pass, and after a step the
    inference outputs follow the new weights (an exact network loading them agrees bit for
    bit; both with Darknet's epilogue, darknet_epilogues). A network that keeps its filters
    stays within 1e-4 of both."""
    from darknumba.layers import conv_plan
    from darknumba.weights import load_weights, save_weights
    cfg = small_cfg(tmp_path)
    exact, kept = nets(cfg)
    monkeypatch.setattr(conv_plan, "WINOGRAD_CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(conv_plan, "WINOGRAD_CACHE_OF_WEIGHTS", 0.0)
    _, budgetless = nets(cfg)
    assert [l.winograd_keep for l in kept.layers[:2]] == [True, True]
    assert [l.winograd_keep for l in budgetless.layers[:2]] == [False, False]
    assert [str(l.forward_path(budgetless)) for l in budgetless.layers[:2]] == ["im2col"] * 2
    assert [str(l.forward_path(kept)) for l in kept.layers[:2]] == ["winograd4x4"] * 2
    x = rng.uniform(0, 1, (2, 20, 30, 30)).astype(np.float32)
    truth = rng.uniform(0, 1, (2, budgetless.outputs)).astype(np.float32)

    def agree(other):
        got, want = budgetless.predict(x).copy(), other.predict(x)
        for lb, lo in zip(budgetless.layers[:4], other.layers[:4]):    # the convolutions
            np.testing.assert_array_equal(lb.output, lo.output)
        np.testing.assert_array_equal(got, want)
        assert rel_diff(got, kept.predict(x)) < 1e-4
        assert all(l.winograd_weights is None for l in budgetless.layers[:4])
    agree(exact)
    budgetless.train = True
    assert str(budgetless.layers[0].forward_path(budgetless)) == "winograd4x4"
    budgetless.train = False
    for net in (budgetless, kept):
        net.train_datum(x, truth)
    trained = tmp_path / "trained.weights"
    save_weights(budgetless, trained)
    load_weights(exact, trained)
    agree(exact)


# -- the official yolov3-tiny and yolov4-tiny weights on the sample photos ---------------------

@pytest.mark.slow
@pytest.mark.parametrize("name,layer", [("yolov3-tiny", 21), ("yolov4-tiny", 18)])
def test_official_detections_identical_on_the_photos(name, layer, monkeypatch):
    """Every yolo output within 1e-3 of its scale, and the printed lines and boxes
    identical, on every sample photo (`layer`: one the default path runs in Winograd)."""
    from conftest import v4tiny_weights

    from darknumba.vision.detector import Detector
    monkeypatch.delenv("DARKNUMBA_EXACT", raising=False)
    monkeypatch.delenv("DARKNUMBA_WINOGRAD", raising=False)
    weights = tiny_weights() if name == "yolov3-tiny" else v4tiny_weights()
    photos = sample_photos()
    cfg = ROOT / "cfg" / f"{name}.cfg"
    runs = [Detector(cfg, weights, thresh=0.25, exact=e) for e in (True, None)]
    assert not runs[1].net.exact                                    # the default
    assert runs[1].net.layers[layer].winograd_weights is None      # not yet run
    preds = [list(d.run(photos)) for d in runs]
    assert runs[1].net.layers[layer].winograd_weights is not None
    assert all(l.winograd_weights is None for l in runs[0].net.layers if l.type == "convolutional")
    for pe, pf in zip(*preds, strict=True):
        assert pe.lines() == pf.lines(), pe.source
        assert [d["box"] for d in pe.results] == [d["box"] for d in pf.results], pe.source
        assert len(pe.lines()) > 0
    x = np.random.default_rng(0).uniform(0, 1, (1, 3, 416, 416)).astype(np.float32)
    for d in runs:
        d.net.predict(x)
    for le, lf in zip(runs[0].net.layers, runs[1].net.layers):
        if le.type == "yolo":
            assert rel_diff(lf.output, le.output) < 1e-3


def test_training_takes_the_exact_option(tmp_path, monkeypatch):
    """detector train's --exact/--winograd reach the network (TrainOptions.exact); unset, the
    environment decides."""
    from typer.testing import CliRunner

    from darknumba.cli import app
    from darknumba.train.detector import TrainOptions, training_network
    monkeypatch.delenv("DARKNUMBA_EXACT", raising=False)
    monkeypatch.delenv("DARKNUMBA_WINOGRAD", raising=False)
    cfg = str(small_cfg(tmp_path))
    assert training_network(cfg, TrainOptions(exact=True), print).exact
    assert not training_network(cfg, TrainOptions(exact=False), print).exact
    assert not training_network(cfg, TrainOptions(), print).exact
    monkeypatch.setenv("DARKNUMBA_EXACT", "1")
    assert training_network(cfg, TrainOptions(), print).exact
    assert not training_network(cfg, TrainOptions(exact=False), print).exact
    out = CliRunner().invoke(app, ["detector", "train", "--help"], terminal_width=200).output
    assert "--exact" in out and "--winograd" in out


@pytest.mark.parametrize("exact", [True, False])
def test_an_image_gives_the_same_outputs_in_any_slot_of_any_batch(rng, tmp_path, exact):
    """At inference every image's convolutions are its own GEMMs (Winograd's too): the same
    floats alone at batch 1 as in slot 1 or 2 of a batch of 3 (OpenBLAS may sum a column of one
    long product in another order, depending on where it falls)."""
    import darknumba as dn
    from darknumba.train.timing import unit_rolling_variance
    x = rng.uniform(0, 1, (3, 20, 30, 30)).astype(np.float32)
    nets_by_batch = {}
    for batch in (1, 3):
        net = dn.load_network(small_cfg(tmp_path), batch=batch, exact=exact)
        unit_rolling_variance(net)
        nets_by_batch[batch] = net
    one, three = nets_by_batch[1], nets_by_batch[3]
    three.predict(x)
    together = [l.output.reshape(3, -1).copy() for l in three.layers]
    for slot in (1, 2):
        one.predict(x[slot:slot + 1])
        for i, l in enumerate(one.layers):
            np.testing.assert_array_equal(l.output.ravel(), together[i][slot], err_msg=f"layer {i}")
    assert (one.layers[0].winograd_weights is not None) == (not exact)


def test_a_connected_layer_gives_an_image_the_same_outputs_in_any_slot(rng, tmp_path):
    """The connected layer at inference: an image's outputs alone equal its slot's in a batch
    of 3 (one batched product sums them in another order here: most values differ in their
    last bits)."""
    import darknumba as dn
    cfg = tmp_path / "fc.cfg"
    cfg.write_text("[net]\nbatch=1\nwidth=8\nheight=8\nchannels=3\n"
                   "[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
                   "[connected]\noutput=300\nactivation=leaky\n"
                   "[connected]\noutput=10\nactivation=linear\n[softmax]\n")
    x = rng.uniform(0, 1, (3, 3, 8, 8)).astype(np.float32)
    one, three = (dn.load_network(cfg, batch=b) for b in (1, 3))
    for a, b in zip(one.layers, three.layers, strict=True):
        for name in ("weights", "biases"):
            if getattr(a, name, None) is not None:
                getattr(b, name)[:] = getattr(a, name)
    three.predict(x)
    together = [l.output.reshape(3, -1).copy() for l in three.layers]
    for slot in range(3):
        one.predict(x[slot:slot + 1])
        for i, l in enumerate(one.layers):
            np.testing.assert_array_equal(l.output.ravel(), together[i][slot], err_msg=f"layer {i}")


def test_forward_path_at_the_real_threshold_names_how_each_convolution_runs():
    """forward_path (the per-layer table of `darknumba bench`, the first run's kernel keys)
    says what forward does: at inference yolov4-tiny's 13x13 layers through F(2x2), the larger
    ones through F(4x4), 32 -> 32 direct, the first (3 -> 32, stride 2) through the stride-2
    direct kernel, and without full-width AVX-512 (the suite's plan) the second (32 -> 64) too,
    1x1 as Darknet does; in training the small Winograd
    layers that do not pipeline (26x26 and below) and the first go back to im2col + GEMM."""
    import darknumba as dn
    from darknumba.train.timing import profile_forward, unit_rolling_variance
    net = dn.load_network(str(ROOT / "cfg" / "yolov4-tiny.cfg"), batch=1, exact=False)
    unit_rolling_variance(net)
    want = {0: "direct-s2", 1: "direct-s2", 2: "winograd4x4", 4: "direct", 7: "1x1",
            12: "winograd4x4", 26: "winograd2x2", 28: "winograd2x2", 35: "winograd4x4"}
    assert {i: net.layers[i].forward_path(net) for i in want} == want
    table = profile_forward(net, np.zeros((1, 3, 416, 416), np.float32), reps=1).splitlines()
    for i, path in want.items():
        assert table[1 + i].split()[:3] == [str(i), "convolutional", path]
    net.train = True
    assert [net.layers[i].forward_path(net) for i in (0, 2, 12, 20, 26)] == \
        ["im2col", "winograd4x4", "winograd4x4", "im2col", "im2col"]
    exact = dn.load_network(str(ROOT / "cfg" / "yolov4-tiny.cfg"), batch=1, exact=True)
    assert {exact.layers[i].forward_path(exact) for i in (2, 12, 26)} == {"im2col"}
