"""Saying so when numba compiles: the first run of a network on a machine compiles its kernels
(tens of seconds), every later one loads them from numba's cache (NUMBA_CACHE_DIR, else a
__pycache__ folder beside the kernels or in the user's cache folder).

numba raises its "numba:compile" event only when a kernel is really compiled, not when it is
loaded from the cache, so the notice appears exactly on a cold cache."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

from numba.core import event

NOTICE = ("darknumba: compiling the network's kernels for this CPU (first run only, about "
          "10-60 s; cached for later runs; `darknumba warmup` does it ahead)")


class _FirstCompile(event.Listener):
    def __init__(self, log: Callable[[str], None], message: str, on_compile):
        self.log, self.message, self.on_compile, self.compiled = log, message, on_compile, False

    def on_start(self, ev):
        if not self.compiled:
            self.compiled = True
            self.log(self.message)
            if self.on_compile is not None:
                self.on_compile()

    def on_end(self, ev):
        pass


@contextmanager
def compile_notice(log: Callable[[str], None], message: str = NOTICE, on_compile=None):
    """Within the block, `log(message)` once when numba starts compiling a kernel (nothing when
    every kernel comes from the cache), then `on_compile()` if given. Yields an object whose
    `compiled` says whether it did."""
    listener = _FirstCompile(log, message, on_compile)
    event.register("numba:compile", listener)
    try:
        yield listener
    finally:
        event.unregister("numba:compile", listener)
