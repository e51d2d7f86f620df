"""xnor=1 [convolutional] layers (XNOR-net): binarised weights and inputs, as both Darknets'
forward_convolutional_layer computes them, and AlexeyAB's bit-packed inference
(kernels/xnor.py has the arithmetic and its layout).

How a binary layer runs, as in the C:

* **float** (training in both Darknets; pjreddie's always; AlexeyAB's at inference until
  calculate_binary_weights): the weights are binarised per filter (sign times the filter's mean
  |w|), the input to +-1 (x > 0: +1, else -1), then the layer's ordinary im2col + GEMM, batch
  norm or biases, activation. Padding is 0. Backward and update are the float layer's, with the
  *real* weights and the *real* input (the binarised copies live only inside forward): a
  straight-through gradient, as both CPU builds compute it.
* **bits** (AlexeyAB's inference after calculate_binary_weights, which its detector test,
  demo, map/valid and classifier predict call; darknumba's Detector does too): the signs packed
  into uint64 words, one XNOR + popcount per 64 products. AlexeyAB quirks, kept because they are
  its definition of this layer (both its CPU and GPU bit kernels do them):
    - a padded pixel is bit 0, i.e. -1, not 0: at the borders the output differs from the
      float way by the padded taps' -sign(w) * mean;
    - bin_output=1 makes the activation linear (unless a [route], [shortcut], [scale_channels]
      or [sam] reads the layer: AlexeyAB's parser clears bin_output there). The next xnor layer
      reads only signs, and leaky keeps them, so its output does not change.
  Batch norm is folded, as AlexeyAB's fuse_conv_batchnorm does before: each filter's output is
  (K - 2 * popcount) * mean * s + (bias - rolling_mean * s), s = scale / sqrt(variance + eps)
  (a negative s flips the filter's signs in AlexeyAB's folded weights: the same product), the
  weights themselves left as loaded.
  Bugs of its CPU bit path, under compat="darknet-cpu" only (quirks.xnor_cpu_bugs): it
  computes only the batch's first image (the others get the bias and activation of 0), and
  with c % 32 != 0 it packs the input only for a 3x3 stride-1 pad-1 layer (im2col_cpu_custom_bin
  prints "is no non-optimized version" otherwise, leaving every input bit 0).

AlexeyAB's CPU float way is broken: its forward_convolutional_layer calls
binarize_weights(l.weights, l.n, l.nweights, ...), a filter size of l.nweights, so it reads and
writes n - 1 layers' worth of floats past the weights (its CPU build crashes with SIGSEGV on
tests/fixtures/ab/xnor/ab-xnor.cfg). darknumba binarises per filter, as its GPU build and
pjreddie's CPU build do; under compat="darknet-cpu" with AlexeyAB's dialect that way is an
error, having no defined result to reproduce. Its bit way is sound, and is what its detector
runs.

AlexeyAB forces groups=1 on an xnor layer (make_convolutional_layer); pjreddie's binarises each
filter of a grouped one. Refused, with a message: xnor with dilation, unequal strides or
antialiasing (AlexeyAB's bit path ignores dilation and, for unequal strides, runs the float
convolution without binarising at all). binary=1 changes nothing on the CPU in either Darknet
(it binarises only on the GPU), so it is read and left without effect.
"""
from __future__ import annotations

import numpy as np

from ..errors import DarknumbaError
from ..kernels.activations import LINEAR
from ..kernels.xnor import (binarize_cpu, binarize_weights_cpu, im2col_bits_cpu, mean_arr_cpu,
                            pack_input_cpu, pack_weights_cpu, words_per_pixel, xnor_gemm_cpu)
from .activate import activate_output, epilogue_activation
from .batchnorm import bn_divisor
from .memory import zeros

# layers whose parse clears bin_output of the layers they read (AlexeyAB's parse_network_cfg)
_CLEARS_BIN_OUTPUT = ("route", "shortcut", "scale_channels", "sam")


def read_xnor_keys(s, quirks, groups, dilation, strides, antialiasing):
    """(xnor, bin_output, groups) from a [convolutional] section: parse_convolutional's
    xnor, binary (no effect on a CPU) and bin_output."""
    xnor = s.find_int("xnor", 0)
    s.find_int("binary", 0)
    use_bin_output = s.find_int("bin_output", 0) if quirks.xnor_bits else 0
    if not xnor:
        return False, False, groups
    if dilation > 1 or strides[0] != strides[1] or antialiasing:
        what = ("dilation" if dilation > 1 else "antialiasing" if antialiasing
                else "stride_x / stride_y")
        raise s.error("xnor", f"xnor=1 with {what} is not supported (AlexeyAB's CPU build "
                              f"computes it differently in training and at inference)")
    return True, bool(use_bin_output), 1 if quirks.xnor_bits else groups


def setup(l, use_bin_output):
    """make_convolutional_layer's xnor buffers: the binarised weights and input."""
    l.xnor = True
    l.use_bin_output = use_bin_output
    l.binary_weights = zeros(l.nweights, "xnor binary weights")
    l.binary_input = zeros(l.batch * l.inputs, "xnor binary input")


def resize(l):
    l.binary_input = zeros(l.batch * l.inputs, "xnor binary input")
    l.bit_weights = None            # the bit buffers follow the sizes: packed again when needed


def forward(l, net, forward_float):
    """forward_convolutional_layer of an xnor layer: the bit way at AlexeyAB's inference once
    calculate_binary_weights asked for it, else `forward_float` (the float layer's forward) on
    the binarised weights and input."""
    if l.bits_wanted and not net.train:
        forward_bits(l, net)
        return
    if l.quirks.xnor_cpu_bugs:
        raise DarknumbaError(
            f"layer {net.index}: AlexeyAB's CPU build binarises an xnor layer's weights past "
            f"their end in training and before calculate_binary_weights (binarize_weights "
            f"over l.nweights values a filter): under compat=\"darknet-cpu\" there is no defined "
            f"result to reproduce (without compat darknumba binarises each filter, as its GPU "
            f"build does)")
    binarize_weights_cpu(l.weights, l.n, l.nweights // l.n, l.binary_weights)
    n = l.batch * l.inputs
    binarize_cpu(net.input, n, l.binary_input)
    weights, x = l.weights, net.input
    l.weights, net.input = l.binary_weights, l.binary_input
    try:
        forward_float(l, net)
    finally:
        l.weights, net.input = weights, x


def binary_align_weights(l):
    """binary_align_weights: the filters' signs packed (pack_weights_cpu), their mean |w|
    (get_mean_array), and the bit buffers of one image."""
    nwc = words_per_pixel(l.c)
    ss = l.size * l.size
    l.bit_words = ss * nwc
    binarize_weights_cpu(l.weights, l.n, l.nweights // l.n, l.binary_weights)
    l.mean_arr = zeros(l.n, "xnor mean_arr")
    mean_arr_cpu(l.binary_weights, l.n, l.nweights // l.n, l.mean_arr)
    l.bit_weights = zeros(l.n * l.bit_words, "xnor packed weights", dtype=np.uint64)
    pack_weights_cpu(l.weights, l.n, l.c, l.size, nwc, l.bit_weights)
    l.bit_input = zeros(l.h * l.w * nwc, "xnor packed input", dtype=np.uint64)
    l.bit_cols = zeros(l.out_h * l.out_w * l.bit_words, "xnor packed columns", dtype=np.uint64)
    l.bit_counts = zeros(l.n * l.out_h * l.out_w, "xnor popcounts", dtype=np.uint64)
    if l.batch_normalize:           # fuse_conv_batchnorm, in float64 as AlexeyAB's
        s = l.scales.astype(np.float64) / bn_divisor(l, l.rolling_variance)
        l.bit_alpha = (l.mean_arr * s).astype(np.float32)
        l.bit_beta = (l.biases - l.rolling_mean * s).astype(np.float32)
    else:
        l.bit_alpha, l.bit_beta = l.mean_arr.copy(), l.biases.copy()


def defined_in_ab(l) -> bool:
    """Whether AlexeyAB's CPU bit path packs this layer's input: always when c % 32 == 0, else
    only for a 3x3 stride-1 pad-1 layer (im2col_cpu_custom_bin's one case)."""
    return l.c % 32 == 0 or (l.out_h == l.h and l.out_w == l.w and l.stride == 1 and l.pad == 1)


def bit_kernels(l) -> tuple:
    """The twins forward_bits runs, each picked by its size (kernels/xnor.py: serial below
    PACK_SERIAL_BELOW values or words for the packing and the columns, below SERIAL_BELOW
    popcounts for the GEMM)."""
    cols = l.out_h * l.out_w * l.size * l.size * words_per_pixel(l.c)
    return (pack_input_cpu.pick(l.inputs), im2col_bits_cpu.pick(cols),
            xnor_gemm_cpu.pick(cols * l.n))


def forward_bits(l, net):
    """AlexeyAB's bit-packed forward: per image, the input's signs packed, the columns of
    packed taps, the XNOR-popcount GEMM times each filter's mean plus its bias (batch norm
    folded in) and the activation (none under bin_output) in the GEMM's sweep."""
    if l.bit_weights is None:
        binary_align_weights(l)
    nwc = words_per_pixel(l.c)
    n_out = l.out_h * l.out_w
    K = l.size * l.size * l.c
    bugs = l.quirks.xnor_cpu_bugs
    images = 1 if bugs else l.batch
    # under the CPU bugs the other images get the bias then the activation: applied afterwards
    act = LINEAR if l.use_bin_output or bugs else epilogue_activation(l, False)
    if bugs:            # the other images: the bias (and batch norm) of 0
        l.output[:l.batch * l.outputs].reshape(l.batch, l.n, n_out)[:] = l.bit_beta[:, None]
    pack, cols, gemm = bit_kernels(l)
    for b in range(images):
        im = net.input[b * l.inputs:(b + 1) * l.inputs]
        if bugs and not defined_in_ab(l):
            l.bit_cols[:] = 0
        else:
            pack(im, l.c, l.h, l.w, nwc, l.bit_input)
            cols(l.bit_input, l.h, l.w, nwc, l.size, l.stride, l.pad, l.out_h, l.out_w,
                 l.bit_cols)
        gemm(l.n, n_out, l.bit_words, K, l.bit_weights, l.bit_cols, l.bit_alpha, l.bit_beta,
             act, l.bit_counts, l.output[b * l.outputs:(b + 1) * l.outputs])
    if not l.use_bin_output:
        activate_output(l, False, act)


def calculate_binary_weights(net):
    """AlexeyAB's calculate_binary_weights: every xnor convolution computes its inference by
    bits from now on (packed when first run, again after its weights change), and a layer with
    bin_output=1 that no [route], [shortcut], [scale_channels] or [sam] reads turns linear
    there. A pjreddie network has no bit path: nothing changes."""
    if not net.quirks.xnor_bits:
        return
    cleared = set()
    for i, l in enumerate(net.layers):
        if l.type == "route":
            cleared.update(l.input_layers)
        elif l.type in _CLEARS_BIN_OUTPUT:        # the layer before and the `from` layer
            cleared.update((i - 1, l.index))
    for i, l in enumerate(net.layers):
        if getattr(l, "xnor", False):
            l.bits_wanted = True
            l.bit_weights = None
            if i in cleared:
                l.use_bin_output = False
