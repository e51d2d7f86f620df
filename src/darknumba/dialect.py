"""Named behaviours: where Darknet builds compute differently, as fields of one frozen object.

A network is built for a *dialect* (whose Darknet it follows: pjreddie's, or AlexeyAB's fork)
and an optional *compat* mode (reproduce a C build's bugs too). Layers never compare strings:
they read the named fields of ``net.quirks``, made once by :func:`quirks_for`.
"""
from __future__ import annotations

from dataclasses import dataclass

PJREDDIE, ALEXEYAB = DIALECTS = ("pjreddie", "alexeyab")
DEFAULT_DIALECT = PJREDDIE      # what a network follows when nothing says otherwise
COMPAT_MODES = (None, "darknet-cpu")

# What AlexeyAB's parser reads and pjreddie's does not (parser.c of each, section by section):
# a cfg that uses any of these is written for AlexeyAB's Darknet.
AB_ONLY_SECTIONS = frozenset({
    "gaussian_yolo", "contrastive", "conv_lstm", "empty", "history", "implicit", "local_avg",
    "local_avgpool", "reorg3d", "sam", "scale_channels", "silence"})
AB_ONLY_KEYS = {
    "net": {"adversarial_lr", "attention", "augment_speed", "badlabels_rejection_percentage",
            "blur", "contrastive", "contrastive_color", "contrastive_jit_flip", "cutmix",
            "dynamic_minibatch", "ema_alpha", "equidistant_point", "flip", "gaussian_noise",
            "label_smooth_eps", "learning_rate_min", "letter_box", "loss_scale",
            "max_chart_loss", "mixup", "mosaic", "mosaic_bound", "num_sigmas_reject_badlabels",
            "optimized_memory", "resize_step", "seq_scales", "sequential_subdivisions",
            "sgdr_cycle", "sgdr_mult", "track", "try_fix_nan", "unsupervised", "use_cuda_graph",
            "weights_reject_freq", "workspace_size_limit_mb"},
    "convolutional": {"angle", "antialiasing", "assisted_excitation", "bin_output", "cbn",
                      "coordconv", "dilation", "grad_centr", "reverse", "rotate", "share_index",
                      "stream", "stretch", "stretch_sway", "stride_x", "stride_y", "sway",
                      "wait_stream"},
    "maxpool": {"antialiasing", "maxpool_depth", "maxpool_zero_nonmax", "out_channels",
                "stride_x", "stride_y"},
    "route": {"groups", "group_id", "stream", "wait_stream"},
    "shortcut": {"weights_normalization", "weights_type"},
    "yolo": {"beta_nms", "cls_normalizer", "counters_per_class", "delta_normalizer",
             "dets_for_show", "dets_for_track", "embedding_layer", "focal_loss", "iou_loss",
             "iou_normalizer", "iou_thresh", "iou_thresh_kind", "label_smooth_eps", "max_delta",
             "new_coords", "nms_kind", "obj_normalizer", "objectness_smooth", "resize",
             "scale_x_y", "show_details", "sim_thresh", "track_ciou_norm",
             "track_history_size"},
    "region": {"focal_loss", "resize"},
    "detection": {"resize"},
    "dropout": {"dropblock", "dropblock_size_abs", "dropblock_size_rel"},
    "crnn": {"dilation", "groups", "hidden", "output", "pad", "padding", "size", "stride",
             "xnor"},
    "rnn": {"hidden", "logistic"},
    "*": {"burnin_update", "dont_update", "show_receptive_field", "train_only_bn"},
}
AB_ONLY_ACTIVATIONS = frozenset({
    "mish", "hard_mish", "swish", "relu6", "gelu", "normalize_channels",
    "normalize_channels_softmax", "normalize_channels_softmax_maxval", "revleaky"})
# section aliases both parsers accept, by the name the tables above use
SECTION_ALIASES = {"conv": "convolutional", "max": "maxpool", "network": "net",
                   "local_avg": "local_avgpool", "avg": "avgpool", "conn": "connected",
                   "soft": "softmax"}


@dataclass(frozen=True)
class Defaults:
    """What a dialect's commands use when the user gives no option: each field follows one line
    of that Darknet's C source (docs/alexeyab-defaults.md names the file, function and
    expression). An option the user gives always wins."""
    # -- detection: `detect`, `detector test`, `detector demo` -------------------------------------
    detect_thresh: float            # `detect`: darknet.c main(), -thresh
    test_thresh: float              # `detector test|demo`: run_detector(), -thresh
    # letterbox the image to the network (pjreddie's test_detector always does); False: stretch
    # it (AlexeyAB's resize_image), unless [net] letter_box=1 or -letter_box
    letterbox: bool
    hier_thresh: float = 0.5        # run_detector() -hier; `detect` passes .5
    nms: float = 0.45               # test_detector(): nms = .45
    # -- evaluation: `detector valid`, `recall`, `map` ---------------------------------------------
    valid_thresh: float = 0.005     # validate_detector(): thresh
    valid_nms: float = 0.45         # validate_detector(): nms
    recall_thresh: float = 0.001    # validate_detector_recall(): thresh (both)
    recall_nms: float = 0.4         # validate_detector_recall(): nms (both)
    recall_iou_thresh: float = 0.5  # validate_detector_recall(): iou_thresh (both)
    map_thresh: float = 0.25        # `map` and -map: run_detector()'s -thresh (AlexeyAB's)
    map_iou_thresh: float = 0.5     # run_detector() -iou_thresh
    map_points: int = 0             # run_detector() -points: 0 = area under the curve
    map_det_thresh: float = 0.005   # validate_detector_map(): thresh (the candidates kept)
    map_nms: float = 0.45           # validate_detector_map(): nms
    # -- training checkpoints ----------------------------------------------------------------------
    # pjreddie (train_detector): <cfg>.backup every `backup_every`; <cfg>_<i>.weights every
    # `weights_every` below `weights_until`, then every `weights_every_after`
    backup_every: int = 100
    weights_every: int = 100
    weights_until: int = 1000
    weights_every_after: int = 10000
    # AlexeyAB (train_detector): <cfg>_last.weights every `save_last` (.data savelast=);
    # <cfg>_<i>.weights every `save_weights` (.data saveweights=), `save_weights_large` when
    # max_batches >= `save_weights_large_from`
    save_last: int = 100
    save_weights: int = 1000
    save_weights_large: int = 10000
    save_weights_large_from: int = 10000
    # -map: every max(map_epochs x train images / batch, map_min_every) iterations, not before
    # burn_in, and at max_batches
    map_epochs: int = 4             # run_detector() -mAP_epochs
    map_min_every: int = 100        # train_detector(): fmax(calc_map_for_each, 100)
    # EMA (ema_alpha > 0, train_network_waitkey): from max_batches // ema_start_divisor, applied
    # at max_batches - ema_apply_before_end
    ema_start_divisor: int = 2
    ema_apply_before_end: int = 1000
    # -- `rnn train` (train_char_rnn) -----------------------------------------------------------
    rnn_reset_odds: int = 64        # a stream jumps to a random offset once in this many data
    rnn_checkpoint_every: int = 10000   # <cfg>_<i>.weights
    rnn_backup_every: int = 100     # <cfg>.backup


# whose defaults, by dialect (docs/alexeyab-defaults.md: the C line of every field)
DEFAULTS = {
    "pjreddie": Defaults(detect_thresh=0.5, test_thresh=0.5, letterbox=True),
    "alexeyab": Defaults(detect_thresh=0.24, test_thresh=0.25, letterbox=False,
                         valid_thresh=0.001, valid_nms=0.6, rnn_reset_odds=10,
                         rnn_checkpoint_every=1000, rnn_backup_every=10),
}


TITLES = {PJREDDIE: "pjreddie's", ALEXEYAB: "AlexeyAB's"}


def defaults_for(dialect: str | None = None) -> Defaults:
    """The command defaults of `dialect` ("pjreddie" when None)."""
    dialect = dialect or DEFAULT_DIALECT
    if dialect not in DEFAULTS:
        raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}, not {dialect!r}")
    return DEFAULTS[dialect]


@dataclass(frozen=True)
class Quirks:
    dialect: str = "pjreddie"
    compat: str | None = None

    # -- pjreddie's CPU build, reproduced only under compat="darknet-cpu" ----------------------
    # a 1x1 convolution's backward writes its input gradient with beta = 0, overwriting what a
    # later layer (e.g. a shortcut) already added to the previous layer's delta
    delta_overwrite_1x1: bool = False
    # a 1x1 convolution with stride > 1 multiplies the first out_h*out_w input pixels
    strided_1x1_misread: bool = False
    # [activation], [batchnorm], [normalization], [reorg] copy their delta over the previous
    # layer's instead of adding to it (both dialects' C code)
    overwrite_delta: bool = False
    # a [batchnorm] layer's scales and biases are never updated (pjreddie's CPU build has no
    # update for it; AlexeyAB's has)
    batchnorm_layer_not_updated: bool = False
    # pjreddie's CPU [region] backward passes no gradient to the layer below (its GPU build does)
    region_no_backward: bool = False
    # [rnn]'s CPU backward hands the input layer the self layer's delta after act' and batch
    # norm backward (exact only for linear activations without batch norm)
    rnn_late_delta: bool = False
    # batch mean then variance in two float32 passes (the variance subtracts the float32 mean)
    two_pass_bn_stats: bool = False
    # adam=1 is read but the CPU update is always SGD
    adam_ignored: bool = False
    # the sig policy's `batch_num - step` is unsigned: before `step` it wraps round
    sig_unsigned_wrap: bool = False

    # -- AlexeyAB's CPU build, reproduced only under compat="darknet-cpu" -----------------------
    # a convolution's backward (col2im_cpu_ext) zeroes its input delta before adding into it,
    # dropping what later layers (a route, a shortcut) already passed to that layer
    col2im_zeroes_delta: bool = False
    # [sam]'s backward writes the `from` layer's delta with `=` (its GPU code adds)
    sam_overwrites_from_delta: bool = False
    # activate() and gradient() have no case for AlexeyAB's relu6, swish, mish and hard_mish:
    # they return 0. Every layer's CPU activation of relu6 goes through activate() (output 0);
    # swish, mish and hard_mish reach it only in [activation] (output 0, gradient 0: its GPU
    # kernels lack them too), as [convolutional] and [shortcut] call their own functions
    activate_lacks_ab_cases: bool = False
    # forward_contrastive_layer never writes the [contrastive] output (zeros); its GPU
    # forward copies the input there
    contrastive_output_zero: bool = False
    # xnor layers (layers/xnor.py): its bit-packed inference computes only the batch's first
    # image, and with c % 32 != 0 packs no input bit unless the layer is 3x3 stride 1 pad 1; its
    # float way (training, inference before calculate_binary_weights) binarises each filter
    # over l.nweights values, past the end of the weights: no defined result, an error here
    xnor_cpu_bugs: bool = False
    # [region] as AlexeyAB's region_layer.c (layers/region_ab.py): the output kept flattened,
    # [cell][anchor][4 + 1 + classes], only objectness and classes activated, its loss (the
    # logistic's derivative inside the deltas, classfix, focal_loss), its detections
    # (objectness 1) and 200 truths of 6 values. Both of AlexeyAB's builds compute this (its GPU
    # forward flattens too), so it is the alexeyab dialect's [region], with or without compat
    region_alexeyab: bool = False

    # -- what the dialects compute differently ---------------------------------------------------
    # batch norm forward: pjreddie (x - m) / (sqrt(v) + 1e-6); AlexeyAB (x - m) / sqrt(v + 1e-5)
    bn_epsilon_inside_sqrt: bool = False
    # batch norm backward: 1 / sqrt(v + 1e-5), as both forks' GPU builds (cuDNN) and pjreddie's
    # CPU. AlexeyAB's CPU normalize_delta_cpu alone divides by sqrt(v) + 1e-5 (its mean and
    # variance deltas keep the epsilon inside): under alexeyab + compat="darknet-cpu" only, as
    # with zero variance (a flat image) it multiplies the delta by 1e5 in every layer
    bn_delta_eps_outside_sqrt: bool = False
    # rolling statistics: rolling = m * rolling + (1 - m) * batch statistic
    bn_rolling_momentum: float = 0.99
    # AlexeyAB's CPU backward_batchnorm_layer leaves bias_updates alone (its GPU one adds the
    # delta's sum): under alexeyab + compat="darknet-cpu" a batch-norm layer's biases never learn
    bn_bias_not_updated: bool = False
    # AlexeyAB's CPU antialiased layers have no blur backward: the next layer's gradient, in
    # the blurred layout, fills the start of the host-sized delta and is read as the host's
    antialias_no_blur_backward: bool = False
    # AlexeyAB's make_implicit_layer leaves l.train = 0, so update_network skips [implicit]:
    # its weights never learn
    implicit_not_updated: bool = False
    # the same for [connected], [deconvolutional], [local], [rnn], [gru] and [lstm], whose
    # make_*_layer leave l.train = 0 too: update_network (and update_network_gpu) skip them, so
    # they never learn in either of AlexeyAB's builds (a bug: reproduced under compat only)
    train_unset_not_updated: bool = False
    # .weights header written on save: (major, minor, revision)
    weights_version: tuple = (0, 2, 0)
    # [yolo] follows AlexeyAB's yolo_layer.c (layers/yolo_ab.py): its keys and defaults (max=200
    # truths of 6 values, iou_normalizer 0.75, ...), logistic in float, scale_x_y, new_coords,
    # its detections, NMS kinds and loss (iou_loss, ignore rule, iou_thresh, ...); without it
    # AlexeyAB's [yolo] keys are refused
    yolo_alexeyab: bool = False
    # [net] reads AlexeyAB's own keys too (parser.parse_ab_net_options: augmentation, ema,
    # letter_box, resize_step, ...)
    net_ab_keys: bool = False
    # policy= names: AlexeyAB's parser says "sigmoid" (not "sig") and adds "sgdr"
    policy_sigmoid_sgdr: bool = False
    # `partial` reads only the layers it keeps (AlexeyAB's load_weights_upto with a cutoff),
    # so the cfg may have another head; pjreddie's loads the whole file first
    partial_reads_kept_layers: bool = False
    # `detector train` follows AlexeyAB's train_detector: its augmentation, multi-scale rule,
    # checkpoint names and cadence (.data savelast/saveweights), EMA and progress line
    train_detector_alexeyab: bool = False
    # `rnn train` prints AlexeyAB's header (global_batch, text_size); `rnn valid` prints no BPC
    char_rnn_alexeyab: bool = False
    # `detect`/`detector test` print boxes as AlexeyAB's draw_detections_v3 does
    print_detections_v3: bool = False
    # a batch the caller sets (--batch, batch=1 to run an image) comes with time_steps 1, as
    # AlexeyAB's detector, demo, partial, rnn generate and load_network_custom call
    # parse_network_cfg_custom(cfg, batch, 1); with time_steps set too, a batch below it is
    # raised to it (parse_network_cfg_custom). pjreddie's keeps the cfg's time_steps, so a
    # [crnn] cfg with time_steps > 1 does not build at batch 1
    batch_sets_one_time_step: bool = False
    # [crnn] reads AlexeyAB's keys (output, hidden, size, pad/padding, dilation, groups);
    # pjreddie's reads output_filters and hidden_filters and always convolves 3x3 with pad 1
    crnn_alexeyab_keys: bool = False
    # backward_network passes over a layer with onlyforward=1 (pjreddie's runs its backward)
    onlyforward_skips_backward: bool = False
    # xnor=1: groups forced to 1 (make_convolutional_layer), and calculate_binary_weights (its
    # detector test, demo, map, classifier predict) switches inference to the bit-packed GEMM
    xnor_bits: bool = False

    @property
    def stb_jpeg(self) -> bool:
        """JPEG files are decoded by the stb_image port (vision/stb_jpeg.py: the C builds'
        decoder, their pixels to the byte) rather than Pillow's libjpeg-turbo, which rounds
        differently: under compat="darknet-cpu", either dialect."""
        return self.compat == "darknet-cpu"

    @property
    def defaults(self) -> Defaults:
        """The dialect's command defaults (thresholds, letterbox, checkpoint cadence)."""
        return DEFAULTS[self.dialect]

    @property
    def title(self) -> str:
        """Whose Darknet, as a reader names it: "pjreddie's" or "AlexeyAB's"."""
        return TITLES[self.dialect]

    @property
    def name(self) -> str:
        return self.dialect + (f" (compat={self.compat})" if self.compat else "")


def ab_only_feature(sections) -> tuple[str, str] | None:
    """(where, what) of the first AlexeyAB-only section, key or activation of a parsed cfg,
    e.g. ("yolov4.cfg:12", "[route] groups=2"); None for a cfg pjreddie's Darknet reads whole."""
    for s in sections:
        kind = SECTION_ALIASES.get(s.type, s.type)
        if kind.lower() in AB_ONLY_SECTIONS:
            return f"{s.path}:{s.line}", f"[{s.type}]"
        keys = AB_ONLY_KEYS.get(kind, set()) | AB_ONLY_KEYS["*"]
        for key, value in s.options.items():
            if key.lower() in keys or (key.endswith("activation")
                                       and value.strip().lower() in AB_ONLY_ACTIVATIONS):
                return f"{s.path}:{s.lines.get(key, s.line)}", f"[{s.type}] {key}={value}"
    return None


def choose_dialect(sections, dialect: str | None = None,
                   weights_version: tuple | None = None) -> tuple[str, str]:
    """(dialect, why): the one asked for; else alexeyab when the cfg uses anything only
    AlexeyAB's parser reads; else alexeyab when the .weights header says 0.2.5 (AlexeyAB
    writes it for every file it saves, so this is a hint: pjreddie's yolov3.weights, 0.2.0,
    runs in both); else pjreddie."""
    if dialect is not None:
        if dialect not in DIALECTS:
            raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}, not {dialect!r}")
        return dialect, "asked for"
    found = ab_only_feature(sections)
    if found:
        where, what = found
        return "alexeyab", f"the cfg uses AlexeyAB's {what} ({where})"
    if weights_version is not None and tuple(weights_version) == (0, 2, 5):
        return "alexeyab", ("the .weights header is version 0.2.5, which AlexeyAB's Darknet "
                            "writes (a hint only: --dialect overrides)")
    why = "nothing in the cfg is AlexeyAB-only"
    if weights_version is not None:
        why += f", weights version {'.'.join(map(str, weights_version))}"
    return "pjreddie", why


def quirks_for(dialect: str | None = None, compat: str | None = None) -> Quirks:
    """The behaviours of `dialect` ("pjreddie" when None) under `compat`. AlexeyAB's CPU code
    has none of pjreddie's CPU quirks, but bugs of its own."""
    dialect = dialect or DEFAULT_DIALECT
    if dialect not in DIALECTS:
        raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}, not {dialect!r}")
    if compat not in COMPAT_MODES:
        raise ValueError(f"compat must be one of {COMPAT_MODES}, not {compat!r}")
    if dialect == "alexeyab":
        return Quirks(dialect, compat, bn_epsilon_inside_sqrt=True,
                      bn_delta_eps_outside_sqrt=compat == "darknet-cpu", bn_rolling_momentum=0.9,
                      weights_version=(0, 2, 5), yolo_alexeyab=True, net_ab_keys=True,
                      policy_sigmoid_sgdr=True, partial_reads_kept_layers=True,
                      train_detector_alexeyab=True, char_rnn_alexeyab=True,
                      print_detections_v3=True, batch_sets_one_time_step=True,
                      crnn_alexeyab_keys=True, xnor_bits=True, onlyforward_skips_backward=True,
                      xnor_cpu_bugs=compat == "darknet-cpu",
                      col2im_zeroes_delta=compat == "darknet-cpu",
                      sam_overwrites_from_delta=compat == "darknet-cpu",
                      bn_bias_not_updated=compat == "darknet-cpu",
                      antialias_no_blur_backward=compat == "darknet-cpu",
                      implicit_not_updated=compat == "darknet-cpu",
                      train_unset_not_updated=compat == "darknet-cpu",
                      activate_lacks_ab_cases=compat == "darknet-cpu",
                      contrastive_output_zero=compat == "darknet-cpu",
                      region_alexeyab=True,
                      overwrite_delta=compat == "darknet-cpu")
    cpu = compat == "darknet-cpu"
    return Quirks(dialect, compat, delta_overwrite_1x1=cpu, strided_1x1_misread=cpu,
                  overwrite_delta=cpu, batchnorm_layer_not_updated=cpu, region_no_backward=cpu,
                  rnn_late_delta=cpu, two_pass_bn_stats=cpu, adam_ignored=cpu,
                  sig_unsigned_wrap=cpu)


DEFAULT_QUIRKS = quirks_for()
