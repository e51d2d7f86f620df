"""The stamp of darknumba's kernels in numba's cache. A compiled kernel also holds the helpers
it calls from other modules (inlined, or linked into its code), but numba stamps a kernel's
cache index with the kernel's own source file alone: a change to kernels/fused.py left
kernels/direct.py's cached kernels running the old epilogue, with wrong results and no word
(seen on 2026-12-07, after an edit of fused.py's inline rows). So each darknumba kernel's
index is stamped with numba's stamp of its file and a hash of every module of the package
that uses numba (sources_stamp): a change in any of them compiles the kernels again, once.

`install()` (run as darknumba.kernels is imported, before any kernel is made) wraps numba's
Cache load and save so that they stamp a darknumba kernel's index first; other code's
kernels keep numba's own stamp. Within numba 0.58-0.68, whose Cache keeps `_py_func` and
whose index file keeps `_source_stamp` (TESTED, which runtime/cache_loads.py and
cache_heal.py share); outside, nothing is changed.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

TESTED = ((0, 58), (0, 68))      # numba versions whose cache internals this was read against
_state = {"installed": False, "sources": None}


def sources_stamp() -> str:
    """hash_sources of the darknumba package, computed once per process."""
    if _state["sources"] is None:
        _state["sources"] = hash_sources(Path(__file__).resolve().parent.parent)
    return _state["sources"]


def hash_sources(root: Path) -> str:
    """sha256 over the path and text of every .py file under `root` whose text names numba
    (the modules compiled code can come from)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        try:
            text = path.read_bytes()
        except OSError:
            continue
        if b"numba" in text:
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + text + b"\0")
    return h.hexdigest()


def stamp_dependencies(cache) -> None:
    """Once per numba Cache, after install(): a darknumba kernel's index stamp becomes (numba's
    stamp of its file, sources_stamp()), for its loads and saves alike."""
    f = getattr(cache, "_cache_file", None)
    if not _state["installed"] or f is None or getattr(f, "_darknumba_stamped", False):
        return
    f._darknumba_stamped = True
    module = getattr(getattr(cache, "_py_func", None), "__module__", None) or ""
    if module.split(".")[0] == "darknumba":
        f._source_stamp = (f._source_stamp, sources_stamp())


def _version(text: str) -> tuple[int, int]:
    """(major, minor) of a version string; (0, 0) when it is not one."""
    try:
        major, minor = text.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (0, 0)


def install() -> bool:
    """Make numba's cache loads and saves stamp darknumba's kernels (once); True when they do."""
    if _state["installed"]:
        return True
    import numba
    from numba.core import caching
    if not TESTED[0] <= _version(numba.__version__) <= TESTED[1]:
        return False
    cache = caching.Cache
    load, save = cache._load_overload, cache.save_overload

    def _load_overload(self, sig, target_context):
        stamp_dependencies(self)
        return load(self, sig, target_context)

    def save_overload(self, sig, data):
        stamp_dependencies(self)
        return save(self, sig, data)

    cache._load_overload, cache.save_overload = _load_overload, save_overload
    _state["installed"] = True
    return True
