"""`parse_network_cfg(..., allocate=False)` / `darknumba summary`: the layer table without the
buffers. The same table as a full build, next to no memory, and a network that refuses to run."""
import re
import tracemalloc
import warnings

import numpy as np
import pytest
from conftest import ROOT
from typer.testing import CliRunner

import darknumba as dn
from darknumba.cli import app
from darknumba.errors import DarknumbaError

SHAPE_FIELDS = ("batch", "h", "w", "c", "out_h", "out_w", "out_c", "inputs", "outputs")

# every recurrent and less common layer type, small enough to build for real ([rnn] hidden= is
# AlexeyAB's, so [crnn] takes AlexeyAB's keys too)
MIXED = """
[net]
batch=2
height=12
width=12
channels=3
[crop]
crop_height=10
crop_width=10
[convolutional]
filters=6
size=3
stride=1
pad=1
batch_normalize=1
activation=leaky
[local]
filters=4
size=3
stride=1
pad=1
activation=linear
[deconvolutional]
filters=4
size=2
stride=2
activation=leaky
[maxpool]
size=2
stride=2
[reorg]
stride=2
[normalization]
[batchnorm]
[shortcut]
from=-2
[route]
layers=-1,-3
[upsample]
stride=2
[avgpool]
[connected]
output=12
activation=leaky
[rnn]
output=8
hidden=8
activation=leaky
[gru]
output=8
[lstm]
output=8
[crnn]
output=4
hidden=4
pad=1
batch_normalize=1
[dropout]
probability=.5
[connected]
output=5
activation=linear
[softmax]
[cost]
"""


def _build(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dn.parse_network_cfg(path, batch=1, **kw)


def _cfg(tmp_path, name, width=None):
    text = (ROOT / "cfg" / f"{name}.cfg").read_text()
    if width:
        text = re.sub(r"^width=\d+", f"width={width}", text, count=1, flags=re.MULTILINE)
        text = re.sub(r"^height=\d+", f"height={width}", text, count=1, flags=re.MULTILINE)
    path = tmp_path / f"{name}-{width}.cfg"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["yolov3-tiny", "yolov2-tiny", "tiny", "mixed"])
def test_same_table_as_a_full_build(name, tmp_path):
    if name == "mixed":
        path = tmp_path / "mixed.cfg"
        path.write_text(MIXED)
    else:
        path = _cfg(tmp_path, name, 128)
    full, table = _build(path, seed=None), _build(path, allocate=False)
    assert table.summary() == full.summary()
    for a, b in zip(full.layers, table.layers, strict=True):
        assert [getattr(a, f) for f in SHAPE_FIELDS] == [getattr(b, f) for f in SHAPE_FIELDS]
        for name_, arr in a.weight_records():
            assert dict(b.weight_records())[name_].shape == arr.shape
        assert b.output.shape == a.output.shape
        if b.output.size >= 4096:                # small arrays stay real (see memory.buffer)
            assert b.output.strides == (0,) and not b.output.flags.writeable


def test_a_large_network_costs_next_to_no_memory(tmp_path):
    """yolov3 at 1536x1536 wants over 6 GB for its outputs and deltas alone; its table takes a
    few megabytes."""
    path = _cfg(tmp_path, "yolov3", 1536)
    tracemalloc.start()
    try:
        net = _build(path, allocate=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    wanted = sum(2 * 4 * l.batch * l.outputs for l in net.layers)
    assert wanted > 5e9 and peak < 20e6
    assert net.layers[-1].out_w == 1536 // 8 and net.n == 107


def test_a_table_only_network_refuses_to_run(tmp_path):
    path = _cfg(tmp_path, "yolov3-tiny", 64)
    net = _build(path, allocate=False)
    x = np.zeros((1, 3, 64, 64), np.float32)
    for call in (lambda: net.forward(x), lambda: net.predict(x), net.backward, net.update,
                 lambda: net.resize(96, 96), lambda: dn.load_weights(net, path)):
        with pytest.raises(DarknumbaError, match=r"layer table only \(allocate=False\)"):
            call()


def test_summary_command_prints_the_table_of_a_large_input(tmp_path):
    path = _cfg(tmp_path, "yolov3", 1536)
    r = CliRunner().invoke(app, ["summary", str(path)])
    assert r.exit_code == 0, r.output
    rows = r.output.splitlines()
    assert rows[0].startswith("dialect: pjreddie")
    assert re.match(r"\s+0 conv\s+32\s+3 x 3 / 1\s+1536 x1536 x   3", rows[2])
    assert rows[-1].startswith("Total BFLOPs ")
