"""bench/xnor.py runs with its smallest settings and prints its table: the traceability header,
a median and a minimum row per shape, the four ways and the two ratios."""
import subprocess
import sys

import pytest
from conftest import ROOT


@pytest.mark.slow
def test_xnor_bench_prints_its_table():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "xnor.py"), "--runs", "1",
                        "--warmup", "1", "--shapes", "64x32x8"], cwd=ROOT, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    for h in ("# command: python bench/xnor.py", "# date:", "# commit:", "# cpu:", "# threads:"):
        assert h in out, out
    header = next(ln for ln in out.splitlines() if ln.startswith("shape"))
    assert header.split() == ["shape", "float", "ms", "float", "exact", "ms", "xnor", "bits",
                              "ms", "xnor", "float", "ms", "float/bits", "exact/bits"]
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("64->32 8x8")]
    assert [r[2] for r in rows] == ["median", "min"], out
    for r in rows:
        ms = [float(v) for v in r[3:7]]
        assert all(v > 0 for v in ms) and r[7].endswith("x") and r[8].endswith("x"), out
