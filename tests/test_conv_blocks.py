"""The convolution by blocks of output rows (kernels/conv_blocks.py, layers/conv_blocks.py):
its im2col of a row range against tests/naive's im2col, its sums against a float64
convolution, and the layer's outputs, deltas and updated weights against the im2col + GEMM
path, which it must equal bit for bit (the same sgemm sums over k in the same order)."""
import naive
import numpy as np
import pytest

from darknumba.kernels import sgemm
from darknumba.kernels.activations import LINEAR
from darknumba.kernels.conv_blocks import (col2im_rows, conv_blocks_backward_cpu, conv_blocks_cpu,
                                           im2col_rows)
from darknumba.layers import conv_blocks

pytestmark = pytest.mark.skipif(not sgemm.available(),
                                reason="numpy's BLAS has no ILP64 OpenBLAS sgemm with per-thread "
                                       "thread counts: the layers use im2col + GEMM")
EMPTY = np.empty(0, np.float32)

# (c, h, w, size, stride, pad)
SHAPES = [(3, 9, 7, 3, 1, 1), (2, 8, 11, 3, 2, 1), (4, 7, 6, 1, 2, 0), (3, 10, 9, 5, 1, 2),
          (1, 6, 6, 3, 3, 0), (2, 5, 13, 3, 2, 0), (3, 4, 4, 3, 1, 2), (2, 12, 70, 3, 1, 1),
          (5, 8, 9, 1, 1, 0)]


def out_size(n, size, stride, pad):
    return (n + 2 * pad - size) // stride + 1


@pytest.mark.parametrize("c,h,w,size,stride,pad", SHAPES)
def test_im2col_rows_are_the_rows_of_im2col(rng, c, h, w, size, stride, pad):
    oh, ow = out_size(h, size, stride, pad), out_size(w, size, stride, pad)
    k = c * size * size
    x = rng.standard_normal(2 * c * h * w).astype(np.float32)
    ref = np.zeros(k * oh * ow, np.float32)
    naive.im2col_cpu(x[c * h * w:], c, h, w, size, stride, pad, ref)     # the second image
    ref = ref.reshape(k, oh, ow)
    for y0, y1 in [(0, oh), (0, 1), (oh - 1, oh), (min(1, oh - 1), oh)]:
        col = np.full(k * (y1 - y0) * ow, np.nan, np.float32)
        im2col_rows(x, c * h * w, c, h, w, size, stride, pad, ow, y0, y1, col)
        np.testing.assert_array_equal(col.reshape(k, y1 - y0, ow), ref[:, y0:y1])


@pytest.mark.parametrize("c,h,w,size,stride,pad", SHAPES)
def test_col2im_rows_adds_back_what_col2im_does(rng, c, h, w, size, stride, pad):
    oh, ow = out_size(h, size, stride, pad), out_size(w, size, stride, pad)
    k = c * size * size
    col = rng.standard_normal(k * oh * ow).astype(np.float32)
    ref = np.zeros(c * h * w, np.float32)
    naive.col2im_cpu(col, c, h, w, size, stride, pad, ref)
    got = np.zeros(2 * c * h * w, np.float32)
    blocks = col.reshape(k, oh, ow)
    for y0 in range(0, oh, 2):                       # row blocks of two, added one after another
        y1 = min(oh, y0 + 2)
        part = np.ascontiguousarray(blocks[:, y0:y1]).ravel()
        col2im_rows(part, c, h, w, size, stride, pad, ow, y0, y1, got, c * h * w)
    assert not got[:c * h * w].any()
    np.testing.assert_allclose(got[c * h * w:], ref, rtol=1e-6, atol=1e-6)


def backward_cases():
    """SHAPES with block heights and batches the layers would take backward (two threads'
    runs of at least two blocks, blocks overlapping only their neighbours)."""
    for c, h, w, size, stride, pad in SHAPES:
        oh = out_size(h, size, stride, pad)
        for rows, batch in [(2, 3), (3, 1), (1000, 4)]:
            rows = min(rows, oh)
            if (rows + 1) * stride >= size and batch * -(-oh // rows) >= 4:
                yield c, h, w, size, stride, pad, rows, batch


@pytest.mark.parametrize("c,h,w,size,stride,pad,rows,batch", list(backward_cases()))
def test_blocks_backward_matches_naive_gradients(rng, c, h, w, size, stride, pad, rows, batch):
    n = 5
    oh, ow = out_size(h, size, stride, pad), out_size(w, size, stride, pad)
    k = c * size * size
    x = rng.standard_normal(batch * c * h * w).astype(np.float32)
    wts = rng.standard_normal(n * k).astype(np.float32)
    delta = rng.standard_normal(batch * n * oh * ow).astype(np.float32)
    dw_ref, dx_ref = naive.conv_backward(x, wts, delta, batch, c, h, w, n, size, stride, pad, 1)
    cols = np.full((2, k * rows * ow), np.nan, np.float32)
    grads = np.full((2, k * rows * ow), np.nan, np.float32)
    parts = np.full((2, k, n), np.nan, np.float32)
    dx = np.ones(x.size, np.float32)                                   # adds, as col2im
    with sgemm.single_threaded():
        conv_blocks_backward_cpu(x, batch, c, h, w, size, stride, pad, wts, n, delta, rows,
                                 cols, grads, parts, dx)
    dw = parts.sum(axis=0).T.ravel()
    np.testing.assert_allclose(dw, dw_ref, rtol=1e-4, atol=1e-5 * np.abs(dw_ref).max())
    np.testing.assert_allclose(dx - 1, dx_ref, rtol=1e-4, atol=1e-5 * np.abs(dx_ref).max())


@pytest.mark.parametrize("c,h,w,size,stride,pad", SHAPES)
@pytest.mark.parametrize("rows", [1, 2, 1000])
def test_blocks_sum_the_convolution(rng, c, h, w, size, stride, pad, rows):
    b, n = 2, 5
    oh, ow = out_size(h, size, stride, pad), out_size(w, size, stride, pad)
    k = c * size * size
    x = rng.standard_normal(b * c * h * w).astype(np.float32)
    wts = rng.standard_normal(n * k).astype(np.float32)
    rows = min(rows, oh)
    cols = np.full((2, k * rows * ow), np.nan, np.float32)
    out = np.full(b * n * oh * ow, np.nan, np.float32)
    with sgemm.single_threaded():
        conv_blocks_cpu(x, b, c, h, w, size, stride, pad, wts, n, out, rows, cols,
                        EMPTY, EMPTY, EMPTY, EMPTY, LINEAR)
    ref = naive.conv_forward(x, wts, np.zeros(n), b, c, h, w, n, size, stride, pad, 1).ravel()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("size,stride,pad", [(3, 1, 1), (3, 2, 1), (1, 1, 0)])
def test_blocks_of_a_real_layer_equal_one_gemm_bit_for_bit(rng, size, stride, pad):
    """A layer of the size the blocks are used for (not OpenBLAS's small-matrix kernels): the
    blocks' sums are one GEMM's, bit for bit."""
    from types import SimpleNamespace
    b, c, h, w, n = 2, 16 if size > 1 else 64, 96, 90, 32
    oh, ow = out_size(h, size, stride, pad), out_size(w, size, stride, pad)
    k = c * size * size
    rows = conv_blocks.rows_per_block(SimpleNamespace(size=size, stride=stride, c=c, n=n, out_h=oh,
                                                      out_w=ow))
    assert 1 < rows < oh and n * k * rows * ow > conv_blocks.SMALL_GEMM
    x = rng.standard_normal(b * c * h * w).astype(np.float32)
    wts = rng.standard_normal(n * k).astype(np.float32)
    out = np.full(b * n * oh * ow, np.nan, np.float32)
    with sgemm.single_threaded():
        conv_blocks_cpu(x, b, c, h, w, size, stride, pad, wts, n, out, rows,
                        np.empty((2, k * rows * ow), np.float32), EMPTY, EMPTY, EMPTY, EMPTY,
                        LINEAR)
    for i in range(b):
        col = np.zeros(k * oh * ow, np.float32)
        naive.im2col_cpu(x[i * c * h * w:], c, h, w, size, stride, pad, col)
        gemm = wts.reshape(n, k) @ col.reshape(k, oh * ow)
        np.testing.assert_array_equal(out[i * n * oh * ow:(i + 1) * n * oh * ow].reshape(n, -1),
                                      gemm)


CFG = """[net]
batch={batch}
width=23
height=17
channels=3
learning_rate=0.01
momentum=0.9
decay=0.0005
[convolutional]
batch_normalize=1
filters=6
size=3
stride=2
pad=1
activation=leaky
[convolutional]
batch_normalize={bn}
filters=7
size=3
stride=1
pad=1
activation={act}
[convolutional]
filters=5
size=5
stride=1
pad=2
activation=linear
[convolutional]
batch_normalize=1
filters=4
size=1
stride=1
pad=0
activation=leaky
[cost]
type=sse
"""


@pytest.mark.parametrize("bn,act,batch", [(1, "leaky", 1), (0, "mish", 1), (1, "logistic", 3),
                                          (0, "relu", 2)])
def test_layers_by_blocks_equal_im2col_and_gemm(rng, monkeypatch, tmp_path, bn, act, batch):
    """Test-mode outputs, then one training step (outputs, deltas, updated weights), with the
    blocks (small ones, so that maps have several and a remainder) and without. The GEMMs are
    small here (OpenBLAS's small-matrix kernels), so the sums may differ in the last bit."""
    import darknumba as dn
    from darknumba.layers import convolutional
    cfg = tmp_path / "n.cfg"
    cfg.write_text(CFG.format(bn=bn, act=act, batch=batch))
    monkeypatch.setattr(conv_blocks, "BLOCKS_MIN_SPATIAL", 0)
    monkeypatch.setattr(conv_blocks, "BLOCK_FLOATS", 1500)      # 2-4 rows a block
    monkeypatch.setattr(conv_blocks, "SMALL_GEMM", 0)
    monkeypatch.setattr(convolutional, "DIRECT_MAX_K", 0)      # no direct 3x3 kernel here
    monkeypatch.setattr(convolutional, "BATCH_GEMM_MAX_N", 0)  # one GEMM per image otherwise
    x = rng.uniform(0, 1, (batch, 3, 17, 23)).astype(np.float32)
    truth = rng.uniform(0, 1, (batch, 4 * 9 * 12)).astype(np.float32)      # after stride 2
    runs = []
    threads = sgemm._threads[1]()
    for blocks in (True, False):
        monkeypatch.setattr(sgemm, "_found", blocks)
        net = dn.parse_network_cfg(str(cfg), seed=5)
        assert conv_blocks.use_blocks(net.layers[1], per_image=True) == blocks
        assert conv_blocks.use_blocks_backward(net.layers[1], per_image=True) == blocks
        assert conv_blocks.use_blocks(net.layers[3], per_image=True) == blocks      # 1x1
        pred = net.predict(x).copy()
        outs = [l.output.copy() for l in net.layers[:4]]
        cost = net.train_datum(x, truth)
        state = [(l.output.copy(), l.delta.copy(), l.weights.copy()) for l in net.layers[:4]]
        runs.append((pred, outs, cost, state))
        assert sgemm._threads[1]() == threads          # OpenBLAS's thread count is given back
    (pred_b, outs_b, cost_b, state_b), (pred_g, outs_g, cost_g, state_g) = runs
    def same(u, v):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(v).max()))
    same(pred_b, pred_g)
    for a, b in zip(outs_b, outs_g, strict=True):
        same(a, b)
    assert cost_b == pytest.approx(cost_g, rel=1e-5)
    for a, b in zip(state_b, state_g, strict=True):
        for u, v in zip(a, b, strict=True):
            same(u, v)
