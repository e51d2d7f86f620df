"""A small AlexeyAB-style detector for the shapes data (3 classes) at 64x64: four strided
convolutions, two [yolo] heads with AlexeyAB's keys (scale_x_y, ciou, normalizers, greedy NMS,
resize), and the [net] augmentation keys AlexeyAB adds (mosaic, blur, gaussian_noise) and
ema_alpha. `ab_tiny_cfg(**net)` sets or adds [net] keys."""

HEAD = """
[convolutional]
size=1
stride=1
pad=1
filters=24
activation=linear

[yolo]
mask={mask}
anchors=8,8, 12,12, 16,16, 20,20, 28,28, 40,40
classes=3
num=6
jitter=.3
resize=1.5
scale_x_y=1.05
iou_loss=ciou
iou_normalizer=0.07
cls_normalizer=1.0
ignore_thresh=.7
truth_thresh=1
nms_kind=greedynms
beta_nms=0.6
random=0
"""

NET = dict(batch=8, subdivisions=2, width=64, height=64, channels=3, momentum=0.9,
           decay=0.0005, learning_rate=0.01, burn_in=2, max_batches=6, policy="steps",
           steps="4,5", scales=".1,.1", hue=.1, saturation=1.5, exposure=1.5, mosaic=1,
           blur=1, gaussian_noise=10, ema_alpha=0.9)


def conv(filters, stride):
    return (f"\n[convolutional]\nbatch_normalize=1\nfilters={filters}\nsize=3\n"
            f"stride={stride}\npad=1\nactivation=leaky\n")


def ab_tiny_cfg(**net) -> str:
    opts = {**NET, **net}
    text = "[net]\n" + "".join(f"{k}={v}\n" for k, v in opts.items() if v is not None)
    text += conv(8, 2) + conv(16, 2) + conv(16, 2) + conv(32, 2)
    text += HEAD.format(mask="3,4,5") + "\n[route]\nlayers=-3\n" + HEAD.format(mask="0,1,2")
    return text
