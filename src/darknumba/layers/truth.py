"""Checks on the truth a loss layer turns into cell, anchor and class indices.

The loss kernels index the output with the cell holding each box's centre and with its class
id, both read from the truth; a NaN, Inf, negative or too large value would make them write
outside the layer's buffers (numba does not check bounds). The layers call these checks first,
so a bad truth is a one-line DataError naming the layer, the image and the box. (The kernels
skip such boxes as well, so that nothing writes out of bounds even without the check.)
"""
from __future__ import annotations

import numpy as np

from ..errors import DataError


def box_rows(truth, batch: int, truths: int, per_box: int, limit: int):
    """(rows, live): the first `limit` boxes of every image as a (batch, limit, per_box) view,
    and which of them an image's list holds (those before its first x == 0; NaN counts as a
    box, as in Darknet's `if(!truth.x) break`)."""
    limit = min(limit, truths // per_box)
    rows = truth[:batch * truths].reshape(batch, truths)[:, :limit * per_box]
    rows = rows.reshape(batch, limit, per_box)
    live = np.logical_and.accumulate(rows[..., 0] != 0, axis=1)
    return rows, live


def check_box_truth(truth, where: str, batch: int, truths: int, per_box: int, limit: int,
                    classes: int, class_col: int, class_count: int | None = None,
                    class_only=None):
    """Every live box: x, y in [0, 1), w, h finite and > 0, class id in 0..class_count-1
    (class_count defaults to classes; a class map passes its length). `class_only` (a
    (batch, limit) bool array) marks rows whose coordinates are not boxes (a class tree's
    classification-only truths): only their class is checked. `where` names the layer."""
    rows, live = box_rows(truth, batch, truths, per_box, limit)
    if not live.any():
        return
    x, y, w, h, cls = (rows[..., k] for k in (0, 1, 2, 3, class_col))
    n = classes if class_count is None else class_count
    with np.errstate(invalid="ignore"):
        coords_ok = (x >= 0) & (x < 1) & (y >= 0) & (y < 1) & (w > 0) & (h > 0) \
            & np.isfinite(w) & np.isfinite(h)
        if class_only is not None:
            coords_ok |= class_only
        ok = coords_ok & (cls >= 0) & (cls < n)
    bad = np.argwhere(live & ~ok)
    if bad.size:
        b, t = (int(v) for v in bad[0])
        vals = ", ".join(f"{name} = {float(v):g}" for name, v in
                         zip(("x", "y", "w", "h", "class"), (x[b, t], y[b, t], w[b, t], h[b, t],
                                                               cls[b, t])))
        raise DataError(
            f"{where}: truth of image {b} of the batch, box {t}: {vals}; expected "
            f"x, y in [0, 1) (relative to the network input; x == 0 ends an image's box list), "
            f"w, h > 0 and a class in 0..{n - 1} ({len(bad)} bad box(es) in this batch)")
