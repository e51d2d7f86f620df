"""`darknumba detector train|map|recall|valid`: Darknet's train_detector, AlexeyAB's
validate_detector_map, pjreddie's validate_detector_recall and validate_detector."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..dialect import ALEXEYAB, PJREDDIE, defaults_for
from .darknet_flags import DontShow, IgnoredClear, IgnoredExtOutput, IgnoredMap, IgnoredOut
from .detector import detector_app
from .options import (BucketMbOption, CheckEveryOption, DecoderOption, DetectCompatOption,
                      DialectOption, ExactOption, MpiTimeoutOption, OverlapOption, SyncBnOption,
                      TrainCompatOption, not_nan, overlap_bytes)
from .restarts import (HostfileOption, RanksOption, RestartsOption, ShrinkOption,
                       supervise_training)

DataArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .data file")]
CfgArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg file")]
WeightsArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help=".weights file")]
PJ, AB = defaults_for(PJREDDIE), defaults_for(ALEXEYAB)     # dialect.Defaults


def train(data: DataArg, cfg: CfgArg,
          weights: Annotated[Path | None, typer.Argument(
              exists=True, dir_okay=False, help="starting weights (full, or cut by `partial`)")] = None,
          clear: Annotated[bool, typer.Option("--clear", "-clear", help="reset `seen` to 0 (fine-tuning)")] = False,
          partial: Annotated[bool, typer.Option("--partial", help="accept a checkpoint (seen > 0) that holds fewer layers than the cfg; the rest start random")] = False,
          seed: Annotated[int, typer.Option(min=0, help="seed for image order and augmentation")] = 0,
          workers: Annotated[int, typer.Option(min=1, help="background loader threads")] = 2,
          bad_data: Annotated[str, typer.Option(help="on a bad image or label: skip (warn) or stop")] = "skip",
          stats_every: Annotated[int, typer.Option(min=0, help="print yolo layer stats every N iterations (0: never)")] = 0,
          chart: Annotated[bool, typer.Option(help="draw chart.png in the backup folder (needs matplotlib)")] = True,
          backup: Annotated[Path | None, typer.Option(help="checkpoint folder (default: the .data file's backup)")] = None,
          max_batches: Annotated[int | None, typer.Option(min=1, help="override [net] max_batches")] = None,
          checkpoint_every: Annotated[int, typer.Option(min=1, help="pjreddie dialect: <cfg>_<iter>.weights every N iterations ... (alexeyab: saveweights= and savelast= in the .data file)")] = PJ.weights_every,
          checkpoint_until: Annotated[int, typer.Option(min=0, help="... below this iteration ...")] = PJ.weights_until,
          checkpoint_every_after: Annotated[int, typer.Option(min=1, help="... then every N")] = PJ.weights_every_after,
          backup_every: Annotated[int, typer.Option(min=1, help="pjreddie dialect: <cfg>.backup every N iterations")] = PJ.backup_every,
          letterbox: Annotated[bool, typer.Option(help="place training images letterboxed instead of Darknet's jitter crop (alexeyab: as [net] letter_box=1)")] = False,
          map_every: Annotated[int, typer.Option(min=0, help="measure mAP@0.5 on the valid list every N iterations (0: never); <cfg>_best.weights when it improves")] = 0,
          map_flag: Annotated[bool, typer.Option("--map", "-map", help="AlexeyAB's -map: mAP@0.5 every 4 epochs, at least 100 iterations apart, not before burn_in, and at the end; <cfg>_best.weights when it improves")] = False,
          map_epochs: Annotated[int, typer.Option("--map-epochs", "-mAP_epochs", min=1, help="-map: epochs between measurements")] = AB.map_epochs,
          dialect: DialectOption = None,
          map_thresh: Annotated[float, typer.Option("--map-thresh", "-thresh", callback=not_nan, help="mAP during training: the confidence of its precision/recall/F1/IoU lines (AlexeyAB's -thresh)")] = AB.map_thresh,
          dont_show: DontShow = False,
          ext_output: IgnoredExtOutput = False,
          out_flag: IgnoredOut = None,
          progress: Annotated[bool, typer.Option(help="progress bar with ETA")] = True,
          compat: TrainCompatOption = None,
          decoder: DecoderOption = None,
          exact: ExactOption = None,
          sync_bn: SyncBnOption = False,
          check_every: CheckEveryOption = 100,
          mpi_timeout: MpiTimeoutOption = None,
          overlap: OverlapOption = False,
          bucket_mb: BucketMbOption = 2.0,
          ranks: RanksOption = None,
          restarts: RestartsOption = 0,
          shrink: ShrinkOption = False,
          hostfile: HostfileOption = None,
          ctx: typer.Context = None,
):
    """Train a detector (Darknet's `detector train`): checkpoints in the backup folder, with
    <cfg>_history.csv (one row per iteration, continued on resume) and chart.png; Ctrl-C
    saves <cfg>.backup (alexeyab: <cfg>_last.weights; exit status 130); starting from a
    checkpoint resumes at its `seen`. An AlexeyAB network trains as AlexeyAB's Darknet does:
    mosaic, letter_box, blur, gaussian_noise, mixup from [net];
    <cfg>_last/_final/_best/_ema.weights. Under `mpirun -np N` the N processes train one
    network, sharing each iteration's mini-batches; with --ranks N (--restarts K) the command
    runs mpirun itself and restarts the job from its last checkpoint when a rank is lost."""
    if ranks is not None or restarts or hostfile is not None:
        status = supervise_training(ctx, ["detector", "train"], [str(data), str(cfg)], weights,
                                    data, cfg, backup, ranks, restarts, shrink, hostfile,
                                    sync_bn, _log)
        raise typer.Exit(status)
    from ..train.data_parallel import run_training
    from ..train.detector import Schedule, TrainOptions, train_detector
    check_policy(bad_data, "--bad-data")
    if map_flag and not map_every:
        map_every = -1          # AlexeyAB's rule (train.alexeyab.MapSchedule)
    opts = TrainOptions(weights=str(weights) if weights else None, clear=clear, partial=partial,
                        seed=seed,
                        workers=workers, bad_data=bad_data, stats_every=stats_every, chart=chart,
                        backup=str(backup) if backup else None, max_batches=max_batches,
                        schedule=Schedule(checkpoint_every, checkpoint_until,
                                          checkpoint_every_after, backup_every),
                        progress=progress, letterbox=letterbox, map_every=map_every,
                        map_epochs=map_epochs, map_thresh=map_thresh, compat=check_compat(compat),
                        dialect=dialect, exact=exact, decoder=decoder)
    result = run_training(train_detector, str(data), str(cfg), opts, _log, sync_bn, check_every,
                          mpi_timeout, overlap_bytes(overlap, bucket_mb))
    if result["interrupted"]:
        raise typer.Exit(130)           # the checkpoint is saved; the contract's Ctrl-C status


def check_compat(value):
    from ..dialect import COMPAT_MODES
    if value not in COMPAT_MODES:
        raise typer.BadParameter(f"--compat takes darknet-cpu, not {value!r}")
    return value


def check_policy(value, option):
    from ..data.datasets import POLICIES
    if value not in POLICIES:
        raise typer.BadParameter(f"{option} takes {' or '.join(POLICIES)}, not {value!r}")


def _log(msg, file=None):
    typer.echo(msg, err=file is sys.stderr)


def _net(cfg, weights, dc, batch=1, compat=None):
    """The network (built as C darknet's CPU build under compat="darknet-cpu"), checked to have
    detection layers with the .data file's classes."""
    from ..errors import DataError
    from ..parser import load_network
    from ..vision.box import detection_layers
    net = load_network(str(cfg), str(weights), batch=batch, compat=compat)
    classes = detection_layers(net)[-1].classes
    if classes != dc.classes:
        raise DataError(f"{cfg} has classes={classes} in its detection layers, {dc.path} has "
                        f"classes={dc.classes}")
    return net


def _bar(total, desc):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="img", file=sys.stderr, leave=False)


def _warn(msg):
    typer.echo(msg, err=True)


def map_(data: DataArg, cfg: CfgArg, weights: WeightsArg,
         thresh: Annotated[float, typer.Option("--thresh", "-thresh", callback=not_nan, help="confidence for precision/recall/F1/IoU")] = AB.map_thresh,
         iou_thresh: Annotated[float, typer.Option("--iou-thresh", "-iou_thresh", callback=not_nan, help="IoU for a true positive (mAP@IoU)")] = AB.map_iou_thresh,
         points: Annotated[int, typer.Option("--points", "-points", help="AP rule: 0 area under the curve (VOC 2010+), 11 (VOC 2007), 101 (COCO)")] = AB.map_points,
         dont_show: DontShow = False, ext_output: IgnoredExtOutput = False,
         map_flag: IgnoredMap = False, clear: IgnoredClear = False, out_flag: IgnoredOut = None,
         decoder: DecoderOption = None, compat: DetectCompatOption = None):
    """AlexeyAB's map: per-class AP and TP/FP, P/R/F1/avg IoU at --thresh, mAP@--iou-thresh by
    the --points rule; then COCOeval's 12 figures (AP@[.5:.95], AP50, AP75, APs/m/l, AR),
    computed as pycocotools computes them."""
    if points < 0 or points == 1:
        raise typer.BadParameter("-points takes 0 (area under the curve) or a count of 2 or more "
                                 "recall points (11, 101)")
    from ..data.datasets import valid_dataset
    from ..train.evaluate import evaluate_map
    dc, ds = valid_dataset(data, log=_warn)
    net = _net(cfg, weights, dc, compat=compat)
    with _bar(len(ds), "map") as bar:
        r = evaluate_map(net, ds.paths, ds.boxes, dc.classes, dc.class_names(), thresh,
                         iou_thresh, progress=bar.update, points=points, decoder=decoder)
    typer.echo(f"detections on {len(ds)} images")
    typer.echo(r.report())


def recall(data: DataArg, cfg: CfgArg, weights: WeightsArg,
           thresh: Annotated[float, typer.Option(callback=not_nan, help="objectness for a proposal")] = PJ.recall_thresh,
           iou_thresh: Annotated[float, typer.Option(callback=not_nan, help="IoU for a truth to count as found")] = PJ.recall_iou_thresh,
           nms: Annotated[float, typer.Option(callback=not_nan, help="NMS IoU")] = PJ.recall_nms,
           dont_show: DontShow = False, ext_output: IgnoredExtOutput = False,
           map_flag: IgnoredMap = False, clear: IgnoredClear = False,
           thresh_flag: Annotated[Optional[float], typer.Option("-thresh", help="Darknet's -thresh: accepted and ignored (Darknet's recall uses a fixed .001; --thresh sets it here)", show_default=False)] = None,
           out_flag: IgnoredOut = None, decoder: DecoderOption = None,
           compat: DetectCompatOption = None):
    """validate_detector_recall: per image, truths found by any proposal, proposals per image,
    average best IoU."""
    from ..data.datasets import valid_dataset
    from ..train.evaluate import validate_detector_recall
    dc, ds = valid_dataset(data, log=_warn)
    net = _net(cfg, weights, dc, compat=compat)
    for totals in validate_detector_recall(net, ds.paths, ds.boxes, thresh, iou_thresh, nms,
                                           decoder):
        typer.echo(totals.line())


def valid(data: DataArg, cfg: CfgArg, weights: WeightsArg,
          out: Annotated[Path, typer.Option(help="results folder")] = Path("results"),
          prefix: Annotated[str, typer.Option("--prefix", "-out", help="per-class file prefix (Darknet's -out)")] = "comp4_det_test_",
          thresh: Annotated[Optional[float], typer.Option(callback=not_nan, help="probability threshold (default: pjreddie 0.005, AlexeyAB 0.001)", show_default=False)] = None,
          nms: Annotated[Optional[float], typer.Option(callback=not_nan, help="NMS IoU (default: pjreddie 0.45, AlexeyAB 0.6)", show_default=False)] = None,
          dont_show: DontShow = False, ext_output: IgnoredExtOutput = False,
          map_flag: IgnoredMap = False, clear: IgnoredClear = False,
          thresh_flag: Annotated[Optional[float], typer.Option("-thresh", help="Darknet's -thresh: accepted and ignored (Darknet's valid uses a fixed .005; --thresh sets it here)", show_default=False)] = None,
          decoder: DecoderOption = None, compat: DetectCompatOption = None):
    """validate_detector: per-class result files (`<prefix><class>.txt`: id score xmin ymin xmax
    ymax, pixels, 1-based), or with `eval = coco` in the .data file coco_results.json."""
    from ..data.datasets import get_paths, read_data_cfg
    from ..errors import DataError
    from ..outputs import check_outputs_not_inputs
    from ..train.evaluate import class_file_stems, validate_detector
    if any(sep in prefix for sep in ("/", "\\", "\0")) or prefix.startswith("."):
        raise typer.BadParameter(f"--prefix {prefix!r}: a file-name prefix, without a folder "
                                 f"(use --out for the folder) or a leading dot")
    dc = read_data_cfg(data)
    names = dc.class_names()[:dc.classes]
    if not dc.valid:
        raise DataError(f"{data}: no `valid` list")
    results = ([out / "coco_results.json"] if dc.eval == "coco" else
               [out / f"{prefix}{stem}.txt" for stem in class_file_stems(names)])
    check_outputs_not_inputs({"the result file": results}, {
        "the data file": data, "the cfg": cfg, "the weights": weights,
        "the valid list": dc.resolve(dc.valid), "the names file": dc.resolve(dc.names)})
    paths = get_paths(dc.resolve(dc.valid))
    net = _net(cfg, weights, dc, compat=compat)
    d = net.quirks.defaults         # validate_detector's thresh and nms of the dialect
    thresh, nms = d.valid_thresh if thresh is None else thresh, d.valid_nms if nms is None else nms
    coco = dc.eval == "coco"
    with _bar(len(paths), "valid") as bar:
        written = validate_detector(net, paths, names, out, prefix, thresh, nms, coco, bar.update,
                                    decoder)
    if coco:
        typer.echo(f"wrote {written} detections to {out / 'coco_results.json'}")
    else:
        typer.echo(f"wrote {dc.classes} result files to {out}/{prefix}<class>.txt")


def register(app: typer.Typer):
    detector_app.command("train")(train)
    detector_app.command("map")(map_)
    detector_app.command("recall")(recall)
    detector_app.command("valid")(valid)
