"""The tests' tiny detection data sets, built in one place: Darknet-style shapes images with
their YOLO label files, train/valid lists and a .data file, as `darknumba data shapes` writes them
(darknumba.data.synthetic.generate_shapes: 3 classes, seeded), small enough for a test.

tests/cli/test_shapes.py checks the generator itself; a test that needs a set of its own calls
shapes_set, a module's fixture when several of its tests share one."""
from pathlib import Path

from darknumba.data.synthetic import generate_shapes


def shapes_set(root: Path, n: int, seed: int, size: tuple[int, int] = (40, 56),
               valid_fraction: float = 0.25) -> Path:
    """N generated images (sides drawn from SIZE) in ROOT/ds, a VALID_FRACTION of them listed
    for validation; returns the .data file."""
    return generate_shapes(Path(root) / "ds", n=n, valid_fraction=valid_fraction, seed=seed,
                           size=size)
