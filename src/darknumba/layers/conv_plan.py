"""How a [convolutional] layer is computed: Darknet's one forward_convolutional_layer (im2col +
GEMM) runs here on one of five paths, and this module is the only place that chooses among
them. Every threshold lives here with the measurements behind it; the layer's forward and
backward (ConvolutionalLayer.forward_path), `darknumba bench`'s path column and the first
run's compile (vision/compile_ahead.py, which compiles the kernels named by `kernels`) all ask
`plan`.

    plan(l, training, exact) -> ConvPath   the path of layer l's forward (and backward)
    kernels(path)            -> (...)      the compiled kernels that path's forward calls
    kernels(path, backward=True)           ... and those its training backward calls
    forward_kernels(l, path) -> [...]      kernels(path) + the layer's bias / batch-norm sweep

The rules, in the order plan applies them:
  0. XNOR: an xnor=1 layer at inference once calculate_binary_weights asked for AlexeyAB's
     bit-packed path (layers/xnor.py); in training, or before, it takes the rules below on its
     binarised weights and input, but never Winograd;
  1. DIRECT: a thin 3x3 stride-1 convolution (direct_thin: DIRECT_MAX_K, and
     DIRECT_MAX_K_FEW_FILTERS for few filters), in training and at inference alike;
     DIRECT_S2: at inference, a thin 3x3 stride-2 convolution (direct_strided: DIRECT_MAX_K,
     DIRECT_S2_MAX_K_NARROW without full-width AVX-512);
  2. WINOGRAD4X4 / WINOGRAD2X2: a large enough 3x3 stride-1 convolution, not exact, not under
     compat= (use_winograd; the inference and training rules differ), F(2x2) at inference on
     small maps (winograd_tile);
  3. ONE_BY_ONE: a 1x1 convolution whose input is its column matrix (direct_1x1);
  4. IM2COL: everything else, im2col + GEMM (one GEMM per image, or in training per chunk of
     images on small maps: batched).
And for the network as a whole, which Winograd layers keep their transformed filters between
inference forwards (winograd_cached: a budget; at inference the others take im2col + GEMM).
"""
from __future__ import annotations

import enum
import os

from ..errors import CfgError
from ..kernels import direct, fused, gemm, im2col, winograd, xnor
from ..kernels.winograd import tiles_of
from . import xnor as xnor_layer


class ConvPath(str, enum.Enum):
    """A convolution's path; its value is the name `darknumba bench` prints (a ConvPath equals
    and formats as that string)."""
    DIRECT = "direct"               # thin 3x3 kernel, biases / batch norm fused (kernels/direct.py)
    DIRECT_S2 = "direct-s2"         # its stride-2 twin, at inference (kernels/direct.py)
    WINOGRAD4X4 = "winograd4x4"     # Winograd F(4x4, 3x3) (layers/conv_winograd.py)
    WINOGRAD2X2 = "winograd2x2"     # Winograd F(2x2, 3x3), inference on small maps
    ONE_BY_ONE = "1x1"              # the input is the column matrix: GEMM only
    IM2COL = "im2col"               # im2col + GEMM, as Darknet
    XNOR = "xnorbits"               # AlexeyAB's bit-packed XNOR-popcount GEMM (layers/xnor.py)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


# the two Winograd paths (their forward and training backward share conv_winograd.py)
WINOGRAD_PATHS = (ConvPath.WINOGRAD4X4, ConvPath.WINOGRAD2X2)


# -- direct vs im2col --------------------------------------------------------------------------
# stride-1 convolutions with at most this many inputs per output (c*size*size) run as a direct
# convolution (kernels/direct.py) rather than im2col + GEMM: measured here, the direct kernel
# wins up to K = 144 (yolov3-tiny's first two layers: 1.8x forward at batch 1, 1.4-5x in
# training) and loses from K = 288 on, where BLAS runs near its peak
DIRECT_MAX_K = 160
# ... except for few filters: a GEMM of M <= 32 rows runs far from the BLAS peak, and the direct
# kernel wins up to K = 288 (measured on a 2-core AMD EPYC, AVX2: yolov4-tiny's 32 -> 32
# layers 4 and 5 at 104x104, 0.77-0.79x forward, 0.81-0.83x forward+backward at batch 8;
# with 64 filters, yolov3-tiny's layer 4, it loses: 1.13x). At inference too since a first
# `detect` no longer waits for the compile (numpy_forward.py): yolov4-tiny's layers 4 and 5
# 4.8 -> 3.4 ms each at batch 1 (same machine). Not under compat=, whose paths are the ones
# checked against C darknet's recorded tensors (its sums' order)
DIRECT_MAX_K_FEW_FILTERS = 288
FEW_FILTERS = 32
# Stride 2 (conv3x3s2_direct_cpu, inference only: its input split into parity planes so the taps
# read contiguous runs) up to the same DIRECT_MAX_K: yolov4-tiny's first layer (3 -> 32 at 416,
# K = 27) took 0.85 ms against 1.2 on im2col + GEMM with its batch-norm sweep (2-core Xeon,
# AVX-512, 2026-12-04, 2 threads, medians of 40); its second (32 -> 64, K = 288) 3.2 against
# 2.8, so the few-filter allowance does not apply there. Where AVX-512 runs at half width
# (wide_vectors False: Zen 4, AVX2) the GEMM is slower and it does, up to
# DIRECT_S2_MAX_K_NARROW: the same layer 3.61-3.68 ms against 4.21-4.27 on im2col (2-core EPYC
# Zen 4, 2026-12-07, medians of 60, 4 interleaved runs; the next layer's Winograd 0.1 ms
# slower, the whole forward 33.4-33.6 against 34.0-34.4 in 3 of the 4). Training keeps
# im2col + GEMM (the weight gradient needs the column matrix)
DIRECT_S2_MAX_K_NARROW = 288

# -- Winograd ----------------------------------------------------------------------------------
# Where Winograd pays, measured per layer in a network's sequence (at a99f427, medians of
# 40 forwards interleaved with the exact path, Winograd / exact time; the transforms channels
# last, kernels/winograd.py): 0.47-0.73 on yolov3's, yolov4-tiny's and yolov3-tiny's 3x3 layers
# from 64 channels at 26x26 to 104x104 (0.2-1.6 BFLOPs), 0.60-0.93 at 13x13 (4x4 tiles, the
# output padded to 16x16; 256-512 channels), 0.84-0.94 at 32 -> 64 channels, but 0.87-1.04
# at 32 -> 32 (yolov4-tiny 4, 5, which the direct kernel takes) and 16 -> 32 (yolov3-tiny 2).
# The transforms cost about tiles * (c + n), the GEMMs tiles * c * n: what decides is
# c * n / (c + n), from WINOGRAD_MIN_CN on.
# Output tiles per image from which it is taken (13x13 outputs have 16)
WINOGRAD_MIN_TILES = 16
# input channels from which it is taken: over RGB (c = 3) the transforms cost more than the
# GEMMs save (2x slower than im2col + GEMM)
WINOGRAD_MIN_C = 16
# c * n / (c + n) from which it is taken (32 -> 64 channels: 21.3; 32 -> 32: 16)
WINOGRAD_MIN_CN = 20
# multiply-adds (as BFLOPs, Darknet's count) from which it is taken: the smallest layers
# measured winning had 0.2
WINOGRAD_MIN_BFLOPS = 0.15
# In training (batch 8) the exact path runs a chunk of images as one GEMM, and the input
# gradient is a second Winograd convolution: there the 0.2-0.4 BFLOPs layers lost (yolov3-tiny's
# and yolov4-tiny's training steps 1.23-1.28x longer with them than without, at a99f427), so
# training keeps the earlier thresholds: 0.6 BFLOPs from 26x26 (49 tiles) on
TRAIN_MIN_BFLOPS = 0.6
TRAIN_MIN_TILES = 49
# Winograd passes (inference, and in training the forward and the input gradient) on images of
# at least this many F(4x4) tiles whose output channels are no more than the tiles run chunk
# by chunk of tile rows, each chunk on one thread (conv_winograd._pipelined; `pipelined`). In
# training, such layers take Winograd when inference does even below TRAIN_MIN_BFLOPS
# (train_pipelined): yolov4-tiny's 64 -> 64 layers 12 and 13 at 52x52, its batch-8 step 0.96x
# (1186-1222 -> 1138-1178 ms, three interleaved runs of 5 steps, 2-core Xeon, 2026-12-04);
# yolov3-tiny's layers 4 and 6 as fast either way (0.98-1.01x)
PIPELINE_MIN_TILES = 128
# F(4x4) tiles per image below which inference takes F(2x2, 3x3) (kernels/winograd.py): on
# 13x13 maps at batch 1 (16 tiles) it took 0.80-1.02 of F(4x4)'s time on yolov4-tiny's,
# yolov3-tiny's and yolov3's layers of 256-1024 channels; at 19x19 (25 tiles, yolov3 at 608)
# 1.07-1.11x, from 26x26 on 1.05-1.12x
WINOGRAD_F2_BELOW = 25
# ... but on CPUs with full-width AVX-512 (wide_vectors), whose GEMMs run twice as many
# multiply-adds a cycle while the transforms stay bound by memory, those small maps take
# im2col + GEMM: on a
# 2-core Xeon (2026-12-04, 2 threads, medians of 40) F(2x2) took 1.08-1.2x im2col's time on
# yolov3-tiny's and yolov4-tiny's 13x13 layers, the whole yolov3-tiny forward 0.97x without
# it (4 interleaved runs), yolov4-tiny 0.99x (on the EPYC, AVX2, F(2x2) took 0.81-0.93x)
WIDE_VECTORS_MIN_TILES = WINOGRAD_F2_BELOW

# -- one GEMM per image or per chunk of images -------------------------------------------------
# maps of fewer output pixels than this batch their images into one GEMM (a longer N runs
# nearer the BLAS peak, and the weight gradient gets one long reduction); larger maps take one
# GEMM per image, which is as fast there and writes each image's output straight into place
# instead of transposing the batch's m x batch x n result (measured here: yolov3-tiny layers 4
# and 6 at batch 8). Training only: at inference every image gets a GEMM of its own, as in
# Darknet, so that an image's outputs do not depend on its slot in the batch or on the batch
# size (OpenBLAS sums a column of a longer product in another order when it falls in the
# kernel's tail block: seen on AVX2 machines, as last-digit differences in detections)
BATCH_GEMM_MAX_N = 2048

# -- which Winograd layers keep their transformed filters at inference --------------------------
# A layer's transformed filters are (m + 2)^2 / 9 times its weights (F(4x4): 4x, F(2x2): 1.8x);
# kept on every Winograd layer they took yolov4 at 608 from 1040 MiB resident (exact path) to
# 1742 (at 1eb2444; AlexeyAB's CPU build: 1416). So the network keeps them only within a budget, the
# larger of WINOGRAD_CACHE_MIN_BYTES and WINOGRAD_CACHE_OF_WEIGHTS times its weights' bytes,
# filled smallest first (the most layers for the bytes); at inference the other layers take
# im2col + GEMM (plan). Until 2026-12-04 they transformed their filters at each forward into
# the scratch arena instead (0.15-0.19 ms per MiB of filters): on a 2-core Xeon (AVX-512)
# yolov3's 512 -> 1024 layers at 608 took 21-25 ms so against 13.3 on im2col (12 keeping
# them), and yolov3 at 416 310 ms per forward against 266 keeping all and 295 exact; taking
# im2col there instead, 269 (bench/winograd_cache.py, 2026-12-04; on the 2-core EPYC at
# 2026-12-03 the old way cost 337 ms against 299). yolov3-tiny (67 MiB of filters) and
# yolov4-tiny (55) keep all. At 1.25 times the weights, yolov4 at 608 keeps 303 of its 699
# MiB: resident 1392 MiB instead of 1788 keeping all (exact 1085; AlexeyAB's build 1416 on the
# EPYC) and as fast (975 ms per forward against 991; Xeon, 2026-12-04).
# DARKNUMBA_WINOGRAD_KEEP_MIB sets the budget instead (0: no Winograd at inference; a large
# value keeps all)
WINOGRAD_CACHE_MIN_BYTES = 96 << 20
WINOGRAD_CACHE_OF_WEIGHTS = 1.25

# the names above: tests/kernels/test_conv_plan.py checks that no other module defines them
THRESHOLDS = ("DIRECT_MAX_K", "DIRECT_MAX_K_FEW_FILTERS", "FEW_FILTERS", "DIRECT_S2_MAX_K_NARROW",
              "WINOGRAD_MIN_TILES", "WINOGRAD_MIN_C", "WINOGRAD_MIN_CN", "WINOGRAD_MIN_BFLOPS",
              "TRAIN_MIN_BFLOPS", "TRAIN_MIN_TILES", "WINOGRAD_F2_BELOW", "WIDE_VECTORS_MIN_TILES",
              "BATCH_GEMM_MAX_N", "WINOGRAD_CACHE_MIN_BYTES", "WINOGRAD_CACHE_OF_WEIGHTS",
              "PIPELINE_MIN_TILES")


def plan(l, training: bool, exact: bool = False) -> ConvPath:
    """The path of convolution `l`'s forward (and backward) in training or at inference;
    `exact`: the network keeps Darknet's im2col + GEMM wherever it has no exact alternative
    (no Winograd; load_network(..., exact=True))."""
    path = _rules(l, training, exact)
    # at inference a Winograd layer whose transformed filters the network does not keep
    # (winograd_cached) takes im2col + GEMM (a 3x3 convolution: never the 1x1 path)
    if path in WINOGRAD_PATHS and not training and not getattr(l, "winograd_keep", True):
        return ConvPath.IM2COL
    return path


def _rules(l, training: bool, exact: bool) -> ConvPath:
    """plan's rules 0-4 for layer l, before the network's filter budget."""
    if getattr(l, "bits_wanted", False) and not training:
        return ConvPath.XNOR
    if direct_thin(l):
        return ConvPath.DIRECT
    if not training and direct_strided(l):
        return ConvPath.DIRECT_S2
    if use_winograd(l, training, exact):
        return ConvPath.WINOGRAD2X2 if winograd_tile(l, training) == 2 else ConvPath.WINOGRAD4X4
    return ConvPath.ONE_BY_ONE if direct_1x1(l) else ConvPath.IM2COL


def direct_thin(l) -> bool:
    """A thin stride-1 convolution computed directly (see DIRECT_MAX_K and
    DIRECT_MAX_K_FEW_FILTERS), in training and at inference alike (the forward pass and
    the gradients); same sums as the GEMM path up to float32 rounding of their order."""
    return (l.size == 3 and l.stride == 1 and l.groups == 1 and l.pad <= 2
            and not l.ext and (l.c * 9 <= DIRECT_MAX_K or (
                l.c * 9 <= DIRECT_MAX_K_FEW_FILTERS and l.n <= FEW_FILTERS
                and l.quirks.compat is None)))


def direct_strided(l) -> bool:
    """A thin 3x3 stride-2 convolution computed directly at inference (DIRECT_MAX_K with
    full-width AVX-512, else DIRECT_S2_MAX_K_NARROW): the same sums as the GEMM path up to
    float32 rounding of their order."""
    max_k = DIRECT_MAX_K if wide_vectors() else DIRECT_S2_MAX_K_NARROW
    return (l.size == 3 and l.stride == 2 and l.groups == 1 and l.pad <= 2 and not l.ext
            and l.c * 9 <= max_k)


def direct_1x1(l) -> bool:
    """1x1 convolutions multiply the input itself, without im2col. Darknet's CPU code does
    this even for stride > 1, reading the wrong pixels; we do it only where it is exact,
    unless quirks.strided_1x1_misread asks for Darknet's behaviour."""
    if l.size != 1 or l.ext:
        return False
    return (l.stride == 1 and l.pad == 0) or l.quirks.strided_1x1_misread


def winograd_eligible(l, train=False) -> bool:
    """A 3x3 stride-1 convolution (no dilation, no groups, weights of its own, not xnor) large
    enough to pay: at inference WINOGRAD_MIN_TILES (WIDE_VECTORS_MIN_TILES with AVX-512),
    WINOGRAD_MIN_C, WINOGRAD_MIN_CN and WINOGRAD_MIN_BFLOPS, in training WINOGRAD_MIN_C,
    TRAIN_MIN_TILES and TRAIN_MIN_BFLOPS, or what inference takes where both training passes
    run pipelined (train_pipelined)."""
    if l.size != 3 or l.stride_x != 1 or l.stride_y != 1 or l.ext or l.groups != 1 \
            or l.share_layer is not None or l.c < WINOGRAD_MIN_C or getattr(l, "xnor", False):
        return False
    th, tw = tiles_of(l.out_h, l.out_w)
    min_tiles = WIDE_VECTORS_MIN_TILES if wide_vectors() else WINOGRAD_MIN_TILES
    at_inference = (l.c * l.n >= WINOGRAD_MIN_CN * (l.c + l.n)
                    and l.bflops >= WINOGRAD_MIN_BFLOPS and th * tw >= min_tiles)
    if train:
        return (l.bflops >= TRAIN_MIN_BFLOPS and th * tw >= TRAIN_MIN_TILES) or (
            at_inference and train_pipelined(l))
    return at_inference


def pipelined(tiles_per_image, n) -> bool:
    """Whether a Winograd pass runs chunk by chunk (conv_winograd._pipelined): an image has
    PIPELINE_MIN_TILES F(4x4) tiles and its `n` output channels' transformed filters are no
    larger than one image's transformed tiles (n <= tiles); on the other layers (small maps,
    many filters) each chunk's GEMMs would stream all of U again, and they take the three
    phases over the whole image (measured on a 2-core Xeon, 2026-12-04: yolov3-tiny's 13x13
    and 26x26 layers 0.2-0.5 ms slower pipelined). In training too since 2026-12-04:
    yolov4-tiny's batch-8 step 1186 -> 1129 ms (layers 2 and 10 and their input gradients;
    three interleaved runs of 5 steps), its whole-batch V and M (50 MB each on layer 2) no
    longer written at each step."""
    return tiles_per_image >= PIPELINE_MIN_TILES and n <= tiles_per_image


def train_pipelined(l) -> bool:
    """A 3x3 layer whose training passes both run pipelined: its forward (n output channels
    over its output's tiles) and its input gradient (c over its input's)."""
    th, tw = tiles_of(l.out_h, l.out_w)
    ih, iw = tiles_of(l.h, l.w)
    return pipelined(th * tw, l.n) and pipelined(ih * iw, l.c)


def wide_vectors() -> bool:
    """Whether this CPU runs AVX-512 at full width (LLVM's reading of the host, as numba
    compiles for it): there inference leaves the small maps to im2col (WIDE_VECTORS_MIN_TILES).
    AMD's Zen 4 (LLVM's "znver4") has AVX-512 but executes each 512-bit instruction as two
    256-bit halves, so its GEMMs run no more multiply-adds a cycle than with AVX2: there F(2x2)
    wins on 13x13 maps as on AVX2 (measured on a 2-core EPYC Zen 4, 2026-12-07, medians of 40
    forwards, 3 interleaved runs: yolov3-tiny 31.3-32.9 ms with the AVX-512 rule, 27.6-28.7
    without; yolov4-tiny 35.5-41.3 against 32.9-36.5). Read once."""
    global _WIDE_VECTORS
    if _WIDE_VECTORS is None:
        try:
            from llvmlite import binding
            _WIDE_VECTORS = full_width_avx512(binding.get_host_cpu_name(),
                                              binding.get_host_cpu_features())
        except Exception:        # noqa: BLE001 -- any failure to read the host: the AVX2 rules
            _WIDE_VECTORS = False
    return _WIDE_VECTORS


# LLVM's names of CPUs whose AVX-512 units are 256 bits wide (each 512-bit operation split
# in two): AMD Zen 4
HALF_WIDTH_AVX512 = frozenset({"znver4"})


def full_width_avx512(cpu_name: str, features) -> bool:
    """AVX-512 present (LLVM's host features) on a CPU not known to split it in halves."""
    return bool(features.get("avx512f", False)) and cpu_name not in HALF_WIDTH_AVX512


_WIDE_VECTORS = None


def use_winograd(l, training: bool, exact: bool = False) -> bool:
    """Winograd for this layer's forward and, in training, its input gradient: not exact, not
    under a compat mode, eligible (for training or inference)."""
    return not exact and l.quirks.compat is None and winograd_eligible(l, training)


def winograd_tile(l, train=False) -> int:
    """The output tile size m of F(m x m, 3x3) for an eligible layer: 2 at inference on maps
    with fewer than WINOGRAD_F2_BELOW 4x4 tiles, else 4."""
    th, tw = tiles_of(l.out_h, l.out_w)
    return 2 if not train and th * tw < WINOGRAD_F2_BELOW else 4


def winograd_filter_bytes(l) -> int:
    """Bytes of layer l's transformed filters at inference: (m + 2)^2 x c x n float32, m its
    winograd_tile."""
    return (winograd_tile(l) + 2) ** 2 * l.c * l.n * 4


def winograd_cache_budget(layers) -> int:
    """Bytes of transformed filters a network of `layers` keeps at inference: the larger of
    WINOGRAD_CACHE_MIN_BYTES and WINOGRAD_CACHE_OF_WEIGHTS times its weights' bytes, or
    DARKNUMBA_WINOGRAD_KEEP_MIB when set (read at each build and resize)."""
    v = os.environ.get("DARKNUMBA_WINOGRAD_KEEP_MIB")
    if v:
        try:
            mib = float(v)
        except ValueError:
            mib = -1.0
        if not mib >= 0:
            raise CfgError(f"DARKNUMBA_WINOGRAD_KEEP_MIB={v!r}: expected a number of MiB, "
                           f"0 or more")
        return int(mib * (1 << 20))
    weights = sum(int(getattr(l, "nweights", 0) or 0) * 4 for l in layers)
    return max(WINOGRAD_CACHE_MIN_BYTES, int(WINOGRAD_CACHE_OF_WEIGHTS * weights))


def winograd_cached(layers) -> set:
    """The indices of the layers whose transformed filters are kept from one inference forward
    to the next: of the layers that take Winograd at inference (plan, not exact), the
    smallest filters first (ties in layer order) while their sum stays within
    winograd_cache_budget; at inference the others take im2col + GEMM (plan). The same
    whether the network runs exact or not (an exact network transforms none)."""
    eligible = [(winograd_filter_bytes(l), i) for i, l in enumerate(layers)
                if hasattr(l, "winograd_keep")        # the convolutions
                and _rules(l, False, False) in WINOGRAD_PATHS]
    budget, total, kept = winograd_cache_budget(layers), 0, set()
    for nbytes, i in sorted(eligible):
        if total + nbytes > budget:
            break
        total += nbytes
        kept.add(i)
    return kept


def mark_winograd_kept(layers):
    """winograd_keep on each convolution of `layers` as winograd_cached says; a layer that no
    longer keeps its transformed filters drops them (Network.alloc_workspace, at every build
    and resize)."""
    kept = winograd_cached(layers)
    for i, l in enumerate(layers):
        if hasattr(l, "winograd_keep"):     # the convolutions
            l.winograd_keep = i in kept
            if not l.winograd_keep:
                l.winograd_weights = None


def batched(l, n) -> bool:
    """The whole batch (in chunks) in one GEMM, for a map of `n` output pixels (see
    BATCH_GEMM_MAX_N; the forward asks only in training, the backward always)."""
    return l.groups == 1 and n < BATCH_GEMM_MAX_N and not l.ext


# the main compiled kernels (numba dispatchers) each path's forward calls, before the bias /
# batch-norm sweep (forward_kernels adds it; the direct kernel fuses it)
FORWARD_KERNELS = {
    ConvPath.DIRECT: (direct.conv3x3_direct_cpu,),
    ConvPath.DIRECT_S2: (direct.conv3x3s2_direct_cpu,),
    ConvPath.WINOGRAD4X4: (winograd.winograd_filters_cpu, winograd.winograd_input_cpu,
                           winograd.winograd_output_cpu),
    ConvPath.WINOGRAD2X2: (winograd.winograd_filters_cpu, winograd.winograd2_input_cpu,
                           winograd.winograd2_output_cpu),
    ConvPath.ONE_BY_ONE: (),
    ConvPath.IM2COL: (im2col.im2col_batch_cpu,),
    ConvPath.XNOR: (xnor.pack_input_cpu, xnor.im2col_bits_cpu, xnor.xnor_gemm_cpu),
}
# ... and its training backward: the weight gradient (im2col + GEMM but for the direct path),
# the input gradient (col2im, or F(4x4) Winograd with the rotated filters on both Winograd
# paths; training plans only F(4x4))
_WINOGRAD_BACKWARD = (im2col.im2col_batch_cpu, gemm.add_transposed, winograd.winograd_filters_cpu,
                      winograd.winograd_input_cpu, winograd.winograd_output_cpu)
BACKWARD_KERNELS = {
    ConvPath.DIRECT: (direct.conv3x3_direct_weight_grad_cpu, direct.flip_weights,
                      direct.conv3x3_direct_cpu),
    ConvPath.WINOGRAD4X4: _WINOGRAD_BACKWARD,
    ConvPath.WINOGRAD2X2: _WINOGRAD_BACKWARD,
    ConvPath.ONE_BY_ONE: (gemm.add_transposed,),
    ConvPath.IM2COL: (im2col.im2col_batch_cpu, gemm.add_transposed, im2col.col2im_batch_cpu),
    # training never plans DIRECT_S2 nor XNOR (an xnor layer's backward is the float layer's,
    # layers/xnor.py)
    ConvPath.DIRECT_S2: (im2col.im2col_batch_cpu, gemm.add_transposed, im2col.col2im_batch_cpu),
    ConvPath.XNOR: (im2col.im2col_batch_cpu, gemm.add_transposed, im2col.col2im_batch_cpu),
}


def kernels(path: ConvPath, backward: bool = False) -> tuple:
    """The compiled kernels `path`'s forward calls (with `backward`: those its training
    backward calls), without the layer's bias / batch-norm sweep (forward_kernels)."""
    return (BACKWARD_KERNELS if backward else FORWARD_KERNELS)[ConvPath(path)]


def forward_kernels(l, path: ConvPath) -> list:
    """Every main kernel convolution `l`'s test-mode forward calls on `path`: kernels(path),
    then, but on the direct and xnor paths (which fuse them), the biases or batch norm and the
    activation in one sweep."""
    path = ConvPath(path)
    if path is ConvPath.XNOR:       # the twins the layer picks; the rest is fused in their GEMM
        return list(xnor_layer.bit_kernels(l))
    if path in (ConvPath.DIRECT, ConvPath.DIRECT_S2):     # biases / batch norm fused in
        return list(kernels(path))
    return list(kernels(path)) + [fused.batchnorm_bias_activate if l.batch_normalize
                                  else fused.bias_activate.pick(l.batch * l.outputs)]
