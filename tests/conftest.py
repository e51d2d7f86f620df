import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from darknumba.parity.tensordiff import named_rows

# `darknumba detect` on a cold numba cache runs numpy's forward pass and leaves a background
# process compiling; the suite compiles in the foreground instead (no process outliving a test,
# the same path whatever ran first). tests/layers/test_numpy_forward.py covers the numpy first run.
os.environ.setdefault("DARKNUMBA_FIRST_RUN", "compile")

ROOT = Path(__file__).resolve().parents[1]
# Tensors recorded from C darknet runs, in the tree (provenance: tests/fixtures/golden/README.md)
GOLDEN = ROOT / "tests" / "fixtures" / "golden"
TINY_WEIGHTS = Path(os.environ.get("DARKNUMBA_TINY_WEIGHTS", ROOT / "weights" / "yolov3-tiny.weights"))
V4TINY_WEIGHTS = Path(os.environ.get("DARKNUMBA_V4TINY_WEIGHTS",
                                     ROOT / "weights" / "yolov4-tiny.weights"))
# Darknet's own sample photos (its data/ folder), which only the tests that hold C darknet's
# printed results for them need: $DARKNUMBA_DATA, else beside the repository, else in the C
# trees the parity tests point at
PHOTO_DIRS = [Path(d) for d in (os.environ.get("DARKNUMBA_DATA"), ROOT.parent / "shared" / "data")
              if d] + [Path(os.environ[v]) / "data" for v in ("DARKNET_DIR", "DARKNET_AB_DIR")
                       if os.environ.get(v)]
NO_DARKNET_PHOTOS = ("Darknet's sample photos (data/dog.jpg, horses.jpg, person.jpg) not found: "
                     "set DARKNUMBA_DATA to a darknet checkout's data/ folder")


@pytest.fixture
def rng(request):
    """A generator seeded from the test's node id: a test draws the same numbers run alone or
    in the suite, whatever other tests draw before it."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True)
def avx2_plan(monkeypatch):
    """The convolution planner's rules as on a CPU without AVX-512 (conv_plan.wide_vectors
    False), so that the paths the tests expect (13x13 maps on F(2x2) Winograd) do not depend
    on the machine; tests of the AVX-512 rule set it themselves."""
    from darknumba.layers import conv_plan
    monkeypatch.setattr(conv_plan, "_WIDE_VECTORS", False)


@pytest.fixture
def darknet_epilogues(monkeypatch):
    """Darknet's inference epilogue in every network, exact or not (layers/batchnorm.py
    fast_epilogue off): for tests that compare a path's sums bit for bit."""
    from darknumba.layers import batchnorm
    monkeypatch.setattr(batchnorm, "FAST_EPILOGUES", False)


def golden_dir(name: str) -> Path:
    d = GOLDEN / name
    assert d.is_dir(), f"recorded C darknet fixture {d} is missing from the tree"
    return d


def load_golden(fixture: str, run: str):
    """(npz data, manifest dict, cfg path, init weights path) of one recorded run."""
    d = golden_dir(fixture)
    data = np.load(d / run / "data.npz")
    manifest = json.loads(str(data["manifest_json"]))
    return data, manifest, d / f"{fixture}.cfg", d / "init.weights"


def official_weights(name: str, path: Path) -> Path:
    """`path`, downloading NAME.weights there first (sha256-checked, as `darknumba weights
    fetch` does) when it is missing; a download that fails fails the test."""
    if not path.exists():
        from darknumba.data.fetch import fetch_weights
        from darknumba.errors import DarknumbaError
        assert path.name == f"{name}.weights", f"{path} is not there to be fetched as {name}"
        try:
            fetch_weights(name, path.parent, log=lambda msg: None)
        except DarknumbaError as e:
            pytest.fail(f"the official {name} weights could not be fetched into {path.parent} "
                        f"({e}); run `darknumba weights fetch {name}` where the network is up")
    return path


def tiny_weights() -> Path:
    return official_weights("yolov3-tiny", TINY_WEIGHTS)


def v4tiny_weights() -> Path:
    return official_weights("yolov4-tiny", V4TINY_WEIGHTS)


def darknet_photo(name: str) -> Path:
    """One of Darknet's sample photos, for a test that holds C darknet's results on it; a skip
    (NO_DARKNET_PHOTOS) when none of PHOTO_DIRS has it."""
    for d in PHOTO_DIRS:
        if (d / name).is_file():
            return d / name
    pytest.skip(NO_DARKNET_PHOTOS)


def sample_photos() -> list[Path]:
    """Four photos the test dependencies ship in their wheels, on each of which yolov3-tiny
    finds something at thresh 0.25: scikit-image's coffee.png (a cup), motorcycle_left.png
    and camera.png (grey; two people), and matplotlib's grace_hopper.jpg (a JPEG)."""
    import importlib.util
    skimage = Path(importlib.util.find_spec("skimage").origin).parent / "data"
    mpl = Path(importlib.util.find_spec("matplotlib").origin).parent / "mpl-data" / "sample_data"
    photos = [skimage / "coffee.png", skimage / "motorcycle_left.png", skimage / "camera.png",
              mpl / "grace_hopper.jpg"]
    missing = [str(p) for p in photos if not p.is_file()]
    assert not missing, f"sample photos missing from the installed wheels: {missing}"
    return photos


def max_rel(a, b) -> tuple[float, float]:
    """(max |a-b|, max |a-b| / max |b|)"""
    d = float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))) if np.size(b) else 0.0
    scale = float(np.max(np.abs(b))) if np.size(b) else 1.0
    return d, d / (scale if scale > 0 else 1.0)


# -- skips: only for what a user may lack and `pip install -e '.[test]'` cannot bring ----------
# Any other skip (a package of the [test] extra missing, a recorded fixture absent, a feature
# not built) fails the run, listed at the end: no area of the suite goes quiet unnoticed.
# Each entry is a part of the skip's reason.
ALLOWED_SKIPS = (
    # a C darknet build to run against (the recorded fixtures in tests/fixtures cover the same
    # tensors without one)
    "DARKNET_DIR is not set",
    "DARKNET_AB_DIR is not set",
    "set DARKNET_AB_DIR to an AlexeyAB darknet tree",
    # Darknet's data/ photos, for the tests that hold C darknet's printed results on them
    NO_DARKNET_PHOTOS,
    # PyTorch, only to check that darknumba runs beside it (pip install darknumba[bench])
    "torch is not installed",
    # the fuzz suite's two profiles: one runs, the other skips
    "set DARKNUMBA_FUZZ=long for the long profile",
    "the long profile runs test_fuzz_long instead",
    # the platform's numpy BLAS and OpenMP (the Linux wheels bring OpenBLAS; gcc brings libgomp)
    "not OpenBLAS",
    "no libgomp on this system",
    # a numba newer or older than the cache-load patch was checked against (it then stays off)
    "is outside the versions the patch was checked against",
    # a test that reuses the checkpoint of the one before it, run without that one
    "needs test_two_ranks_train_what_one_process_trains' checkpoint",
    # two network namespaces joined by a veth pair stand for two hosts: root (CAP_NET_ADMIN)
    # and iproute2's `ip` (tests/cli/test_mpi_netns.py says which one is missing)
    "the two-host MPI test needs network namespaces",
)
_unexpected_skips: list[str] = []


def _skip_reason(report) -> str | None:
    """A skip's reason, or None if the report is no skip (an xfail is reported as one)."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


def _check_skip(report):
    reason = _skip_reason(report)
    if reason is not None and not any(a in reason for a in ALLOWED_SKIPS):
        _unexpected_skips.append(f"{report.nodeid}: {reason}")


def pytest_runtest_logreport(report):
    _check_skip(report)


def pytest_collectreport(report):
    _check_skip(report)


def pytest_sessionfinish(session, exitstatus):
    if _unexpected_skips and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _unexpected_skips:
        terminalreporter.section("skips not in ALLOWED_SKIPS (tests/conftest.py): the run fails",
                                 red=True)
        for line in _unexpected_skips:
            terminalreporter.line(line)


# The tier folders in the order they run: the quick, low floors first (a kernel that fails shows
# before the networks and commands built on it), the fuzz suite last: its driver processes reuse
# the kernels that the other tests compiled into numba's cache.
TIER_ORDER = ("unit", "kernels", "layers", "networks", "cli", "fuzz")


def pytest_collection_modifyitems(items):
    """Tests run tier by tier (TIER_ORDER), each tier's in pytest's order; a test file at tests/
    itself runs first."""
    def tier(item):
        folder = Path(str(item.fspath)).parent.name
        return TIER_ORDER.index(folder) + 1 if folder in TIER_ORDER else 0
    items.sort(key=tier)


# -- guard cells: a kernel's output as a view into a larger buffer whose ends hold a sentinel,
#    which a write past the end of the view changes (numba checks no bounds by default)
SENTINEL = np.float32(-7.25)
GUARD = 64


def guarded(shape, dtype=np.float32, fill=0):
    """(view, big): a zero-filled array of `shape` inside a buffer with GUARD sentinel rows
    on either side."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    big = np.full((shape[0] + 2 * GUARD,) + shape[1:], SENTINEL, dtype)
    view = big[GUARD:GUARD + shape[0]]
    view[...] = fill
    return view, big


def guards_intact(big):
    return bool(np.all(big[:GUARD] == SENTINEL) and np.all(big[-GUARD:] == SENTINEL))


def weights_rows(net, ours: bytes, ref: bytes, tol: float):
    """Two .weights files (their bytes) compared record by record in `net`'s layout, as
    tensordiff rows named "L###_<record>"; the header (version, seen) and the sizes must be
    identical."""
    assert len(ours) == len(ref), f".weights sizes differ: {len(ours)} and {len(ref)} bytes"
    assert ours[:20] == ref[:20], "header (version, seen) differs"
    a, b = np.frombuffer(ours[20:], "<f4"), np.frombuffer(ref[20:], "<f4")
    mine, theirs = {}, {}
    off = 0
    for i, l in enumerate(net.layers):
        for name, arr in l.weight_records():
            mine[f"L{i:03d}_{name}"] = a[off:off + arr.size]
            theirs[f"L{i:03d}_{name}"] = b[off:off + arr.size]
            off += arr.size
    assert off == a.size, f"the network's records hold {off} floats, the file {a.size}"
    return named_rows(mine, theirs, tol=tol)


def darknet_ab_dir() -> Path:
    """The AlexeyAB darknet tree of DARKNET_AB_DIR (built with `make LIBSO=1`), or a skip."""
    d = os.environ.get("DARKNET_AB_DIR")
    if not d:
        pytest.skip("DARKNET_AB_DIR is not set (point it at an AlexeyAB darknet tree built with "
                    "`make LIBSO=1`); the recorded AlexeyAB fixtures are tested in test_ab_*")
    return Path(d)
