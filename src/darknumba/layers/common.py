"""Small pieces the extra layer types share."""
from ..kernels.blas import axpy_cpu, copy_cpu


def pass_delta(net, delta, n, overwrite=False):
    """Send this layer's delta (already w.r.t. its input) to the layer below: added into
    net.delta, or copied over it when ``overwrite`` (what several Darknet CPU layers do:
    [activation], [batchnorm], [normalization], [reorg]; quirks.overwrite_delta keeps that)."""
    if net.delta is None:
        return
    if overwrite:
        copy_cpu(n, delta, net.delta)
    else:
        axpy_cpu(n, 1.0, delta, net.delta)
