"""A [convolutional] layer's forward by blocks of output rows (kernels/conv_blocks.py): each of
numba's threads builds a block's column matrix, multiplies it with a single-threaded OpenBLAS
sgemm and, at test time, applies the biases or batch norm and the activation while the block
is in its cache. Same results as im2col + GEMM, bit for bit (the same blocked sgemm sums over k
in the same order; see SMALL_GEMM); used where that path would run one
GEMM per image (batch 1, or maps too large to batch), when numpy's OpenBLAS offers what the
kernel calls (kernels/sgemm.py)."""
from __future__ import annotations

import numba
import numpy as np

from ..kernels import sgemm
from ..kernels.activations import LINEAR
from ..kernels.conv_blocks import conv_blocks_cpu
from .activate import activate_output, epilogue_activation
from .base import scratch_of
from .batchnorm import bn_divisor

_NONE = np.empty(0, np.float32)

# column-matrix floats per block (1 MiB): a block and its part of the output stay in a core's
# L2 while the GEMM reads them
BLOCK_FLOATS = 1 << 18
# output pixels per image from which the blocks pay: on smaller maps (26x26, 13x13) the blocks
# are few and short and the weights, large there, are packed again for each; one GEMM wins
BLOCKS_MIN_SPATIAL = 2048


# OpenBLAS's small-matrix sgemm kernels (x86-64, m*n*k up to 100^3) sum in another order than
# its blocked one: blocks stay above that size, so that their sums are those of the one GEMM
SMALL_GEMM = 100 ** 3


def rows_per_block(l) -> int:
    """Output rows per block: a column block of about BLOCK_FLOATS, and a GEMM larger than
    SMALL_GEMM multiply-adds."""
    k = l.size * l.size * l.c
    rows = max(1, BLOCK_FLOATS // (k * l.out_w))
    rows = max(rows, -(-(SMALL_GEMM + 1) // (l.n * k * l.out_w)))
    return min(l.out_h, rows)


def use_blocks(l, per_image: bool) -> bool:
    """For convolutions im2col + GEMM would compute one image at a time (`per_image`): plain
    ones (no groups, dilation or asymmetric stride), with the sgemm the kernel calls."""
    if l.size == 1 and (l.stride > 1 or l.pad) and l.quirks.strided_1x1_misread:
        return False                # Darknet's misread pixels: the layer's own 1x1 path
    return (per_image and l.groups == 1 and not l.ext and l.share_layer is None
            and l.out_h * l.out_w >= BLOCKS_MIN_SPATIAL and sgemm.available())


def forward_blocks(l, net):
    """l.output = conv(net.input) by blocks; at test time with the epilogue fused (the
    activations it cannot take are applied after, as on the other paths). In train mode the
    raw sums only: the caller goes on with the batch norm or biases as after a GEMM."""
    threads = numba.get_num_threads()
    rows = rows_per_block(l)
    k = l.size * l.size * l.c
    pointwise = l.size == 1 and l.stride == 1 and l.pad == 0
    cols = scratch_of(net)("conv_blocks", 0 if pointwise else threads * k * rows * l.out_w)
    cols = cols.reshape(threads, -1)
    spatial = l.out_h * l.out_w
    x = net.input
    if (x.size < l.batch * l.inputs or l.weights.size < l.n * k
            or l.output.size < l.batch * l.n * spatial or l.out_c != l.n):
        raise ValueError(f"convolutional layer: buffers smaller than its sizes "
                         f"({l.batch} x {l.c}x{l.h}x{l.w} -> {l.n}x{l.out_h}x{l.out_w})")
    if net.train:
        with sgemm.single_threaded():
            conv_blocks_cpu(x, l.batch, l.c, l.h, l.w, l.size, l.stride, l.pad, l.weights, l.n,
                            l.output, rows, cols, _NONE, _NONE, _NONE, _NONE, LINEAR)
        return
    act = epilogue_activation(l, False)
    if l.batch_normalize:
        bn = (l.rolling_mean, bn_divisor(l, l.rolling_variance), l.scales)
    else:
        bn = (_NONE, _NONE, _NONE)
    with sgemm.single_threaded():
        conv_blocks_cpu(x, l.batch, l.c, l.h, l.w, l.size, l.stride, l.pad, l.weights, l.n,
                        l.output, rows, cols, *bn, l.biases, act)
    activate_output(l, False, act)
