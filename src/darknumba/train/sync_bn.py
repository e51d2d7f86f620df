"""Synchronised batch norm for data-parallel training (`--sync-bn`): a mini-batch split into
equal parts over the ranks, its statistics and backward sums added up across them."""
from __future__ import annotations

import numpy as np

from ..kernels.fused import channel_moments_cpu
from .distributed import Communicator


class SyncBatchNorm:
    """Batch norm over a mini-batch split into equal parts across the ranks (layers' bn_sync)."""

    def __init__(self, comm: Communicator):
        self.comm, self.ranks = comm, comm.size
        self._bufs: dict = {}

    def _buffer(self, key, shape):
        buf = self._bufs.get((key, shape))
        if buf is None:
            buf = self._bufs[(key, shape)] = np.zeros(shape, np.float64)
        return buf

    def batch_stats(self, x, batch, filters, spatial, mean, variance):
        """mean and (unbiased) variance of the whole mini-batch, from this part's values x:
        every part's float64 moments gathered, combined in rank order with Chan's formula
        (the same values on every rank), rounded to float32 once, as one process does."""
        N = self.ranks
        parts = self._buffer("stats", (N, filters, 2))
        parts[:] = 0.0
        channel_moments_cpu(x, batch, filters, spatial, parts[self.comm.rank])
        self.comm.allreduce(parts, what="the synchronised batch-norm statistics")
        count = batch * spatial
        m, m2 = parts[0, :, 0].copy(), parts[0, :, 1].copy()
        for r in range(1, N):           # Chan et al., the r + 1-th of N equal parts
            delta = parts[r, :, 0] - m
            m += delta / (r + 1)
            m2 += parts[r, :, 1] + delta * delta * (count * r / (r + 1))
        mean[:] = m
        variance[:] = m2 / (N * count - 1)

    def sums_buffer(self, n):
        return self._buffer("sums", (3, n))

    def add_up(self, sums):
        self.comm.allreduce(sums, what="the synchronised batch-norm backward sums")
