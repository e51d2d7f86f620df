"""AlexeyAB's calc_anchors: k-means with the 1 - IoU distance, against a loop-by-loop port of
its matrix.c rules, and from the command line on a generated dataset."""
import numpy as np
import pytest
from typer.testing import CliRunner

from darknumba.cli import app
from darknumba.data.synthetic import generate_shapes
from darknumba.train.anchors import calc_anchors, iou_wh, kmeans_iou


def naive_kmeans(data, centres, rounds=1000):
    """do_kmeans after random_centers, as matrix.c loops it (float32 like its floats)."""
    data, centres = data.astype(np.float32), centres.astype(np.float32).copy()
    k = len(centres)
    assign = [0] * len(data)

    def dist(x, y):
        mw, mh = min(x[0], y[0]), min(x[1], y[1])
        inter = np.float32(mw * mh)
        return np.float32(1) - inter / np.float32(x[0] * x[1] + y[0] * y[1] - inter)

    def maximise():
        old = centres.copy()
        sums = np.zeros((k, 2), np.float64)
        counts = [0] * k
        for i, a in enumerate(assign):
            counts[a] += 1
            sums[a] += data[i]
        for j in range(k):
            for c in range(2):
                v = np.float32(sums[j, c] / counts[j]) if counts[j] else np.float32(0)
                centres[j, c] = old[j, c] if v == 0 else v

    if k == 1:
        maximise()
    i = 0
    while i < rounds:
        converged = True
        for n, x in enumerate(data):
            best, best_d = 0, dist(x, centres[0])
            for j in range(k):
                d = dist(x, centres[j])
                if d < best_d:
                    best, best_d = j, d
            if best != assign[n]:
                converged = False
            assign[n] = best
        if converged:
            break
        maximise()
        i += 1
    return centres, np.array(assign), i


@pytest.mark.parametrize("k, seed", [(1, 0), (3, 1), (6, 2), (9, 3)])
def test_kmeans_equals_the_loop_port(k, seed):
    rng = np.random.default_rng(seed)
    data = (rng.lognormal(3, 0.8, (200, 2))).astype(np.float32)
    got, assign, rounds = kmeans_iou(data, k, np.random.default_rng(seed))
    init = data[np.random.default_rng(seed).permutation(len(data))[:k]]
    ref, ref_assign, ref_rounds = naive_kmeans(data, init)
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    np.testing.assert_array_equal(assign, ref_assign)
    assert rounds == ref_rounds


def test_separated_clusters_are_found_and_sorted_by_area():
    rng = np.random.default_rng(0)
    true = np.array([[10, 14], [40, 30], [120, 160]], np.float32)
    wh = np.concatenate([t * rng.uniform(0.97, 1.03, (50, 2)) for t in true]) / 416
    a = calc_anchors(wh, np.repeat([0, 1, 2], 50), 3, 3, 416, 416, seed=5)
    np.testing.assert_allclose(a.anchors, true, rtol=0.03)
    assert a.counters_per_class == [50, 50, 50] and a.avg_iou > 90
    assert a.anchors_line(416).count(",") == 5
    assert iou_wh(a.anchors[:1], a.anchors[:1])[0, 0] == pytest.approx(1)


def test_calc_anchors_command(tmp_path):
    data = generate_shapes(tmp_path / "shapes", n=40, valid_fraction=0.2, seed=1)
    r = CliRunner().invoke(app, ["detector", "calc_anchors", str(data), "-num_of_clusters", "6",
                                 "-width", "224", "-height", "224", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    line = (tmp_path / "anchors.txt").read_text()
    vals = np.array(line.replace(" ", "").split(","), float).reshape(6, 2)
    assert np.all(np.diff(vals[:, 0] * vals[:, 1]) >= -1)       # smallest area first (rounded)
    assert "avg IoU = " in r.output and f"anchors = {line}" in r.output
    assert (tmp_path / "counters_per_class.txt").read_text().startswith("counters_per_class = ")
