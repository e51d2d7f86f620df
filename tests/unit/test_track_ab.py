"""AlexeyAB's [net] track=1 (vision/sequence_ab.py): the sequential path choice against a
plain-Python reference of data.c get_sequential_paths fed the same random stream (numpy's, and
glibc's rand() as AlexeyAB's random_gen() draws it on Linux), the sequential_subdivisions
schedule by hand, a batch whose thread shares are sequences augmented alike, and a short
`detector train` whose loaded batches step through the list."""
import numpy as np
import pytest

from darknumba.vision.augment_ab import AbAugmentConfig
from darknumba.vision.mosaic_ab import load_data_detection_ab, thread_shares
from darknumba.vision.sequence_ab import (SequentialSubdivisions, TrackSource,
                                          generator_rand, get_sequential_paths,
                                          sequential_plan)

RNG = np.random.default_rng


def ab_sequential_paths(rand, n, m, mini_batch, augment_speed, contrastive):
    """get_sequential_paths as its C reads, one loop per line: rand() gives random_gen()."""
    lo, hi = 1, augment_speed                       # rand_int(1, augment_speed)
    if hi < lo:
        lo, hi = hi, lo
    speed = rand() % (hi - lo + 1) + lo
    if speed < 1:
        speed = 1
    start = [0] * mini_batch                        # unsigned int start_time_indexes[]
    for i in range(mini_batch):
        if contrastive and i % 2 == 1:
            start[i] = start[i - 1]
        else:
            start[i] = rand() % m
    out = []
    for i in range(n):
        line = i % mini_batch
        out.append(start[line] % m)
        start[line] = (start[line] + speed) % 2 ** 32
    return out


def glibc_rand(seed):
    """glibc's rand() after srand(seed) (random_r's TYPE_3 additive generator), as a
    function giving the next number."""
    r = [seed]
    for i in range(1, 31):
        r.append(16807 * r[i - 1] % 2147483647)
    r += [r[i - 31] for i in range(31, 34)]
    for i in range(34, 344):
        r.append((r[i - 31] + r[i - 3]) % 2 ** 32)

    def rand():
        r.append((r[-31] + r[-3]) % 2 ** 32)
        return r[-1] >> 1
    return rand


def test_glibc_rand_port_gives_the_known_stream():
    rand = glibc_rand(1)            # srand(1); rand() x 4 on glibc
    assert [rand() for _ in range(4)] == [1804289383, 846930886, 1681692777, 1714636915]


def _stream(source, seed):
    """Two copies of one random_gen() stream: numpy's through generator_rand, or glibc's."""
    if source == "numpy":
        return generator_rand(RNG(seed)), generator_rand(RNG(seed))
    return glibc_rand(seed), glibc_rand(seed)


@pytest.mark.parametrize("source", ["numpy", "glibc"])
@pytest.mark.parametrize("n, m, mini_batch, speed, contrastive", [
    (12, 20, 3, 3, False), (16, 7, 4, 2, True), (10, 5, 4, 1, False),  # 10: not whole steps
    (9, 50, 9, 5, False), (8, 11, 2, 0, False), (6, 3, 6, 4, True)])    # speed 0: AB's swap
def test_sequential_paths_follow_alexeyabs_rule(source, n, m, mini_batch, speed, contrastive):
    for seed in (1, 2, 3):
        ours, ref = _stream(source, seed)
        got = get_sequential_paths(ours, n, m, mini_batch, speed, contrastive)
        assert got.tolist() == ab_sequential_paths(ref, n, m, mini_batch, speed, contrastive)
        assert ours() == ref()      # the same draws consumed


def test_sequential_subdivisions_schedule_by_hand():
    s = SequentialSubdivisions(init=3, subdivisions=8, steps=[10, 20, 30],
                               seq_scales=[0.5, 4.0])
    # 3 * 0.5 = 1.5 -> 1 (C's int *= float), 1 * 4 = 4, the third step has no scale: 1
    assert [s.current(b) for b in (0, 9, 10, 19, 20, 35)] == [3, 3, 1, 1, 4, 4]
    assert [s.sequence(b) for b in (0, 10, 20)] == [8 // 3, 8, 2]
    assert SequentialSubdivisions(4, 4, [1], [10.0]).current(5) == 4     # at most S
    assert SequentialSubdivisions(4, 4, [1], [0.1]).current(5) == 1      # at least 1
    # a run started at 10: its first batch takes the cfg's value, batch k the one at k - 1
    assert [s.threads(k, 10) for k in (10, 11, 20, 21)] == [3, 1, 1, 4]
    assert SequentialSubdivisions(0, 4).threads(0, 0) == 4                # 0: subdivisions


def _ab_net(tmp_path, **net):
    from ab_tiny import ab_tiny_cfg

    from darknumba.parser import parse_network_cfg
    p = tmp_path / "ab.cfg"
    p.write_text(ab_tiny_cfg(**net))
    return parse_network_cfg(p)


def test_track_config_from_network(tmp_path):
    """train_detector's track branch: mini_batch = batch / subdivisions (net.batch / time_steps),
    the threads from sequential_subdivisions (the cfg's, at most subdivisions)."""
    net = _ab_net(tmp_path, track=1, time_steps=3, batch=8, subdivisions=4, augment_speed=5,
                  sequential_subdivisions=9, policy="steps", steps="4,5", scales=".1,.1",
                  seq_scales="0.5,0.5")
    a = AbAugmentConfig.from_network(net)
    assert net.batch == 6 and (a.track, a.mini_batch, a.augment_speed) == (True, 2, 5)
    assert a.sequential == SequentialSubdivisions(4, 4, [4, 5], [0.5, 0.5])
    a = AbAugmentConfig.from_network(_ab_net(tmp_path, track=1))
    assert a.sequential.init == 2 and a.augment_speed == 2                  # the defaults
    assert not AbAugmentConfig.from_network(_ab_net(tmp_path)).track


def _track_batch(n, threads, a, m, seed=0):
    """A track=1 batch of one picture in m copies (the same boxes) told apart by their track
    ids 1000 (j + 1): returns X, T, the list index of each row (from its track id) and the
    TrackSource's plan rebuilt from the same generators."""
    rng = RNG(9)
    im = rng.random((3, 40, 50)).astype(np.float32)
    boxes = np.array([[0.5, 0.5, 0.4, 0.3, 1]], np.float32)
    source = TrackSource(m, lambda j: (im, boxes, 1000 * (j + 1)),
                         lambda start: RNG([seed, start, 2]),
                         lambda start, q: RNG([seed, start, 3, q]))
    X, T = load_data_detection_ab(RNG(seed), None, n, 32, 32, a,
                                  image_rng=lambda p: RNG([seed, p]), track=source,
                                  threads=threads)
    ids = T.reshape(n, -1, 6)[:, 0, 5]
    return X, T, ids / 1000 - 1


@pytest.mark.parametrize("contrastive", [False, True])
def test_track_batch_is_sequences_augmented_alike(contrastive):
    """Each thread share: row i is sequence i % mini_batch at its step i // mini_batch,
    stepping through the list by the share's speed; every row of the share has the same crop,
    flip, colour and blur (one picture: the very same pixels and boxes), the shares differ."""
    n, threads, mini_batch, m = 16, 2, 4, 13
    a = AbAugmentConfig(jitter=0.3, resize=1.5, hue=0.1, saturation=1.5, exposure=1.5,
                        flip=True, blur=1, mixup=0, track=True, augment_speed=3,
                        mini_batch=mini_batch, contrastive=contrastive)
    X, T, rows = _track_batch(n, threads, a, m)
    shares = thread_shares(n, threads)
    for s, share in enumerate(shares):
        ref = ab_sequential_paths(generator_rand(RNG([0, share.start, 2])), len(share), m,
                                  mini_batch, 3, contrastive)
        assert rows[share].tolist() == ref
        steps = {(rows[p + mini_batch] - rows[p]) % m for p in share if p + mini_batch in share}
        assert len(steps) == 1 and steps <= {1, 2, 3}          # one speed per share
        for p in share:
            np.testing.assert_array_equal(X[p], X[share.start])
            np.testing.assert_array_equal(T.reshape(n, -1, 6)[p, :, :5],
                                          T.reshape(n, -1, 6)[share.start, :, :5])
    assert not np.array_equal(X[shares[0].start], X[shares[1].start])
    plan = sequential_plan(shares, [1, 1], m, mini_batch, 3, contrastive,
                           lambda start: RNG([0, start, 2]))
    assert [plan[p][0] for p in range(n)] == rows.tolist()


def test_track_mosaic_takes_four_sequences_per_share():
    """mosaic: a share makes four pictures per image, each its own get_sequential_paths call
    (and its own common augmentation); the batch is seeded."""
    a = AbAugmentConfig(jitter=0.2, mixup=3, track=True, augment_speed=2, mini_batch=2)
    X, T, _ = _track_batch(8, 2, a, 9, seed=4)
    X2, T2, _ = _track_batch(8, 2, a, 9, seed=4)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(T, T2)
    plan = sequential_plan(thread_shares(8, 2), [4, 1], 9, 2, 2, False,
                           lambda start: RNG([4, start, 2]))
    assert all(len(plan[p]) == 4 for p in range(4)) and len(plan[4]) == 1
    with pytest.raises(ValueError, match="TrackSource"):
        load_data_detection_ab(RNG(0), None, 8, 32, 32, a)


def test_detector_train_with_track_loads_sequences(tmp_path, monkeypatch):
    """detector train of a tiny AlexeyAB net with track=1, time_steps=2 and
    sequential_subdivisions=1: it finishes, says it is tracking, and every batch it trained
    on is two sequences (mini_batch 2) of four frames through the training list, one speed
    each batch, running on across its two mini-batches (one loader thread)."""
    from ab_tiny import ab_tiny_cfg
    from tiny_data import shapes_set

    import darknumba.train.detector as det
    from darknumba.data.datasets import get_paths, label_path, read_data_cfg
    from darknumba.vision.augment_ab import track_id_base
    data = shapes_set(tmp_path, n=16, seed=3, size=(48, 64), valid_fraction=0.25)
    cfg = tmp_path / "track.cfg"
    cfg.write_text(ab_tiny_cfg(track=1, time_steps=2, batch=4, subdivisions=2, mosaic=None,
                               blur=0, gaussian_noise=0, sequential_subdivisions=1,
                               augment_speed=3, max_batches=2, ema_alpha=None))
    loaded = {}

    class Recording(det.DetectionLoader):
        def load_batch(self, k):
            X, T = super().load_batch(k)
            loaded[k] = T
            return X, T
    monkeypatch.setattr(det, "DetectionLoader", Recording)
    lines = []
    r = det.train_detector(data, cfg, det.TrainOptions(backup=str(tmp_path / "b"),
                                                       progress=False, chart=False),
                           log=lambda m, file=None: lines.append(m))
    assert r["final_iteration"] == 2 and np.isfinite(r["loss"])
    assert "Tracking! batch = 4, subdiv = 2, time_steps = 2, mini_batch = 2" in lines
    assert " sequential_subdivisions = 1, sequence = 2" in lines
    dc = read_data_cfg(str(data))
    paths = get_paths(dc.resolve(dc.train))
    bases = [track_id_base(label_path(p)) for p in paths]
    assert len(set(bases)) == len(bases)                        # rows tell their image
    index = {b: j for j, b in enumerate(bases)}
    m = len(paths)
    for k in (0, 1):
        ids = loaded[k].reshape(8, -1, 6)[:, :, 5]
        rows = [index.get(int(t[0]) // 4000 * 4000) if t[0] else None for t in ids]
        assert sum(r is not None for r in rows) >= 6, rows      # most frames keep a box
        ref = ab_sequential_paths(generator_rand(RNG([0, k, 0, 2])), 8, m, 2, 3, False)
        assert [r for r in rows if r is not None] == [j for j, r in zip(ref, rows)
                                                      if r is not None]
        assert len({(ref[i + 2] - ref[i]) % m for i in range(6)}) == 1
