"""Checkpoints during training: written atomically (outputs.atomic_write: a temporary file
beside the target, then a rename), with the two ways that can still go wrong handled.

- A process killed in the middle of a write leaves its temporary file behind. A run starting
  in the folder removes the ones that are ours (atomic_write's name pattern) and older than
  this process, so a run writing there concurrently is not disturbed.
- A full disk or a file-size limit (ENOSPC, EDQUOT, EFBIG) fails the write: the previous
  checkpoint is untouched, and the error says which file could not be written and which one
  is kept.
"""
from __future__ import annotations

import errno
import os
import time

from ..errors import DarknumbaError
from ..outputs import TEMP_NAME, check_outputs_not_inputs
from ..weights import save_weights

STARTED = time.time()       # when this process imported the training code


class CheckpointError(DarknumbaError):
    """A checkpoint could not be written (disk full, file-size limit, permissions)."""


def remove_stale_temps(folder, log=None) -> list[str]:
    """Delete interrupted checkpoint writes in `folder`: files named like atomic_write's
    temporaries and last modified before this process started. Returns their paths."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for e in entries:
        if not TEMP_NAME.fullmatch(e.name):
            continue
        try:
            old = e.stat(follow_symlinks=False).st_mtime < STARTED
            if e.is_file(follow_symlinks=False) and old:
                os.unlink(e.path)
                removed.append(e.path)
        except OSError:
            continue
    if removed and log:
        log(f"removed {len(removed)} unfinished checkpoint file(s) left by an interrupted run "
            f"in {folder}")
    return removed


def check_backups_not_inputs(folder, base: str, inputs: dict):
    """Refuse (a UsageError) a backup folder where a file this run writes (<base>.backup,
    <base>_*.weights, <base>_history.csv, chart.png) is already one of `inputs` (what: path;
    the cfg, the .data file, its lists), a hard link or symlink included. The starting weights
    are not among them: a run resumed from its own <base>.backup replaces it, after reading it
    whole, through a temporary file and a rename."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    ours = [os.path.join(folder, n) for n in names if n == "chart.png" or n.startswith(base)
            and n.endswith((".backup", ".weights", "_history.csv"))]
    check_outputs_not_inputs({"the training output": ours}, inputs)


def save_checkpoint(net, path, previous: str | None):
    """save_weights, or a CheckpointError naming `path`, the reason and the last checkpoint
    written (`previous`): a failed write leaves every existing file as it was."""
    try:
        save_weights(net, path)
    except OSError as e:
        hint = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is reached",
                errno.EFBIG: "the file-size limit (ulimit -f) is reached"}.get(e.errno)
        raise CheckpointError(f"cannot write checkpoint {path}: {hint or e.strerror or e}; "
                              f"existing files are unchanged (last checkpoint of this run: "
                              f"{previous or 'none yet'})") from None
