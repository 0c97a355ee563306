"""The μP audit's result: one row per (parameter, module that uses it) or attention
module, with the fitted width exponents, the rule table's and the verdict
(:func:`mutransfer.checks.audit.audit` fills it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

QUANTITY_RULE = {"init": "init std", "lr": "LR", "mult": "forward multiplier", "wd": "weight decay",
                 "attention": "attention scale", "eps": "Adam eps"}


@dataclass
class AuditRow:
    """One (parameter, module that uses it), or one attention module."""

    name: str
    module: str
    role: str
    optimizer: str
    """Rule column: adam, sgd or muon (attention rows: ``-``)."""
    expected: dict[str, float | None]
    """Width exponent per quantity (init, lr, mult, wd; attention: vs head dim)."""
    found: dict[str, float | None]
    verdict: str
    """``ok``, ``ok (equivalent)``, ``FAIL`` or ``n/a``."""
    broken: str | None = None
    """The quantity whose rule is broken (init, lr, mult, wd, attention)."""
    message: str = ""
    values: dict[str, list[float]] = field(default_factory=dict)
    """Raw per-width values (effective LR, RMS, multiplier, WD, eps)."""
    axis: str = "width"
    """What the exponents are of: ``width``, or ``d_head`` for a growing head dim."""
    rules: dict[str, str] = field(default_factory=dict)
    """The table's rule per quantity, as written in :mod:`mutransfer.parametrize.rules`."""
    unjudged: list[str] = field(default_factory=list)
    """Quantities measured too noisily to judge (init of a tensor with few entries)."""
    allowed: dict[str, list[float]] = field(default_factory=dict)
    """Quantities with a range of correct exponents rather than one, as [low, high]: the
    readout's init (``readout_init`` constant to fan_in); ``expected`` holds the default's."""


@dataclass
class AuditResult:
    """Rows, the first failure and the coordinate check of one audit."""

    widths: list[int]
    base_width: int
    rows: list[AuditRow]
    coord_check: Any | None = None
    """A :class:`~mutransfer.checks.coord_check.CoordCheckResult` on the user's model, or None."""
    tol: float = 0.2

    @property
    def failures(self) -> list[AuditRow]:
        return [r for r in self.rows if r.verdict == "FAIL"]

    @property
    def first_failure(self) -> AuditRow | None:
        return next(iter(self.failures), None)

    @property
    def coord_passed(self) -> bool | None:
        return None if self.coord_check is None else bool(self.coord_check.passed)

    @property
    def passed(self) -> bool:
        return not self.failures and self.coord_passed is not False

    def summary_line(self) -> str:
        f = self.first_failure
        if f is not None:
            via = "" if f.module in (f.name, f.name.rpartition(".")[0]) else f", via {f.module or 'model'}"
            return f"first failing layer: {f.name} ({f.role}{via}): {f.message}"
        return "no layer breaks the μP rules"

    def coord_line(self) -> str:
        cc = self.coord_check
        if cc is None:
            return "coordinate check: skipped"
        w = cc.worst()
        return (f"coordinate check: {'PASSED' if cc.passed else 'FAILED'} (max log2 slope "
                f"{w['slope']:.2f} at {w['module']}, step {w['step']}; tol {cc.tol})")

    def table(self) -> str:
        head = ["parameter", "role", "optim", "init exp/found", "LR exp/found", "mult exp/found",
                "WD exp/found", "verdict"]

        def cell(r: AuditRow, q: str) -> str:
            e, f = r.expected.get(q), r.found.get(q)
            if e is None and f is None:
                return "-"
            return f"{_fmt(e)}/{'~' if q in r.unjudged else ''}{_fmt(f)}"

        body = []
        for r in self.rows:
            if r.axis == "depth":
                continue
            label = r.name if r.module in ("", r.name, r.name.rpartition(".")[0]) else f"{r.name} @{r.module}"
            if r.role == "attention":
                axis = " (of d_head)" if r.axis == "d_head" else ""
                body.append([label, "attn", "-", "-", "-", f"{cell(r, 'attention')}{axis}", "-",
                             r.verdict + (" attention scale" if r.broken else "")])
            else:
                body.append([label, r.role, r.optimizer, cell(r, "init"), cell(r, "lr"), cell(r, "mult"),
                             cell(r, "wd"), r.verdict + (f" {QUANTITY_RULE[r.broken]}" if r.broken else "")])
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        lines = [f"# audit: widths {self.widths}, base {self.base_width}; exponents of width "
                 f"(expected/found), tol {self.tol}",
                 fmt.format(*head), fmt.format(*("-" * w for w in widths))]
        lines += [fmt.format(*b).rstrip() for b in body]
        depth = [r for r in self.rows if r.axis == "depth"]
        if depth:
            head = ["parameter", "role", "optim", "LR exp/found", "mult exp/found", "eps exp/found",
                    "verdict"]
            body = [[r.name, r.role, r.optimizer, cell(r, "lr"), cell(r, "mult"), cell(r, "eps"),
                     r.verdict + (f" {QUANTITY_RULE[r.broken]}" if r.broken else "")] for r in depth]
            widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
            fmt = "  ".join(f"{{:<{w}}}" for w in widths)
            lines += ["", "# depth (CompleteP, Dey et al. 2025 Table 1): exponents of depth (expected/found) "
                      "of the first block's branches and parameters",
                      fmt.format(*head), fmt.format(*("-" * w for w in widths))]
            lines += [fmt.format(*b).rstrip() for b in body]
        return "\n".join(lines)

    def report(self) -> str:
        verdict = "PASS: this is μP" if self.passed else "FAIL: this breaks μP"
        return "\n".join([self.table(), "", self.summary_line(), self.coord_line(), verdict])

    def to_json_dict(self) -> dict[str, Any]:
        f = self.first_failure
        return {
            "passed": self.passed,
            "widths": self.widths,
            "base_width": self.base_width,
            "tol": self.tol,
            "first_failure": None if f is None else {"parameter": f.name, "module": f.module, "role": f.role,
                                                     "rule": f.broken, "message": f.message},
            "coord_check": None if self.coord_check is None else self.coord_check.to_json_dict(),
            "rows": [dataclasses.asdict(r) for r in self.rows],
        }


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v - round(v * 2) / 2) < 5e-3:  # exact rules and exact finds print as -1, -1/2, 0
        return f"{round(v * 2) / 2:g}"
    return f"{v:.2f}"


