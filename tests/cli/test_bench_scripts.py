"""The bench/ scripts run with their smallest settings and print the tables the published
figures are read from: the traceability header, the expected columns, a row per peer or way.
Each runs in a subprocess (as a user runs it), bounded by a timeout."""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
TINY = str(ROOT / "cfg" / "shapes-tiny.cfg")          # 96x96, two [yolo] heads, 3 classes
HEADER = ("# command: python bench/", "# date:", "# commit:", "# cpu:", "# threads:")


def run(script, *args, timeout=600, env=None):
    r = subprocess.run([sys.executable, str(BENCH / script), *map(str, args)], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, f"{script} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def assert_header(out):
    for h in HEADER:
        assert h in out, f"header line {h!r} missing:\n{out[:1500]}"


def table(out, title_part):
    """The rows under the `## ...title_part...` line: {first cell: the rest split}."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("## ") and title_part in ln)
    header = lines[start + 1].split()
    rows = {}
    for ln in lines[start + 2:]:
        if not ln.strip() or ln.startswith(("#", "dn/peer", "frames/s", "darknumba / C")):
            break
        parts = ln.split()
        rows[parts[0] if parts[0] != "openvino" else " ".join(parts[:2])] = parts
    return header, rows


def installed(module):
    return importlib.util.find_spec(module) is not None


@pytest.mark.slow
def test_peers_prints_every_installed_peer_with_checked_outputs():
    out = run("peers.py", "--cfg", TINY, "--size", "96", "--runs", "2", "--iters", "2",
              "--warmup", "1", "--train-batch", "2", "--openvino-default", timeout=1500)
    assert_header(out)
    assert "RANDOM weights" in out                  # shapes-tiny has no official weights
    header, rows = table(out, "inference, batch 1")
    assert header == ["peer", "run", "1", "run", "2", "median", "min", "images/s", "peak",
                      "RSS", "dn/peer", "check", "others", "detail"]
    expected = {"darknumba"} | {p for p, m in [("opencv", "cv2"), ("torch", "torch"),
                                               ("onnxruntime", "onnxruntime"),
                                               ("openvino f32", "openvino"),
                                               ("openvino dflt", "openvino")] if installed(m)}
    assert set(rows) == expected, out
    for name, cells in rows.items():
        assert "failed:" not in cells, out
        k = 2 if name.startswith("openvino") else 1
        runs, med = [float(v) for v in cells[k:k + 2]], float(cells[k + 2])
        assert all(v > 0 for v in runs) and min(runs) <= med <= max(runs), out
        assert cells[k + 5].endswith("M")           # peak RSS
    assert "OUTPUTS DIFFER" not in out and "WAS imported" not in out, out
    for name in ("torch", "onnxruntime", "openvino f32"):
        if name in rows:
            k = 2 if name.startswith("openvino") else 1
            assert float(rows[name][k + 7]) <= 1e-3, out      # check column
    header, rows = table(out, "training step, batch 2")
    assert set(rows) == {"darknumba"} | ({"torch"} if installed("torch") else set()), out
    assert all("failed:" not in cells for cells in rows.values()), out
    assert "## summary" in out


def test_peer_workers_keep_darknumba_out_of_the_peers(tmp_path):
    """The PyTorch and onnxruntime processes import no darknumba, and their outputs are
    darknumba's (the twin reads the cfg and weights itself)."""
    if not installed("torch"):
        pytest.skip("torch is not installed")
    sys.path.insert(0, str(BENCH))
    try:
        import peers
    finally:
        sys.path.remove(str(BENCH))
    cfg = peers.sized_cfg(Path(TINY), 96, tmp_path / "net.cfg")
    job = {"cfg": str(cfg), "weights": None, "random_weights": str(tmp_path / "r.weights"),
           "heads_out": str(tmp_path / "dn.npz")}
    info = peers.run_child("prepare", job, timeout=600)
    assert "error" not in info, info
    for peer in ("torch", "onnxruntime"):
        if peer == "onnxruntime":
            if not installed("onnxruntime"):
                continue
            onnx = tmp_path / "net.onnx"
            subprocess.run([str(Path(sys.executable).with_name("darknumba")), "export", "onnx",
                            str(cfg), info["weights"], str(onnx), "--no-check"], check=True,
                           capture_output=True, timeout=600)
        else:
            onnx = None
        out = peers.run_child(peer, {
            "cfg": str(cfg), "weights": info["weights"], "onnx": str(onnx), "mode": "infer",
            "batch": 1, "threads": 1, "iters": 1, "warmup": 0, "dialect": info["dialect"],
            "c": info["c"], "h": info["h"], "w": info["w"],
            "heads_out": str(tmp_path / f"{peer}.npz")}, timeout=600)
        assert "error" not in out, out
        assert out["darknumba_imported"] is False
        assert out["rss_mb"] > 0 and len(out["times"]) == 1
        assert peers.check(job["heads_out"], str(tmp_path / f"{peer}.npz")) <= 1e-3


def test_darknet_twin_reads_what_darknumba_writes(tmp_path):
    """The twin's cfg reader gives darknumba's shapes; its weights reader consumes the file."""
    sys.path.insert(0, str(BENCH))
    try:
        from darknet_twin import read_cfg, read_weights
    finally:
        sys.path.remove(str(BENCH))
    import darknumba as dn
    for cfg in ("yolov3-tiny.cfg", "yolov4-tiny.cfg", "yolov3.cfg", "shapes-tiny.cfg"):
        net = dn.parse_network_cfg(str(ROOT / "cfg" / cfg), seed=None, allocate=False)
        twin = read_cfg(ROOT / "cfg" / cfg)
        assert len(twin) - 1 == len(net.layers)
        for l, t in zip(net.layers, twin[1:]):
            assert (l.type, l.out_c, l.out_h, l.out_w) == (t["type"], t["out_c"], t["out_h"], t["out_w"])
    net = dn.load_network(TINY, None, batch=1)
    dn.save_weights(net, tmp_path / "w.weights")
    convs = read_weights(tmp_path / "w.weights", read_cfg(TINY))
    first = next(l for l in net.layers if l.type == "convolutional")
    assert (convs[0]["weights"].ravel() == first.weights.ravel()).all()


def test_c_train_step_says_it_skips_without_a_build():
    env = {k: v for k, v in os.environ.items() if k != "DARKNET_DIR"}
    r = subprocess.run([sys.executable, str(BENCH / "c_train_step.py")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "skipped" in r.stdout and "DARKNET_DIR" in r.stdout


def test_c_train_step_reads_darknets_iteration_lines(tmp_path):
    """With a stand-in `darknet` printing pjreddie's lines: the median of iterations 2..N."""
    fake = tmp_path / "darknet"
    fake.write_text("#!/bin/sh\nfor i in 1 2 3 4; do echo \"$i: 9.5, 9.5 avg, 0.000000 rate, "
                    "0.$i seconds, $((i*2)) images\"; done\n")
    fake.chmod(0o755)
    out = run("c_train_step.py", "--darknet", tmp_path, "--cfg", TINY, "--size", "96",
              "--batch", "2", "--iters", "4", "--runs", "2", "--images", "8", timeout=300)
    assert_header(out)
    header, rows = table(out, "training step, batch 2")
    assert header == ["implementation", "run", "1", "run", "2", "median", "images/s"]
    assert rows["C"][2:] == ["0.300", "0.300", "0.300", "6.67"]      # median of 0.2 0.3 0.4


@pytest.mark.slow
def test_c_train_step_on_a_real_build():
    d = os.environ.get("DARKNET_DIR")
    if not d:
        pytest.skip("DARKNET_DIR is not set (point it at a built darknet tree to time its "
                    "training step)")
    out = run("c_train_step.py", "--darknet", d, "--cfg", TINY, "--size", "96", "--batch", "2",
              "--iters", "3", "--runs", "1", "--images", "8", "--darknumba", timeout=1200)
    header, rows = table(out, "training step, batch 2")
    assert set(rows) == {"C", "darknumba"} and "darknumba / C darknet time:" in out


@pytest.mark.slow
def test_video_fps_times_the_command_and_the_api():
    out = run("video_fps.py", "--frames", "4", "--width", "128", "--height", "96", "--runs", "1",
              timeout=900)
    assert_header(out)
    header, rows = table(out, "frames/s")
    assert header == ["way", "run", "1", "median", "wall", "fps"]
    assert set(rows) == {"cli", "api-out", "api"}
    assert all(float(v) > 0 for cells in rows.values() for v in cells[1:])


def test_mpi_scaling_defaults_give_the_docs_table():
    out = run("mpi_scaling.py", timeout=300)
    assert_header(out)
    # docs/mpi.md, "Scaling model": yolov4-tiny at batch 64 on 8 / 32 / 128 machines, 10 and
    # 25 Gbit/s: efficiency without and with --overlap
    section = out[out.index("## yolov4-tiny.cfg: "):]
    section = section[:section.index("\n\n")] if "\n\n" in section else section
    got = [tuple(ln.split()[i] for i in (0, 1, 5, 6)) for ln in section.splitlines()[2:]
           if ln.split()[1] in ("8", "32", "128")]
    assert got == [("10", "8", "94%", "93%"), ("10", "32", "79%", "93%"),
                   ("10", "128", "46%", "54%"), ("25", "8", "96%", "93%"),
                   ("25", "32", "86%", "93%"), ("25", "128", "57%", "70%")], section


@pytest.mark.slow
def test_forward_prints_its_header_and_rate():
    out = run("forward.py", "--cfg", TINY, "--weights", "none", "--reps", "2", timeout=600)
    assert_header(out)
    assert re.search(r"steady state\s+[\d.]+ ms/image median", out), out


@pytest.mark.slow
def test_kernel_loads_times_every_cache_load(tmp_path):
    """bench/kernel_loads.py: one row per kernel loaded from the cache, parallel ones marked,
    times positive, the totals add the rows."""
    import darknumba as dn
    weights = tmp_path / "tiny.weights"
    dn.save_weights(dn.load_network(TINY), weights)
    out = run("kernel_loads.py", "--cfg", TINY, "--weights", weights, "--runs", "1",
              "--top", "100")
    assert_header(out)
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("kernel ")) + 1
    rows = [ln.split() for ln in lines[start:] if ln.startswith("darknumba.kernels.")]
    assert len(rows) >= 5 and all(float(r[-1]) > 0 for r in rows), out
    par = [r for r in rows if r[1] == "yes"]
    assert par and len(par) < len(rows), out            # both kinds are loaded by detect
    m = re.search(r"parallel kernels: (\d+), (\d+) ms", out)
    assert m and int(m.group(1)) == len(par), out
    assert abs(int(m.group(2)) - sum(float(r[-1]) for r in par)) <= 1 + 0.01 * int(m.group(2))


@pytest.mark.slow
def test_layer_peers_maps_onnxruntimes_nodes_to_every_layer():
    """bench/layer_peers.py: a row per darknumba layer with positive times, every convolution's
    onnxruntime Conv node mapped to it (none left without a layer but the reorders), and the
    rows' sums matching the totals line."""
    out = run("layer_peers.py", "--cfg", TINY, "--size", "96", "--threads", "1", "--runs", "1",
              "--reps", "2", "--warmup", "0", timeout=600)
    assert_header(out)
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("## per layer")) + 1
    assert lines[start].split()[:16] == ["layer", "type", "path", "GFLOP", "dn", "ms", "dn", "min",
                                         "dn", "cpu", "ort", "ms", "ort", "min", "min", "dn-ort"], out
    rows = {}
    for ln in lines[start + 1:]:
        if not ln.strip()[:1].isdigit():
            break
        cells = ln.split()
        rows[int(cells[0])] = cells
    import darknumba as dn
    net = dn.load_network(TINY, None, batch=1)
    assert sorted(rows) == list(range(len(net.layers))), out
    dn_ms = 0.0
    for i, l in enumerate(net.layers):
        cells = rows[i]
        assert cells[1] == l.type, out
        assert cells[2] == (l.forward_path(net) or "-"), out
        ms, low, cpu, ort, ort_low, diff = (float(cells[k]) for k in range(4, 10))
        assert 0 < low <= ms and cpu > 0 and ort_low <= ort, out
        assert abs(diff - (low - ort_low)) <= 0.002, out
        dn_ms += ms
        if l.type in ("convolutional", "maxpool"):
            assert ort > 0 and cells[-1].split("+")[0] in ("Conv", "MaxPool"), out
    other = [ln for ln in lines[start:] if "(no layer)" in ln]
    assert all(set(ln.split()[-1].split("+")) <= {"ReorderInput", "ReorderOutput"}
               for ln in other), out
    total = next(ln for ln in lines[start:] if "sum of rows" in ln).split()
    assert abs(float(total[5]) - dn_ms) <= 0.01 + 1e-3 * dn_ms, out
    assert re.search(r"whole forward, median: darknumba [\d.]+ ms wall, [\d.]+ ms CPU; "
                     r"onnxruntime [\d.]+ \(profiling on\) [\d.]+ ms wall", out), out


@pytest.mark.slow
def test_winograd_error_prints_a_bounded_error_per_network_and_rule(tmp_path):
    """bench/winograd_error.py: a row per rule and network, each naming a Winograd path, the
    error within the 1e-3 of the head's scale that the detection tests allow, and the AVX-512
    rows without F(2x2)."""
    from PIL import Image
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (60, 80, 3), np.uint8)).save(tmp_path / "a.jpg")
    out = run("winograd_error.py", "--photos", tmp_path, "--size", "256", timeout=600)
    assert_header(out)
    rows = re.findall(r"^(avx2|avx512)\s+(\S+)\s+largest .*: ([\d.e+-]+)\s+\(paths: (.*)\)$", out,
                      re.M)
    assert [(r[0], r[1]) for r in rows] == [(rule, net) for rule in ("avx2", "avx512")
                                            for net in ("yolov3-tiny", "yolov4-tiny", "yolov3")]
    for rule, net, err, paths in rows:
        assert float(err) < 1e-3 and "winograd4x4" in paths, (rule, net, err)
        assert rule == "avx2" or "winograd2x2" not in paths
