"""Which tensors `darknumba compare` holds side by side, in what order, and how each is judged;
the tests judge theirs with the same functions (`diff`, `term_scales`, `named_rows`).

Both sides are dicts in the golden fixtures' layout: ``input``, ``truth``, ``cost``,
``L###_output`` / ``_delta`` / ``_cost`` / ``_mean`` / ``_variance`` / ``_weight_updates`` /
``_bias_updates`` / ``_scale_updates`` / ``_rolling_mean`` / ``_rolling_variance``,
``before_L###_{weights,biases,scales}`` and ``after_L###_...`` (after the update).

A tensor passes when max |ours - darknet| <= tol * max |darknet| (the scale at least 1e-6);
a gradient that is a sum of cancelling terms is judged per entry against the sum of |terms|
(`term_scales`). Parameters after an update are compared as the step they took (after -
before), so a wrong learning rate is not hidden behind the size of the weights.

That is the *propagated* figure: both networks run end to end, so a layer also inherits the
float32 rounding of every layer before it (C's long one-by-one sums drift by more than 1e-4).
Where the layer was also replayed on C's own inputs (replay.py), the row carries the
*per-layer* figure too, judged against the rounding its own reductions allow (roundoff.py),
and that figure decides the row.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..kernels.activations import gradient_array
from ..kernels.im2col import im2col_cpu
from .darknet_ref import PARAM_FIELDS

DEFAULT_TOL = 1e-4
SCALE_FLOOR = 1e-6
KEY = re.compile(r"^(?:(before|after)_)?L(\d{3})_([a-z_]+)$")
STEP_PARAMS = ("weights", "biases", "scales")
AFTER_FIELDS = PARAM_FIELDS + ("weight_updates", "bias_updates", "scale_updates")
# order inside each phase
FORWARD_ORDER = ("mean", "variance", "output", "cost", "delta", "rolling_mean", "rolling_variance")
BACKWARD_ORDER = ("delta", "weight_updates", "bias_updates", "scale_updates")


@dataclass
class Row:
    layer: int | None        # None for network-level tensors (input, cost)
    type: str
    tensor: str
    shape: str
    max_abs: float
    max_rel: float
    ok: bool
    note: str = ""
    judged: bool = True      # False: shown for information, never fails the comparison
    # the per-layer figure: the layer replayed on C's own inputs (replay.py), its max |diff|,
    # that over max |C|, the worst |diff| / tolerance over the entries (roundoff.py) and the
    # longest reduction behind the tolerance. When present, `ok` is own_ratio <= 1.
    own_abs: float | None = None
    own_rel: float | None = None
    own_ratio: float | None = None
    own_K: int | None = None


def diff(ours, ref, terms=None) -> tuple[float, float]:
    """(max |ours - ref|, max of |ours - ref| / scale), in float64. The scale is max |ref| (at
    least 1e-6), or per entry the larger of that and `terms` (the sum of |terms| of a sum)."""
    a = np.asarray(ours, np.float64).reshape(-1)
    b = np.asarray(ref, np.float64).reshape(-1)
    if a.size != b.size or (terms is not None and np.size(terms) != b.size):
        raise ValueError(f"diff of {a.size} values against {b.size}"
                         + ("" if terms is None else f" with {np.size(terms)} terms"))
    if b.size == 0:
        return 0.0, 0.0
    d = np.abs(a - b)
    if not np.all(np.isfinite(d)):      # NaN on one side only, or inf
        same = (np.isnan(a) & np.isnan(b)) | (a == b)
        d = np.where(same, 0.0, np.where(np.isfinite(d), d, np.inf))
    scale = max(float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0)), SCALE_FLOOR)
    if terms is not None:
        return float(d.max()), float(np.max(d / np.maximum(scale, terms)))
    return float(d.max()), float(d.max()) / scale


def named_rows(ours: dict, ref: dict, keys=None, tol: float = DEFAULT_TOL,
               terms: dict | None = None) -> list[Row]:
    """One Row per key (default: every key of `ref`), in that order: ours[key] against ref[key]
    by `diff`, with per-entry sums of |terms| from terms[key] where given. A key ours lacks, or
    a tensor of another size, fails."""
    terms = terms or {}
    rows = []
    for key in ref if keys is None else keys:
        m = KEY.match(key)
        layer = int(m.group(2)) if m else None
        b = ref[key]
        if key not in ours or np.size(ours[key]) != np.size(b):
            what = "no such tensor" if key not in ours else f"{np.size(ours[key])} values"
            rows.append(Row(layer, "", key, str(np.size(b)), math.inf, math.inf, False,
                            f"darknumba has {what}, darknet {np.size(b)} values"))
            continue
        d, r = diff(ours[key], b, terms.get(key))
        rows.append(Row(layer, "", key, str(np.size(b)), d, r, r <= tol))
    return rows


def rows_report(rows: list[Row], tol: float, label: str = "") -> str:
    """The failing rows, worst first, each by name with its max abs / max rel difference, and
    the worst of all: what a test prints when a comparison fails."""
    bad = sorted((r for r in rows if r.judged and not r.ok), key=lambda r: -r.max_rel)
    lines = [f"{label}: {len(bad)} of {len(rows)} tensors differ by more than {tol:g} "
             f"(max rel)" if bad else f"{label}: {len(rows)} tensors within {tol:g}"]
    lines += [f"  {r.tensor}: max abs {r.max_abs:.3g}, max rel {r.max_rel:.3g}"
              + (f" ({r.note})" if r.note else "") for r in bad]
    if rows:
        worst = max(rows, key=lambda r: r.max_rel)
        lines.append(f"  worst: {worst.tensor}: max abs {worst.max_abs:.3g}, "
                     f"max rel {worst.max_rel:.3g}")
    return "\n".join(lines)


def term_scales(ref: dict, layers, momentum: float | None = None,
                decay_batch: float = 0.0) -> dict[str, np.ndarray]:
    """{key: per-entry sum of |terms|} of the conv / connected gradients, which are sums whose
    terms cancel (batch-norm and softmax deltas sum to ~0), so that their float error follows
    the terms, not the result. From darknet's own tensors in `ref`, with pre = delta_in *
    act'(output) (the delta entering batch norm; the final delta where no delta_in was dumped):
        bias_updates[f]      sum over images b and pixels p of |pre[b, f, p]|
        scale_updates[f]     sum |pre * x_norm|
        mean_delta[f]        sum |pre| * |scales| / sqrt(variance + 1e-5)
        variance_delta[f]    sum |pre * (x - mean)| * |scales| * 0.5 (variance + 1e-5)^-1.5
        weight_updates[f, k] sum |delta[b, f, p] * col[b, k, p]|, col = im2col(input)
    and with `momentum`, the momentum buffers after the update (update_network keeps
    momentum * (updates + decay_batch * |weights|) for the weights, momentum * updates else).
    `layers`: darknumba's layers (types, shapes, activations); decay_batch = decay * cfg batch."""
    S = {}
    for i, l in enumerate(layers):
        delta = ref.get(f"L{i:03d}_delta")
        if l.type not in ("convolutional", "connected") or delta is None \
                or delta.size != l.batch * l.outputs:
            continue
        k = f"L{i:03d}_"
        b, n, sp = l.batch, l.out_c, l.out_h * l.out_w
        pre, out = ref.get(k + "delta_in"), ref.get(k + "output")
        if pre is None or out is None or pre.size != delta.size or out.size != delta.size:
            pre = delta
        else:
            pre = pre.astype(np.float32)          # a copy: act' is applied in place
            gradient_array(out.astype(np.float32), pre.size, l.activation_id, pre)
        pre = np.abs(pre.astype(np.float64)).reshape(b, n, sp)
        S[k + "bias_updates"] = pre.sum(axis=(0, 2))
        if getattr(l, "batch_normalize", False):
            S.update(_bn_terms(k, ref, pre))
        x = ref.get(f"L{i - 1:03d}_output") if i else ref.get("input")
        if x is not None and x.size == l.batch * l.inputs:
            S[k + "weight_updates"] = _weight_terms(l, np.abs(delta.astype(np.float64)),
                                                    np.abs(x.astype(np.float32)))
        if momentum is not None:
            w = ref.get(f"before_{k}weights")
            for f in ("bias_updates", "scale_updates", "weight_updates"):
                if k + f in S:
                    decay = decay_batch * np.abs(w.astype(np.float64)) if f == "weight_updates" \
                        and w is not None and w.size == S[k + f].size else 0.0
                    S[f"after_{k}{f}"] = momentum * (S[k + f] + decay)
    return S


def _bn_terms(k: str, ref: dict, pre: np.ndarray) -> dict[str, np.ndarray]:
    """The batch-norm backward's sums (see term_scales), those whose inputs darknet dumped."""
    n = pre.shape[1]

    def get(key, size):
        a = ref.get(key)
        return None if a is None or a.size != size else a.astype(np.float64)
    out = {}
    xn = get(k + "x_norm", pre.size)
    if xn is not None:
        out[k + "scale_updates"] = (pre * np.abs(xn.reshape(pre.shape))).sum(axis=(0, 2))
    x, mean, var, scales = (get(k + "x", pre.size), get(k + "mean", n),
                            get(k + "variance", n), get(f"before_{k}scales", n))
    if x is None or mean is None or var is None or scales is None:
        return out
    var = var + 1e-5
    xc = np.abs(x.reshape(pre.shape) - mean[None, :, None])
    out[k + "mean_delta"] = pre.sum(axis=(0, 2)) * np.abs(scales) / np.sqrt(var)
    out[k + "variance_delta"] = (pre * xc).sum(axis=(0, 2)) * np.abs(scales) * 0.5 * var ** -1.5
    return out


def _weight_terms(l, delta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """sum over images and pixels of |delta| * |col|: the column matrix of |input| as the
    layer's forward builds it (Darknet's CPU 1x1 path reads the input itself, strided or not)."""
    if l.type == "connected":
        x = x.reshape(l.batch, -1).astype(np.float64)
        return (delta.reshape(l.batch, l.outputs).T @ x).ravel()
    g, m, cg = l.groups, l.n // l.groups, l.c // l.groups
    sp = l.out_h * l.out_w
    kk = l.size * l.size * cg
    quirks = getattr(l, "quirks", None)
    as_is = l.size == 1 and ((l.stride == 1 and l.pad == 0) or
                            (quirks is not None and quirks.strided_1x1_misread))
    wu = np.zeros((g, m, kk))
    col = np.zeros(kk * sp, dtype=np.float32)
    d = delta.reshape(l.batch, g, m, sp)
    for bi in range(l.batch):
        for gi in range(g):
            im = x[(bi * g + gi) * cg * l.h * l.w:][:cg * l.h * l.w]
            if as_is:
                col[:] = im[:kk * sp]
            else:
                im2col_cpu(im, cg, l.h, l.w, l.size, l.stride, l.pad, col)
            wu[gi] += d[bi, gi] @ col.reshape(kk, sp).astype(np.float64).T
    return wu.ravel()


def _shape_of(layer, fieldname: str, n: int) -> str:
    """A readable shape for a flat tensor of `layer` (a darknumba layer or None)."""
    if layer is not None:
        if fieldname in ("output", "delta") and layer.batch * layer.outputs == n:
            if layer.out_c * layer.out_h * layer.out_w == layer.outputs:
                return "x".join(map(str, layer.output_shape()))
            return f"{layer.batch}x{layer.outputs}"
        if fieldname in ("weights", "weight_updates"):
            if layer.type == "convolutional" and layer.nweights == n:
                return f"{layer.n}x{layer.c // layer.groups}x{layer.size}x{layer.size}"
            if layer.type == "connected" and layer.inputs * layer.outputs == n:
                return f"{layer.outputs}x{layer.inputs}"
    return str(n)


def own_figures(own_value, ref_value, bound) -> tuple[float, float, float, int]:
    """(max |diff|, max |diff| / max |ref|, worst |diff| / tau, K) of a per-layer replay
    against C, with bound = (tau per entry or scalar, K) from roundoff.LayerBounds."""
    tau, K = bound
    a = np.asarray(own_value, np.float64).reshape(-1)
    b = np.asarray(ref_value, np.float64).reshape(-1)
    d = np.abs(a - b)
    same = (np.isnan(a) & np.isnan(b)) | (a == b)
    d = np.where(same, 0.0, np.where(np.isfinite(d), d, np.inf))
    t = np.broadcast_to(np.asarray(tau, np.float64).reshape(-1) if np.ndim(tau) else tau, d.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(d == 0, 0.0, d / np.maximum(t, 1e-38))
    scale = max(float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0)), SCALE_FLOOR)
    dmax = float(d.max()) if d.size else 0.0
    return dmax, dmax / scale, float(ratio.max()) if d.size else 0.0, int(K)


def _own_key(key: str) -> tuple[int | None, str] | None:
    """(layer, LayerBounds field) of a C tensor key: L012_output -> (12, "output"),
    after_L012_weights -> (12, "after_weights"), cost -> (None, "cost")."""
    if key == "cost":
        return None, "cost"
    m = OWN_KEY.match(key)
    if not m:
        return None
    return int(m.group(2)), (m.group(1) or "") + m.group(3)


OWN_KEY = re.compile(r"^(after_)?L(\d{3})_([a-z_]+(?:_\d{3})?)$")
BWD_OUT = re.compile(r"^L(\d{3})_bwd_out_(\d{3})$")


def compare_tensors(ours: dict, ref: dict, layers, tol: float = DEFAULT_TOL,
                    ref_types: list[str] | None = None,
                    factors: dict | None = None, own: dict | None = None,
                    bounds=None) -> tuple[list[Row], list[str]]:
    """Rows for every tensor both sides hold, in the order darknet computes them: the input,
    loaded parameters, forward (layer 0 up), backward (last layer down), update (layer 0 up).
    `layers`: darknumba's layers (types and shapes). `factors`: what turns a gradient into the
    momentum buffer ("after": momentum, "decay_batch": decay * cfg batch) and into the
    parameter step ("step": rate / cfg batch), to carry term_scales over to those rows. `own`: darknumba's layers replayed on C's inputs
    (replay.py, same keys as ref, plus L###_bwd_out_### for the deltas a backward adds into)
    and `bounds(layer, field)` -> (tau, K) or None: where both are there, a row is judged on
    its per-layer figure. Returns (rows, keys only ref has)."""
    rows, missing = _propagated_rows(ours, ref, layers, tol, ref_types, factors or {})
    if own is None or bounds is None:
        return rows, missing
    judged, last_backward = [], {}
    for r, key in rows:
        k = _own_key(key) if key else None
        if k is not None and key in own and key in ref and np.size(own[key]) == np.size(ref[key]):
            b = bounds(*k)
            if b is not None:
                r.own_abs, r.own_rel, r.own_ratio, r.own_K = own_figures(own[key], ref[key], b)
                r.ok, r.note = r.own_ratio <= 1.0, ("" if r.own_ratio <= 1.0 else r.note)
        m = KEY.match(key or "")
        if m and not m.group(1) and m.group(3) in BACKWARD_ORDER and any(
                k.startswith("after_") for k in ref):
            last_backward[r.layer] = len(judged)
        judged.append(r)
    for i, at in sorted(last_backward.items(), key=lambda kv: -kv[1]):   # after each layer's
        at += 1                                                           # backward rows
        judged[at:at] = _input_gradient_rows(i, own, ref, layers, bounds)
    return judged, missing


def _input_gradient_rows(i, own, ref, layers, bounds) -> list[Row]:
    """Per-layer rows for the deltas layer i's backward added into (its input gradient)."""
    rows = []
    for key in sorted(k for k in own if k.startswith(f"L{i:03d}_bwd_out_")):
        j = int(key[-3:])
        r = ref.get(key, ref.get(f"L{j:03d}_delta_in") if j == i - 1 else None)
        b = bounds(i, key[5:]) if r is not None and np.size(r) == np.size(own[key]) else None
        if b is None:
            continue
        a, rel, ratio, K = own_figures(own[key], r, b)
        layer = layers[i] if i < len(layers) else None
        rows.append(Row(i, layer.type if layer is not None else "?", f"delta into {j}",
                        _shape_of(layers[j] if j < len(layers) else None, "delta", np.size(r)),
                        math.nan, math.nan, ratio <= 1.0, "", True, a, rel, ratio, K))
    return rows


def _propagated_rows(ours: dict, ref: dict, layers, tol: float, ref_types, factors: dict):
    """(Row, C key) pairs of the propagated figures (see compare_tensors)."""
    S = term_scales(ref, layers, factors.get("after"), factors.get("decay_batch", 0.0))
    step = factors.get("step")
    def ltype(i):
        if i < len(layers):
            return layers[i].type
        return ref_types[i] if ref_types and i < len(ref_types) else "?"

    n = max(len(layers), len(ref_types or []))
    train_step = any(k.startswith("after_") for k in ref)   # else delta is forward's loss delta
    l0 = layers[0] if layers else None
    input_shape = f"{l0.batch}x{l0.c}x{l0.h}x{l0.w}" if l0 is not None else ""
    plan = []  # (sort key, layer, tensor name, ours value, ref value, field, sums of |terms|, key)
    not_compared = []
    for key in ref:
        m = KEY.match(key)
        if key == "input" and "letterbox" in ours:     # information: both ran on ref's input
            plan.append(((0, 0, 0), None, "letterbox", ours["letterbox"], ref[key], "input", None, key))
            continue
        if key == "cost" and key in ours:                # the mean cost of the loss layers
            plan.append(((2, n, 0), None, key, ours[key], ref[key], key, None, key))
            continue
        if not m:
            continue
        prefix, i, f = m.group(1), int(m.group(2)), m.group(3)
        if prefix == "before":
            if f in STEP_PARAMS and key in ours:
                plan.append(((1, i, STEP_PARAMS.index(f)), i, f"loaded {f}", ours[key], ref[key], f,
                             None, key))
            continue
        if prefix == "after":
            if f not in AFTER_FIELDS:
                continue
            if key not in ours:
                not_compared.append(key)
                continue
            b = f"before_L{i:03d}_{f}"
            order = (4, i, AFTER_FIELDS.index(f))
            if f in STEP_PARAMS and b in ours and b in ref and ours[b].size == ours[key].size \
                    and ref[b].size == ref[key].size:
                a = ours[key].astype(np.float64) - ours[b]
                r = ref[key].astype(np.float64) - ref[b]
                grad = S.get(f"L{i:03d}_" + {"weights": "weight_updates", "biases": "bias_updates",
                                             "scales": "scale_updates"}[f])
                terms = None if grad is None or step is None else step * grad
                plan.append((order, i, f"{f} step", a, r, f, terms, key))
            else:
                plan.append((order, i, f"{f} after", ours[key], ref[key], f, S.get(key), key))
            continue
        if f not in FORWARD_ORDER + BACKWARD_ORDER:
            continue
        if key not in ours:
            not_compared.append(key)
            continue
        if f in BACKWARD_ORDER and (f != "delta" or train_step):
            plan.append(((3, n - i, BACKWARD_ORDER.index(f)), i, f, ours[key], ref[key], f,
                         S.get(key), key))
        else:
            plan.append(((2, i, FORWARD_ORDER.index(f)), i, f, ours[key], ref[key], f, S.get(key),
                         key))
    rows = []
    for _, i, name, a, b, f, terms, key in sorted(plan, key=lambda p: p[0]):
        layer = layers[i] if i is not None and i < len(layers) else None
        t = "network" if i is None else ltype(i)
        if ref_types and i is not None and i < len(ref_types) and ref_types[i] != t:
            rows.append((Row(i, t, name, "", math.inf, math.inf, False,
                             f"darknet has [{ref_types[i]}] here"), key))
            continue
        if np.size(a) != np.size(b):
            rows.append((Row(i, t, name, "", math.inf, math.inf, False,
                             f"darknumba has {np.size(a)} values, darknet {np.size(b)}"), key))
            continue
        if terms is not None and np.size(terms) != np.size(b):     # another network's layers
            terms = None
        d, r = diff(a, b, terms)
        if name == "letterbox":
            rows.append((Row(i, t, name, input_shape, d, r, r <= tol, "image decoding and "
                             "resize; both networks ran on darknet's tensor", judged=False), key))
            continue
        note = "" if r <= tol else kink_note(i, layer, ours, ref) if f == "delta" else \
            sum_note(layer, tol) if f in ("mean", "variance") else ""
        rows.append((Row(i, t, name, _shape_of(layer, f, np.size(b)), d, r, r <= tol, note), key))
    return rows, sorted(not_compared)


def sum_note(layer, tol: float) -> str:
    """BN batch statistics: darknet's mean_cpu / variance_cpu add batch x spatial values one at
    a time in float32, whose rounding grows with the count."""
    n = getattr(layer, "batch", 0) * getattr(layer, "out_h", 0) * getattr(layer, "out_w", 0)
    drift = n * 2.0 ** -24
    return (f"darknet sums {n} values one by one in float32 (drift up to ~{drift:.0e})"
            if drift > tol else "")


KINKED = ("leaky", "relu", "relie", "ramp")      # act'(y) jumps at y = 0


def kink_note(i: int, layer, ours: dict, ref: dict) -> str:
    """Why a backward delta can part while every output agrees: an output within float rounding
    of the activation's kink at 0, on opposite sides in the two runs, gets a different act'."""
    act = getattr(layer, "activation", None)
    key = f"L{i:03d}_output"
    if act not in KINKED or key not in ours or key not in ref or ours[key].size != ref[key].size:
        return ""
    a, b = ours[key].astype(np.float64), ref[key].astype(np.float64)
    near = np.abs(a - b) <= 1e-5 * max(float(np.max(np.abs(b))), SCALE_FLOOR)
    k = int(np.count_nonzero(((a > 0) != (b > 0)) & near))
    return f"{k} {act} output(s) within rounding of 0 fell on the other side" if k else ""


def scalar_rows(sc: dict, tol: float) -> list[Row]:
    """The learning rate and the update decision are checked as rows too (cost already is)."""
    rows = []
    for k in ("rate", "did_update", "seen_after"):
        v = sc.get(k)
        if not v or v["darknumba"] is None or v["darknet"] is None:
            continue
        d, r = diff([v["darknumba"]], [v["darknet"]])
        rows.append(Row(None, "network", k, "1", d, r, r <= tol))
    return rows
