"""Winograd F(4x4, 3x3) for a [convolutional] layer's test-mode forward (kernels/winograd.py):
input transform, 36 GEMMs in one batched BLAS call, output transform; the layer then applies
its biases or batch norm and activation as on the exact path.

Darknet has no such path: the results differ from im2col + GEMM by rounding (within ~1e-4 of
the output's scale). It is the default for inference; the exact path stays for training, under
compat= (darknet-cpu), in `compare`, and when asked for (load_network(..., exact=True),
`--exact`, DARKNUMBA_EXACT=1).

The transformed filters (36 x n x c, four times the weights) are made at the first test-mode
forward and kept; whatever changes the weights in place calls `weights_changed()` on the layer
or the network (update, load_weights, random_init and a train-mode forward do).

Each of the 36 GEMMs of a layer wakes OpenBLAS's worker threads (im2col + GEMM: one GEMM per
layer): on an idle machine that costs little, but when other processes compete for the cores
every wake-up waits for one, and this path then slows down more than the exact one (measured
here on 2 shared cores); `--exact` is the way out there.
"""
import numpy as np

from ..kernels.winograd import G, tiles_of, winograd_input_cpu, winograd_output_cpu
from .base import scratch_of

# U[a * 6 + b] = sum over i, j of G[a, i] G[b, j] g[i, j]: the filter transform G g G^T of a
# 3x3 filter g (row-major, 9 values) as one 36 x 9 matrix
G_KRON = np.kron(G, G)

# output tiles per image (4x4 pixels each) from which Winograd beats im2col + GEMM, measured here
# on yolov3-tiny's, yolov4-tiny's and yolov3's layers: from 26x26 outputs on (7x7 tiles) it
# takes 1.3-2.2x less CPU time per layer; at 13x13 (4x4 tiles, the output padded to 16x16) and
# 19x19 its 36 thin GEMMs over filters four times the size of the weights do not beat the one
# GEMM
WINOGRAD_MIN_TILES = 49
# input channels from which it pays: over RGB (c = 3) the transforms cost more than the GEMMs
# save (2x slower than im2col + GEMM). Thin layers the direct kernel takes (c*9 <= DIRECT_MAX_K,
# convolutional.py) stay with it: at c = 16 it is as fast in CPU time and faster with 2 threads
WINOGRAD_MIN_C = 16


def winograd_eligible(l) -> bool:
    """A 3x3 stride-1 convolution (no dilation, no groups, weights of its own) with outputs
    large enough to pay (WINOGRAD_MIN_TILES)."""
    if l.size != 3 or l.stride_x != 1 or l.stride_y != 1 or l.ext or l.groups != 1 \
            or l.share_layer is not None or l.c < WINOGRAD_MIN_C:
        return False
    th, tw = tiles_of(l.out_h, l.out_w)
    return th * tw >= WINOGRAD_MIN_TILES


def use_winograd(l, net) -> bool:
    """Winograd for this forward: test mode, not exact, not under a compat mode, eligible."""
    return (not net.train and not getattr(net, "exact", False) and l.quirks.compat is None
            and winograd_eligible(l))


def transformed_weights(l) -> np.ndarray:
    """U = G g G^T for every filter and channel (36 x n x c), in float64 rounded once to
    float32 (one BLAS GEMM over all filters: no kernel to compile for a transform made once per
    layer), made once and kept on the layer."""
    U = getattr(l, "winograd_weights", None)
    if U is None:
        g = l.weights[:l.n * l.c * 9].reshape(l.n * l.c, 9).astype(np.float64)
        U = (G_KRON @ g.T).astype(np.float32).reshape(36, l.n, l.c)
        l.winograd_weights = U
    return U


def forward_winograd(l, net):
    """l.output = conv(net.input) through F(4x4, 3x3), before the biases or batch norm."""
    th, tw = tiles_of(l.out_h, l.out_w)
    tiles = l.batch * th * tw
    scratch = scratch_of(net)
    V = scratch("winograd_V", 36 * l.c * tiles).reshape(36, l.c, tiles)
    M = scratch("winograd_M", 36 * l.n * tiles).reshape(36, l.n, tiles)
    winograd_input_cpu(net.input, l.batch, l.c, l.h, l.w, l.pad, th, tw, V)
    np.matmul(transformed_weights(l), V, out=M)
    winograd_output_cpu(M, l.batch, l.n, l.out_h, l.out_w, th, tw, l.output)
