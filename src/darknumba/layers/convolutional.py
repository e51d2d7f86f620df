"""[convolutional] (Darknet's `convolutional_layer.c`): im2col + one BLAS GEMM per image and group,
then batch norm (or biases) and the activation.

weights: n x (c/groups) x size x size; output: batch x n x out_h x out_w. Which of the five
paths computes a layer (direct, Winograd 4x4 / 2x2, 1x1, im2col), and every threshold that
decides it: conv_plan.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..kernels.activations import ACTIVATIONS
from ..kernels.blas import (
    backward_bias,
)
from ..kernels.direct import (
    conv3x3_direct,
    conv3x3s2_direct,
    conv3x3_direct_weight_grad_cpu,
    flip_weights,
)
from ..kernels.fused import (
    bias_activate,
)
from ..kernels.gemm import add_transposed, gemm
from ..kernels.im2col import col2im_batch_cpu, im2col_batch_cpu
from .antialias import Antialiased
from .base import DEFAULT_QUIRKS, Layer, alloc_params, require_image_input, scratch_of, update_params
from .batchnorm import (backward_batchnorm, bn_test_divisor, fast_epilogue, forward_batchnorm,
                        one_sweep_batch_stats)
from .activate import activate_output, epilogue_activation, get_activation, gradient_output
from .conv_ab import check_ext_sizes, col2im_layer, im2col_layer, read_ab_keys, share_parameters
from .conv_plan import WINOGRAD_PATHS, ConvPath, batched, direct_1x1, direct_thin, plan
from .conv_winograd import backward_input_winograd, forward_winograd
from .xnor import forward as forward_xnor
from .xnor import read_xnor_keys, setup as setup_xnor, resize as resize_xnor

# floats of the column matrix the batched backward builds at once (64 MB): images are taken
# in chunks that fit, so early layers with large maps do not multiply memory by the batch
BATCH_COLUMNS = 1 << 24

def conv_weight_records(l):
    """A convolution's .weights records: biases, [scales, rolling_mean, rolling_variance],
    weights (load/save_convolutional_weights)."""
    recs = [("biases", l.biases)]
    if l.batch_normalize:
        recs += [("scales", l.scales), ("rolling_mean", l.rolling_mean),
                 ("rolling_variance", l.rolling_variance)]
    return recs + [("weights", l.weights)]


class ConvolutionalLayer(Layer):
    type = "convolutional"
    output_can_be_view = True
    bn_foldable = True
    share_layer = None            # AlexeyAB's share_index: the layer whose parameters this uses
    winograd_weights = None       # 36 x c x n Winograd filters, made when first needed
    winograd_keep = True          # kept between inference forwards (conv_plan.winograd_cached)
    xnor = False                  # xnor=1: binary weights and inputs (layers/xnor.py)
    use_bin_output = False        # bin_output=1: linear on AlexeyAB's bit path
    bits_wanted = False           # calculate_binary_weights asked for the bit path
    bit_weights = None            # the packed filter signs, made when first needed

    def __init__(self, batch, h, w, c, n, groups, size, stride, padding, activation,
                 batch_normalize=False, quirks=DEFAULT_QUIRKS, dilation=1, stride_y=None):
        if c % groups or n % groups:
            raise ValueError(f"channels ({c}) and filters ({n}) must be divisible by groups ({groups})")
        self.batch, self.h, self.w, self.c = batch, h, w, c
        self.n, self.groups, self.size, self.stride, self.pad = n, groups, size, stride, padding
        self.dilation = dilation
        self.stride_x, self.stride_y = stride, stride if stride_y is None else stride_y
        self.ext = dilation > 1 or self.stride_y != stride      # AlexeyAB's im2col_cpu_ext
        self.activation = activation
        self.activation_id = ACTIVATIONS[activation]
        self.batch_normalize = bool(batch_normalize)
        self.quirks = quirks
        alloc_params(self, c // groups * n * size * size, n)
        self.learning_rate_scale = 1.0
        self._set_sizes()

    def _set_sizes(self):
        self.out_h = (self.h + 2 * self.pad - self.size) // self.stride_y + 1
        self.out_w = (self.w + 2 * self.pad - self.size) // self.stride + 1
        if self.out_h < 1 or self.out_w < 1:
            raise ValueError(f"a {self.size}x{self.size}/{self.stride_x}x{self.stride_y} "
                             f"convolution of a "
                             f"{self.w}x{self.h} input has no output pixels")
        check_ext_sizes(self)
        self.out_c = self.n
        self.inputs = self.h * self.w * self.c
        self.outputs = self.out_h * self.out_w * self.out_c
        self._alloc_io()
        if self.batch_normalize:
            self.train_buffer("x", self.batch * self.outputs, "batch norm's input")
        self.workspace_size = 0 if self._direct_1x1() or self._direct_thin() else \
            self.out_h * self.out_w * self.size * self.size * self.c // self.groups

    def _direct_1x1(self) -> bool:
        """The input is the column matrix (conv_plan.direct_1x1)."""
        return direct_1x1(self)

    def forward_path(self, net) -> ConvPath:
        """How forward (and backward) computes this layer as `net` runs it, in training or at
        inference, exact or not: the planner's answer (conv_plan.plan), also what `bench`
        prints and what the first run compiles."""
        return plan(self, bool(getattr(net, "train", False)), bool(getattr(net, "exact", False)))

    def _direct_thin(self) -> bool:
        """The thin 3x3 kernel, in training and at inference alike (conv_plan.direct_thin)."""
        return direct_thin(self)

    def _batched(self, n) -> bool:
        """The whole batch in one GEMM (conv_plan.batched)."""
        return batched(self, n)

    @classmethod
    def from_cfg(cls, s, params):
        n = s.find_int("filters", 1, at_least=1)
        size = s.find_int("size", 1, at_least=1)
        stride = s.find_int("stride", 1, at_least=1)
        pad = s.find_int("pad", 0)
        padding = s.find_int("padding", 0, at_least=0)
        groups = s.find_int("groups", 1, at_least=1)
        if pad:
            padding = size // 2
        activation = get_activation(s, exclude=())
        require_image_input(s, params)
        bn = s.find_int("batch_normalize", 0)
        stride, stride_y, dilation, antialiasing, share = read_ab_keys(s, params, size, stride)
        xnor, bin_output, groups = read_xnor_keys(s, params.net.quirks, groups, dilation,
                                                  (stride, stride_y), antialiasing)
        for key, v in (("filters", n), ("size", size), ("stride", min(stride, stride_y)),
                       ("groups", groups)):
            if v < 1:
                raise s.error(key, f"must be at least 1, found {v}")
        if params.c % groups or n % groups:
            raise s.error("groups", f"input channels ({params.c}) and filters ({n}) must both be "
                                    f"divisible by groups={groups}")
        quirks = params.net.quirks
        try:
            l = cls(params.batch, params.h, params.w, params.c, n, groups, size,
                    1 if antialiasing else stride, padding, activation, bn, quirks, dilation,
                    1 if antialiasing else stride_y)
        except ValueError as e:
            raise s.error(None, str(e)) from None
        l.flipped = s.find_int("flipped", 0)
        if xnor:
            setup_xnor(l, bin_output)
        if share is not None:
            share_parameters(l, share, s)
        if antialiasing:
            return Antialiased(l, cls, (stride, stride_y), antialiasing, quirks)
        return l

    def resize(self, w, h):
        self.w, self.h = w, h
        self._set_sizes()
        if self.xnor:
            resize_xnor(self)

    # -- forward ---------------------------------------------------------------------------
    def forward(self, net):
        """forward_convolutional_layer; an xnor layer's binarises first or runs by bits
        (layers/xnor.py)."""
        if self.xnor:
            forward_xnor(self, net, ConvolutionalLayer._forward_float)
        else:
            self._forward_float(net)

    def _forward_float(self, net):
        """forward_convolutional_layer on float weights and input."""
        m = self.n // self.groups
        k = self.size * self.size * self.c // self.groups
        n = self.out_h * self.out_w
        cg = self.c // self.groups
        if net.train:
            self.weights_changed()      # training changes them: no inference transform kept
        path = self.forward_path(net)       # the one decision, also what `bench` prints
        if path is ConvPath.DIRECT:
            self._forward_direct(net)
            return
        if path is ConvPath.DIRECT_S2:
            self._forward_direct_s2(net)
            return
        if path in WINOGRAD_PATHS:
            forward_winograd(self, net)
        elif self.batch > 1 and self._batched(n) and net.train:
            self._forward_gemms_batched(net, m, k, n)
        else:
            self._forward_gemms_per_image(net, m, k, n, cg)
        if self.batch_normalize:
            forward_batchnorm(self, net)
        else:
            act = epilogue_activation(self, net.train)
            bias_activate(self.output, self.biases, self.batch, self.n, n,
                          fast_epilogue(self, net, act))
            activate_output(self, net.train, act)

    def _forward_direct(self, net):
        """Thin 3x3 convolution with the next sweep fused into its rows: the biases or the
        test-mode batch norm and the activation, or in train mode the batch statistics (not
        under compat="darknet-cpu", which keeps Darknet's two-pass float32 variance)."""
        args = (net.input, self.batch, self.c, self.h, self.w, self.weights, self.n, self.pad,
                self.output)
        act = epilogue_activation(self, net.train)
        code = fast_epilogue(self, net, act)
        if not self.batch_normalize:
            conv3x3_direct(*args, biases=self.biases, act=code)
            activate_output(self, net.train, act)
        elif not net.train:
            conv3x3_direct(*args, bn_mean=self.rolling_mean,
                           bn_divisor=bn_test_divisor(self, code), scales=self.scales,
                           biases=self.biases, act=code)
            activate_output(self, net.train, act)
        else:
            stats = one_sweep_batch_stats(self)
            conv3x3_direct(*args, stats_mean=self.mean if stats else None,
                           stats_variance=self.variance if stats else None)
            forward_batchnorm(self, net, stats_done=stats)

    def _forward_direct_s2(self, net):
        """Thin 3x3 stride-2 convolution at inference, its biases or batch norm and activation
        fused into its rows."""
        act = epilogue_activation(self, net.train)
        code = fast_epilogue(self, net, act)
        bn = dict(bn_mean=self.rolling_mean, bn_divisor=bn_test_divisor(self, code),
                  scales=self.scales) if self.batch_normalize else {}
        conv3x3s2_direct(net.input, self.batch, self.c, self.h, self.w, self.weights, self.n,
                         self.pad, self.output, biases=self.biases, act=code, **bn)
        activate_output(self, net.train, act)

    def _forward_gemms_per_image(self, net, m, k, n, cg):
        x, out = net.input, self.output
        ws = net.workspace
        for b in range(self.batch):
            for g in range(self.groups):
                a = self.weights[g * m * k:(g + 1) * m * k]
                im = x[(b * self.groups + g) * cg * self.h * self.w:][:cg * self.h * self.w]
                c = out[(b * self.groups + g) * m * n:][:m * n]
                if self._direct_1x1():
                    col = im[:k * n]
                else:
                    im2col_layer(self, im, cg, ws)
                    col = ws[:k * n]
                gemm(0, 0, m, n, k, 1.0, a, col, 0.0, c)

    def _batch_columns(self, x, b0, nb, k, n, col):
        """The column matrices of images b0..b0+nb side by side, k x nb*n, into `col`."""
        col = col.reshape(k, nb, n)
        if self._direct_1x1():       # the input itself is the column matrix (its first k*n values)
            col[...] = x[b0:b0 + nb, :k * n].reshape(nb, k, n).transpose(1, 0, 2)
        else:
            im2col_batch_cpu(x[b0:b0 + nb].reshape(-1), nb, self.c, self.h, self.w,
                             self.size, self.stride, self.pad, col.reshape(-1))
        return col

    def _forward_gemms_batched(self, net, m, k, n):
        """W @ [col_0 ... col_bc]: one GEMM for a chunk of images (a longer N runs nearer the
        BLAS peak than one short GEMM per image), then the m x bc x n result is laid out as
        bc x m x n."""
        bc = max(1, min(self.batch, BATCH_COLUMNS // (k * n)))
        x = net.input[:self.batch * self.inputs].reshape(self.batch, self.inputs)
        out = self.output.reshape(self.batch, m, n)
        weights = self.weights.reshape(m, k)
        for b0 in range(0, self.batch, bc):
            nb = min(bc, self.batch - b0)
            col, res = scratch_of(net).parts(k * nb * n, m * nb * n)
            col = self._batch_columns(x, b0, nb, k, n, col)
            res = res.reshape(m, nb * n)
            np.matmul(weights, col.reshape(k, nb * n), out=res)
            out[b0:b0 + nb] = res.reshape(m, nb, n).transpose(1, 0, 2)

    # -- backward and update ----------------------------------------------------------------
    def backward(self, net):
        """backward_convolutional_layer: delta *= act'(output); batch-norm or bias backward;
        then weight_updates += delta @ col^T and, unless this is layer 0, the input gradient
        W^T @ delta folded back with col2im (added into net.delta). A direct 1x1 convolution
        adds W^T @ delta straight into net.delta; compat="darknet-cpu" overwrites it instead,
        as Darknet's CPU code does."""
        m = self.n // self.groups
        k = self.size * self.size * self.c // self.groups
        n = self.out_h * self.out_w
        cg = self.c // self.groups
        gradient_output(self)
        if self.batch_normalize:
            backward_batchnorm(self, net)
        else:
            backward_bias(self.bias_updates, self.delta, self.batch, self.n, n)
        if net.delta is not None and self.quirks.col2im_zeroes_delta:
            # AlexeyAB's CPU col2im_cpu_ext zeroes the input delta before adding into it,
            # dropping what later layers (a route, a shortcut) already passed down
            net.delta[:self.batch * self.inputs] = 0.0
        path = self.forward_path(net)
        if path is ConvPath.DIRECT:
            self._backward_direct(net)
            return
        # the input gradient of a Winograd layer is a Winograd convolution too (conv_winograd.py)
        winograd_dx = net.delta is not None and path in WINOGRAD_PATHS
        if self._batched(n):
            self._backward_gemms_batched(net, m, k, n, not winograd_dx)
        else:
            self._backward_gemms_per_image(net, m, k, n, cg, not winograd_dx)
        if winograd_dx:
            backward_input_winograd(self, net)

    def _backward_direct(self, net):
        """Thin stride-1 convolution: weight gradient straight from input and delta; the input
        gradient as the convolution of delta with the flipped, transposed filters."""
        conv3x3_direct_weight_grad_cpu(net.input, self.batch, self.c, self.h, self.w,
                                       self.delta, self.n, self.pad, self.weight_updates)
        if net.delta is None:
            return
        flipped = scratch_of(net)("conv_flipped", self.nweights)
        flip_weights(self.weights, self.n, self.c, self.size, flipped)
        conv3x3_direct(self.delta, self.batch, self.n, self.out_h, self.out_w, flipped, self.c,
                       2 - self.pad, net.delta, accumulate=True)

    def _backward_gemms_batched(self, net, m, k, n, input_grad=True):
        """The weight and input gradients of up to `bc` images in one GEMM each: the images'
        columns side by side (k x bc*n), their deltas likewise (m x bc*n). One long reduction
        instead of one short GEMM (and an m x k temporary) per image. Without `input_grad`
        only the weight gradient."""
        bc = max(1, min(self.batch, BATCH_COLUMNS // (k * n)))
        direct = self._direct_1x1()
        weights = self.weights.reshape(m, k)
        x = net.input[:self.batch * self.inputs].reshape(self.batch, self.inputs)
        dx = net.delta[:self.batch * self.inputs].reshape(self.batch, self.inputs) \
            if net.delta is not None and input_grad else None
        for b0 in range(0, self.batch, bc):
            nb = min(bc, self.batch - b0)
            # one arena for the three (Scratch.parts); dw_t keeps its place at its start
            dw_t, d, col = scratch_of(net).parts(k * m, m * nb * n, k * nb * n)
            dw_t, d = dw_t.reshape(k, m), d.reshape(m, nb, n)
            d[...] = self.delta[b0 * m * n:(b0 + nb) * m * n].reshape(nb, m, n).transpose(1, 0, 2)
            col = self._batch_columns(x, b0, nb, k, n, col)
            d2, col2 = d.reshape(m, nb * n), col.reshape(k, nb * n)
            # weight_updates += delta @ col^T, computed as (col @ delta^T)^T: faster in BLAS
            np.matmul(col2, d2.T, out=dw_t)
            add_transposed(self.weight_updates.reshape(m, k), dw_t)
            if dx is None:
                continue
            np.matmul(weights.T, d2, out=col2)           # the columns' gradient, k x nb*n
            if not direct:
                col2im_batch_cpu(col2.reshape(-1), nb, self.c, self.h, self.w, self.size,
                                 self.stride, self.pad, dx[b0:b0 + nb].reshape(-1))
            elif self.quirks.delta_overwrite_1x1:
                # Darknet's CPU code writes a 1x1 convolution's input gradient with beta = 0,
                # *overwriting* what later layers (e.g. a shortcut) already added
                dx[b0:b0 + nb, :k * n] = col.transpose(1, 0, 2).reshape(nb, k * n)
            else:
                dx[b0:b0 + nb, :k * n] += col.transpose(1, 0, 2).reshape(nb, k * n)

    def _backward_gemms_per_image(self, net, m, k, n, cg, input_grad=True):
        """Grouped convolutions and large maps: per image and group, weight_updates += delta @
        col^T and (with `input_grad`) the input gradient W^T @ delta folded back with col2im."""
        direct = self._direct_1x1()
        beta_in = 0.0 if self.quirks.delta_overwrite_1x1 else 1.0
        ws = net.workspace
        for b in range(self.batch):
            for g in range(self.groups):
                d = self.delta[(b * self.groups + g) * m * n:][:m * n]         # m x n
                off = (b * self.groups + g) * cg * self.h * self.w
                im = net.input[off:][:cg * self.h * self.w]
                if direct:
                    col = im[:k * n]                                            # k x n
                else:
                    im2col_layer(self, im, cg, ws)
                    col = ws[:k * n]
                gemm(0, 1, m, k, n, 1.0, d, col, 1.0, self.weight_updates[g * m * k:][:m * k])
                if net.delta is None or not input_grad:
                    continue
                a = self.weights[g * m * k:][:m * k]
                imd = net.delta[off:][:cg * self.h * self.w]
                if direct:
                    gemm(1, 0, k, n, m, 1.0, a, d, beta_in, imd[:k * n])
                else:
                    gemm(1, 0, k, n, m, 1.0, a, d, 0.0, ws[:k * n])
                    col2im_layer(self, ws, cg, imd)

    def random_init(self, rng):
        """make_convolutional_layer: sqrt(2 / (size*size*c/groups)) * N(0, 1)."""
        scale = math.sqrt(2.0 / (self.size * self.size * self.c / self.groups))
        self.weights[:] = scale * rng.standard_normal(self.weights.size)
        self.weights_changed()

    def update(self, a):
        """update_convolutional_layer"""
        update_params(self, a)
        self.weights_changed()

    def weights_changed(self):
        """Drop what was derived from the weights (the Winograd filters, conv_winograd.py; an
        xnor layer's packed signs): called by whatever writes them in place."""
        self.winograd_weights = None
        self.bit_weights = None

    # -- weights and reporting -------------------------------------------------------------
    def weight_records(self):
        return [] if self.share_layer is not None else conv_weight_records(self)

    def load_records(self):
        """load_convolutional_weights' records: the first numload filters only; without the
        batch-norm scales and statistics under dontloadscales."""
        recs = self.weight_records()
        numload = getattr(self, "numload", 0)
        if numload:
            per = self.nweights // self.n
            recs = [(name, a[:numload * per] if name == "weights" else a[:numload])
                    for name, a in recs]
        if getattr(self, "dontloadscales", False):
            recs = [r for r in recs if r[0] not in ("scales", "rolling_mean", "rolling_variance")]
        return recs

    def after_load(self, transpose):
        """flipped=1: the file holds the filters transposed (transpose_matrix in the C)."""
        if getattr(self, "flipped", 0):
            k = self.nweights // self.n
            self.weights[:] = self.weights.reshape(k, self.n).T.reshape(-1)

    @property
    def bflops(self):
        return (2.0 * self.n * self.size * self.size * self.c / self.groups
                * self.out_h * self.out_w) / 1e9

    def describe(self):
        stride = f"{self.stride:2d}" if self.stride_y == self.stride else \
            f"{self.stride_x}x{self.stride_y}"
        return (f"conv  {self.n:5d} {self.size:2d} x{self.size:2d} /{stride}  "
                f"{self.w:4d} x{self.h:4d} x{self.c:4d}   ->  "
                f"{self.out_w:4d} x{self.out_h:4d} x{self.out_c:4d}  {self.bflops:5.3f} BFLOPs")
