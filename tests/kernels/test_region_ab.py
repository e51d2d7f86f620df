"""AlexeyAB's [region] kernels (kernels/region_ab.py) against plain numpy: flatten and its
inverse on odd shapes, the objectness / softmax activations on the flattened output, and the
boxes and probabilities get_region_boxes reads from it. (The loss is held against AlexeyAB's
recorded deltas in tests/networks/test_ab_region.py.)"""
import numpy as np
import pytest

from darknumba.kernels.region_ab import activate_region_ab, flatten_cpu, get_region_boxes_ab
from darknumba.kernels.softmax import softmax_cpu_one

f32 = np.float32


@pytest.mark.parametrize("size, layers, batch", [(1, 1, 1), (5, 7, 3), (16, 21, 2), (9, 1, 2)])
def test_flatten_is_a_per_image_transpose_and_back(size, layers, batch):
    rng = np.random.default_rng(size * 100 + layers)
    x = rng.standard_normal(size * layers * batch).astype(f32)
    flat = np.full_like(x, np.nan)
    flatten_cpu(x, size, layers, batch, True, flat)
    expected = x.reshape(batch, layers, size).transpose(0, 2, 1).reshape(-1)
    np.testing.assert_array_equal(flat, expected)
    back = np.full_like(x, np.nan)
    flatten_cpu(flat, size, layers, batch, False, back)
    np.testing.assert_array_equal(back, x)


def logistic(v):
    return 1.0 / (1.0 + np.exp(-v.astype(np.float64)))


@pytest.mark.parametrize("softmax", [True, False])
def test_activations_on_the_flattened_output(softmax):
    batch, wh, n, classes = 2, 6, 3, 4
    size = 5 + classes
    x = (np.random.default_rng(3).standard_normal(batch * wh * n * size) * 3).astype(f32)
    out = x.copy()
    activate_region_ab(out, batch, wh * n * size, wh * n, size, classes, softmax)
    ref = x.astype(np.float64).reshape(batch, wh, n, size).copy()
    ref[..., 4] = logistic(ref[..., 4])
    if softmax:
        e = np.exp(ref[..., 5:] - ref[..., 5:].max(-1, keepdims=True))
        ref[..., 5:] = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(out.reshape(ref.shape), ref, rtol=2e-6, atol=1e-7)
    untouched = np.ones(size, bool)
    untouched[4] = False
    if softmax:
        untouched[5:] = False
    np.testing.assert_array_equal(out.reshape(ref.shape)[..., untouched],
                                  x.reshape(ref.shape)[..., untouched])


def test_softmax_of_equal_values_is_uniform_and_in_place():
    x = np.array([9, 2, 2, 2, 2, 9], f32)
    softmax_cpu_one(x[1:5], 4, 1.0, x[1:5])     # as activate_region_ab calls it
    np.testing.assert_array_equal(x, f32([9, 0.25, 0.25, 0.25, 0.25, 9]))


@pytest.mark.parametrize("classfix", [0, -1])
def test_region_boxes_read_the_flattened_layout(classfix):
    lw, lh, n, classes = 3, 2, 2, 3
    size = 5 + classes
    rng = np.random.default_rng(5)
    flat = rng.standard_normal((lh * lw, n, size)).astype(f32)
    flat[..., 4] = rng.uniform(0.2, 0.9, (lh * lw, n))
    flat[..., 5:] = rng.uniform(0, 1, (lh * lw, n, classes))
    biases = f32([0.6, 0.8, 2.1, 1.3])
    thresh = f32(0.3)
    k = lw * lh * n
    bbox, prob = np.full((k, 4), np.nan, f32), np.full((k, classes), np.nan, f32)
    offset = 7                      # the image's start in the buffer
    buf = np.concatenate([np.zeros(offset, f32), flat.reshape(-1)])
    get_region_boxes_ab(bbox, prob, buf, offset, n, lw, lh, classes, biases, thresh, classfix)
    cell = np.arange(lw * lh)
    col, row = (cell % lw)[:, None], (cell // lw)[:, None]
    f = flat.astype(np.float64)
    ref_box = np.stack([(col + logistic(f[..., 0])) / lw, (row + logistic(f[..., 1])) / lh,
                        np.exp(f[..., 2]) * biases[0::2] / lw,
                        np.exp(f[..., 3]) * biases[1::2] / lh], -1).reshape(k, 4)
    np.testing.assert_allclose(bbox, ref_box, rtol=2e-6)
    scale = f[..., 4:5]
    if classfix == -1:
        scale = np.where(scale < 0.5, 0.0, scale)
    p = (scale * f[..., 5:]).reshape(k, classes)
    ref_prob = np.where(p > thresh, p, 0.0)
    np.testing.assert_allclose(prob, ref_prob, rtol=2e-6)
    assert (prob > 0).any() and (prob == 0).any()
