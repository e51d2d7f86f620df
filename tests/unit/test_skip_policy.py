"""conftest.py's ALLOWED_SKIPS: a run whose skips are all allowed passes; one skip for any other
reason (a missing package, a missing fixture) fails the run and is named at its end."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def run_pytest(tmp_path, body: str):
    shutil.copyfile(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_some.py").write_text("import pytest\n\n" + body)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_allowed_skips_pass_and_any_other_fails_the_run(tmp_path):
    allowed = ("def test_c():\n    pytest.skip('DARKNET_DIR is not set (a pjreddie tree)')\n\n"
               "@pytest.mark.skipif(True, reason='torch is not installed')\n"
               "def test_torch():\n    pass\n\n"
               "def test_xfail():\n    pytest.xfail('not a skip')\n\n"
               "def test_ok():\n    pass\n")
    r = run_pytest(tmp_path, allowed)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 skipped" in r.stdout and "ALLOWED_SKIPS" not in r.stdout

    r = run_pytest(tmp_path, allowed + "\n\ndef test_onnx():\n"
                                       "    pytest.importorskip('no_such_module_here')\n")
    assert r.returncode == 1, r.stdout + r.stderr
    summary = r.stdout[r.stdout.index("skips not in ALLOWED_SKIPS"):]
    assert "test_some.py::test_onnx: could not import 'no_such_module_here'" in summary
    assert "test_c" not in summary and "test_torch" not in summary

    r = run_pytest(tmp_path, "pytest.skip('no mpirun', allow_module_level=True)\n")
    assert r.returncode == 1 and "test_some.py: no mpirun" in r.stdout, r.stdout
