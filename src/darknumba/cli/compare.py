"""`darknumba compare`: layer-by-layer numbers against C darknet (a build of yours, or an .npz)."""
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import DarknumbaError


def compare(
    cfg: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg file")],
    weights: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help=".weights file")],
    image: Annotated[Optional[Path], typer.Argument(
        exists=True, dir_okay=False,
        help="an image (letterboxed as darknet does) or an input tensor (.npy, raw float32)")] = None,
    darknet: Annotated[Optional[Path], typer.Option(
        "--darknet", file_okay=False,
        help="a pjreddie darknet tree built with `make` (include/darknet.h, libdarknet.so); "
             "default: $DARKNET_DIR unless --npz is given. compare compiles against and runs "
             "code from this folder: use a tree you trust")] = None,
    npz: Annotated[Optional[Path], typer.Option(
        "--npz", dir_okay=False,
        help="compare with tensors recorded in an .npz (golden layout, holds its own input)")] = None,
    random_input: Annotated[bool, typer.Option(
        "--random-input", help="seeded uniform [0, 1) input instead of IMAGE")] = False,
    seed: Annotated[int, typer.Option(min=0, help="seed for --random-input")] = 0,
    train: Annotated[bool, typer.Option(
        "--train", help="one train_network_datum step: deltas, gradients, updated weights")] = False,
    truth: Annotated[Optional[Path], typer.Option(
        "--truth", exists=True, dir_okay=False,
        help="truth for --train: raw float32 / .npy (batch x truths), or labels .txt for yolo "
             "and region networks "
             "(class x y w h, relative to the network input)")] = None,
    batch: Annotated[Optional[int], typer.Option(
        min=1, help="images per pass (default: 1 forward, the cfg's batch/subdivisions with "
                    "--train)")] = None,
    tol: Annotated[float, typer.Option(
        help="a tensor fails when max |diff| > tol x max |darknet|")] = 1e-4,
    as_json: Annotated[bool, typer.Option("--json", help="print the full report as JSON")] = False,
    dump: Annotated[Optional[Path], typer.Option(
        "--dump", file_okay=False,
        help="save both sides' tensors to DIR/darknumba.npz and DIR/darknet.npz")] = None,
    perturb: Annotated[Optional[str], typer.Option(
        "--perturb", metavar="LAYER[:INDEX[:SIZE]]",
        help="self-test: add SIZE (default 0.1) x the layer's largest |weight| to one weight "
             "on darknumba's side; the report must name LAYER")] = None,
    timeout: Annotated[Optional[float], typer.Option(
        help="seconds to wait for C darknet")] = None,
):
    """Run CFG + WEIGHTS through darknumba and C darknet; print per-layer max |diff|, max rel diff
    and a verdict, name the first layer past --tol, and exit 1 when any tensor fails."""
    from ..outputs import check_outputs_not_inputs
    from ..parity.compare import compare_darknet, compare_npz, save_dump
    log = (lambda m: typer.echo(m, err=True))
    if dump is not None:
        check_outputs_not_inputs({"--dump": [dump / "darknumba.npz", dump / "darknet.npz"]},
                                 {"--npz": npz, "the cfg": cfg, "the weights": weights,
                                  "the image": image, "--truth": truth})
    if darknet is None and npz is None and os.environ.get("DARKNET_DIR"):
        darknet = Path(os.environ["DARKNET_DIR"])
    if (darknet is None) == (npz is None):
        raise DarknumbaError("give exactly one of --darknet DIR (a C darknet build; or set "
                             "DARKNET_DIR) or --npz FILE")
    if npz is not None:
        if image is not None or random_input or truth is not None or train or batch:
            raise DarknumbaError("--npz brings its own input, truth, run mode and batch; drop "
                                 "IMAGE / --random-input / --train / --truth / --batch")
        report, ours, ref = compare_npz(npz, cfg, weights, tol=tol, perturb=perturb, log=log)
    else:
        report, ours, ref = compare_darknet(
            darknet, cfg, weights, image=image, random_input=random_input, seed=seed,
            train=train, truth=truth, batch=batch, tol=tol, perturb=perturb, log=log,
            timeout=timeout)
    if dump is not None:
        save_dump(dump / "darknumba.npz", ours, report.mode, ours.get("meta", {}))
        save_dump(dump / "darknet.npz", ref, report.mode, ref.get("meta", {}))
        log(f"tensors saved to {dump}/darknumba.npz and {dump}/darknet.npz")
    typer.echo(report.to_json() if as_json else report.table())
    if not report.passed:
        from .common import fail
        fail(f"compare: {report.table().splitlines()[-1]}")


def register(app: typer.Typer):
    app.command()(compare)
