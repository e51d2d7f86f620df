"""One thin class per Darknet layer type; `base.py` states the conventions they share."""
from .avgpool import AvgpoolLayer
from .connected import ConnectedLayer
from .convolutional import ConvolutionalLayer
from .cost import CostLayer
from .dropout import DropoutLayer
from .maxpool import MaxpoolLayer
from .route import RouteLayer
from .shortcut import ShortcutLayer
from .softmax import SoftmaxLayer
from .upsample import UpsampleLayer
from .yolo import YoloLayer

# section name (and Darknet's aliases) -> layer class with a from_cfg(section, params) builder
LAYER_TYPES = {
    "convolutional": ConvolutionalLayer, "conv": ConvolutionalLayer,
    "maxpool": MaxpoolLayer, "max": MaxpoolLayer,
    "avgpool": AvgpoolLayer, "avg": AvgpoolLayer,
    "route": RouteLayer,
    "shortcut": ShortcutLayer,
    "upsample": UpsampleLayer,
    "yolo": YoloLayer,
    "connected": ConnectedLayer, "conn": ConnectedLayer,
    "softmax": SoftmaxLayer, "soft": SoftmaxLayer,
    "dropout": DropoutLayer,
    "cost": CostLayer,
}
