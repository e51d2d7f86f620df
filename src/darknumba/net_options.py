"""NetOptions: the [net] section as one declared object (Darknet's parse_net_options).

Every field has the default of the C line that reads it (pjreddie's parser.c unless marked
AlexeyAB's); parser.parse_net_options fills one, with each number's range checked, and the
Network reads and writes its fields under their usual names (net.batch, net.learning_rate, ...).
The AlexeyAB fields keep their defaults under pjreddie's dialect, whose parser never reads them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass
class NetOptions:
    # -- sizes -------------------------------------------------------------------------------
    batch: int = 1                  # per datum: batch / subdivisions * time_steps ("batch", 1)
    subdivisions: int = 1           # "subdivisions", 1
    time_steps: int = 1             # "time_steps", 1
    h: int = 0                      # "height", 0
    w: int = 0                      # "width", 0
    c: int = 0                      # "channels", 0
    inputs: int = 0                 # "inputs", h*w*c (else the first layer's)
    # -- optimiser ---------------------------------------------------------------------------
    learning_rate: float = 0.001    # "learning_rate", .001
    momentum: float = 0.9           # "momentum", .9
    decay: float = 0.0001           # "decay", .0001
    adam: bool = False              # "adam", 0
    B1: float = 0.9                 # "B1", .9 (read only with adam=1)
    B2: float = 0.999               # "B2", .999 (read only with adam=1)
    eps: float = 1e-7               # "eps", .0000001 (AlexeyAB's .000001)
    # -- learning-rate policy (get_current_rate) --------------------------------------------
    policy: str = "constant"        # "policy", "constant"
    burn_in: int = 0                # "burn_in", 0
    power: float = 4.0              # "power", 4
    step: int = 1                   # "step", 1 (policy step, sig)
    scale: float = 1.0              # "scale", 1 (policy step)
    steps: list[int] = field(default_factory=list)      # "steps" (policy steps, sgdr)
    scales: list[float] = field(default_factory=list)   # "scales" (policy steps; sgdr: 1 each)
    gamma: float = 1.0              # "gamma", 1 (policy exp, sig)
    max_batches: int = 0            # "max_batches", 0
    # -- augmentation (classifier and detector data) -----------------------------------------
    max_crop: int = 0               # "max_crop", w*2
    min_crop: int = 0               # "min_crop", w
    angle: float = 0.0              # "angle", 0
    aspect: float = 1.0             # "aspect", 1
    saturation: float = 1.0         # "saturation", 1
    exposure: float = 1.0           # "exposure", 1
    hue: float = 0.0                # "hue", 0
    random: int = 0                 # "random", 0
    # -- AlexeyAB's parse_net_options only ---------------------------------------------------
    flip: int = 1                   # "flip", 1
    blur: int = 0                   # "blur", 0
    gaussian_noise: int = 0         # "gaussian_noise", 0
    mixup: int = 0                  # "mixup", 0
    cutmix: int = 0                 # "cutmix", 0
    mosaic: int = 0                 # "mosaic", 0
    letter_box: int = 0             # "letter_box", 0
    mosaic_bound: int = 0           # "mosaic_bound", 0
    contrastive: int = 0            # "contrastive", 0
    contrastive_jit_flip: int = 0   # "contrastive_jit_flip", 0
    contrastive_color: int = 0      # "contrastive_color", 0
    unsupervised: int = 0           # "unsupervised", 0
    attention: int = 0              # "attention", 0
    track: int = 0                  # "track", 0
    augment_speed: int = 2          # "augment_speed", 2
    try_fix_nan: int = 0            # "try_fix_nan", 0
    weights_reject_freq: int = 0    # "weights_reject_freq", 0
    equidistant_point: int = 0      # "equidistant_point", 0
    use_cuda_graph: int = 0         # "use_cuda_graph", 0
    dynamic_minibatch: int = 0      # "dynamic_minibatch", 0
    optimized_memory: int = 0       # "optimized_memory", 0
    sgdr_mult: int = 2              # "sgdr_mult", 2
    sequential_subdivisions: int = 0    # "sequential_subdivisions", subdivisions (at most it)
    sgdr_cycle: int = 0             # "sgdr_cycle", max_batches
    learning_rate_min: float = 0.00001  # "learning_rate_min", .00001
    ema_alpha: float = 0.0          # "ema_alpha", 0
    label_smooth_eps: float = 0.0   # "label_smooth_eps", 0
    resize_step: float = 32.0       # "resize_step", 32
    adversarial_lr: float = 0.0     # "adversarial_lr", 0
    max_chart_loss: float = 20.0    # "max_chart_loss", 20
    loss_scale: float = 1.0         # "loss_scale", 1
    badlabels_rejection_percentage: float = 0.0     # "badlabels_rejection_percentage", 0
    num_sigmas_reject_badlabels: float = 0.0        # "num_sigmas_reject_badlabels", 0
    workspace_size_limit_mb: float = 1024.0         # "workspace_size_limit_MB", 1024
    seq_scales: list[float] = field(default_factory=list)   # "seq_scales" (sgdr steps)


NET_OPTION_NAMES = tuple(f.name for f in fields(NetOptions))


def _option(name: str) -> property:
    def get(net):
        return getattr(net.options, name)

    def set_(net, value):
        setattr(net.options, name, value)
    return property(get, set_, doc=f"[net] {name} (NetOptions.{name})")


def options_as_attributes(cls):
    """Class decorator: each NetOptions field reads and writes `self.options.<field>`."""
    for name in NET_OPTION_NAMES:
        setattr(cls, name, _option(name))
    return cls
