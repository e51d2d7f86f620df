"""Writing a network out for other runtimes and tools.

- ``onnx.py``: the ONNX graph of a network (``export_onnx``), one builder per layer type;
  ``activations.py``: one builder per activation; ``yolo.py``: the [yolo]/[region] heads, raw
  or decoded into boxes; ``graph.py``: the small helper that assembles ONNX nodes.
- ``fold.py``: batch norm folded into the convolution weights (a .weights file, and the cfg
  that goes with it).
- ``caffe/``: the other way in, a Caffe model (deploy .prototxt + .caffemodel) imported as a
  Darknet .cfg + .weights (`darknumba import caffe`, docs/caffe.md).

Nothing here imports torch: the ONNX file is written with the ``onnx`` package alone
(``pip install darknumba[onnx]``), and checked with onnxruntime when it is installed.
"""
from ..errors import DarknumbaError


class ExportError(DarknumbaError):
    """A network (or one of its layers) that cannot be written in the format asked for."""
