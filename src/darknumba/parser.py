"""Build a Network from a .cfg (Darknet's `parse_network_cfg`), and load_network."""
from __future__ import annotations

import contextlib
import logging
import os
import warnings

import numpy as np

from .cfg import Section, read_cfg
from .dialect import DEFAULT_QUIRKS, Quirks, choose_dialect, quirks_for
from .errors import CfgError, CfgWarning, WeightsWarning
from .layers import LAYER_TYPES
from .layers import memory
from .layers.base import SizeParams
from .net_options import NetOptions
from .network import POLICIES, Network


def _warn_unused(s: Section):
    for key in s.unused():
        warnings.warn(CfgWarning(f"{s.path}:{s.lines[key]}: [{s.type}] unused field "
                                 f"'{key} = {s.options[key]}'"), stacklevel=3)


def parse_net_options(s: Section, net: Network, batch: int | None,
                      time_steps: int | None = None, quirks: Quirks = DEFAULT_QUIRKS):
    """parse_net_options, with the range of every number checked (Darknet takes a negative
    batch, a NaN learning rate or time_steps=0 and fails later, or never). time_steps, if
    given, replaces the cfg's (one step at a time to generate from a network trained on
    many); under quirks.batch_sets_one_time_step a given batch brings time_steps 1 with it
    unless time_steps is given too, and is raised to time_steps. The values go to
    net.options, a NetOptions."""
    net.options = o = NetOptions()
    o.batch = s.find_int("batch", 1)
    o.learning_rate = s.find_float("learning_rate", 0.001, at_least=0)
    o.momentum = s.find_float("momentum", 0.9, at_least=0, below=1)
    o.decay = s.find_float("decay", 0.0001, at_least=0)
    subdivs = s.find_int("subdivisions", 1, at_least=1)
    o.time_steps = s.find_int("time_steps", 1, at_least=1)
    if time_steps is None and batch is not None and quirks.batch_sets_one_time_step:
        time_steps = 1
    if time_steps is not None:
        o.time_steps = int(time_steps)
    s.find_int("notruth", 0)
    o.batch //= subdivs
    o.batch *= o.time_steps
    o.subdivisions = subdivs
    if batch is not None:
        o.batch = int(batch)          # set_batch_network: the update still divides by cfg batch
    if o.batch < 1:
        raise s.error("batch", f"batch / subdivisions must be at least 1 "
                               f"(batch={s.options.get('batch')}, subdivisions={subdivs})")
    if batch is not None and quirks.batch_sets_one_time_step:
        o.batch = max(o.batch, o.time_steps)
    o.random = s.find_int("random", 0)
    o.adam = bool(s.find_int("adam", 0))
    if o.adam:
        # Adam divides by 1 - B^t and by sqrt(v) + eps, in float32
        o.B1 = s.find_float("B1", 0.9, at_least=0, below=1)
        o.B2 = s.find_float("B2", 0.999, at_least=0, below=1)
        o.eps = s.find_float("eps", 0.0000001, above=0)
        for key, v in (("B1", o.B1), ("B2", o.B2)):
            if np.float32(v) >= 1:
                raise s.error(key, f"{v} rounds to 1 in float32; expected 0 <= {key} < 1")
        if np.float32(o.eps) <= 0:
            raise s.error("eps", f"{o.eps} rounds to 0 in float32; expected eps > 0")
    o.h = s.find_int("height", 0, at_least=0)
    o.w = s.find_int("width", 0, at_least=0)
    o.c = s.find_int("channels", 0, at_least=0)
    o.inputs = s.find_int("inputs", o.h * o.w * o.c, at_least=0)
    o.max_crop = s.find_int("max_crop", o.w * 2, at_least=0)
    o.min_crop = s.find_int("min_crop", o.w, at_least=0)
    for key in ("max_ratio", "min_ratio", "clip"):
        s.find_float(key, 0, at_least=0)
    s.find_int("center", 0)
    o.angle = s.find_float("angle", 0)
    o.aspect = s.find_float("aspect", 1, above=0)
    o.saturation = s.find_float("saturation", 1, above=0)
    o.exposure = s.find_float("exposure", 1, above=0)
    o.hue = s.find_float("hue", 0, at_least=0)
    if not o.inputs and not (o.h and o.w and o.c):
        raise s.error(None, "no input size: set width, height and channels (or inputs)")
    o.policy = policy_name(s, net.quirks)
    o.burn_in = s.find_int("burn_in", 0, at_least=0)
    o.power = s.find_float("power", 4)
    if o.policy == "step":
        o.step = s.find_int("step", 1, at_least=1)
        o.scale = s.find_float("scale", 1, at_least=0)
    elif o.policy == "steps" or (o.policy == "sgdr" and s.has("steps")):
        if o.policy == "steps" and (not s.has("steps") or not s.has("scales")):
            raise s.error(None, "policy=steps needs both steps= and scales=")
        o.steps = s.find_list("steps", int)
        # AlexeyAB's sgdr reads steps (for seq_scales) with scales optional: 1.0 each
        o.scales = s.find_list("scales", float) if s.has("scales") else [1.0] * len(o.steps)
        if len(o.scales) < len(o.steps):
            raise s.error("scales", f"{len(o.steps)} steps need {len(o.steps)} scales, "
                                    f"found {len(o.scales)}")
        if any(v < 0 for v in o.scales):
            raise s.error("scales", f"expected scales >= 0, found {o.scales}")
    elif o.policy == "exp":
        o.gamma = s.find_float("gamma", 1, at_least=0)
    elif o.policy == "sig":
        o.gamma = s.find_float("gamma", 1)
        o.step = s.find_int("step", 1)
    o.max_batches = s.find_int("max_batches", 0, at_least=0)
    if o.policy == "poly" and o.max_batches <= 0:
        raise s.error("max_batches", "policy=poly needs max_batches > 0")


# The cfg names of the rate policies, by Quirks.policy_sigmoid_sgdr (AlexeyAB says "sigmoid"
# and adds "sgdr")
POLICY_NAMES = {False: {p: p for p in POLICIES if p != "sgdr"},
                True: {**{p: p for p in POLICIES if p != "sig"}, "sigmoid": "sig"}}


def policy_name(s: Section, quirks: Quirks) -> str:
    name = s.find_str("policy", "constant")
    names = POLICY_NAMES[quirks.policy_sigmoid_sgdr]
    if name in names:
        return names[name]
    hint = ""
    if quirks.policy_sigmoid_sgdr and name == "sig":
        hint = " (AlexeyAB's Darknet calls it 'sigmoid'; with 'sig' it falls back to constant)"
    elif not quirks.policy_sigmoid_sgdr and name in ("sigmoid", "sgdr"):
        hint = " (that is AlexeyAB's name: --dialect alexeyab)"
    raise s.error("policy", f"unknown policy {name!r}{hint}; expected one of "
                            f"{', '.join(names)}")


def parse_ab_net_options(s: Section, net: Network):
    """The [net] keys only AlexeyAB's parse_net_options reads, with its defaults: kept on the
    network (augmentation and schedule keys are used by training; letter_box by detection)."""
    o = net.options
    if o.adam and not s.has("eps"):
        o.eps = 0.000001                      # AlexeyAB's default (pjreddie 1e-7)
    ints = {"flip": 1, "blur": 0, "gaussian_noise": 0, "mixup": 0, "cutmix": 0, "mosaic": 0,
            "letter_box": 0, "mosaic_bound": 0, "contrastive": 0, "contrastive_jit_flip": 0,
            "contrastive_color": 0, "unsupervised": 0, "attention": 0, "track": 0,
            "augment_speed": 2, "try_fix_nan": 0, "weights_reject_freq": 0,
            "equidistant_point": 0, "use_cuda_graph": 0, "dynamic_minibatch": 0,
            "optimized_memory": 0, "sgdr_mult": 2,
            "sequential_subdivisions": o.subdivisions, "sgdr_cycle": o.max_batches}
    floats = {"learning_rate_min": 0.00001, "ema_alpha": 0.0, "label_smooth_eps": 0.0,
              "resize_step": 32.0, "adversarial_lr": 0.0, "max_chart_loss": 20.0,
              "loss_scale": 1.0, "badlabels_rejection_percentage": 0.0,
              "num_sigmas_reject_badlabels": 0.0, "workspace_size_limit_MB": 1024.0}
    for key, default in ints.items():
        setattr(net, key, s.find_int(key, default))
    for key, default in floats.items():
        setattr(net, key.lower(), s.find_float(key, default))
    o.sequential_subdivisions = min(o.sequential_subdivisions, o.subdivisions)
    o.seq_scales = s.find_list("seq_scales", float) if s.has("seq_scales") else []


def _generic_options(s: Section, l):
    """Options every section may carry (read after the layer's own, as Darknet does)."""
    l.truth = s.find_int("truth", 0)
    l.onlyforward = s.find_int("onlyforward", 0)
    l.stopbackward = s.find_int("stopbackward", 0)
    l.dontsave = bool(s.find_int("dontsave", 0))
    l.dontload = bool(s.find_int("dontload", 0))
    l.numload = s.find_int("numload", 0, at_least=0)
    l.dontloadscales = bool(s.find_int("dontloadscales", 0))
    l.learning_rate_scale = s.find_float("learning_rate", 1.0, at_least=0)
    l.smooth = s.find_float("smooth", 0.0)


def init_weights(net: Network, seed: int = 0, start: int = 0):
    """Darknet's random initialisation (each layer's random_init) of layers [start, n), seeded."""
    rng = np.random.default_rng([seed, 1])
    for l in net.layers[start:]:
        l.random_init(rng)


log = logging.getLogger("darknumba")


def _build_layers(net: Network, sections: list[Section], path: str, b: memory.MemoryBudget):
    """parse_network_cfg's loop: each section's layer sized from the one before it."""
    h, w, c, inputs = net.h, net.w, net.c, net.inputs
    first_loss = None                # (index, truth values per image) of the first yolo/region
    for index, s in enumerate(sections):
        if s.type in ("net", "network"):
            raise CfgError(f"{s.where()}: a second [net] section (layer {index})")
        cls = LAYER_TYPES.get(s.type)
        if cls is None:
            known = ", ".join(sorted(set(LAYER_TYPES)))
            raise CfgError(f"{s.where()}: unknown section type [{s.type}] (layer {index}); "
                           f"supported: {known}")
        params = SizeParams(batch=net.batch, h=h, w=w, c=c, inputs=inputs, index=index, net=net,
                            path=path)
        b.start_layer()
        try:
            l = cls.from_cfg(s, params)
            b.take_workspace(4 * l.workspace_size)
        except memory.SizeError as e:
            raise CfgError(f"{s.where()}: layer {index}: {e}") from None
        l.quirks = net.quirks                        # every layer: the network's behaviours
        if l.detector_head:
            # one truth buffer feeds every loss layer (Darknet sizes it once, from one layer:
            # another length would read past it)
            if first_loss is None:
                first_loss = (index, l.truths)
            elif l.truths != first_loss[1]:
                raise CfgError(f"{s.where('max')}: layer {index} reads {l.truths} truth values "
                               f"per image, layer {first_loss[0]} {first_loss[1]}: every "
                               f"[yolo]/[region] layer of a network must take the same max= "
                               f"boxes")
        _generic_options(s, l)
        _warn_unused(s)
        net.layers.append(l)
        h, w, c, inputs = l.out_h, l.out_w, l.out_c, l.outputs


def parse_network_cfg(path, batch: int | None = None, compat: str | None = None,
                      seed: int | None = 0, dialect: str | None = None,
                      weights_version: tuple | None = None, max_bytes: int | None = None,
                      allocate: bool = True, time_steps: int | None = None,
                      train: bool | None = None) -> Network:
    """Read a .cfg and build every layer with the shapes Darknet computes; weights start
    from Darknet's random initialisation with `seed` (None: left at zero).

    dialect: "pjreddie" or "alexeyab"; None chooses (see dialect.choose_dialect: the cfg's
    AlexeyAB-only sections and keys, then `weights_version`, the header of the .weights
    about to be loaded). net.dialect and net.dialect_reason say which and why.

    Every layer's buffers are counted before they are allocated: a layer that would take more
    than max_bytes / 4, or a network more than max_bytes (default 16 GiB, or
    DARKNUMBA_MAX_GIB), is a CfgError naming the layer and the bytes.

    train=False builds for inference, as AlexeyAB's parse_network_cfg_custom does at a given
    batch: what only training reads (deltas, weight gradients, batch norm's kept input) is
    neither counted nor allocated until training first needs it (Network.prepare_training);
    None (the default): for inference when `batch` is given, for training when it is the cfg's.

    allocate=False builds the layer table alone (shapes, BFLOPs): no buffer gets memory, the
    weights stay unset, and the network refuses to run. time_steps replaces the cfg's."""
    path = os.fspath(path)
    sections = read_cfg(path)
    dialect, reason = choose_dialect(sections, dialect, weights_version)
    quirks = quirks_for(dialect, compat)
    log.info("dialect: %s (%s)", dialect, reason)
    first = sections[0]
    if first.type not in ("net", "network"):
        raise CfgError(f"{path}:{first.line}: the first section must be [net] or [network], "
                       f"found [{first.type}]")
    net = Network()
    net.cfg_path = path
    net.quirks = quirks
    net.dialect_reason = reason
    parse_net_options(first, net, batch, time_steps, quirks)
    if quirks.net_ab_keys:
        parse_ab_net_options(first, net)
    _warn_unused(first)
    if len(sections) == 1:
        raise CfgError(f"{path}: no layers after [net]")
    inference = batch is not None if train is None else not train
    with memory.budget(max_bytes or memory.max_bytes_from_env()) as b, \
            (contextlib.nullcontext() if allocate else memory.shapes_only()), \
            memory.inference_only(inference):
        _build_layers(net, sections[1:], path, b)
        if net.inputs == 0:
            net.inputs = net.layers[0].inputs
    net.inference_only = inference and allocate
    net.built_bytes, net.max_bytes = b.total + b.workspace, b.max_total
    if not allocate:
        net.allocated = False
        return net
    net.alloc_workspace()
    net.share_outputs()
    if seed is not None:
        init_weights(net, seed)
    return net


def load_network(cfg, weights=None, batch: int | None = None, compat: str | None = None,
                 clear: bool = False, dialect: str | None = None,
                 time_steps: int | None = None, exact: bool | None = None,
                 train: bool | None = None) -> Network:
    """Darknet's `load_network`: parse the cfg, load weights if given (keeping their `seen`
    unless `clear`), else Darknet's random initialisation. batch=None keeps the cfg's
    batch/subdivisions (x time_steps: the cfg's, or these). Weights holding NaN or Inf give
    one WeightsWarning naming the layers. exact=False lets the large 3x3 stride-1
    convolutions take Winograd (their forward and, in training, their input gradient); True
    keeps every one on im2col + GEMM, as Darknet computes them; None: the environment decides
    (Winograd unless DARKNUMBA_EXACT=1). compat= is always exact. train: as in
    parse_network_cfg (None: built for inference when `batch` is given; training allocates
    what it needs when it starts)."""
    from .weights import describe_nonfinite, load_weights, nonfinite_layers, peek_version
    net = parse_network_cfg(cfg, batch=batch, compat=compat, seed=None if weights else 0,
                            dialect=dialect, time_steps=time_steps, train=train,
                            weights_version=peek_version(weights) if weights else None)
    if weights is not None:
        load_weights(net, weights)
        bad = nonfinite_layers(net)
        if bad:
            warnings.warn(WeightsWarning(f"{os.fspath(weights)}: NaN or Inf weights in "
                                         f"{describe_nonfinite(bad)}: outputs will be NaN "
                                         f"(saved by a diverged run?)"), stacklevel=2)
    if clear:
        net.seen = 0
    if exact is not None:
        net.exact = bool(exact)
    return net
