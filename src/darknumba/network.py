"""Network: the layer list and Darknet's generic loops (`network.c`): forward walks the layers
with ``net.input = l.output``; backward walks back with ``net.input = prev.output`` and
``net.delta = prev.delta``; update hands every layer the same UpdateArgs."""
from __future__ import annotations

import math
import os
import random

import numpy as np

from .dialect import quirks_for
from .errors import DarknumbaError
from .kernels.blas import fill_cpu
from .layers import memory
from .layers.base import Layer, Scratch, UpdateArgs, skips_update
from .layers.conv_plan import mark_winograd_kept
from .layers.route import share_outputs
from .net_options import NetOptions, options_as_attributes


def _rate_constant(net, b):
    return float(np.float32(net.learning_rate))


def _rate_step(net, b):
    f32 = np.float32
    return float(f32(float(f32(net.learning_rate)) * math.pow(float(f32(net.scale)), b // net.step)))


def _rate_steps(net, b):
    f32 = np.float32
    rate = f32(net.learning_rate)
    for s, sc in zip(net.steps, net.scales):
        if s > b:
            break
        rate = f32(rate * f32(sc))
    return float(rate)


def _rate_exp(net, b):
    f32 = np.float32
    return float(f32(float(f32(net.learning_rate)) * math.pow(float(f32(net.gamma)), b)))


def _rate_poly(net, b):
    f32 = np.float32
    base = float(f32(1) - f32(b) / f32(net.max_batches))
    return float(f32(float(f32(net.learning_rate)) * math.pow(base, float(f32(net.power)))))


def _rate_random(net, b):
    f32 = np.float32
    return float(f32(float(f32(net.learning_rate)) * math.pow(random.random(),
                                                               float(f32(net.power)))))


def _rate_sig(net, b):
    """1 / (1 + exp(gamma * (b - step))); quirks.sig_unsigned_wrap keeps Darknet's unsigned
    `batch_num - step` (before `step` it wraps round, so the rate is 0 for gamma > 0)."""
    f32 = np.float32
    diff = b - net.step
    if net.quirks.sig_unsigned_wrap and diff < 0:
        diff += 1 << 64
    z = float(f32(f32(net.gamma) * f32(diff)))
    sig = 1.0 / (1.0 + math.exp(z)) if z < 709 else 0.0
    return float(f32(float(f32(net.learning_rate)) * sig))


def _rate_sgdr(net, b):
    """AlexeyAB's SGDR: cosine from learning_rate to learning_rate_min over cycles of
    sgdr_cycle batches, each sgdr_mult times longer than the one before."""
    start, cycle = 0, net.sgdr_cycle
    while start + cycle < b:
        start += cycle
        cycle *= net.sgdr_mult
    lr, lo = float(np.float32(net.learning_rate)), float(np.float32(net.learning_rate_min))
    return float(np.float32(lo + 0.5 * (lr - lo) * (1.0 + math.cos(
        float(np.float32(b - start)) * 3.14159265 / cycle))))


# get_current_rate's policies by cfg name: (net, batch_num) -> the rate after burn_in
RATE_POLICIES = {"constant": _rate_constant, "step": _rate_step, "steps": _rate_steps,
                 "exp": _rate_exp, "poly": _rate_poly, "sig": _rate_sig, "random": _rate_random,
                 "sgdr": _rate_sgdr}
POLICIES = tuple(RATE_POLICIES)


def zero_delta(delta):
    """delta[:] = 0 (forward_network's fill_cpu): in parallel for large arrays (88 MB at
    yolov3-tiny's layer 0, batch 8: 8.4 -> 3.5 ms), numpy's fill for small ones."""
    if delta.ndim == 1 and delta.size >= 1 << 20:
        fill_cpu(delta.size, 0.0, delta)
    else:
        delta.fill(0.0)


def exact_from_env() -> bool:
    """Winograd for the eligible convolutions, unless DARKNUMBA_EXACT=1 (or
    DARKNUMBA_WINOGRAD=0) asks for the exact im2col + GEMM path everywhere; DARKNUMBA_EXACT
    wins over DARKNUMBA_WINOGRAD=1."""
    return (os.environ.get("DARKNUMBA_EXACT", "") not in ("", "0")
            or os.environ.get("DARKNUMBA_WINOGRAD", "") == "0")


def _with_inner(layers) -> list:
    """The layers and the layers inside them (a recurrent layer's, an antialiased layer's host
    and blur), each once."""
    out, seen = [], set()

    def visit(l):
        if id(l) in seen:
            return
        seen.add(id(l))
        out.append(l)
        for v in vars(l).values():
            for inner in (v if isinstance(v, list | tuple) else (v,)):
                if isinstance(inner, Layer):
                    visit(inner)

    for l in layers:
        visit(l)
    return out


@options_as_attributes
class Network:
    """The layers and the pass under way; the [net] options are `options` (NetOptions), each
    also read and written as an attribute of its own name (net.batch, net.learning_rate)."""

    def __init__(self):
        self.layers = []
        self.options = NetOptions()    # [net], with Darknet's defaults (parse_net_options)
        self.seen = 0
        self.t = 0
        self.quirks = quirks_for()     # named behaviours of the dialect x compat mode
        # False (the default): Winograd for the eligible 3x3 convolutions' forward and, in
        # training, their input gradient (layers/conv_winograd.py); True: every convolution
        # takes the exact im2col + GEMM path (exact_from_env). compat= modes are always exact
        self.exact = exact_from_env()
        self.dialect_reason = "the default"
        self.cfg_path = None
        self.allocated = True          # False: built for the layer table only (no buffers)
        # True: built for inference (memory.inference_only), what only training reads is not
        # allocated yet (prepare_training); built_bytes: what the build counted, of max_bytes
        self.inference_only = False
        self.built_bytes = 0
        self.max_bytes = memory.DEFAULT_MAX_BYTES
        # state of the pass under way (Darknet's `network` passed by value)
        self.input = None
        self.delta = None
        self.truth = None
        self.train = False
        self.index = 0
        self.workspace_floats = 1      # the largest workspace_size of the layers
        self.scratch = Scratch()
        self.cost = math.nan

    @property
    def compat(self) -> str | None:
        return self.quirks.compat

    @property
    def dialect(self) -> str:
        return self.quirks.dialect

    # -- sizes -------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.layers)

    def output_layer(self):
        """get_network_output_layer: the last layer that is not a [cost] layer."""
        for l in reversed(self.layers):
            if not l.is_cost_layer:
                return l
        return self.layers[-1]

    @property
    def outputs(self) -> int:
        return self.output_layer().outputs

    def truth_layers(self) -> list:
        """The layers that read the network's truth with a layout of their own (yolo, region,
        detection, iseg): the parser checks that they agree on its length."""
        return [l for l in self.layers if getattr(l, "truths", 0)]

    @property
    def truths(self) -> int:
        """Truth values per image: what the loss layers read (Darknet takes the last layer's;
        a network whose last layers come after its [yolo] heads reads theirs too), else the
        output layer's outputs (a classifier's one-hot vector, a [cost] target)."""
        readers = self.truth_layers()
        return readers[-1].truths if readers else self.output_layer().outputs

    def weights_changed(self):
        """Tell the layers that their parameters were written in place (by code other than
        update, load_weights or random_init, which tell them): what they derived from them
        (Winograd filters) is made anew."""
        for l in self.layers:
            changed = getattr(l, "weights_changed", None)
            if changed is not None:
                changed()

    def share_outputs(self):
        """At batch 1, the layers whose outputs a [route] only copies write into its output
        instead (route.share_outputs); run after every (re)allocation of the buffers."""
        share_outputs(self.layers)

    def prepare_training(self):
        """A network built for inference gets what training reads (deltas, weight gradients,
        batch norm's kept input...) now, all at once and within the memory limit, as
        AlexeyAB's parser allocates them when it builds for training (`train = 1`). Forward
        in train mode, backward and update call it; nothing to do after the first time."""
        if not self.inference_only:
            return
        layers = _with_inner(self.layers)
        need = sum(l.pending_bytes() for l in layers)
        limit = self.max_bytes
        if self.built_bytes + need > limit:
            raise memory.SizeError(
                f"{self.cfg_path or 'this network'}: training needs {memory.gib(need)} more "
                f"(deltas, weight gradients) than its {memory.gib(self.built_bytes)} for "
                f"inference, more than {memory.gib(limit)} in all ({memory.LIMITS}; a smaller "
                f"batch or input size takes less)")
        for l in layers:
            l.allocate_pending()
        self.inference_only = False

    @property
    def workspace(self) -> np.ndarray:
        """The im2col / col2im buffer the layers share, as large as the largest one's
        workspace_size (AlexeyAB's get_workspace_size): the first part of the scratch arena
        (Scratch.parts), which a convolution's batched or Winograd step uses at other times;
        read it at the start of a layer's pass, valid until the next parts call. Its values
        are left over from earlier passes: every user writes before it reads (im2col)."""
        return self.scratch.parts(self.workspace_floats)[0]

    def alloc_workspace(self):
        """The shared workspace's size (get_workspace_size), and which Winograd layers keep
        their transformed filters at inference (conv_plan.winograd_cached; a layer that no
        longer keeps them drops them): both follow the layers' sizes."""
        self.workspace_floats = max([l.workspace_size for l in self.layers] + [1])
        mark_winograd_kept(self.layers)

    # -- input checks ------------------------------------------------------------------------
    def require_buffers(self, what: str):
        if not self.allocated:
            raise DarknumbaError(
                f"cannot {what}: {self.cfg_path or 'this network'} was built for its layer table "
                f"only (allocate=False), its layers have no buffers or weights; build it with "
                f"parse_network_cfg(..., allocate=True) or load_network to run it")

    def _as_input(self, x) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        expected = self.batch * self.inputs
        if x.size != expected:
            raise DarknumbaError(
                f"network input has {x.size} values, expected batch x c x h x w = "
                f"{self.batch} x {self.c} x {self.h} x {self.w} = {expected}"
                + ("" if x.size % self.inputs else
                   f" (got {x.size // self.inputs} images: load the network with batch="
                   f"{x.size // self.inputs})"))
        return x

    def _as_truth(self, truth) -> np.ndarray | None:
        if truth is None:
            return None
        t = np.ascontiguousarray(truth, dtype=np.float32).reshape(-1)
        expected = self.batch * self.truths
        if t.size != expected:
            raise DarknumbaError(f"truth has {t.size} values, expected batch x truths = "
                                 f"{self.batch} x {self.truths} = {expected}")
        return t

    # -- the verbs ---------------------------------------------------------------------------
    def forward(self, x, train: bool = False, truth=None) -> np.ndarray:
        """forward_network: fills every layer's output; returns the output layer's output."""
        self.require_buffers("run forward")
        if train:
            self.prepare_training()
        self.input = self._as_input(x)
        self.truth = self._as_truth(truth)
        self.train = bool(train)
        self._input0 = self.input
        for i, l in enumerate(self.layers):
            self.index = i
            if self.train:
                zero_delta(l.delta)
            l.forward(self)
            self.input = l.output
            if getattr(l, "truth", 0):         # truth=1: this layer's output is the truth
                self.truth = l.output
        costs = [l.cost for l in self.layers if l.cost is not None]
        self.cost = float(np.float32(sum(costs) / len(costs))) if costs and self.truth is not None \
            else math.nan
        return self.output_layer().output

    def predict(self, x) -> np.ndarray:
        """network_predict: test-mode forward; a copy of the output layer's output, shaped
        (batch, out_c, out_h, out_w) for image outputs, else (batch, outputs)."""
        out = self.forward(x, train=False)
        l = self.output_layer()
        if l.out_c and l.out_h and l.out_w and l.out_c * l.out_h * l.out_w == l.outputs:
            return out.reshape(l.batch, l.out_c, l.out_h, l.out_w).copy()
        return out.reshape(l.batch, l.outputs).copy()

    def backward(self, delta=None, after_layer=None):
        """backward_network. Layer 0 gets `delta` as its net.delta (Darknet's network-level
        delta): None during training, so no input gradient is computed; a float32 buffer of
        batch*inputs receives the gradient w.r.t. the network input (added into it).
        after_layer(i), when given, is called once layer i's backward is done (data-parallel
        training starts the allreduce of the gradients that are final from there)."""
        self.require_buffers("run backward")
        self.prepare_training()
        for i in range(self.n - 1, -1, -1):
            l = self.layers[i]
            if getattr(l, "stopbackward", 0):
                break
            if i == 0:
                self.input, self.delta = self._input0, delta
            else:
                prev = self.layers[i - 1]
                self.input, self.delta = prev.output, prev.delta
            self.index = i
            if not (getattr(l, "onlyforward", 0) and self.quirks.onlyforward_skips_backward):
                l.backward(self)
            if after_layer is not None:
                after_layer(i)

    def update(self):
        """update_network"""
        self.require_buffers("update")
        self.prepare_training()
        self.t += 1
        a = UpdateArgs(batch=self.batch * self.subdivisions, learning_rate=self.current_rate(),
                       momentum=self.momentum, decay=self.decay, adam=self.adam,
                       B1=self.B1, B2=self.B2, eps=self.eps, t=self.t)
        for l in self.layers:
            if not skips_update(l, self.quirks):
                l.update(a)

    def train_datum(self, x, truth) -> float:
        """train_network_datum: seen += batch first; forward (train), backward; update only
        when (seen / batch) % subdivisions == 0. Returns the mean cost of the loss layers."""
        self.seen += self.batch
        self.forward(x, train=True, truth=truth)
        self.backward()
        err = self.cost
        if (self.seen // self.batch) % self.subdivisions == 0:
            self.update()
        return err

    def reset_state(self, b: int):
        """reset_network_state: the recurrent layers forget sequence b's carried state (as
        Darknet's GPU build does; its CPU build does nothing)."""
        per_step = self.batch // self.time_steps
        if not 0 <= b < per_step:
            raise DarknumbaError(f"reset_state: sequence {b} outside 0..{per_step - 1}")
        for l in self.layers:
            l.reset_state(b)

    # -- learning rate -----------------------------------------------------------------------
    def current_batch(self) -> int:
        return self.seen // (self.batch * self.subdivisions)

    def current_rate(self) -> float:
        """get_current_rate: float32 operands, the power/exp taken in double and the result
        rounded to float32 once, as Darknet computes it; after burn_in, the policy's rule
        (RATE_POLICIES)."""
        b = self.current_batch()
        if b < self.burn_in:
            lr = float(np.float32(self.learning_rate))
            power = float(np.float32(self.power))
            return float(np.float32(lr * math.pow(float(np.float32(b) / np.float32(self.burn_in)),
                                                  power)))
        return RATE_POLICIES[self.policy](self, b)

    # -- shape changes -----------------------------------------------------------------------
    def resize(self, w: int, h: int):
        """resize_network: new input size, every layer's buffers reallocated to fit."""
        self.require_buffers("resize")
        self.w, self.h = w, h
        c = self.c
        with memory.inference_only(self.inference_only):
            for i, l in enumerate(self.layers):
                l.resize_in(self.layers[:i], w, h)
                w, h = l.out_w, l.out_h
        self.inputs = self.w * self.h * c
        self.alloc_workspace()
        self.share_outputs()

    # -- reporting ---------------------------------------------------------------------------
    def summary(self, file=None) -> str:
        """Darknet's layer table, as `parse_network_cfg` prints it to stderr."""
        lines = ["layer     filters    size              input                output"]
        for i, l in enumerate(self.layers):
            lines.append(f"{i:5d} {l.describe()}")
        total = sum(l.bflops for l in self.layers)
        lines.append(f"Total BFLOPs {total:.3f}")
        text = "\n".join(lines)
        if file is not None:
            print(text, file=file)
        return text
