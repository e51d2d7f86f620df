"""One kernel source compiled serial and parallel, chosen at call time by size.

Starting a parallel region (waking the OpenMP team, waiting at its barrier) costs several
microseconds on an idle 2-core machine and hundreds on a busy one (bench/region_overhead.py),
more than a small kernel's whole work:
rnn-tiny's recurrent steps call bias_activate, gradient_array, backward_bias, axpy_cpu on 512
values each, hundreds of times an iteration. `@twins(size=i)` compiles the body twice,
`njit(cache=True)` and `njit(parallel=True, cache=True)` (prange is range in the serial one), and
calls the serial twin when argument i (an element count, or an array whose size counts) is below
SERIAL_BELOW. Each prange iteration owns its writes, so both twins give the same bits
(tests/kernels/test_twins.py).

The chooser is a Python object: compiled callers call `.parallel` (or `.serial`), whatever asks
which dispatcher a call on n elements compiles asks `.pick(n)`, and whatever asks a kernel for its
dispatcher's attributes (py_func, stats, signatures, the cache) gets the parallel twin's.
"""
import types

from numba import njit

# Elements below which a kernel runs its serial twin. A region start costs several us on an idle
# 2-core machine (hundreds on a busy one); axpy_cpu on 16384 floats takes ~2 us serial, so the
# cheap kernels (fill, copy, axpy, scal, sgd_update, leaky and linear activations) gain nothing
# from a second thread below it. A transcendental activation (tanh, logistic: ~30 ns a value
# serial) would break even far lower; one threshold keeps the choice simple -- re-measure with
# bench/region_overhead.py on an idle machine before moving it.
SERIAL_BELOW = 16384


class Twins:
    """A kernel compiled serial and parallel; calling it picks one by the size argument."""

    def __init__(self, body, size: int, options: dict, below: int | None = None):
        serial_body = types.FunctionType(body.__code__, body.__globals__, body.__name__,
                                         body.__defaults__, body.__closure__)
        # its own name: numba's cache files are named by function, and the two must not share
        serial_body.__qualname__ = body.__qualname__ + "_serial"
        serial_body.__module__, serial_body.__doc__ = body.__module__, body.__doc__
        serial_body.serial_twin = True
        self.serial = njit(cache=True, **options)(serial_body)
        self.parallel = njit(parallel=True, cache=True, **options)(body)
        self.size, self.below = size, below        # None: SERIAL_BELOW as it is when called
        self.__doc__, self.__name__ = body.__doc__, body.__name__

    def pick(self, n: int):
        """The twin a call on `n` elements runs (compile_ahead asks which one to check)."""
        below = SERIAL_BELOW if self.below is None else self.below
        return self.serial if n < below else self.parallel

    def __call__(self, *args):
        n = args[self.size]
        return self.pick(n if isinstance(n, int) else n.size)(*args)

    def __getattr__(self, name):
        return getattr(self.parallel, name)


def twins(size: int, below: int | None = None, **options):
    """Decorator: the body (written with prange) as Twins; `size` is the index of the argument
    that counts the elements, `below` the count under which the serial twin runs (SERIAL_BELOW
    unless the kernel says why it differs); `options` go to both njit calls (e.g. fastmath)."""
    return lambda body: Twins(body, size, options, below)
