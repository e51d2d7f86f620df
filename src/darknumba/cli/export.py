"""`darknumba export onnx|weights`: the network as an ONNX file, or its .weights with batch
norm folded into the convolutions."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .options import DialectOption

export_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                         help="Write a network as ONNX, or its weights with batch norm folded.")

LOW_THRESH = 0.005      # --nms's self-check when nothing passes --thresh (validate's thresh)
CfgArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .cfg file")]
WeightsArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help=".weights file")]


@export_app.command("onnx")
def onnx(cfg: CfgArg, weights: WeightsArg,
         out: Annotated[Path, typer.Argument(dir_okay=False, help="the .onnx file to write")],
         batch: Annotated[int, typer.Option(min=1, help="images per run (fixed unless --dynamic)")] = 1,
         fuse_bn: Annotated[bool, typer.Option(
             "--fuse-bn/--no-fuse-bn",
             help="fold batch norm into the convolutions (else BatchNormalization nodes)")] = True,
         decode: Annotated[bool, typer.Option(
             help="one `detections` output (batch, boxes, 5 + classes): centre x, y, width, "
                  "height in input pixels, objectness, class scores; else each head's raw output")] = False,
         dynamic: Annotated[bool, typer.Option(help="batch, height and width left free")] = False,
         nms: Annotated[bool, typer.Option(
             "--nms", help="decode and NonMaxSuppression in the graph: one `detections` output "
                           "(num, 7): batch index, class, score, x1, y1, x2, y2 in input pixels "
                           "(onnxruntime; OpenCV's DNN has no NonMaxSuppression: use --decode)")] = False,
         thresh: Annotated[float, typer.Option(
             "--thresh", min=0.0, max=1.0, help="--nms: keep a class whose score (objectness x class probability) is above this")] = 0.25,
         nms_thresh: Annotated[float, typer.Option(
             "--nms-thresh", min=0.0, max=1.0, help="--nms: drop a box whose IoU with a better one of its class is above this")] = 0.45,
         check: Annotated[bool, typer.Option(
             help="run the file in onnxruntime (when installed) and print its largest "
                  "difference from darknumba's forward pass per head, and how its "
                  "`detections` compare with darknumba's")] = True,
         dialect: DialectOption = None):
    """Write CFG + WEIGHTS as an ONNX file (opset 13, written with the onnx package, no torch).
    Inputs: `input`, NCHW float32 in [0, 1] (RGB, letterboxed or resized as for Darknet);
    outputs: `layer_<i>` per [yolo]/[region] head (or the last layer), or `detections`
    (--decode: every candidate; --nms: the kept boxes, docs/fine-tune.md)."""
    from ..export.onnx import compare_with_onnxruntime, build_onnx, export_onnx
    from ..outputs import check_outputs_not_inputs
    from ..parser import load_network
    check_outputs_not_inputs({"OUT": out}, {"the cfg": cfg, "the weights": weights})
    net = load_network(str(cfg), str(weights), batch=batch, dialect=dialect)
    kept = (nms_thresh, thresh) if nms else None
    model = export_onnx(net, out, fuse_bn=fuse_bn, decode=decode, dynamic=dynamic, nms=kept)
    outs = ", ".join(o.name for o in model.graph.output)
    typer.echo(f"wrote {out} ({out.stat().st_size:,} bytes; dialect {net.dialect}, batch norm "
               f"{'folded' if fuse_bn else 'as nodes'}; outputs {outs})")
    if not check:
        return
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        typer.echo("not checked: onnxruntime is not installed (pip install darknumba[onnx])")
        return
    import numpy as np

    from ..export.nms import check_detections
    from ..export.onnx import run_onnxruntime
    x = np.random.default_rng(0).random((net.batch, net.c, net.h, net.w), np.float32)
    raw = build_onnx(net, fuse_bn, False, dynamic) if decode or nms else model
    diffs = compare_with_onnxruntime(net, raw, x)       # leaves net's outputs at x
    typer.echo("onnxruntime vs darknumba on a random input, max |difference|: "
               + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    if decode or nms:
        got = run_onnxruntime(model, x)["detections"]
        line = check_detections(net, got, x, kept)
        if nms and not len(got) and thresh > LOW_THRESH:    # a random input: try more boxes
            low = (nms_thresh, LOW_THRESH)
            got = run_onnxruntime(build_onnx(net, fuse_bn, decode, dynamic, low), x)
            line = (f"no box above {thresh:g} on a random input; at {LOW_THRESH:g}: "
                    + check_detections(net, got["detections"], x, low))
        typer.echo(line)


@export_app.command("weights")
def weights_(cfg: CfgArg, weights: WeightsArg,
             out: Annotated[Path, typer.Argument(dir_okay=False, help="the .weights file to write")],
             fuse_bn: Annotated[bool, typer.Option(
                 "--fuse-bn", help="fold batch norm into the convolution weights")] = False,
             cfg_out: Annotated[Path | None, typer.Option(
                 help="the cfg for the folded weights (default: OUT with .cfg)")] = None,
             dialect: DialectOption = None):
    """With --fuse-bn: fold every batch norm into its convolution (or connected) layer with the
    dialect's own normaliser, so the outputs stay the same; writes OUT and the cfg that reads
    it (the same cfg with batch_normalize=0 in the folded layers)."""
    if not fuse_bn:
        raise typer.BadParameter("the one conversion is --fuse-bn (to copy a .weights file, "
                                 "copy it)", param_hint="--fuse-bn")
    from ..export.fold import fold_batchnorm, folded_cfg_text
    from ..outputs import atomic_write, check_outputs_not_inputs
    from ..parser import load_network
    from ..weights import save_weights
    cfg_out = cfg_out or out.with_suffix(".cfg")
    check_outputs_not_inputs({"OUT": out, "--cfg-out": cfg_out},
                             {"the cfg": cfg, "the weights": weights})
    net = load_network(str(cfg), str(weights), batch=1, dialect=dialect)
    layers = fold_batchnorm(net)
    atomic_write(cfg_out, folded_cfg_text(cfg, layers).encode())
    save_weights(net, out)
    typer.echo(f"folded batch norm into {len(layers)} layers ({net.dialect}'s normaliser); "
               f"wrote {out} and {cfg_out}"
               + (f" (load them with --dialect {net.dialect})" if dialect else ""))


def register(app: typer.Typer):
    app.add_typer(export_app, name="export")
