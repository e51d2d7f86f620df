"""Options and checks several commands share."""
import math
from typing import Annotated, Optional

import typer

from ..dialect import DIALECTS


def not_nan(value: float) -> float:
    """A threshold must be a number: NaN compares false both ways, which would let a count and
    the fill that follows it disagree."""
    if value is not None and math.isnan(value):
        raise typer.BadParameter("NaN is not a threshold (give a number)")
    return value


def _check_dialect(value):
    if value is not None and value not in DIALECTS:
        raise typer.BadParameter(f"takes {' or '.join(DIALECTS)}, not {value!r}")
    return value


DialectOption = Annotated[Optional[str], typer.Option(
    "--dialect", callback=_check_dialect,
    help="whose Darknet the network follows: pjreddie or alexeyab (default: alexeyab when the "
         "cfg uses anything only AlexeyAB's Darknet reads, or the weights header is 0.2.5)")]

def _check_decoder(value):
    if value is not None and value not in ("stb", "pillow"):
        raise typer.BadParameter(f"takes stb or pillow, not {value!r}")
    return value


def _check_compat(value):
    from ..dialect import COMPAT_MODES
    if value not in COMPAT_MODES:
        raise typer.BadParameter(f"takes {', '.join(m for m in COMPAT_MODES if m)}, "
                                 f"not {value!r}")
    return value


# every command that reads photos: detect, detector test/map/recall/valid/train, classifier
# predict/valid/train, data check (vision.image.pick_decoder resolves None)
DecoderOption = Annotated[Optional[str], typer.Option(
    "--decoder", callback=_check_decoder,
    help="how JPEG files are decoded: stb (a port of the stb_image C darknet builds: its "
         "pixels, so its percentages to the point) or pillow (libjpeg-turbo: faster, a few grey "
         "levels off); default pillow, stb under --compat darknet-cpu", show_default=False)]
# the commands that run a network on photos without training it
DetectCompatOption = Annotated[Optional[str], typer.Option(
    "--compat", callback=_check_compat,
    help="darknet-cpu: as C darknet's CPU build (every convolution exact, JPEGs decoded by "
         "stb)", show_default=False)]
# detector train, classifier train (checked in the command: detector_train.check_compat)
TrainCompatOption = Annotated[Optional[str], typer.Option(
    help="darknet-cpu: reproduce C darknet's CPU build where it is wrong (1x1 convolution "
         "backward overwrites, strided 1x1 forward, adam ignored) and decode JPEGs with stb as "
         "it does; default: correct gradients", show_default=False)]

ExactOption = Annotated[Optional[bool], typer.Option(
    "--exact/--winograd", help="--exact: every convolution as im2col + GEMM, as Darknet "
    "computes it (also DARKNUMBA_EXACT=1); --winograd (the default): Winograd F(4x4,3x3) for "
    "the larger 3x3 stride-1 ones, F(2x2,3x3) on 13x13 maps (within ~1e-4 of exact; in "
    "training the largest ones' forward and input gradient)", show_default=False)]


# data-parallel training under mpirun (train/data_parallel.py); without mpirun they do nothing
SyncBnOption = Annotated[bool, typer.Option(
    "--sync-bn", help="under mpirun: split every mini-batch (batch/subdivisions images) over the "
                      "ranks and synchronise batch norm across them; for subdivisions smaller "
                      "than the number of ranks")]
CheckEveryOption = Annotated[int, typer.Option(
    help="under mpirun: compare a checksum of every rank's weights every N iterations (0: at "
         "the start only)")]
MpiTimeoutOption = Annotated[Optional[float], typer.Option(
    help="under mpirun: seconds a rank waits for the others before it stops the job "
         "(default 1800: rank 0 alone writes checkpoints and measures mAP meanwhile)")]
OverlapOption = Annotated[bool, typer.Option(
    "--overlap/--no-overlap", help="under mpirun: start the gradient allreduce in buckets "
                                   "during backward (last layers first) instead of after it; "
                                   "the same sums")]
BucketMbOption = Annotated[float, typer.Option(
    min=0.001, help="--overlap: megabytes of gradients per bucket (each at least one layer's)")]


def overlap_bytes(overlap: bool, bucket_mb: float) -> int:
    """data_parallel's `overlap`: the bytes per bucket, 0 for no overlap."""
    return max(4, int(bucket_mb * 2**20)) if overlap else 0
