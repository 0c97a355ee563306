"""What the two parts of the run plan share: the record of a projected value and the
check of a fit's bounds.

The LR part (:mod:`mutransfer.card.plan`) and the batch part
(:mod:`mutransfer.card.batch_plan`) of the card's ``projected`` section write each value
as :func:`_estimate` (the projection's value record), and pass one :class:`_Bounds`, which
refuses a value of the fit that is only a bound (``--batch-rule fit``) or accepts and
records it (``--accept-edge``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analysis.scaling_fit import ScalingLawFit


def _estimate(value: float, lo: float | None, hi: float | None, level: float, source: str,
              extrapolation: float = 1.0) -> dict[str, Any]:
    """The projection's value record (as ``analysis.projection.Estimate.to_dict()``)."""
    return {"value": float(value), "lo": None if lo is None else float(lo),
            "hi": None if hi is None else float(hi), "level": float(level), "source": source,
            "extrapolation": float(extrapolation)}


@dataclass
class _Bounds:
    """Refuses, or accepts and records, a value of the fit that is only a bound."""

    laws: ScalingLawFit | None
    batch_rule: str
    accept_edge: Sequence[str]
    warnings: list[str]
    accepted: dict[str, list[str]] = field(default_factory=dict)

    def __call__(self, what: str, where: tuple[str, ...], how: str) -> None:
        if not where:
            return
        said = "; ".join(where[:4]) + (f"; and {len(where) - 4} more" if len(where) > 4 else "")
        if what in self.accept_edge:
            self.accepted[what] = list(where)
            self.warnings.append(f"the {how} rests on bounds, not optima ({said}); taken as a value because "
                                 f"--accept-edge {what}")
        elif self.batch_rule == "fit":
            src = self.laws.source if self.laws is not None else "the scaling fit"
            raise ValueError(f"--batch-rule fit: the {how} rests on bounds, not optima: {said} in {src}. "
                             "A bound is not a value: extend the grid (sweep scaling brackets it), use "
                             f"--batch-rule auto, or pass --accept-edge {what} to take it anyway (recorded "
                             "in the card)")
        elif what == "lr":
            self.warnings.append(f"the {how} rests on bounds, not optima ({said})")
