"""`darknumba detector train|map|recall|valid`: Darknet's train_detector, AlexeyAB's
validate_detector_map, pjreddie's validate_detector_recall and validate_detector."""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from .detector import detector_app
from .options import not_nan

DataArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .data file")]
CfgArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg file")]
WeightsArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help=".weights file")]

COCO_IDS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
            25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49,
            50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74,
            75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90)


def train(data: DataArg, cfg: CfgArg,
          weights: Annotated[Path | None, typer.Argument(
              exists=True, dir_okay=False, help="starting weights (full, or cut by `partial`)")] = None,
          clear: Annotated[bool, typer.Option("--clear", "-clear", help="reset `seen` to 0 (fine-tuning)")] = False,
          seed: Annotated[int, typer.Option(min=0, help="seed for image order and augmentation")] = 0,
          workers: Annotated[int, typer.Option(min=1, help="background loader threads")] = 2,
          bad_data: Annotated[str, typer.Option(help="on a bad image or label: skip (warn) or stop")] = "skip",
          stats_every: Annotated[int, typer.Option(min=0, help="print yolo layer stats every N iterations (0: never)")] = 0,
          chart: Annotated[bool, typer.Option(help="draw chart.png in the backup folder (needs matplotlib)")] = True,
          backup: Annotated[Path | None, typer.Option(help="checkpoint folder (default: the .data file's backup)")] = None,
          max_batches: Annotated[int | None, typer.Option(min=0, help="override [net] max_batches")] = None,
          checkpoint_every: Annotated[int, typer.Option(min=1, help="<cfg>_<iter>.weights every N iterations ...")] = 100,
          checkpoint_until: Annotated[int, typer.Option(min=0, help="... below this iteration ...")] = 1000,
          checkpoint_every_after: Annotated[int, typer.Option(min=1, help="... then every N")] = 10000,
          backup_every: Annotated[int, typer.Option(min=1, help="<cfg>.backup every N iterations")] = 100,
          letterbox: Annotated[bool, typer.Option(help="place training images letterboxed instead of Darknet's jitter crop")] = False,
          map_every: Annotated[int, typer.Option(min=0, help="measure mAP@0.5 on the valid list every N iterations (0: never)")] = 0,
          map_flag: Annotated[bool, typer.Option("--map", "-map", help="AlexeyAB's -map: mAP every 4 epochs (at least 100 iterations)")] = False,
          dont_show: Annotated[bool, typer.Option("-dont_show", hidden=True, help="accepted for Darknet commands; no window is ever shown")] = False,
          progress: Annotated[bool, typer.Option(help="progress bar with ETA")] = True,
          compat: Annotated[str | None, typer.Option(
              help="darknet-cpu: reproduce C darknet's CPU build where it is wrong (1x1 convolution "
                   "backward overwrites, strided 1x1 forward, adam ignored); default: correct gradients")] = None,
):
    """Train a detector (Darknet's `detector train`): checkpoints in the backup folder, Ctrl-C
    saves <cfg>.backup (exit status 130); starting from a checkpoint resumes at its `seen`."""
    from ..train.detector import Schedule, TrainOptions, train_detector
    check_policy(bad_data, "--bad-data")
    if map_flag and not map_every:
        map_every = -1          # train_detector turns it into 4 epochs
    opts = TrainOptions(weights=str(weights) if weights else None, clear=clear, seed=seed,
                        workers=workers, bad_data=bad_data, stats_every=stats_every, chart=chart,
                        backup=str(backup) if backup else None, max_batches=max_batches,
                        schedule=Schedule(checkpoint_every, checkpoint_until,
                                          checkpoint_every_after, backup_every),
                        progress=progress, letterbox=letterbox, map_every=map_every,
                        compat=check_compat(compat))
    if train_detector(str(data), str(cfg), opts, log=_log)["interrupted"]:
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


def _valid_set(data, policy="skip"):
    from ..data.datasets import DataIssues, DetectionDataset, get_paths, read_data_cfg
    from ..errors import DataError
    dc = read_data_cfg(data)
    lst = dc.resolve(dc.valid)
    if not lst:
        raise DataError(f"{data}: no `valid` list")
    issues = DataIssues(policy, log=lambda m: typer.echo(m, err=True))
    ds = DetectionDataset(get_paths(lst), dc.classes, issues)
    return dc, ds


def _net(cfg, weights, dc, batch=1):
    """The network, checked to have detection layers with the .data file's classes."""
    from ..errors import DataError
    from ..parser import load_network
    from ..vision.box import detection_layers
    net = load_network(str(cfg), str(weights), batch=batch)
    classes = detection_layers(net)[-1].classes
    if classes != dc.classes:
        raise DataError(f"{cfg} has classes={classes} in its detection layers, {dc.path} has "
                        f"classes={dc.classes}")
    return net


def _bar(total, desc):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="img", file=sys.stderr, leave=False)


def map_(data: DataArg, cfg: CfgArg, weights: WeightsArg,
         thresh: Annotated[float, typer.Option("--thresh", "-thresh", callback=not_nan, help="confidence for precision/recall/F1/IoU")] = 0.25,
         iou_thresh: Annotated[float, typer.Option("--iou-thresh", "-iou_thresh", callback=not_nan, help="IoU for a true positive (mAP@IoU)")] = 0.5):
    """Per-class AP, mAP@0.5 (VOC all-point), COCO mAP@[.5:.95], and P/R/F1/avg IoU at --thresh."""
    from ..train.evaluate import evaluate_map
    dc, ds = _valid_set(data)
    net = _net(cfg, weights, dc)
    with _bar(len(ds), "map") as bar:
        r = evaluate_map(net, ds.paths, ds.boxes, dc.classes, dc.class_names(), thresh,
                         iou_thresh, progress=bar.update)
    typer.echo(f"detections on {len(ds)} images")
    typer.echo(r.report())


def recall(data: DataArg, cfg: CfgArg, weights: WeightsArg,
           thresh: Annotated[float, typer.Option(callback=not_nan, help="objectness for a proposal")] = 0.001,
           iou_thresh: Annotated[float, typer.Option(callback=not_nan, help="IoU for a truth to count as found")] = 0.5,
           nms: Annotated[float, typer.Option(callback=not_nan, help="NMS IoU")] = 0.4):
    """validate_detector_recall: per image, truths found by any proposal, proposals per image,
    average best IoU."""
    from ..train.evaluate import detect_list, recall_stats
    dc, ds = _valid_set(data)
    net = _net(cfg, weights, dc)
    total = correct = proposals = 0
    iou_sum = 0.0
    for k, _, _, boxes, probs, objs in detect_list(net, ds.paths, thresh, nms):
        keep = objs > thresh
        proposals += int(keep.sum())
        n, c, s = recall_stats(boxes[keep], ds.boxes[k], iou_thresh)
        total, correct, iou_sum = total + n, correct + c, iou_sum + s
        typer.echo(f"{k:5d} {correct:5d} {total:5d}\tRPs/Img: {proposals / (k + 1):.2f}\t"
                   f"IOU: {100 * iou_sum / max(total, 1):.2f}%\t"
                   f"Recall:{100 * correct / max(total, 1):.2f}%")


def valid(data: DataArg, cfg: CfgArg, weights: WeightsArg,
          out: Annotated[Path, typer.Option(help="results folder")] = Path("results"),
          prefix: Annotated[str, typer.Option(help="per-class file prefix")] = "comp4_det_test_",
          thresh: Annotated[float, typer.Option(callback=not_nan, help="probability threshold")] = 0.005,
          nms: Annotated[float, typer.Option(callback=not_nan, help="NMS IoU")] = 0.45):
    """validate_detector: per-class result files (`<prefix><class>.txt`: id score xmin ymin xmax
    ymax, pixels, 1-based), or with `eval = coco` in the .data file coco_results.json."""
    from ..data.datasets import get_paths, read_data_cfg
    from ..errors import DataError
    from ..train.evaluate import detect_list
    if any(sep in prefix for sep in ("/", "\\", "\0")) or prefix.startswith("."):
        raise typer.BadParameter(f"--prefix {prefix!r}: a file-name prefix, without a folder "
                                 f"(use --out for the folder) or a leading dot")
    dc = read_data_cfg(data)
    names = dc.class_names()
    if not dc.valid:
        raise DataError(f"{data}: no `valid` list")
    paths = get_paths(dc.resolve(dc.valid))
    net = _net(cfg, weights, dc)
    out.mkdir(parents=True, exist_ok=True)
    coco = dc.eval == "coco"
    results = []
    with contextlib.ExitStack() as stack:
        files = {} if coco else {
            c: stack.enter_context(open(out / f"{prefix}{stem}.txt", "w"))
            for c, stem in enumerate(class_file_stems(names[:dc.classes]))}
        bar = stack.enter_context(_bar(len(paths), "valid"))
        for _, p, (w, h), boxes, probs, _ in detect_list(net, paths, thresh, nms, bar.update):
            stem = os.path.splitext(os.path.basename(p))[0]
            for b, pr in zip(boxes, probs):
                x0, x1 = (b[0] - b[2] / 2) * w, (b[0] + b[2] / 2) * w
                y0, y1 = (b[1] - b[3] / 2) * h, (b[1] + b[3] / 2) * h
                for c in pr.nonzero()[0]:
                    if coco:
                        x0c, y0c = max(x0, 0.0), max(y0, 0.0)
                        x1c, y1c = min(x1, w), min(y1, h)
                        results.append({"image_id": _coco_image_id(p),
                                        "category_id": COCO_IDS[c] if dc.classes == 80 else int(c),
                                        "bbox": [x0c, y0c, x1c - x0c, y1c - y0c],
                                        "score": float(pr[c])})
                    else:
                        files[c].write(f"{stem} {pr[c]:f} {max(x0 + 1, 1):f} {max(y0 + 1, 1):f} "
                                       f"{min(x1 + 1, w):f} {min(y1 + 1, h):f}\n")
    if coco:
        (out / "coco_results.json").write_text(json.dumps(results))
        typer.echo(f"wrote {len(results)} detections to {out / 'coco_results.json'}")
    else:
        typer.echo(f"wrote {dc.classes} result files to {out}/{prefix}<class>.txt")


def class_file_stems(names: list[str]) -> list[str]:
    """validate_detector's per-class file names (`<prefix><name>.txt`) made safe: a name is one
    file name inside the output folder (no '/', '\\', NUL or other control characters, no
    leading dots, so no '..'), at most 100 characters; names that end up equal (or empty)
    get their class index appended."""
    stems = [re.sub(r"[/\\\x00-\x1f\x7f]", "_", name).lstrip(".")[:100] for name in names]
    counts = {s: stems.count(s) for s in stems}
    return [s if s and counts[s] == 1 else f"{s}_{c}" if s else f"class_{c}"
            for c, s in enumerate(stems)]


def _coco_image_id(path: str) -> int:
    """get_coco_image_id: the number after the last '_' (or after the folder) in the name."""
    name = os.path.splitext(os.path.basename(path))[0]
    digits = name.rsplit("_", 1)[-1]
    try:
        return int(digits)
    except ValueError:
        return 0


def register(app: typer.Typer):
    detector_app.command("train")(train)
    detector_app.command("map")(map_)
    detector_app.command("recall")(recall)
    detector_app.command("valid")(valid)
