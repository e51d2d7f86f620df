"""What the commands share beyond their options (options.py): the exit statuses of the
contract (cli/__init__.py's run) and `fail`, the line on stderr, where JSON lines go, Darknet's
timing words, the check that a drawing or --json is no input, and how detection runs on a cold
numba cache."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

import typer

from ..errors import DataError

EXIT_OK, EXIT_BAD_INPUT, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def fail(message: str):
    """End a command that found problems and reported them in full (data check, compare) the
    contract's way: a last line `darknumba: error: ...` and exit status 1."""
    print(f"darknumba: error: {one_line(message)}", file=sys.stderr)
    raise typer.Exit(EXIT_BAD_INPUT)


def warn(msg: str):
    typer.echo(msg, err=True)


def drawing_path(out: Path | None, path: Path, single: bool, used: set) -> Path | None:
    """Where the image at `path` is drawn: `out` (default predictions.png) for one image;
    for several, <stem>.png in the folder `out` (none without it), numbered past the names
    `used`."""
    if single:
        return out if out is not None else Path("predictions.png")
    if out is None:
        return None
    name = f"{path.stem}.png"
    k = 1
    while name in used:
        name, k = f"{path.stem}_{k}.png", k + 1
    used.add(name)
    return out / name


def check_detect_outputs(out, json_out, paths: list, inputs: dict, video=None):
    """Refuse (a UsageError, exit status 2) a drawing (`out`, or the PNGs drawn into it for
    several images) or a --json file that is one of the images (or the `video`) or other
    `inputs` (what: path), compared as files: a hard link or a symlink to an input counts."""
    from ..outputs import check_outputs_not_inputs
    single, used = len(paths) == 1, set()
    drawn = ([out] if video is not None else [] if json_out == "-" and out is None else
             [drawing_path(out, Path(p), single, used) for p in paths])
    check_outputs_not_inputs(
        {"--out" if out is not None else "the drawing": drawn,
         "--json": json_out if isinstance(json_out, (str, os.PathLike)) else None},
        {"the input video": video, "the input image": paths, **inputs})


@contextmanager
def json_lines_to(json_out):
    """Where JSON lines go: stdout for '-', an open text file given (left open), a path
    (its folder made; written through a temporary file that replaces it at the end, so an
    error leaves the previous file), or nowhere (None, empty)."""
    from ..outputs import atomic_output
    if not json_out:
        yield None
    elif json_out == "-":
        yield sys.stdout
    elif hasattr(json_out, "write"):
        yield json_out
    else:
        with atomic_output(json_out, "w") as f:
            yield f


def predicted_in(seconds: float, alexeyab: bool) -> str:
    """Darknet's timing words: AlexeyAB's in milli-seconds, pjreddie's in seconds."""
    return (f"Predicted in {1000 * seconds:f} milli-seconds." if alexeyab
            else f"Predicted in {seconds:f} seconds.")


def first_run_mode() -> str:
    """How `detect` runs on a cold numba cache: "numpy" (default: the forward pass in numpy
    while the kernels compile in the background) or "compile" (DARKNUMBA_FIRST_RUN=compile:
    compile first, as `darknumba warmup` does)."""
    mode = os.environ.get("DARKNUMBA_FIRST_RUN", "numpy").strip().lower() or "numpy"
    if mode not in ("numpy", "compile"):
        raise DataError(f"DARKNUMBA_FIRST_RUN={mode!r}: expected numpy or compile")
    return mode
