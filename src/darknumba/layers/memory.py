"""Every buffer a layer allocates goes through `zeros` / `full`, which refuse it before it is
allocated when it would take more than a sane share of memory (a cfg with width=100000 or
batch=10^6 would otherwise ask for terabytes, or be killed by the OS half-way).

While `parse_network_cfg` builds a network it sets a MemoryBudget: every layer's buffers
(output and delta times the batch, weights and their updates, batch-norm arrays, the state of
the recurrent layers) count towards a per-layer and a whole-network limit, and the shared
workspace (the largest any layer asks for) towards the whole. Outside a build (a resize, a
layer made directly) each single buffer is held to the per-layer limit.

A network built for inference (`inference_only()`, as AlexeyAB's parser builds at a given
batch) counts and allocates only what a forward pass needs; what training alone reads is
allocated when training first needs it, checked against the same limit then.
"""
from __future__ import annotations

import contextlib
import contextvars
import os

import numpy as np

from ..errors import CfgError

# the whole network's buffers; one layer may take a quarter of it. DARKNUMBA_MAX_GIB raises
# (or lowers) it, read when a network is built.
DEFAULT_MAX_BYTES = 16 << 30


class SizeError(CfgError):
    """A layer whose buffers cannot exist: an output without pixels, or more bytes than the
    limit. The parser adds the file, line, section and layer."""


def gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):,.1f} GiB ({nbytes:,} bytes)"


LIMITS = "DARKNUMBA_MAX_GIB sets the network's limit, 16 by default; a layer may take a quarter"


def max_bytes_from_env() -> int:
    """DARKNUMBA_MAX_GIB as bytes, or the default."""
    v = os.environ.get("DARKNUMBA_MAX_GIB")
    if not v:
        return DEFAULT_MAX_BYTES
    try:
        g = float(v)
    except ValueError:
        g = -1.0
    if not g > 0:
        raise CfgError(f"DARKNUMBA_MAX_GIB={v!r}: expected a positive number of GiB")
    return int(g * (1 << 30))


class MemoryBudget:
    """Bytes taken by the network being built, layer by layer."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_total = max_bytes
        self.max_layer = max_bytes // 4
        self.total = 0              # every layer's own buffers
        self.layer = 0              # the current layer's
        self.workspace = 0          # the largest workspace so far (shared by all layers)

    def start_layer(self):
        self.layer = 0

    def _refuse(self, what: str, nbytes: int, layer: int, total: int):
        if layer > self.max_layer:
            more = f", {gib(layer)} with the layer's other buffers" if layer > nbytes else ""
            raise SizeError(f"{what} need {gib(nbytes)}{more}; a layer may take at most "
                            f"{gib(self.max_layer)} ({LIMITS})")
        if total > self.max_total:
            raise SizeError(f"{what} need {gib(nbytes)}, which brings the network to "
                            f"{gib(total)}; it may take at most {gib(self.max_total)} ({LIMITS})")

    def take(self, nbytes: int, what: str):
        self._refuse(what, nbytes, self.layer + nbytes, self.total + self.workspace + nbytes)
        self.layer += nbytes
        self.total += nbytes

    def take_workspace(self, nbytes: int):
        """The shared scratch buffer (im2col columns) this layer needs: the largest counts."""
        self._refuse("its workspace (im2col columns)", nbytes, self.layer + nbytes,
                     self.total + max(nbytes, self.workspace))
        self.workspace = max(nbytes, self.workspace)


_BUDGET: contextvars.ContextVar[MemoryBudget | None] = contextvars.ContextVar(
    "darknumba_memory_budget", default=None)


@contextlib.contextmanager
def budget(max_bytes: int):
    """Count every buffer allocated inside the block against a new MemoryBudget."""
    b = MemoryBudget(max_bytes)
    token = _BUDGET.set(b)
    try:
        yield b
    finally:
        _BUDGET.reset(token)


_INFERENCE_ONLY = contextvars.ContextVar("darknumba_inference_only", default=False)


@contextlib.contextmanager
def inference_only(on: bool = True):
    """Layers built (or resized) inside leave out what only training reads -- deltas, weight
    gradients, the batch-norm input kept for backward, pooling winners, dropout draws -- as
    AlexeyAB's parse_network_cfg_custom(cfg, batch > 0) builds for inference (`train = 0`): the
    budget does not count them and they get no memory until training first reads them
    (Layer.defer, Network.prepare_training). on=False: everything now, as for training."""
    token = _INFERENCE_ONLY.set(bool(on))
    try:
        yield
    finally:
        _INFERENCE_ONLY.reset(token)


def deferring() -> bool:
    """Whether training-only buffers are being left for later (inside inference_only())."""
    return _INFERENCE_ONLY.get() and not _SHAPES_ONLY.get()


_SHAPES_ONLY = contextvars.ContextVar("darknumba_shapes_only", default=False)


@contextlib.contextmanager
def shapes_only():
    """Layers built inside get no memory: every buffer is a read-only view of one value, and
    the budget is not consulted (the layer table of a 1536-input network is cheap)."""
    token = _SHAPES_ONLY.set(True)
    try:
        yield
    finally:
        _SHAPES_ONLY.reset(token)


def reserve(n, dtype=np.float32, what: str | None = None) -> int:
    """Account for n values of dtype about to be allocated (refusing them if the budget does
    not allow them); returns n as an int."""
    n = int(n)
    what = what or f"{n} values"
    if n < 0:
        raise SizeError(f"{what}: a negative size ({n})")
    if _SHAPES_ONLY.get():
        return n
    nbytes = n * np.dtype(dtype).itemsize
    b = _BUDGET.get()
    if b is not None:
        b.take(nbytes, what)
    elif nbytes > max_bytes_from_env() // 4:
        raise SizeError(f"{what} need {gib(nbytes)}; a layer may take at most "
                        f"{gib(max_bytes_from_env() // 4)} ({LIMITS})")
    return n


def buffer(n: int, value=0, dtype=np.float32) -> np.ndarray:
    """n values already reserved: np.full(n, value), or inside shapes_only() a read-only
    zero-stride view (small arrays stay real: layers write anchors, masks... while built)."""
    if _SHAPES_ONLY.get() and n >= 4096:
        return np.broadcast_to(np.full(1, value, dtype=dtype), (int(n),))
    if value == 0:          # calloc'd: pages a run never touches (deltas at inference) cost nothing
        return np.zeros(int(n), dtype=dtype)
    return np.full(int(n), value, dtype=dtype)


def zeros(n: int, what: str | None = None, dtype=np.float32) -> np.ndarray:
    """np.zeros(n) once the budget allows it."""
    return buffer(reserve(n, dtype, what), 0, dtype)


def full(n: int, value, what: str | None = None, dtype=np.float32) -> np.ndarray:
    """np.full(n, value) once the budget allows it."""
    return buffer(reserve(n, dtype, what), value, dtype)
