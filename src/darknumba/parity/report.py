"""The report of `darknumba compare`: rows of tensors side by side, the verdict, the table
and JSON a user reads."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .roundoff import C_ELEM, C_SUM, EPS
from .tensordiff import Row


@dataclass
class Report:
    reference: str           # "C darknet at DIR" or "FILE.npz"
    cfg: str
    weights: str
    mode: str
    tol: float
    rows: list[Row] = field(default_factory=list)
    scalars: dict = field(default_factory=dict)      # name -> {"darknumba": v, "darknet": v}
    not_compared: list[str] = field(default_factory=list)

    @property
    def first_failure(self) -> Row | None:
        return next((r for r in self.rows if r.judged and not r.ok), None)

    @property
    def passed(self) -> bool:
        return bool(self.rows) and self.first_failure is None

    def to_dict(self) -> dict:
        f = self.first_failure
        return {"reference": self.reference, "cfg": self.cfg, "weights": self.weights,
                "mode": self.mode, "tol": self.tol, "passed": self.passed,
                "verdict": self.verdict(),
                "per_layer_tolerance": {"model": "C_SUM * EPS * sqrt(K) * sum|terms| + "
                                        "C_ELEM * EPS * max|C|; C's one-by-one float32 sums "
                                        "(batch statistics, cost): u * sum|partial sums|",
                                        "EPS": EPS, "C_SUM": C_SUM, "C_ELEM": C_ELEM},
                "first_failure": asdict(f) if f else None, "scalars": self.scalars,
                "rows": [asdict(r) for r in self.rows], "not_compared": self.not_compared}

    def to_json(self) -> str:
        def clean(v):
            return None if isinstance(v, float) and not math.isfinite(v) else v
        d = self.to_dict()
        d["rows"] = [{k: clean(v) for k, v in r.items()} for r in d["rows"]]
        return json.dumps(d, indent=1)

    def table(self) -> str:
        lines = [f"darknumba vs {self.reference}: {self.mode}, {Path(self.cfg).name} + "
                 f"{Path(self.weights).name if self.weights else '(no weights)'}",
                 "propagated: both networks run end to end (tol {:g}, information where the "
                 "layer's own figure exists); own: the layer on C's own inputs, against its "
                 "rounding tolerance for sums of K terms".format(self.tol),
                 f"{'layer':>5}  {'type':<14} {'tensor':<22} {'shape':<18} {'propagated':>10} "
                 f"{'own rel':>9} {'x tol':>7} {'K':>7}  verdict"]
        for r in self.rows:
            idx = "-" if r.layer is None else str(r.layer)
            verdict = ("ok" if r.ok else "FAIL") if r.judged else "info"
            if r.note:
                verdict += f" ({r.note})"
            own = (f"{r.own_rel:>9.3g} {r.own_ratio:>7.3g} {r.own_K:>7d}" if r.own_ratio is not None
                   else f"{'-':>9} {'-':>7} {'-':>7}")
            prop = "-" if math.isnan(r.max_rel) else f"{r.max_rel:.3g}"
            lines.append(f"{idx:>5}  {r.type:<14} {r.tensor:<22} {r.shape:<18} {prop:>10} "
                         f"{own}  {verdict}")
        for name, v in self.scalars.items():
            lines.append(f"{name}: darknumba {_fmt(v.get('darknumba'))}, "
                         f"darknet {_fmt(v.get('darknet'))}")
        if self.not_compared:
            lines.append(f"not compared (darknumba has no such tensor): "
                         f"{', '.join(self.not_compared[:12])}"
                         + (" ..." if len(self.not_compared) > 12 else ""))
        lines.append(self.verdict())
        return "\n".join(lines)

    def verdict(self) -> str:
        """The last line: PASS with the worst figures, or FAIL naming the first failure."""
        f = self.first_failure
        nfail = sum(r.judged and not r.ok for r in self.rows)
        if f is not None:
            where = "network" if f.layer is None else f"layer {f.layer} ({f.type})"
            if f.own_ratio is not None:
                return (f"FAIL: first difference at {where} {f.tensor}: on C's own inputs max "
                        f"|diff| {f.own_abs:.3g} (max rel {f.own_rel:.3g}) is {f.own_ratio:.3g} x "
                        f"its rounding tolerance (sums of {f.own_K} terms); {nfail} of "
                        f"{len(self.rows)} tensors fail")
            return (f"FAIL: first difference at {where} {f.tensor}: max |diff| {f.max_abs:.3g}, "
                    f"max rel {f.max_rel:.3g} > tol {self.tol:g} ({nfail} of {len(self.rows)} "
                    f"tensors fail)" + (f"; {f.note}" if f.note else ""))
        if not self.rows:
            return "FAIL: nothing to compare"
        judged = [r for r in self.rows if r.judged]
        own = [r for r in judged if r.own_ratio is not None]
        prop = [r for r in judged if not math.isnan(r.max_rel)]
        text = f"PASS: {len(judged)} tensors"
        if own:
            w = max(own, key=lambda r: r.own_ratio)
            text += (f"; {len(own)} judged per layer on C's own inputs, the worst at "
                     f"{w.own_ratio:.2g} x its tolerance ({_where(w)} {w.tensor})")
        if len(own) < len(judged):
            text += f"; {len(judged) - len(own)} within tol {self.tol:g}"
        if prop:
            w = max(prop, key=lambda r: r.max_rel)
            text += (f"; propagated end to end: largest max rel {w.max_rel:.3g} "
                     f"({_where(w)} {w.tensor})")
        return text


def _fmt(v):
    return "n/a" if v is None else f"{v:.7g}" if isinstance(v, float) else str(v)


def _where(r: Row) -> str:
    return "network" if r.layer is None else f"layer {r.layer}"
