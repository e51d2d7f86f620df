"""`darknumba data check DATA` and `darknumba data shapes OUT`."""
from pathlib import Path
from typing import Annotated

import typer

from .options import DecoderOption

data_app = typer.Typer(rich_markup_mode=None, help="Check a dataset, or generate the synthetic shapes dataset.",
                       no_args_is_help=True)


@data_app.command("check")
def check(data: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Darknet .data file")],
          policy: Annotated[str, typer.Option(help="skip: report every problem; stop: fail at the first")] = "skip",
          decoder: DecoderOption = None):
    """Decode every image and check every label line of the train and valid lists (JPEGs by
    --decoder: check with stb a set that trains under --compat darknet-cpu)."""
    from ..data.datasets import check_data
    from .detector_train import check_policy
    check_policy(policy, "--policy")
    _, counts, issues = check_data(data, policy=policy, log=lambda m: typer.echo(m, err=True),
                                   decoder=decoder or "pillow")
    for k, n in counts.items():
        typer.echo(f"{k}: {n} usable images")
    typer.echo(issues.summary())
    if issues.issues:
        from .common import fail
        fail(f"{data}: {issues.summary()}")


@data_app.command("shapes")
def shapes(out: Annotated[Path, typer.Argument(help="output folder")],
           n: Annotated[int, typer.Option("--n", min=1, help="number of images")] = 2000,
           valid: Annotated[float, typer.Option(help="fraction held out for validation")] = 0.2,
           seed: Annotated[int, typer.Option(min=0, help="random seed")] = 0,
           force: Annotated[bool, typer.Option(
               "--force", help="write into OUT even if it holds train.txt, valid.txt, "
                               "shapes.data, shapes.names, images/ or labels/ (replacing them)")] = False):
    """Coloured circles, squares and triangles on textured backgrounds, with a train/valid
    split, shapes.data and shapes.names (train it with cfg/shapes-tiny.cfg)."""
    from tqdm import tqdm

    from ..data.synthetic import FILES, generate_shapes
    from ..outputs import check_not_replacing
    check_not_replacing([out / f for f in FILES], force, "a data set of yours")
    with tqdm(total=n, unit="img", leave=False) as bar:
        data = generate_shapes(out, n=n, valid_fraction=valid, seed=seed, progress=bar.update)
    typer.echo(f"wrote {n} images; data file: {data}")


def register(app: typer.Typer):
    app.add_typer(data_app, name="data")
