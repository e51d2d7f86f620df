"""`darknumba classifier ...`: Darknet's classifier commands (train, predict, valid) and a
synthetic example set to try them on."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from .darknet_flags import DontShow, IgnoredClear
from .options import (BucketMbOption, CheckEveryOption, DecoderOption, DetectCompatOption,
                      MpiTimeoutOption, OverlapOption, SyncBnOption, TrainCompatOption,
                      overlap_bytes)

classifier_app = typer.Typer(rich_markup_mode=None, help="Darknet's classifier commands: train, predict, valid; "
                                  "example writes a small synthetic set.", no_args_is_help=True)

DataArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="classifier .data file")]
CfgArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg file")]


@classifier_app.command()
def train(data: DataArg, cfg: CfgArg,
          weights: Annotated[Optional[Path], typer.Argument(exists=True, dir_okay=False,
                                                            help="starting weights (full or partial)")] = None,
          clear: Annotated[bool, typer.Option("--clear", "-clear", help="reset the seen-images count (fine-tuning)")] = False,
          max_batches: Annotated[Optional[int], typer.Option(min=1, help="override [net] max_batches")] = None,
          backup: Annotated[Optional[Path], typer.Option(help="checkpoint folder (default: the .data file's backup)")] = None,
          seed: Annotated[int, typer.Option(min=0, help="random seed (initial weights, batches, augmentation)")] = 0,
          workers: Annotated[int, typer.Option(min=1, help="image loading threads")] = 2,
          log_every: Annotated[int, typer.Option(min=1, help="print a line every N iterations")] = 1,
          progress: Annotated[bool, typer.Option(help="progress bar with ETA")] = True,
          chart: Annotated[bool, typer.Option(help="draw chart.png in the backup folder (needs matplotlib)")] = True,
          dont_show: DontShow = False,
          compat: TrainCompatOption = None,
          decoder: DecoderOption = None,
          sync_bn: SyncBnOption = False,
          check_every: CheckEveryOption = 100,
          mpi_timeout: MpiTimeoutOption = None,
          overlap: OverlapOption = False,
          bucket_mb: BucketMbOption = 2.0,
):
    """Train a classifier (Darknet's `classifier train`): prints `iteration, epoch: loss, avg,
    rate, seconds, images` under a progress bar; writes CFG_<epoch>.weights each epoch,
    CFG.backup every 1000 iterations and CFG.weights at the end, CFG_history.csv and chart.png
    beside them (Ctrl-C: finish the iteration, save, exit status 130).
    Under `mpirun -np N` the N processes train one network, sharing each iteration's
    mini-batches."""
    from ..train.classifier import ClassifierTrainOptions, train_classifier
    from ..train.data_parallel import run_training
    from .detector_train import check_compat
    opts = ClassifierTrainOptions(weights=str(weights) if weights else None, clear=clear,
                                  seed=seed, workers=workers, max_batches=max_batches,
                                  backup=str(backup) if backup else None, log_every=log_every,
                                  progress=progress, chart=chart,
                                  compat=check_compat(compat), decoder=decoder)
    result = run_training(train_classifier, str(data), str(cfg), opts,
                          lambda m, file=None: typer.echo(m, err=file is sys.stderr), sync_bn,
                          check_every, mpi_timeout, overlap_bytes(overlap, bucket_mb))
    if result["interrupted"]:
        raise typer.Exit(130)           # the weights are saved; the contract's Ctrl-C status


@classifier_app.command()
def predict(data: DataArg, cfg: CfgArg,
            weights: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help=".weights file")],
            images: Annotated[list[Path], typer.Argument(exists=True, dir_okay=False, help="images")],
            top: Annotated[Optional[int], typer.Option(min=1, help="how many classes to print (default: the .data file's `top`, else 1)")] = None,
            dont_show: DontShow = False, clear: IgnoredClear = False,
            decoder: DecoderOption = None, compat: DetectCompatOption = None):
    """Top-k classes of each image with their probabilities, as Darknet prints them."""
    from ..parser import load_network
    from ..train.classifier import ClassifierData, predict_image
    from ..vision.image import load_image, pick_decoder
    dc = ClassifierData.read(data)
    net = load_network(cfg, weights, batch=1, compat=compat)
    decoder = pick_decoder(decoder, net.quirks)
    k = top or dc.top
    for p in images:
        im = load_image(p, c=net.c, decoder=decoder)
        t0 = time.time()
        res = predict_image(net, im, k)
        typer.echo(f"{p}: Predicted in {time.time() - t0:f} seconds.", err=True)
        for i, prob in res:
            typer.echo(f"{prob * 100:5.2f}%: {dc.names[i]}")


@classifier_app.command()
def valid(data: DataArg, cfg: CfgArg,
          weights: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help=".weights file")],
          top: Annotated[Optional[int], typer.Option(min=1, help="k of the top-k accuracy (default: the .data file's `top`, else 1)")] = None,
          batch: Annotated[int, typer.Option(min=1, help="images per forward pass")] = 16,
          verbose: Annotated[bool, typer.Option(help="print the running accuracy after every batch")] = False,
          dont_show: DontShow = False, clear: IgnoredClear = False,
          decoder: DecoderOption = None, compat: DetectCompatOption = None):
    """Top-1 and top-k accuracy on the .data file's `valid` list (centre crops)."""
    from ..errors import DataError
    from ..parser import load_network
    from ..train.classifier import ClassifierData, labelled_paths, validate
    dc = ClassifierData.read(data)
    if not dc.valid:
        raise DataError(f"{data}: no `valid` list")
    paths, idx = labelled_paths(dc.valid, dc.labels,
                                log=lambda m, file=None: typer.echo(m, err=True))
    net = load_network(cfg, weights, batch=batch, compat=compat)
    k = top or dc.top
    t1, tk = validate(net, paths, idx, k, batch, log=typer.echo if verbose else None,
                      decoder=decoder)
    typer.echo(f"{len(paths)} images: top 1: {t1:f}, top {k}: {tk:f}")


@classifier_app.command()
def example(out: Annotated[Path, typer.Argument(help="output folder")],
            n: Annotated[int, typer.Option("--n", min=1, help="number of images")] = 3000,
            valid: Annotated[float, typer.Option(help="fraction held out for validation")] = 0.2,
            seed: Annotated[int, typer.Option(min=0, help="random seed")] = 0,
            force: Annotated[bool, typer.Option(
                "--force", help="write into OUT even if it holds train.list, valid.list, "
                                "labels.txt, shapes5.data, train/ or valid/ (replacing them)")] = False):
    """Write a synthetic 5-class set (32x32 shapes) with its lists, labels and .data file;
    train it with cfg/shapes5-classifier.cfg."""
    from ..data.classifier_example import FILES, make_example
    from ..outputs import check_not_replacing
    check_not_replacing([out / f for f in FILES], force, "a data set of yours")
    data = make_example(out, n, valid, seed)
    typer.echo(f"wrote {n} images; data file: {data}")


def register(app: typer.Typer):
    app.add_typer(classifier_app, name="classifier")
