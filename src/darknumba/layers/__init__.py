"""One thin class per Darknet layer type; `base.py` states the conventions they share."""
from .activation import ActivationLayer
from .avgpool import AvgpoolLayer
from .batchnorm import BatchnormLayer
from .caffe_batchnorm import CaffeBatchnormLayer
from .connected import ConnectedLayer
from .convolutional import ConvolutionalLayer
from .cost import CostLayer
from .crnn import CRNNLayer
from .crop import CropLayer
from .deconvolutional import DeconvolutionalLayer
from .detection import DetectionLayer
from .dropout import DropoutLayer
from .eltwise import EltwiseLayer
from .empty import EmptyLayer
from .gru import GRULayer
from .implicit import ImplicitLayer
from .iseg import IsegLayer
from .l2norm import L2normLayer
from .local import LocalLayer
from .logistic import LogisticLayer
from .lstm import LSTMLayer
from .maxpool import LocalAvgpoolLayer, MaxpoolLayer
from .normalization import NormalizationLayer
from .prelu import PreluLayer
from .region import RegionLayer
from .reorg import Reorg3dLayer, ReorgLayer
from .rnn import RNNLayer
from .route import RouteLayer
from .scale_channels import SamLayer, ScaleChannelsLayer
from .shortcut import ShortcutLayer
from .softmax import SoftmaxLayer
from .upsample import UpsampleLayer
from .yolo import YoloLayer


class NotSupportedYet:
    """Sections of AlexeyAB's darknet that darknumba does not compute: a clear error."""

    @staticmethod
    def from_cfg(s, params):
        raise s.error(None, f"[{s.type}] (layer {params.index}) is a section of AlexeyAB's "
                            f"darknet that darknumba does not support yet")


class ByQuirk:
    """A section each dialect builds with its own class: the one `alexeyab()` returns where the
    network's Quirks field `quirk` is set, else `pjreddie`. (`alexeyab` is a function: its module
    and kernels load only for a network that needs them.)"""

    def __init__(self, quirk: str, pjreddie, alexeyab):
        self.quirk, self.pjreddie, self.alexeyab = quirk, pjreddie, alexeyab

    def from_cfg(self, s, params):
        chosen = self.alexeyab() if getattr(params.net.quirks, self.quirk) else self.pjreddie
        return chosen.from_cfg(s, params)


def _ab_yolo():
    from .yolo_ab import AbYoloLayer
    return AbYoloLayer


class Lazy:
    """A section only AlexeyAB's darknet has: its class loads when a cfg uses it."""

    def __init__(self, load):
        self.load = load

    def from_cfg(self, s, params):
        return self.load().from_cfg(s, params)


def _ab_region():
    from .region_ab import AbRegionLayer
    return AbRegionLayer


def _gaussian_yolo():
    from .gaussian_yolo import GaussianYoloLayer
    return GaussianYoloLayer


def _contrastive():
    from .contrastive import ContrastiveLayer
    return ContrastiveLayer


# section name (and Darknet's aliases) -> layer class with a from_cfg(section, params) builder
LAYER_TYPES = {
    "convolutional": ConvolutionalLayer, "conv": ConvolutionalLayer,
    "maxpool": MaxpoolLayer, "max": MaxpoolLayer,
    "avgpool": AvgpoolLayer, "avg": AvgpoolLayer,
    "local_avgpool": LocalAvgpoolLayer, "local_avg": LocalAvgpoolLayer,
    "route": RouteLayer,
    "shortcut": ShortcutLayer,
    "upsample": UpsampleLayer,
    "yolo": ByQuirk("yolo_alexeyab", YoloLayer, _ab_yolo),
    "connected": ConnectedLayer, "conn": ConnectedLayer,
    "softmax": SoftmaxLayer, "soft": SoftmaxLayer,
    "dropout": DropoutLayer,
    "cost": CostLayer,
    "region": ByQuirk("region_alexeyab", RegionLayer, _ab_region),
    "reorg": ReorgLayer,
    "reorg3d": Reorg3dLayer,
    "detection": DetectionLayer,
    "local": LocalLayer,
    "crop": CropLayer,
    "batchnorm": BatchnormLayer,
    "l2norm": L2normLayer,
    "logistic": LogisticLayer,
    "activation": ActivationLayer,
    "deconvolutional": DeconvolutionalLayer, "deconv": DeconvolutionalLayer,
    "normalization": NormalizationLayer, "lrn": NormalizationLayer,
    "rnn": RNNLayer,
    "gru": GRULayer,
    "lstm": LSTMLayer,
    "crnn": CRNNLayer,
    "iseg": IsegLayer,
    "sam": SamLayer,
    "scale_channels": ScaleChannelsLayer,
    "implicit": ImplicitLayer,
    "empty": EmptyLayer, "silence": EmptyLayer,
    # Caffe's arithmetic where Darknet has none or its own (`darknumba import caffe`)
    "caffe_batchnorm": CaffeBatchnormLayer, "eltwise": EltwiseLayer, "prelu": PreluLayer,
    "gaussian_yolo": Lazy(_gaussian_yolo), "contrastive": Lazy(_contrastive),
    "conv_lstm": NotSupportedYet, "history": NotSupportedYet,
}
