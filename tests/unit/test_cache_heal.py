"""numba's cache healed (cache_heal.py): in fresh processes with a private NUMBA_CACHE_DIR, a
cache file damaged in each way (truncated or garbage index, truncated or garbage data file, an
index of another numba version, a file that is no pickle at all) is moved aside into a
corrupt-* folder, its kernel is compiled again with the same result, and stderr has one line
naming the cache; a cache that cannot be written leaves the kernels in memory with one line.
Small kernels of their own first (seconds), then `darknumba detect` on a small detector."""
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, sample_photos
from tiny_nets import QUICK_DETECTOR

import darknumba as dn

KERNELS = """
from numba import njit

@njit(cache=True)
def twice(x):
    return 2 * x

@njit(cache=True)
def total(a):
    s = 0.0
    for v in a:
        s += v
    return s
"""

SCRIPT = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "heal":
    from darknumba.runtime.cache_heal import heal_numba_cache
    heal_numba_cache()
if len(sys.argv) > 3 and sys.argv[3] == "disk-full":
    import errno
    from numba.core import caching
    def full(self, path):
        raise OSError(errno.ENOSPC, "No space left on device")
    caching.IndexDataCacheFile._open_for_write = full
if len(sys.argv) > 3 and sys.argv[3] == "no-renames":
    import errno
    import os
    def no_room(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")
    os.replace = no_room
import kern
print(kern.twice(21), kern.total(np.arange(5.0)))
"""


def env_for(cache) -> dict:
    return dict(os.environ, NUMBA_CACHE_DIR=str(cache),
                PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))


def run_kernels(tmp_path, cache, *mode):
    mod = tmp_path / "mod"
    mod.mkdir(exist_ok=True)
    (mod / "kern.py").write_text(KERNELS)
    return subprocess.run([sys.executable, "-c", SCRIPT, str(mod), *mode], env=env_for(cache),
                          capture_output=True, text=True, timeout=600)


def cache_files(cache) -> dict[str, Path]:
    """name -> path of the index and data files in the cache's kernel folders (not moved)."""
    return {p.name: p for p in Path(cache).glob("*/*") if p.suffix in (".nbi", ".nbc")}


def quarantined(cache) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in Path(cache).glob("*/corrupt-*/*")}


def notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("darknumba:")]


def truncate(p: Path):
    p.write_bytes(p.read_bytes()[:len(p.read_bytes()) // 2])


def garbage(p: Path):
    p.write_bytes(bytes(range(7, 250, 3)) * 5)


def another_numba(p: Path):
    """The index as another numba version writes it: its version first, then its pickle."""
    with open(p, "rb") as f:
        pickle.load(f)
        rest = f.read()
    p.write_bytes(pickle.dumps("0.40.1", protocol=-1) + rest)


def not_a_pickle(p: Path):
    p.write_text("this is not numba's\n")


DAMAGE = {  # name: (file kind, damage)
    "truncated index": (".nbi", truncate),
    "garbage index": (".nbi", garbage),
    "truncated data": (".nbc", truncate),
    "garbage data": (".nbc", garbage),
    "another numba's index": (".nbi", another_numba),
    "text as index": (".nbi", not_a_pickle),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_file_is_moved_aside_and_its_kernel_compiled_again(tmp_path, kind):
    cache = tmp_path / "cache"
    first = run_kernels(tmp_path, cache, "heal")
    assert first.returncode == 0 and notices(first.stderr) == [], first.stderr
    suffix, damage = DAMAGE[kind]
    [target] = [p for n, p in cache_files(cache).items()
                if n.startswith("kern.twice") and n.endswith(suffix)]
    damage(target)
    bad = target.read_bytes()

    healed = run_kernels(tmp_path, cache, "heal")
    assert healed.returncode == 0, healed.stderr
    assert healed.stdout == first.stdout                    # the same results
    [line] = notices(healed.stderr)                         # one line, naming the cache
    assert str(cache) in line and "corrupt-" in line and "compiling" in line
    moved = quarantined(cache)
    assert moved[target.name] == bad                        # moved aside, not deleted
    if suffix == ".nbi":                                    # its data files went with it
        assert any(n.startswith("kern.twice") and n.endswith(".nbc") for n in moved)
    assert target.name in cache_files(cache)                # compiled and cached again

    again = run_kernels(tmp_path, cache, "heal")
    assert again.returncode == 0 and again.stdout == first.stdout
    assert notices(again.stderr) == [] and quarantined(cache) == moved


def test_without_healing_numba_fails_on_a_truncated_index(tmp_path):
    """What the command met before cache_heal: numba's UnpicklingError on every run."""
    cache = tmp_path / "cache"
    assert run_kernels(tmp_path, cache, "plain").returncode == 0
    [index] = [p for n, p in cache_files(cache).items()
               if n.startswith("kern.twice") and n.endswith(".nbi")]
    truncate(index)
    plain = run_kernels(tmp_path, cache, "plain")
    assert plain.returncode != 0 and "UnpicklingError" in plain.stderr


def test_a_full_disk_leaves_the_kernels_in_memory_with_one_line(tmp_path):
    cache = tmp_path / "cache"
    full = run_kernels(tmp_path, cache, "heal", "disk-full")
    assert full.returncode == 0, full.stderr
    assert full.stdout.split() == ["42", "10.0"]
    [line] = notices(full.stderr)
    assert "cannot write numba's kernel cache" in line and str(cache) in line
    assert "No space left on device" in line and "in memory" in line
    assert run_kernels(tmp_path, cache, "plain", "disk-full").returncode != 0


def test_a_damaged_file_that_cannot_be_moved_is_left_and_the_kernel_kept_in_memory(tmp_path):
    """A full disk: nothing can be moved or written. The kernel compiles in memory, one line."""
    cache = tmp_path / "cache"
    assert run_kernels(tmp_path, cache, "heal").returncode == 0
    [index] = [p for n, p in cache_files(cache).items()
               if n.startswith("kern.twice") and n.endswith(".nbi")]
    truncate(index)
    bad = index.read_bytes()
    r = run_kernels(tmp_path, cache, "heal", "no-renames")
    assert r.returncode == 0 and r.stdout.split() == ["42", "10.0"], r.stderr
    [line] = notices(r.stderr)
    assert str(cache) in line and "cannot be moved aside" in line and "in memory" in line
    assert index.read_bytes() == bad and not list(cache.glob("*/corrupt-*"))


def _unusable(cache: Path) -> str:
    """Make the warm cache folder one numba cannot write: read-only where permissions bind;
    as root (whom they do not bind) a regular file in its place."""
    if os.geteuid() != 0:
        for p in [cache, *cache.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        return "Permission denied"
    import shutil
    shutil.rmtree(cache)
    cache.write_text("a file where the cache folder was\n")
    return "File exists"


def test_a_cache_folder_numba_cannot_write_is_named_once(tmp_path):
    """numba skips a NUMBA_CACHE_DIR it cannot write without a word and caches beside the
    source instead (here the test's module folder): one line names both."""
    cache = tmp_path / "cache"
    assert run_kernels(tmp_path, cache, "heal").returncode == 0
    why = _unusable(cache)
    try:
        r = run_kernels(tmp_path, cache, "heal")
        assert r.returncode == 0 and r.stdout.split() == ["42", "10.0"], r.stderr
        [line] = notices(r.stderr)
        assert f"numba cannot write its cache folder {cache}" in line and why in line
        assert "elsewhere" in line
    finally:
        if cache.is_dir():
            for p in [cache, *cache.rglob("*")]:
                p.chmod(0o755 if p.is_dir() else 0o644)


# -- the command --------------------------------------------------------------------------------


def detect(cache, cwd, base):
    env = dict(env_for(cache), DARKNUMBA_FIRST_RUN="compile")
    return subprocess.run(
        [sys.executable, "-c", "from darknumba.cli import main; main()", "detect",
         str(base / "h.cfg"), str(base / "w.weights"), str(sample_photos()[0]), "--thresh",
         "0.05", "--json", "-"], env=env, cwd=cwd, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """A numba cache filled by one `detect` of QUICK_DETECTOR (its kernels include the damaged
    ones) with random weights, and its output."""
    from darknumba.train.timing import unit_rolling_variance
    base = tmp_path_factory.mktemp("heal")
    (base / "h.cfg").write_text(QUICK_DETECTOR)
    net = dn.load_network(base / "h.cfg", None, batch=1)
    unit_rolling_variance(net)
    dn.save_weights(net, base / "w.weights")
    r = detect(base / "cache", base, base)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["detections"], "random weights at --thresh 0.05 should detect something"
    return base, out


@pytest.mark.slow
@pytest.mark.parametrize("damages", [
    {"box.do_nms_sort_cpu": ("nbi", truncate), "blas.upsample_cpu": ("nbc", garbage)},
    {"fused.batchnorm_bias_activate": ("nbi", another_numba),
     "box.get_yolo_detections_cpu": ("nbc", truncate)}], ids=["truncated-garbage", "foreign"])
def test_detect_heals_a_damaged_cache(warm_cache, tmp_path, damages):
    import shutil
    base, expected = warm_cache
    cache = tmp_path / "cache"
    shutil.copytree(base / "cache", cache)
    bad = {}
    for kernel, (suffix, damage) in damages.items():
        [p] = [p for n, p in cache_files(cache).items()
               if n.startswith(kernel + "-") and n.endswith(suffix)]
        damage(p)
        bad[p.name] = p.read_bytes()
    r = detect(cache, tmp_path, base)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["detections"] == expected["detections"]
    heal = [line for line in notices(r.stderr) if "corrupt-" in line]
    assert len(heal) == 1 and str(cache) in heal[0], r.stderr
    moved = quarantined(cache)
    assert all(moved.get(name) == data for name, data in bad.items())
    again = detect(cache, tmp_path, base)
    assert again.returncode == 0 and notices(again.stderr) == [], again.stderr
    assert json.loads(again.stdout)["detections"] == expected["detections"]
