"""Tier 4: tiny networks trained over several datums track C darknet, like llm.c's expected
losses: the cost of every datum, and the weights save_weights writes at the end (momentum,
batch-norm rolling statistics, burn-in and step/poly rates over 4 or 5 updates with
subdivisions=2).

tests/fixtures/multistep/NAME/ holds one run of pjreddie's C darknet (README.md there: commit,
build, how): net.cfg, init.weights, the datum (input.f32, truth.f32), the per-datum costs
(costs.json) and C's final.weights. test_tracks_recorded_c_run needs no C build;
test_tracks_live_c_run runs the C side again through tests/c_train.py when DARKNET_DIR points
at a pjreddie tree built with make. `PYTHONPATH=tests python tests/networks/test_multistep.py DARKNET_DIR` records the
fixtures from the golden runs in tests/fixtures/golden.

Tolerances, with room for another BLAS on the machine running darknumba (its sums in another
order; darknet's side is fixed): every cost within 1e-4 of C's (relative), every .weights
record within 1e-4 of its largest |value| (tensordiff's max rel). Measured on the recording
machine (scipy-openblas): costs <= 5.3e-6, records <= 4.3e-5 (det-small's rolling means).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import GOLDEN, weights_rows
from tiny_nets import set_net_options

import darknumba as dn
from darknumba.parity.tensordiff import named_rows, rows_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "multistep"
COST_TOL = 1e-4
WEIGHTS_TOL = 1e-4
LIVE_WEIGHTS_TOL = 1e-3
# name: (golden fixture, cfg changes, datums, compat)
RUNS = {
    "det-small": ("det-small", {"batch": 4, "subdivisions": 2, "burn_in": 3,
                                "learning_rate": 0.001, "steps": 5, "scales": ".5"},
                  10, "darknet-cpu"),
    "cls-small-fc": ("cls-small-fc", {"batch": 8, "subdivisions": 2, "burn_in": 2}, 8, None),
    "act-mix": ("act-mix", {"batch": 4, "subdivisions": 2, "learning_rate": 0.0005}, 8, None),
}


def train(d: Path, compat, datums, out: Path):
    """darknumba's side: `datums` train_datum calls on the run's datum from its init weights,
    the weights then written to `out`. Returns (the network, the per-datum costs)."""
    net = dn.load_network(d / "net.cfg", d / "init.weights", compat=compat)
    x, t = np.fromfile(d / "input.f32", "<f4"), np.fromfile(d / "truth.f32", "<f4")
    costs = [net.train_datum(x, t) for _ in range(datums)]
    dn.save_weights(net, out)
    return net, costs


def run_c(darknet_dir: Path, d: Path, batch: int, datums: int, out: Path) -> list[float]:
    """C darknet's side, in a child process (tests/c_train.py): per-datum costs; weights to out."""
    child = Path(__file__).resolve().parents[1] / "c_train.py"
    r = subprocess.run([sys.executable, child, darknet_dir / "libdarknet.so", d / "net.cfg",
                        d / "init.weights", d / "input.f32", d / "truth.f32", str(batch),
                        str(datums), out], capture_output=True, text=True, check=True)
    return json.loads(r.stderr.strip().splitlines()[-1])


def check(net, ours, theirs, ours_weights: bytes, their_weights: bytes, weights_tol, label):
    rows = named_rows({f"cost {i}": c for i, c in enumerate(ours)},
                      {f"cost {i}": c for i, c in enumerate(theirs)}, tol=COST_TOL)
    report = rows_report(rows, COST_TOL, f"{label}: costs")
    assert all(r.ok for r in rows), report
    print(report)
    rows = weights_rows(net, ours_weights, their_weights, weights_tol)
    report = rows_report(rows, weights_tol, f"{label}: weights after {len(theirs)} datums")
    assert all(r.ok for r in rows), report
    print(report)


@pytest.mark.parametrize("name", list(RUNS))
def test_tracks_recorded_c_run(tmp_path, name):
    d = FIXTURES / name
    recorded = json.loads((d / "costs.json").read_text())
    _, _, datums, compat = RUNS[name]
    assert recorded["datums"] == datums and recorded["compat"] == compat
    net, ours = train(d, compat, datums, tmp_path / "ours.weights")
    check(net, ours, recorded["costs"], (tmp_path / "ours.weights").read_bytes(),
          (d / "final.weights").read_bytes(), WEIGHTS_TOL, name)


@pytest.mark.parametrize("name", list(RUNS))
def test_tracks_live_c_run(tmp_path, name):
    root = os.environ.get("DARKNET_DIR")
    if not root or not (Path(root) / "libdarknet.so").exists():
        pytest.skip("DARKNET_DIR is not set to a pjreddie darknet tree built with make")
    d = FIXTURES / name
    _, _, datums, compat = RUNS[name]
    net, ours = train(d, compat, datums, tmp_path / "ours.weights")
    theirs = run_c(Path(root), d, net.batch, datums, tmp_path / "c.weights")
    check(net, ours, theirs, (tmp_path / "ours.weights").read_bytes(),
          (tmp_path / "c.weights").read_bytes(), LIVE_WEIGHTS_TOL, f"{name} (live)")


def record(darknet_dir: Path):
    """Writes tests/fixtures/multistep/NAME/ for every run: the golden fixture's cfg with the
    run's changes, its init weights and datum, then C darknet's costs and final weights."""
    for name, (golden, changes, datums, compat) in RUNS.items():
        src, d = GOLDEN / golden, FIXTURES / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "net.cfg").write_text(set_net_options((src / f"{golden}.cfg").read_text(), **changes))
        for f in ("init.weights", "input.f32", "truth.f32"):
            (d / f).write_bytes((src / f).read_bytes())
        batch = dn.parse_network_cfg(d / "net.cfg").batch
        costs = run_c(darknet_dir, d, batch, datums, d / "final.weights")
        (d / "costs.json").write_text(json.dumps({"golden": golden, "changes": changes,
                                                  "datums": datums, "compat": compat,
                                                  "batch": batch, "costs": costs}, indent=1) + "\n")
        print(f"{name}: {datums} datums, costs {costs[0]:.6g} .. {costs[-1]:.6g}")


if __name__ == "__main__":
    record(Path(sys.argv[1]))
