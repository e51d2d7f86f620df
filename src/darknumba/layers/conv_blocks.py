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
from ..kernels.conv_blocks import conv_blocks_backward_cpu, conv_blocks_cpu
from ..kernels.gemm import add_transposed
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
    """Output rows per block: a column block of about BLOCK_FLOATS, a GEMM larger than
    SMALL_GEMM multiply-adds, and blocks whose input rows overlap only their neighbours'."""
    k = l.size * l.size * l.c
    rows = max(1, BLOCK_FLOATS // (k * l.out_w))
    rows = max(rows, -(-(SMALL_GEMM + 1) // (l.n * k * l.out_w)),
               -(-l.size // l.stride) - 1)          # the backward's condition (see there)
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


def use_blocks_backward(l, per_image: bool) -> bool:
    """The backward by blocks (kernels/conv_blocks.conv_blocks_backward_cpu) where the forward
    takes them, but for 1x1 stride-1 layers (their columns are the input: no col2im to keep
    in cache) and where blocks are too few or short for the threads to keep apart."""
    if not use_blocks(l, per_image) or (l.size == 1 and l.stride == 1 and l.pad == 0):
        return False
    rows = rows_per_block(l)
    blocks = l.batch * -(-l.out_h // rows)
    return (rows + 1) * l.stride >= l.size and blocks >= 2 * numba.get_num_threads()


def backward_blocks(l, net):
    """weight_updates += delta @ col^T and, unless the layer is the first, net.delta += the
    input gradient, by blocks; the threads' weight-gradient parts are added up after."""
    threads = numba.get_num_threads()
    rows = rows_per_block(l)
    k = l.size * l.size * l.c
    block = k * rows * l.out_w
    scratch = scratch_of(net)
    cols = scratch("conv_blocks", threads * block).reshape(threads, -1)
    grads = scratch("conv_blocks_grad", threads * block if net.delta is not None else 0)
    dw_parts = scratch("conv_blocks_dw", threads * k * l.n).reshape(threads, k, l.n)
    dx = net.delta[:l.batch * l.inputs] if net.delta is not None else _NONE
    if (net.input.size < l.batch * l.inputs or l.delta.size < l.batch * l.outputs
            or l.weights.size < l.n * k or l.out_c != l.n):
        raise ValueError(f"convolutional layer: buffers smaller than its sizes "
                         f"({l.batch} x {l.c}x{l.h}x{l.w} -> {l.n}x{l.out_h}x{l.out_w})")
    with sgemm.single_threaded():
        conv_blocks_backward_cpu(net.input, l.batch, l.c, l.h, l.w, l.size, l.stride, l.pad,
                                 l.weights, l.n, l.delta, rows, cols,
                                 grads.reshape(threads, -1), dw_parts, dx)
    add_transposed(l.weight_updates.reshape(l.n, k), dw_parts.sum(axis=0))
