"""bench/train_rss.py runs a small detector's training step in a fresh process and prints its
peak RSS with what the layers and the scratch hold."""
import re
import subprocess
import sys

from conftest import ROOT


def test_train_rss_prints_the_peak_and_the_buffers():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "train_rss.py"), "--cfg",
                        "cfg/shapes-yolov3-tiny.cfg", "--batch", "2", "--runs", "1", "--steps",
                        "1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "# command: python bench/train_rss.py" in r.stdout and "# commit:" in r.stdout
    m = re.search(r"shapes-yolov3-tiny +peak RSS median +([\d.]+) MB \(runs ([\d.]+)\); "
                  r"layers (\d+) MB \{.*'delta': .*\}, scratch ([\d.]+) MB", r.stdout)
    assert m, r.stdout
    peak, run, layers, scratch = (float(v) for v in m.groups())
    assert peak == run and layers + scratch < peak and scratch > 0
