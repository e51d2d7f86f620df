"""Darknet's activations as ONNX nodes: one builder per cfg name, ``(graph, x) -> y``.

Formulas are Darknet's (``activations.h``; AlexeyAB's additions from its ``activations.c``),
written with standard ONNX operators only, so onnxruntime and OpenCV DNN both read them.
Adding an activation is one entry in ACTIVATION_BUILDERS.
"""
from __future__ import annotations

import numpy as np


def _clip(g, x, lo, hi):
    return g.op("Clip", [x, g.const(lo), g.const(hi)])


def _add(g, a, b):
    return g.op("Add", [a, b])


def _mul(g, a, b):
    return g.op("Mul", [a, b])


def _ramp(g, x):
    """x * (x > 0) + .1 * x"""
    return _add(g, g.op("Relu", [x]), g.scale_shift(x, 0.1))


def _loggy(g, x):
    """2 / (1 + exp(-x)) - 1"""
    return g.scale_shift(g.op("Sigmoid", [x]), 2.0, -1.0)


def _plse(g, x):
    """.01 (x + 4) below -4, .01 (x - 4) + 1 above 4, .125 x + .5 between: the clipped line
    plus .01 times what the clip cut off."""
    c = _clip(g, x, -4.0, 4.0)
    return _add(g, g.scale_shift(c, 0.125, 0.5),
                g.scale_shift(g.op("Sub", [x, c]), 0.01))


def _lhtan(g, x):
    """.001 x below 0, .001 (x - 1) + 1 above 1, x between."""
    c = _clip(g, x, 0.0, 1.0)
    return _add(g, c, g.scale_shift(g.op("Sub", [x, c]), 0.001))


def _stair(g, x):
    """n = floor(x); floor(x / 2) when n is even, else (x - n) + floor(x / 2)."""
    n = g.op("Floor", [x])
    half = g.op("Floor", [g.scale_shift(x, 0.5)])
    odd = g.op("Sub", [n, g.scale_shift(g.op("Floor", [g.scale_shift(n, 0.5)]), 2.0)])
    return _add(g, half, _mul(g, odd, g.op("Sub", [x, n])))


def _gelu(g, x):
    """AlexeyAB's 0.5 x (1 + tanh(0.797885 x + 0.035677 x^3))."""
    x3 = _mul(g, _mul(g, x, x), x)
    u = _add(g, g.scale_shift(x, 0.797885), g.scale_shift(x3, 0.035677))
    return _mul(g, g.scale_shift(x, 0.5), g.scale_shift(g.op("Tanh", [u]), 1.0, 1.0))


def _swish(g, x):
    return _mul(g, x, g.op("Sigmoid", [x]))


def _mish(g, x):
    """x tanh(softplus(x)); AlexeyAB's softplus returns x above 20 and exp(x) below -20, which
    log(1 + exp(x)) equals there to float32 precision."""
    return _mul(g, x, g.op("Tanh", [g.op("Softplus", [x])]))


def _hard_mish(g, x):
    """x above 0, x^2 / 2 + x on (-2, 0], 0 below: x * clip(x / 2 + 1, 0, 1)."""
    return _mul(g, x, g.op("HardSigmoid", [x], alpha=0.5, beta=1.0))


NORM_EPS = 0.0001      # AlexeyAB's eps in the normalize_channels family


def _channel_sum(g, x):
    return g.op("ReduceSum", [x, g.const([1], dtype=np.int64)], keepdims=1)


def _normalize_channels(g, x):
    """Per pixel: positive values divided by (eps + their sum over the channels), else 0."""
    r = g.op("Relu", [x])
    return g.op("Div", [r, g.scale_shift(_channel_sum(g, r), 1.0, NORM_EPS)])


def _channels_softmax(g, x, use_max):
    if use_max:
        x = g.op("Sub", [x, g.op("ReduceMax", [x], axes=[1], keepdims=1)])
    e = g.op("Exp", [x])
    return g.op("Div", [e, g.scale_shift(_channel_sum(g, e), 1.0, NORM_EPS)])


ACTIVATION_BUILDERS = {
    "linear": lambda g, x: x,
    "logistic": lambda g, x: g.op("Sigmoid", [x]),
    "relu": lambda g, x: g.op("Relu", [x]),
    "relie": lambda g, x: g.op("LeakyRelu", [x], alpha=0.01),
    "ramp": _ramp,
    "tanh": lambda g, x: g.op("Tanh", [x]),
    "plse": _plse,
    "leaky": lambda g, x: g.op("LeakyRelu", [x], alpha=0.1),
    "elu": lambda g, x: g.op("Elu", [x], alpha=1.0),
    "loggy": _loggy,
    "stair": _stair,
    "hardtan": lambda g, x: _clip(g, x, -1.0, 1.0),
    "lhtan": _lhtan,
    "selu": lambda g, x: g.op("Selu", [x], alpha=1.6732, gamma=1.0507),
    # AlexeyAB's
    "relu6": lambda g, x: _clip(g, x, 0.0, 6.0),
    "revleaky": lambda g, x: g.op("LeakyRelu", [x], alpha=0.1),
    "gelu": _gelu,
    "swish": _swish,
    "mish": _mish,
    "hard_mish": _hard_mish,
    "normalize_channels": _normalize_channels,
    "normalize_channels_softmax": lambda g, x: _channels_softmax(g, x, False),
    "normalize_channels_softmax_maxval": lambda g, x: _channels_softmax(g, x, True),
}


def activation(g, x: str, name: str, where: str) -> str:
    """The nodes of activation `name` applied to x."""
    builder = ACTIVATION_BUILDERS.get(name)
    if builder is None:
        from . import ExportError
        raise ExportError(f"{where}: activation {name!r} has no ONNX form; exportable: "
                          f"{', '.join(ACTIVATION_BUILDERS)}")
    return builder(g, x)
