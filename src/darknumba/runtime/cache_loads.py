"""Loading compiled kernels from numba's cache without numba's registry refresh, for the
`darknumba` command.

Before it loads a cached kernel, numba refreshes its CPU target: it imports and installs every
typing and lowering registry (numba.cpython.*, numba.np.*, ...), 0.2-0.35 s of a warm `detect`
here, needed only to compile. A cached kernel is machine code: loading it needs numba's runtime
(NRT) started, which the refresh also does. Every real compile refreshes the target itself
(numba's CompilerBase does), so a process that loads first and compiles later is served too.

numba's own internals: `Cache.load_overload` and the runtime's `rtsys.initialize` are the same
in numba 0.58 to 0.68 (read in each); outside that range, or for another target than the CPU,
loads go through numba unchanged. Only the command turns this on (runtime.configure(command=True), from cli.main), so a
program that imports darknumba keeps numba as it is.
"""
from __future__ import annotations

# numba versions whose loading this was checked against, and numba's version as a pair
from ..kernels.cache_stamp import TESTED, _version  # noqa: F401 -- cache_heal imports them here


def skip_refresh_on_cache_loads() -> bool:
    """Patch numba's cache loads to start the runtime instead of refreshing the target (the
    CPU target, numba within TESTED); True when loads now take that path."""
    import numba
    from numba.core import caching, cpu
    from numba.core.runtime import rtsys

    if not TESTED[0] <= _version(numba.__version__) <= TESTED[1]:
        return False
    original = caching.Cache.load_overload
    if getattr(original, "_darknumba", False):
        return True

    def load_overload(self, sig, target_context):
        if type(target_context) is not cpu.CPUContext:
            return original(self, sig, target_context)
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    load_overload._darknumba = True
    caching.Cache.load_overload = load_overload
    return True
