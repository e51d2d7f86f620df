"""kernels/twins.py: each kernel compiled serial and parallel gives the same bits on inputs
below and above SERIAL_BELOW, and the chooser calls the serial twin below it only."""
import numpy as np
import pytest

from darknumba.kernels import activations, blas, fused, twins
from darknumba.kernels.activations import LEAKY, LINEAR, LOGISTIC, RELU, TANH

SMALL, LARGE = 517, 3 * twins.SERIAL_BELOW + 7


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def cases(n, rng):
    """(kernel, arguments) for every kernel with twins, on about n elements."""
    filters = 7
    spatial = max(1, n // (2 * filters))
    out = [
        (blas.fill_cpu, (n, 0.37, f32(rng, n))),
        (blas.copy_cpu, (n, f32(rng, n), f32(rng, n))),
        (blas.axpy_cpu, (n, -0.3, f32(rng, n), f32(rng, n))),
        (blas.scal_cpu, (n, 0.9, f32(rng, n))),
        (blas.sgd_update_cpu, (n, 0.01, -0.0005, 0.9, f32(rng, n), f32(rng, n))),
        (blas.backward_bias, (f32(rng, filters), f32(rng, 2 * filters * spatial), 2, filters,
                              spatial)),
    ]
    for a in (LINEAR, LEAKY, LOGISTIC, RELU, TANH):
        out.append((activations.gradient_array, (f32(rng, n), n, a, f32(rng, n))))
        out.append((fused.bias_activate, (f32(rng, 2 * filters * spatial), f32(rng, filters), 2,
                                          filters, spatial, a)))
    return out


def copies(args):
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


@pytest.mark.parametrize("n", [SMALL, LARGE])
def test_serial_and_parallel_twins_give_the_same_bits(n):
    rng = np.random.default_rng(n)
    for kernel, args in cases(n, rng):
        serial, parallel = copies(args), copies(args)
        kernel.serial(*serial)
        kernel.parallel(*parallel)
        for s, p in zip(serial, parallel):
            if isinstance(s, np.ndarray):
                assert np.array_equal(s.view(np.uint32), p.view(np.uint32)), (
                    f"{kernel.__name__}: max |diff| {np.abs(s - p).max()}")


@pytest.mark.parametrize("n", [SMALL, LARGE])
def test_the_chooser_calls_serial_below_the_threshold(n, monkeypatch):
    called = []
    for kernel, args in cases(n, np.random.default_rng(0)):
        monkeypatch.setattr(kernel, "serial", lambda *a: called.append("serial"))
        monkeypatch.setattr(kernel, "parallel", lambda *a: called.append("parallel"))
        kernel(*args)
        size = args[kernel.size] if isinstance(args[kernel.size], int) else args[kernel.size].size
        assert called.pop() == ("serial" if size < twins.SERIAL_BELOW else "parallel")


def test_a_twin_answers_as_its_parallel_dispatcher():
    assert blas.axpy_cpu.py_func is blas.axpy_cpu.parallel.py_func
    assert blas.axpy_cpu.parallel.targetoptions.get("parallel")
    assert not blas.axpy_cpu.serial.targetoptions.get("parallel")
    # numba names its cache files by function: the twins must not share them
    assert blas.axpy_cpu.serial.py_func.__qualname__ != blas.axpy_cpu.py_func.__qualname__


def test_rnn_tiny_starts_few_parallel_regions_an_iteration(monkeypatch):
    """bench/region_overhead.py's count (calls, not time: it holds on a loaded machine): with
    every kernel parallel, rnn-tiny's iteration makes 228 calls into parallel kernels; with
    the twins, the recurrent steps' small kernels run serial."""
    import importlib.util
    import sys
    from pathlib import Path
    bench = Path(__file__).resolve().parents[2] / "bench"
    monkeypatch.syspath_prepend(str(bench))
    spec = importlib.util.spec_from_file_location("region_overhead", bench / "region_overhead.py")
    region_overhead = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "region_overhead", region_overhead)
    spec.loader.exec_module(region_overhead)
    net, x, y = region_overhead.build("rnn-tiny")
    net.learning_rate = 1e-6
    counts = {}
    for threshold in (0, twins.SERIAL_BELOW):
        monkeypatch.setattr(twins, "SERIAL_BELOW", threshold)
        net.train_datum(x, y)
        with region_overhead.RegionCounter() as counted:
            net.train_datum(x, y)
        counts[threshold] = sum(counted.parallel.values()), sum(counted.serial_twin.values())
    before, after = counts[0], counts[twins.SERIAL_BELOW]
    assert before[1] == 0 and before[0] > 100
    assert after[0] <= 12 and after[0] + after[1] == before[0]
