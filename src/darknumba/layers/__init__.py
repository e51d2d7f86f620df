"""One thin class per Darknet layer type; `base.py` states the conventions they share."""
from .avgpool import AvgpoolLayer
from .connected import ConnectedLayer
from .convolutional import ConvolutionalLayer
from .cost import CostLayer
from .dropout import DropoutLayer
from .maxpool import LocalAvgpoolLayer, MaxpoolLayer
from .route import RouteLayer
from .shortcut import ShortcutLayer
from .softmax import SoftmaxLayer
from .upsample import UpsampleLayer
from .yolo import YoloLayer
from .activation import ActivationLayer
from .batchnorm import BatchnormLayer
from .crnn import CRNNLayer
from .crop import CropLayer
from .deconvolutional import DeconvolutionalLayer
from .detection import DetectionLayer
from .gru import GRULayer
from .iseg import IsegLayer
from .l2norm import L2normLayer
from .local import LocalLayer
from .logistic import LogisticLayer
from .lstm import LSTMLayer
from .normalization import NormalizationLayer
from .region import RegionLayer
from .reorg import ReorgLayer
from .rnn import RNNLayer

# section name (and Darknet's aliases) -> layer class with a from_cfg(section, params) builder
LAYER_TYPES = {
    "convolutional": ConvolutionalLayer, "conv": ConvolutionalLayer,
    "maxpool": MaxpoolLayer, "max": MaxpoolLayer,
    "avgpool": AvgpoolLayer, "avg": AvgpoolLayer,
    "local_avgpool": LocalAvgpoolLayer, "local_avg": LocalAvgpoolLayer,
    "route": RouteLayer,
    "shortcut": ShortcutLayer,
    "upsample": UpsampleLayer,
    "yolo": YoloLayer,
    "connected": ConnectedLayer, "conn": ConnectedLayer,
    "softmax": SoftmaxLayer, "soft": SoftmaxLayer,
    "dropout": DropoutLayer,
    "cost": CostLayer,
    "region": RegionLayer,
    "reorg": ReorgLayer,
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
}
