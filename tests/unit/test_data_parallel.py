"""Data-parallel training's parts, in one process (tests/cli/test_mpi.py runs them under mpirun):
loaders that load any part of a batch exactly, the split batch-norm kernels and statistics
against the whole mini-batch's, the plan of which rank trains what, and DataParallel on one
rank against the plain training iteration (the momentum held aside, the rolling statistics
replayed, the synchronised batch-norm path)."""
import os

import numpy as np
import pytest
from tiny_nets import HEAD3, TRAIN_NET, cfg_text, conv, maxpool

from darknumba.kernels.fused import (batchnorm_backward, batchnorm_backward_delta,
                                     batchnorm_backward_sums, bn_divisors, channel_moments_cpu,
                                     mean_variance_cpu)
from darknumba.parser import parse_network_cfg
from darknumba.train.data_parallel import DataParallel, SyncBatchNorm
from darknumba.train.distributed import Communicator, SingleProcess
from darknumba.train.step import train_iteration

f32 = np.float32
rng = np.random.default_rng(11)



def write_cfg(tmp_path, subdivisions):
    cfg = tmp_path / f"tiny{subdivisions}.cfg"
    cfg.write_text(cfg_text({**TRAIN_NET, "subdivisions": subdivisions},
                            conv(8), maxpool(), conv(16), maxpool(), HEAD3))
    return cfg


class PeerOfRankZero(Communicator):
    """Rank 0 of `size` whose peers' contributions to each allreduce are known in advance."""
    rank, local_rank, local_size = 0, 0, 1

    def __init__(self, size, peers=()):
        self.size = size
        self.peers = list(peers)

    def allreduce(self, buf, what="", timeout=None):
        buf += self.peers.pop(0)
        return buf

    def barrier(self, what="", timeout=None):
        return None


@pytest.mark.parametrize("dialect", ["pjreddie", "alexeyab"])
def test_detection_loader_loads_exactly_the_positions_asked_for(tmp_path, dialect):
    """pjreddie's loader, and AlexeyAB's with mosaic (chosen per loader-thread share)."""
    from ab_tiny import ab_tiny_cfg
    from tiny_data import shapes_set

    from darknumba.data.datasets import DetectionDataset, get_paths, read_data_cfg
    from darknumba.data.loader import DetectionLoader, MultiScale
    from darknumba.vision.augment import AugmentConfig
    from darknumba.vision.augment_ab import AbAugmentConfig
    data = shapes_set(tmp_path, n=12, seed=3, valid_fraction=0.0)
    ds = DetectionDataset(get_paths(read_data_cfg(data).train), 3)
    if dialect == "alexeyab":
        cfg = tmp_path / "ab.cfg"
        cfg.write_text(ab_tiny_cfg())
        aug = AbAugmentConfig.from_network(parse_network_cfg(cfg), log=lambda m: None)
        assert aug.mixup == 3                            # mosaic
    else:
        aug = AugmentConfig.from_network(parse_network_cfg(write_cfg(tmp_path, 2)))
    args = (ds, 6, aug, MultiScale(32, 32, False, 0, 10))
    with DetectionLoader(*args, seed=4, start=3) as whole, \
            DetectionLoader(*args, seed=4, start=3, positions=[1, 4, 5]) as part:
        for _ in range(2):
            (X, T), (x, t) = next(whole), next(part)
            np.testing.assert_array_equal(x, X[[1, 4, 5]])
            np.testing.assert_array_equal(t, T[[1, 4, 5]])


def test_classifier_loader_loads_exactly_the_positions_asked_for(tmp_path):
    from darknumba.data.classifier_example import make_example
    from darknumba.train.classifier import (ClassifierAugment, ClassifierData, _BatchLoader,
                                            labelled_paths)
    dc = ClassifierData.read(make_example(tmp_path / "cls", n=20, seed=2))
    paths, idx = labelled_paths(dc.train, dc.labels)
    aug = ClassifierAugment(32, 40, hue=0.1, saturation=1.5, exposure=1.5)
    whole = _BatchLoader(paths, idx, dc.classes, 32, aug, 6, [1, 0], 1)
    part = _BatchLoader(paths, idx, dc.classes, 32, aug, 6, [1, 0], 1, positions=[0, 3])
    try:
        for _ in range(2):
            (X, T), (x, t) = next(whole), next(part)
            np.testing.assert_array_equal(x, X[[0, 3]])
            np.testing.assert_array_equal(t, T[[0, 3]])
    finally:
        whole.close()
        part.close()


def test_synchronised_statistics_of_two_halves_equal_the_whole_batch():
    """Each half's float64 moments, combined (Chan) as rank 0 does, give the whole batch's
    mean_variance_cpu statistics up to the one float32 rounding."""
    b, f, s = 6, 5, 49
    x = (rng.standard_normal(b * f * s) * 3 + 20).astype(f32)     # a large mean: cancellation
    mean, var = np.empty(f, f32), np.empty(f, f32)
    mean_variance_cpu(x, b, f, s, mean, var)
    half = b // 2 * f * s
    peer = np.zeros((2, f, 2))
    channel_moments_cpu(x[half:], b // 2, f, s, peer[1])
    ref = x[half:].reshape(b // 2, f, s).astype(np.float64)
    np.testing.assert_allclose(peer[1, :, 0], ref.mean((0, 2)), rtol=1e-13)
    np.testing.assert_allclose(peer[1, :, 1], ref.var((0, 2)) * ref[:, 0].size, rtol=1e-10)
    m, v = np.zeros(f, f32), np.zeros(f, f32)
    SyncBatchNorm(PeerOfRankZero(2, [peer])).batch_stats(x[:half], b // 2, f, s, m, v)
    np.testing.assert_allclose(m, mean, rtol=2 ** -23)
    np.testing.assert_allclose(v, var, rtol=2 ** -23)


@pytest.mark.parametrize("eps_outside", [False, True])
def test_split_batchnorm_backward_equals_the_fused_kernel_on_the_whole(eps_outside):
    """Both halves' sums added up, each half's delta rewritten with the whole batch's count:
    the fused kernel's delta, and its bias / scale gradients as the halves' sum."""
    b, f, s = 4, 3, 41
    x = rng.standard_normal(b * f * s).astype(f32)
    delta = rng.standard_normal(b * f * s).astype(f32)
    mean = x.reshape(b, f, s).mean((0, 2)).astype(f32)
    var = x.reshape(b, f, s).var((0, 2), ddof=1).astype(f32)
    scales = rng.standard_normal(f).astype(f32)
    d = np.empty(f, f32)
    bn_divisors(var, False, d)
    ref = [delta.copy(), np.zeros(f, f32), np.zeros(f, f32), np.zeros(f, f32), np.zeros(f, f32)]
    batchnorm_backward(ref[0], x, mean, var, scales, b, f, s, ref[1], ref[2], ref[3], ref[4],
                       mean, d, eps_outside)
    got = [delta.copy(), np.zeros(f, f32), np.zeros(f, f32), np.zeros(f, f32), np.zeros(f, f32)]
    n = b // 2 * f * s
    halves = [slice(0, n), slice(n, 2 * n)]
    sums = [np.zeros((3, f)) for _ in halves]
    for h, sm in zip(halves, sums):
        batchnorm_backward_sums(got[0][h], x[h], mean, b // 2, f, s, got[1], got[2], mean, d, sm)
    total = sums[0] + sums[1]
    for h in halves:
        batchnorm_backward_delta(got[0][h], x[h], mean, var, scales, b // 2, f, s, total, b * s,
                                 got[3], got[4], eps_outside)
    for name, g, r in zip(["delta", "bias_updates", "scale_updates", "mean_delta",
                           "variance_delta"], got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6 * np.abs(r).max(), err_msg=name)


def test_plan_says_which_rank_trains_what(tmp_path):
    cfg1, cfg4 = write_cfg(tmp_path, 1), write_cfg(tmp_path, 4)
    whole = DataParallel(PeerOfRankZero(2))
    assert whole.network_batch(cfg4) is None and whole.datums == [0, 1]
    assert whole.positions() == [0, 1, 2, 3]             # mini-batches 0 and 1 of 2 images
    split = DataParallel(PeerOfRankZero(2), sync_bn=True)
    assert split.network_batch(cfg4) == 1 and split.datums == [0, 1, 2, 3]
    assert split.positions() == [0, 2, 4, 6]             # the first image of every mini-batch
    with pytest.raises(Exception, match=r"subdivisions=1 cannot be shared by 2 ranks.*"
                                        r"batch/subdivisions = 8 images.*--sync-bn"):
        DataParallel(PeerOfRankZero(2)).network_batch(cfg1)
    with pytest.raises(Exception, match=r"--sync-bn splits each mini-batch of .* = 2 images into "
                                        r"3 equal parts.*3 ranks do not divide 2"):
        DataParallel(PeerOfRankZero(3), sync_bn=True).network_batch(cfg4)


def _truth(n, max_boxes=90):
    T = np.zeros((n, max_boxes * 5), f32)
    for i in range(n):
        T[i, :5] = (0.3 + 0.05 * i, 0.5, 0.3, 0.25, i % 3)
        T[i, 5:10] = (0.7, 0.3, 0.2, 0.2, (i + 1) % 3)
    return T


@pytest.mark.parametrize("sync_bn", [False, True])
def test_one_rank_data_parallel_equals_the_plain_iteration(tmp_path, sync_bn):
    """DataParallel on one rank: momentum held aside and added back once, rolling statistics
    replayed (or, synchronised, taken through the split kernels): three iterations give the
    plain loop's weights, gradients (momentum) and rolling statistics, up to the order in which
    the gradients were added."""
    cfg = write_cfg(tmp_path, 2)
    plain = parse_network_cfg(cfg, seed=0)
    par = DataParallel(SingleProcess(), sync_bn=sync_bn)
    net = parse_network_cfg(cfg, batch=par.network_batch(cfg), seed=0)
    par.setup(net, log=lambda *a, **k: None)
    assert net.layers[0].weight_updates.base is par.buf
    for it in range(3):
        X = rng.random((8, 3, 32, 32), dtype=f32)
        T = _truth(8)
        a = train_iteration(plain, X, T)
        b = par.train_iteration(net, X, T)
        assert a == pytest.approx(b, rel=1e-5)
        if it == 0 and not sync_bn:     # the same weights went in: replayed bit for bit
            for p, q in zip(plain.layers, net.layers):
                if getattr(p, "batch_normalize", 0):
                    np.testing.assert_array_equal(q.rolling_mean, p.rolling_mean)
                    np.testing.assert_array_equal(q.rolling_variance, p.rolling_variance)
    assert net.seen == plain.seen == 24 and net.current_batch() == 3
    for i, (p, q) in enumerate(zip(plain.layers, net.layers)):
        for (name, u), (_, v) in zip(p.weight_records(), q.weight_records()):
            np.testing.assert_allclose(v, u, rtol=0, atol=2e-6 * np.abs(u).max(),
                                       err_msg=f"layer {i} {name}")
        for name in ("weight_updates", "bias_updates", "scale_updates"):
            if getattr(p, name, None) is not None:
                u, v = getattr(p, name), getattr(q, name)
                np.testing.assert_allclose(v, u, rtol=0, atol=2e-6 * np.abs(u).max(),
                                           err_msg=f"layer {i} {name}")


def test_ranks_share_this_machines_cores(monkeypatch):
    """Under a launcher, each thread pool gets cores / ranks-on-this-machine threads unless
    the user set it; without one nothing changes."""
    from darknumba.runtime import launcher
    env = {k: v for k, v in os.environ.items() if k not in
           launcher.SIZE_VARS + launcher.LOCAL_SIZE_VARS + launcher.THREAD_VARS}
    monkeypatch.setattr(os, "environ", env)              # a copy: nothing leaks out
    monkeypatch.setattr(launcher, "usable_cores", lambda: 8)
    launcher.limit_threads_per_rank()
    assert not any(v in os.environ for v in launcher.THREAD_VARS)
    env.update(PMI_SIZE="6", MPI_LOCALNRANKS="3")        # 6 ranks, 3 of them here
    env["OMP_NUM_THREADS"] = "1"                         # the user's choice stays
    assert launcher.launched_ranks() == 6 and launcher.threads_per_rank() == 2
    launcher.limit_threads_per_rank()
    assert [os.environ[v] for v in launcher.THREAD_VARS] == ["2", "1", "2", "2"]
    env["MPI_LOCALNRANKS"] = "16"                        # more ranks than cores: one each
    assert launcher.threads_per_rank() == 1
