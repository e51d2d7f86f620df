"""`darknumba bench`: the per-layer table and the summary line, finite with random weights."""
import re
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from darknumba.cli import app

CFG = Path(__file__).resolve().parents[1] / "cfg" / "shapes-tiny.cfg"


@pytest.mark.parametrize("train", [False, True])
def test_bench_prints_a_layer_table_and_a_rate(train):
    args = ["bench", str(CFG), "--reps", "1"] + (["--train", "--batch", "2"] if train else [])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)      # no inf / NaN arithmetic
        r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    # each convolution with its path (layer.forward_path), then its time
    assert re.search(r"^\s+0 convolutional\s+(direct|winograd4x4|winograd2x2|1x1|im2col)"
                     r"\s+\d+\.\d+", r.output, re.M)
    what = "training step" if train else "forward"
    m = re.search(rf"{what} ([\d.]+) ms median for (\d) image\(s\): ([\d.]+) images/s", r.output)
    assert m and float(m.group(1)) > 0 and float(m.group(3)) > 0
