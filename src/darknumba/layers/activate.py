"""Small pieces the layer types share: reading and applying a layer's activation
the way AlexeyAB's convolutional and shortcut layers do (activations that keep their input,
activations across the channels of a pixel)."""
import numpy as np

from ..kernels.activations import (ACTIVATIONS, HARD_MISH, KEEPS_INPUT, LINEAR, MISH, PER_PIXEL,
                                   RELU6, SWISH, activate_array)
from ..kernels.activations_ab import activate_layer_cpu, gradient_layer_cpu

_EMPTY = np.empty(0, np.float32)


# activations AlexeyAB's darknet computes only in [convolutional] layers (swish and mish in
# [shortcut] too); its other layers' activate() has no case for them and outputs 0. [crnn]
# refuses them too: what they keep for backward would hold the last time step only
CONV_ONLY = ("swish", "mish", "hard_mish", "normalize_channels", "normalize_channels_softmax",
             "normalize_channels_softmax_maxval")
SHORTCUT_EXCLUDED = CONV_ONLY[2:]
ACTIVATION_LAYER_EXCLUDED = CONV_ONLY[3:]
# what AlexeyAB's activate() outputs 0 for (quirks.activate_lacks_ab_cases): relu6 in the
# layers whose own code sends it there, all four in [activation]
ZEROED_BY_ACTIVATE = (RELU6,)
ZEROED_IN_ACTIVATION_LAYER = (RELU6, SWISH, MISH, HARD_MISH)


def zeroed(l, which=ZEROED_BY_ACTIVATE) -> bool:
    """Whether AlexeyAB's CPU build outputs 0 for this layer's activation (under compat)."""
    return l.quirks.activate_lacks_ab_cases and l.activation_id in which


def get_activation(section, key="activation", default="logistic", exclude=CONV_ONLY):
    name = section.find_str(key, default)
    if name not in ACTIVATIONS:
        raise section.error(key, f"unknown activation {name!r}; expected one of "
                                 f"{', '.join(sorted(ACTIVATIONS))}")
    if name in exclude:
        where = ("[convolutional], [shortcut] and [activation]" if name in ("swish", "mish")
                 else "[convolutional] and [activation]" if name == "hard_mish"
                 else "[convolutional]")
        raise section.error(key, f"{name} is computed only in {where} layers (most other "
                                 f"layers of AlexeyAB's darknet output 0 for it)")
    return name



def kept_input(l):
    """l.activation_input: what swish (its sigmoid) and mish / hard_mish (the pre-activation)
    keep in a train-mode forward for backward; allocated when first needed."""
    n = l.batch * l.outputs
    buf = getattr(l, "activation_input", None)
    if buf is None or buf.size != n:
        buf = l.activation_input = np.zeros(n, np.float32)
    return buf


def epilogue_activation(l, train) -> int:
    """The activation a fused epilogue (bias / batch norm sweep) may apply itself: any
    elementwise one, except in train mode those that keep their input; `activate_output`
    applies the rest afterwards."""
    a = l.activation_id
    if a in PER_PIXEL or (train and a in KEEPS_INPUT) or zeroed(l):
        return LINEAR
    return a


def activate_output(l, train, done=LINEAR):
    """l.output = act(l.output) unless an epilogue already applied `done` == the activation."""
    a = l.activation_id
    if a == done:
        return
    n = l.batch * l.outputs
    if zeroed(l):
        l.output[:n] = 0
        return
    if a in KEEPS_INPUT and not train:
        activate_array(l.output, n, a)
        return
    keep = kept_input(l) if a in KEEPS_INPUT else _EMPTY
    activate_layer_cpu(l.output, n, a, l.batch, l.out_c, l.out_h * l.out_w, keep)


def gradient_output(l):
    """l.delta *= act'(...): from l.output, or from what a train-mode forward kept. Backward
    follows a train-mode forward, as in Darknet."""
    a = l.activation_id
    keep = kept_input(l) if a in KEEPS_INPUT else _EMPTY
    gradient_layer_cpu(l.output, l.batch * l.outputs, a, l.batch, l.out_c, l.out_h * l.out_w,
                       keep, l.delta)
