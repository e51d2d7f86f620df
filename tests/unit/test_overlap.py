"""The gradient allreduce overlapped with backward (train/overlap.py), in one process: the
bucket plan covers the gradients once, from the last layers down, and DataParallel as rank 0 of
2 with buckets started during backward ends bit for bit where the fused allreduce after
backward ends. The fake peer reads each bucket when it is started (MPI may read a buffer any
time after the call): a gradient changed after its bucket started would show. Under mpirun:
tests/cli/test_mpi_recovery.py."""
import numpy as np
import pytest
from test_data_parallel import _truth, write_cfg

from darknumba.parser import parse_network_cfg
from darknumba.train import overlap
from darknumba.train.data_parallel import DataParallel
from darknumba.train.distributed import Communicator
from darknumba.train.overlap import plan_buckets

f32 = np.float32


def test_buckets_cover_the_gradients_once_from_the_end():
    starts = [0, None, 100, 150, None, 1000, 1001]      # layers 1 and 4 have no arrays
    plan = plan_buckets(starts, 3000, bucket_bytes=4 * 200)
    assert plan == [(6, 1001, 3000), (3, 150, 1001), (0, 0, 150)]
    assert plan_buckets(starts, 3000, bucket_bytes=1 << 30) == [(0, 0, 3000)]
    assert plan_buckets(starts, 3000, bucket_bytes=4) == [
        (6, 1001, 3000), (5, 1000, 1001), (3, 150, 1000), (2, 100, 150), (0, 0, 100)]
    assert plan_buckets([None, None], 0) == []


class RankZeroOfTwo(Communicator):
    """Rank 0 of 2; the peer's buffer is `peer` (the same layout). allreduce adds it; a started
    bucket is copied when it starts and gets the peer's part when waited for."""
    rank, size, local_rank, local_size = 0, 2, 0, 1

    def __init__(self, peer):
        self.peer, self.started, self.net = peer, [], None

    def allreduce(self, buf, what="", timeout=None):
        if buf.ndim == 2:           # the weights checksum table: the peer has the same
            buf[1] = buf[0]
        elif self.peer is not None:
            buf += self.peer
        return buf

    def barrier(self, what="", timeout=None):
        return None

    def start_allreduce(self, buf):
        lo = (buf.ctypes.data - self.base.ctypes.data) // 4
        self.started.append((lo, self.net.index if self.net else None))
        return [buf, buf.copy(), self.peer[lo:lo + buf.size]]

    def progress(self, requests):
        return False

    def wait_all(self, requests, what="", timeout=None):
        for buf, copy, peer in requests:
            buf[:] = copy + peer


def test_overlapped_buckets_end_where_the_fused_allreduce_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(overlap, "BUCKET_BYTES", 256)   # several buckets in the tiny network
    cfg = write_cfg(tmp_path, 2)
    rng = np.random.default_rng(5)
    nets, comms = [], []
    for over in (False, True):
        comm = RankZeroOfTwo(None)
        par = DataParallel(comm, overlap=over)
        net = parse_network_cfg(cfg, batch=par.network_batch(cfg), seed=0)
        par.setup(net, log=lambda *a, **k: None)
        comm.base, comm.net = par.buf, net
        nets.append((par, net))
        comms.append(comm)
    par, _ = nets[1]
    assert len(par.overlap.plan) >= 3
    for it in range(3):
        X = rng.random((4, 3, 32, 32), dtype=f32)
        T = _truth(4)
        peer = np.zeros(par.buf.size, f32)
        peer[:par.nparams] = rng.normal(0, 1e-3, par.nparams)
        peer[par.nparams:-3] = rng.uniform(0.1, 1.0, par.buf.size - par.nparams - 3)
        for (p, net), comm in zip(nets, comms):
            comm.peer, comm.started = peer, []
            p.train_iteration(net, X, T)
        starts = comms[1].started
        # the buckets from the top down, the first while backward was still at a later layer;
        # then the statistics and loss slots
        assert [lo for lo, _ in starts[:-1]] == [lo for _, lo, _ in par.overlap.plan]
        assert starts[0][1] > 0 and starts[-1][0] == par.nparams
    (a, na), (b, nb) = nets
    np.testing.assert_array_equal(b.buf, a.buf)
    for i, (p, q) in enumerate(zip(na.layers, nb.layers)):
        for (name, u), (_, v) in zip(p.weight_records(), q.weight_records()):
            np.testing.assert_array_equal(v, u, err_msg=f"layer {i} {name}")


@pytest.mark.parametrize("ranks,subdivisions,mini_batch,sync_bn,fewer", [
    (4, 4, 16, False, 2), (3, 12, 8, False, 2), (2, 4, 8, False, 1), (4, 1, 6, True, 3),
    (1, 4, 8, False, 1)])
def test_fewer_ranks_is_the_largest_that_can_share_the_cfg(ranks, subdivisions, mini_batch,
                                                           sync_bn, fewer):
    from darknumba.train.supervise import fewer_ranks
    assert fewer_ranks(ranks, subdivisions, mini_batch, sync_bn) == fewer
