"""The process around the engine: how its thread pools share the cores with BLAS
(thread_policy.py), what an MPI launcher says (launcher.py), numba's cache healed and loaded
faster (cache_heal.py, cache_loads.py), the compile notice (compile_notice.py) and a
detector's first run on a cold cache (cold_start.py, numpy_forward.py, compile_ahead.py).

Importing darknumba, or this package, changes nothing in the process: no environment
variable, no collector setting, no BLAS or OpenMP setting, no process started. (Importing its
kernels makes numba stamp their cache entries with the modules they call,
kernels/cache_stamp.py; other code's kernels are cached as before.)
`configure()` applies what the engine runs best with; the `darknumba` command calls it as it
starts, before numpy and numba load (cli/__init__.py), and a Detector when it is made.
A program that embeds darknumba calls it when it wants the same:

    import darknumba as dn
    dn.configure()          # or darknumba.runtime.configure()
"""
from __future__ import annotations

import gc
from typing import Callable

_done = {"threads": False, "command": False}


def configure(log: Callable[[str], None] | None = None, command: bool = False):
    """Set up this process for darknumba, once (a second call changes nothing more):

    1. the thread pools under an MPI launcher: cores / ranks-on-this-machine threads each
       (launcher.limit_threads_per_rank; the variables the user set are kept);
    2. the thread policy (thread_policy.apply): GOMP_SPINCOUNT and OPENBLAS_THREAD_TIMEOUT
       filled in, numba's OpenMP layer on its own libgomp when another was loaded first, and
       every OpenBLAS already loaded restarted with the timeout (numpy came first);
    3. numba's cache healed (cache_heal.heal_numba_cache): a file numba cannot read is moved
       aside and its kernel compiled again; `log` gets the notices (default: stderr);
    4. with `command` (the `darknumba` command, cli.main): cached kernels loaded without
       numba's registry refresh (cache_loads), and the objects made so far frozen out of
       later collections (gc.freeze; they stay until exit).

    Steps 1 and 2 take full effect before numpy and numba load; afterwards only the thread
    counts of step 1 come too late (the pools have their sizes), the rest still applies."""
    if not _done["threads"]:
        from . import launcher, thread_policy
        launcher.limit_threads_per_rank()   # first: an OpenBLAS restarted in 2 reads them
        thread_policy.apply()
        _done["threads"] = True
    from .cache_heal import heal_numba_cache
    heal_numba_cache(log)
    if command and not _done["command"]:
        from .cache_loads import skip_refresh_on_cache_loads
        skip_refresh_on_cache_loads()
        gc.freeze()
        _done["command"] = True


class collector_paused:
    """The collector off within the block, then as it was (also when the block raises): numba's
    import makes a few hundred thousand objects, and the collector's full passes over them
    (~0.1-0.3 s) find nothing to free."""

    def __enter__(self):
        self.was_enabled = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc):
        if self.was_enabled:
            gc.enable()
        return False
