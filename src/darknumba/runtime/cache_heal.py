"""numba's cache, healed: a cache file numba cannot use is moved aside and its kernel compiled
again, instead of every later run ending in numba's UnpicklingError.

numba keeps, per kernel, an index (`<kernel>.nbi`: numba's version, then the source stamp and
the compiled versions by signature and CPU) and data files (`<kernel>.<n>.nbc`) in its cache
folder: NUMBA_CACHE_DIR/<source folder>_<hash>/ if set, else `__pycache__` beside the kernels'
source (or the user's cache folder when that cannot be written). A full disk, an interrupted
copy or a stray file leaves an index or data file numba fails to read, and numba raises from
every load. With `heal_numba_cache()` (runtime.configure, which the command and the Detector call):

  - an index that does not unpickle, or that another numba version wrote (numba would write
    over it), is moved with its data files into `corrupt-<time>-<pid>/` in its folder;
  - a data file that does not unpickle or rebuild is moved there alone;
  - either way the kernel is compiled again (and cached), and stderr gets one line for the
    whole process naming the folder;
  - a cache that cannot be written (a full disk, a read-only folder) leaves the kernels
    compiled in memory for this run, with one line; NUMBA_CACHE_DIR set to a folder numba
    cannot write (numba then silently caches elsewhere) gets one line naming both.

Which index entries are fresh is kernels/cache_stamp.py's: darknumba's kernels are stamped
with their own file and every module of the package that uses numba.

Nothing is deleted. Another CPU's versions in a shared index are numba's design (keyed by CPU
name and features), not foreign: numba adds this CPU's beside them. numba's own internals
(IndexDataCacheFile._load_index / _load_data, Cache._load_overload / save_overload) are the
same in numba 0.58 to 0.68 (cache_loads.TESTED); outside that range numba is left as it is.
"""
from __future__ import annotations

import os
import pickle
import sys
import time
from typing import Callable

_state: dict = {"patched": False, "log": None, "healed": False, "unwritable": False,
                "stamp": None, "checked": None}


def _say(message: str):
    (_state["log"] or (lambda m: print(m, file=sys.stderr, flush=True)))(message)


def _cache_root(folder: str) -> str:
    """The folder to name: NUMBA_CACHE_DIR when `folder` is one of its subfolders."""
    from numba.core import config
    root = config.CACHE_DIR
    if root and os.path.dirname(os.path.abspath(folder)) == os.path.abspath(root):
        return root
    return folder


def quarantine(folder: str, names: list[str]) -> str | None:
    """Move the files `names` of cache folder `folder` into its corrupt-<time>-<pid>/ folder
    (said once per process); the quarantine folder, or None when nothing could be moved."""
    if _state["stamp"] is None:
        _state["stamp"] = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    dest = os.path.join(folder, f"corrupt-{_state['stamp']}")
    moved = []
    for name in names:
        try:
            os.makedirs(dest, exist_ok=True)
            os.replace(os.path.join(folder, name), os.path.join(dest, name))
            moved.append(name)
        except FileNotFoundError:       # another process moved it first
            pass
        except OSError as e:            # a read-only folder: numba cannot write it either
            _state["unwritable"] = True     # (so no second line from the saves)
            if not moved:
                try:
                    os.rmdir(dest)
                except OSError:
                    pass
            if not _state["healed"]:
                _state["healed"] = True
                _say(f"darknumba: numba's kernel cache {_cache_root(folder)} holds files numba "
                     f"cannot read ({name}) and they cannot be moved aside "
                     f"({e.strerror or e}): compiling those kernels in memory")
            return None
    if moved and not _state["healed"]:
        _state["healed"] = True
        _say(f"darknumba: numba's kernel cache {_cache_root(folder)} held files numba cannot "
             f"read (truncated, damaged or another numba version's): moved them to {dest} "
             f"and compiling those kernels again")
    return dest if moved else None


def _data_files(folder: str, index_name: str) -> list[str]:
    base = index_name[:-len(".nbi")] + "."
    try:
        return sorted(f for f in os.listdir(folder) if f.startswith(base) and f.endswith(".nbc"))
    except OSError:
        return []


def _foreign_version(path: str, version: str) -> bool:
    """Whether the index at `path` starts with another numba version than `version`."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f) != version
    except FileNotFoundError:
        return False
    except Exception:                   # noqa: BLE001 - not even a version: not numba's
        return True


def heal_numba_cache(log: Callable[[str], None] | None = None) -> bool:
    """Make numba treat a cache file it cannot use as a miss, after moving it aside (see the
    module's docstring); idempotent. `log` receives the notices (default: stderr). True when
    numba's loads and saves now take that path (numba within cache_loads.TESTED)."""
    import numba
    from numba.core import caching

    from .cache_loads import TESTED, _version

    if log is not None:
        _state["log"] = log
    if not TESTED[0] <= _version(numba.__version__) <= TESTED[1]:
        return False
    if not _state["patched"]:
        _patch(caching)
        _state["patched"] = True
    _check_cache_dir()
    return True


def _patch(caching):
    files, cache = caching.IndexDataCacheFile, caching.Cache
    load_index, load_data = files._load_index, files._load_data
    load_overload, save_overload = cache._load_overload, cache.save_overload

    def _load_index(self):
        try:
            overloads = load_index(self)
        except FileNotFoundError:
            return {}
        except Exception:               # noqa: BLE001 - whatever numba cannot read
            quarantine(self._cache_path, [self._index_name]
                       + _data_files(self._cache_path, self._index_name))
            return {}
        if not overloads and _foreign_version(self._index_path, self._version):
            quarantine(self._cache_path, [self._index_name]
                       + _data_files(self._cache_path, self._index_name))
        return overloads

    def _load_data(self, name):
        try:
            return load_data(self, name)
        except FileNotFoundError:
            raise                       # numba's load: the index names a removed file, a miss
        except Exception:               # noqa: BLE001
            quarantine(self._cache_path, [name])
            return None

    def _load_overload(self, sig, target_context):
        try:
            return load_overload(self, sig, target_context)
        except Exception:               # noqa: BLE001 - the data unpickled but did not rebuild
            f = self._cache_file
            name = f._load_index().get(self._index_key(sig, target_context.codegen()))
            if name is None:
                raise
            quarantine(f._cache_path, [name])
            return None

    def _save_overload(self, sig, data):
        if _state["unwritable"]:
            return
        try:
            save_overload(self, sig, data)
        except OSError as e:
            _state["unwritable"] = True
            _say(f"darknumba: cannot write numba's kernel cache {_cache_root(self.cache_path)} "
                 f"({e.strerror or e}): this run keeps the kernels it compiles in memory")

    files._load_index, files._load_data = _load_index, _load_data
    cache._load_overload, cache.save_overload = _load_overload, _save_overload


def _check_cache_dir():
    """One line when NUMBA_CACHE_DIR names a folder numba cannot write: numba then caches in
    its default folders without a word (or, with none writable, refuses at import)."""
    from numba.core import config
    root = config.CACHE_DIR
    if not root or _state["checked"] == root:
        return
    _state["checked"] = root
    from ..kernels.blas import axpy_cpu
    used = getattr(axpy_cpu, "_cache", None)
    used = getattr(used, "cache_path", None)
    if used is None or os.path.dirname(os.path.abspath(used)) == os.path.abspath(root):
        return
    try:
        import tempfile
        os.makedirs(root, exist_ok=True)
        tempfile.TemporaryFile(dir=root).close()
        why = "it was not writable when darknumba was imported"
    except OSError as e:
        why = e.strerror or str(e)
    _say(f"darknumba: numba cannot write its cache folder {root} (NUMBA_CACHE_DIR: {why}); "
         f"it caches the kernels elsewhere instead (e.g. {used})")
