"""The shipped yolov3 family builds with the layer table Darknet prints and runs forward."""
import numpy as np
import pytest

import darknumba as dn
from conftest import ROOT

EXPECTED_ROWS = {
    "yolov3": {
        0: "    0 conv     32  3 x 3 / 1   608 x 608 x   3   ->   608 x 608 x  32  0.639 BFLOPs",
        1: "    1 conv     64  3 x 3 / 2   608 x 608 x  32   ->   304 x 304 x  64  3.407 BFLOPs",
        4: "    4 res    1                 304 x 304 x  64   ->   304 x 304 x  64",
        81: "   81 conv    255  1 x 1 / 1    19 x  19 x1024   ->    19 x  19 x 255  0.189 BFLOPs",
        82: "   82 yolo",
        86: "   86 route  85 61",
        87: "   87 conv    256  1 x 1 / 1    38 x  38 x 768   ->    38 x  38 x 256  0.568 BFLOPs",
        97: "   97 upsample            2x    38 x  38 x 128   ->    76 x  76 x 128",
        106: "  106 yolo",
    },
    "yolov3-spp": {
        82: "   82 max          13 x 13 / 1    19 x  19 x 512   ->    19 x  19 x 512",
        83: "   83 route  82 80 78 77",
        84: "   84 conv    512  1 x 1 / 1    19 x  19 x2048   ->    19 x  19 x 512  0.757 BFLOPs",
        113: "  113 yolo",
    },
}
YOLO_GRIDS = {"yolov3": [(82, 19), (94, 38), (106, 76)], "yolov3-spp": [(89, 19), (101, 38), (113, 76)]}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["yolov3", "yolov3-spp"])
def test_builds_with_darknets_table_and_runs_forward(name):
    net = dn.parse_network_cfg(ROOT / "cfg" / f"{name}.cfg", batch=1)
    rows = net.summary().splitlines()
    for i, row in EXPECTED_ROWS[name].items():
        assert rows[i + 1] == row
    assert rows[-1] == ("Total BFLOPs 140.692" if name == "yolov3" else "Total BFLOPs 141.449")
    rng = np.random.default_rng(0)
    for l in net.layers:
        for key, a in l.weight_records():
            if key == "rolling_variance":
                a[:] = rng.uniform(0.5, 1.5, a.size)
            elif key == "scales":
                a[:] = 1
            else:
                a[:] = rng.normal(0, 0.02, a.size)
    x = rng.uniform(0, 1, (1, 3, 608, 608)).astype(np.float32)
    net.forward(x)
    for i, g in YOLO_GRIDS[name]:
        l = net.layers[i]
        assert l.type == "yolo" and (l.out_c, l.out_h, l.out_w) == (255, g, g)
        out = l.output.reshape(3, 85, g, g)
        assert np.isfinite(out).all()
        assert (out[:, 4:] > 0).all() and (out[:, 4:] < 1).all()      # logistic on obj and classes
