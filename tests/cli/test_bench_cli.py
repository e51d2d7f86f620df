"""`darknumba bench`: the per-layer table and the summary line, finite with random weights."""
import re
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from darknumba.cli import app

CFG = Path(__file__).resolve().parents[2] / "cfg" / "shapes-tiny.cfg"


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


@pytest.fixture
def peak_cache(tmp_path, monkeypatch):
    """darknumba's cache folder in tmp_path, a small peak GEMM, and a count of measurements."""
    from darknumba.train import peak
    monkeypatch.setenv("DARKNUMBA_CACHE", str(tmp_path))
    calls = []
    measure = peak.measure_gemm_peak
    monkeypatch.setattr(peak, "measure_gemm_peak",
                        lambda: calls.append(1) or measure(sizes=(128,), runs=1))
    return tmp_path / peak.CACHE_NAME, calls


def bench_output(*extra) -> str:
    r = CliRunner().invoke(app, ["bench", str(CFG), "--reps", "1", *extra])
    assert r.exit_code == 0, r.output
    return r.output


def test_bench_prints_the_share_of_the_measured_peak(peak_cache):
    out = bench_output()
    assert re.search(r"^layer type\s+path\s+fwd ms\s+GFLOPS\s+%peak\s+share$", out, re.M)
    assert re.search(r"^\s+0 convolutional\s+\w+\s+[\d.]+\s+[\d.]+\s+[\d.]+%\s+[\d.]+%$",
                     out, re.M)
    assert re.search(r"effective GFLOPS, [\d.]+% of peak$", out, re.M)
    assert re.search(r"^peak [\d.]+ GFLOPS: float32 GEMM, \d+ thread\(s\), measured now$",
                     out, re.M)


def test_the_peak_is_measured_once_then_read_from_the_cache(peak_cache):
    path, calls = peak_cache
    bench_output()
    assert len(calls) == 1 and path.is_file()
    before = path.stat().st_mtime_ns, path.read_bytes()
    assert "cached (--remeasure-peak" in bench_output()
    assert len(calls) == 1 and (path.stat().st_mtime_ns, path.read_bytes()) == before
    assert "measured now" in bench_output("--remeasure-peak")
    assert len(calls) == 2


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b"[1, 2]", b'{"x": 1}', b""])
def test_a_corrupt_peak_cache_is_measured_again(peak_cache, content):
    import json

    from darknumba.train.peak import peak_key, thread_count
    path, calls = peak_cache
    path.write_bytes(content)
    assert "measured now" in bench_output()
    assert len(calls) == 1
    assert json.loads(path.read_text())[peak_key(thread_count())]["gflops"] > 0


def test_a_cached_peak_with_a_bad_value_is_measured_again(peak_cache):
    import json

    from darknumba.train.peak import peak_key, thread_count
    path, calls = peak_cache
    path.write_text(json.dumps({peak_key(thread_count()): {"gflops": "fast"}}))
    assert "measured now" in bench_output()
    assert len(calls) == 1
