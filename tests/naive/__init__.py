"""Slow, readable references: the spec every fast kernel and layer is tested against. Plain
loops over Darknet's formulas (or numpy indexing where that is as plain), in float64 unless a
reference must round as Darknet does; nothing here imports darknumba.

- im2col.py     im2col_cpu / col2im_cpu, loop by loop as Darknet's im2col.c / col2im.c
- layers.py     activations, convolution forward (im2col + GEMM) and backward, local,
                deconvolutional, maxpool, batch-norm backward, LRN, reorg
- detection.py  the yolo and region losses, box IoU, do_nms_sort
- image.py      resize_image
"""
from .detection import box_iou, nms_sort, region_deltas, yolo_loss
from .im2col import col2im_cpu, im2col_cpu, out_size
from .image import resize_image
from .layers import (ACTIVATIONS, batchnorm_backward, conv_backward, conv_forward, deconv_forward,
                     local_forward, lrn_forward, maxpool_forward, reorg, sigmoid)

__all__ = ["ACTIVATIONS", "batchnorm_backward", "box_iou", "col2im_cpu", "conv_backward",
           "conv_forward", "deconv_forward", "im2col_cpu", "local_forward", "lrn_forward",
           "maxpool_forward", "nms_sort", "out_size", "region_deltas", "reorg", "resize_image",
           "sigmoid", "yolo_loss"]
