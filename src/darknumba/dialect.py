"""Named behaviours: where Darknet builds compute differently, as fields of one frozen object.

A network is built for a *dialect* (whose Darknet it follows: pjreddie's, or AlexeyAB's fork)
and an optional *compat* mode (reproduce a C build's bugs too). Layers never compare strings:
they read the named fields of ``net.quirks``, made once by :func:`quirks_for`.
"""
from __future__ import annotations

from dataclasses import dataclass

DIALECTS = ("pjreddie", "alexeyab")
COMPAT_MODES = (None, "darknet-cpu")


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
    # layer's (and [region] passes none) instead of adding to it
    overwrite_delta: bool = False
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

    # -- what the dialects compute differently ---------------------------------------------------
    # batch norm forward: pjreddie (x - m) / (sqrt(v) + 1e-6); AlexeyAB (x - m) / sqrt(v + 1e-5)
    bn_epsilon_inside_sqrt: bool = False
    # rolling statistics: rolling = m * rolling + (1 - m) * batch statistic
    bn_rolling_momentum: float = 0.99
    # .weights header written on save: (major, minor, revision)
    weights_version: tuple = (0, 2, 0)

    @property
    def name(self) -> str:
        return self.dialect + (f" (compat={self.compat})" if self.compat else "")


def quirks_for(dialect: str | None = None, compat: str | None = None) -> Quirks:
    """The behaviours of `dialect` ("pjreddie" when None) under `compat`. AlexeyAB's CPU code
    has none of pjreddie's CPU quirks, but bugs of its own."""
    dialect = dialect or "pjreddie"
    if dialect not in DIALECTS:
        raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}, not {dialect!r}")
    if compat not in COMPAT_MODES:
        raise ValueError(f"compat must be one of {COMPAT_MODES}, not {compat!r}")
    if dialect == "alexeyab":
        return Quirks(dialect, compat, bn_epsilon_inside_sqrt=True, bn_rolling_momentum=0.9,
                      weights_version=(0, 2, 5), col2im_zeroes_delta=compat == "darknet-cpu",
                      sam_overwrites_from_delta=compat == "darknet-cpu")
    cpu = compat == "darknet-cpu"
    return Quirks(dialect, compat, delta_overwrite_1x1=cpu, strided_1x1_misread=cpu,
                  overwrite_delta=cpu, region_no_backward=cpu, rnn_late_delta=cpu, two_pass_bn_stats=cpu, adam_ignored=cpu,
                  sig_unsigned_wrap=cpu)


DEFAULT_QUIRKS = quirks_for()
