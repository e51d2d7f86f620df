"""Small pieces the extra layer types share."""
from ..kernels.blas import axpy_cpu, copy_cpu


def pass_delta(net, delta, n, overwrite=False):
    """Send this layer's delta (already w.r.t. its input) to the layer below: added into
    net.delta, or copied over it when ``overwrite`` (what several Darknet CPU layers do:
    [activation], [batchnorm], [normalization], [reorg]; compat="darknet-cpu" keeps that)."""
    if net.delta is None:
        return
    if overwrite:
        copy_cpu(n, delta, net.delta)
    else:
        axpy_cpu(n, 1.0, delta, net.delta)


def overwrites(net_or_compat) -> bool:
    compat = getattr(net_or_compat, "compat", net_or_compat)
    return compat == "darknet-cpu"
