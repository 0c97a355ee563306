"""Projection from generic fits: recommended hyperparameters at a target scale, with
intervals and flags.

This is not the projection of a scaling sweep to a training run (that one is
:meth:`analysis.ScalingLawFit.project`, whose rules the card's run plan shares). It
stays separate because it answers another question from other inputs: it combines any
:class:`PowerLawFit` (an LR or batch law over width, ``n_params`` or compute), a
critical-batch law and a Chinchilla loss law at a target *model size or compute*, and
has no batch-and-budget laws, tau or schedule rules to share. :class:`Estimate`, its
value record, is the record of every projection here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._io import plain
from ._stats import check_level
from .loss_law import ChinchillaFit
from .powerlaw import PowerLawFit

__all__ = ["Estimate", "Projection", "project"]


def _plain(v: Any) -> Any:
    """JSON-safe value: Python scalars, non-finite floats as ``None``."""
    return plain(v, nonfinite_to_none=True)


@dataclass(frozen=True)
class Estimate:
    """One projected value with its interval and where it came from.

    ``extrapolation`` is how far the target lies outside the fitted range (1 = inside;
    10 = ten times beyond the largest or below the smallest fitted value).
    """

    value: float
    lo: float
    hi: float
    level: float
    source: str
    extrapolation: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {k: _plain(getattr(self, k))
                for k in ("value", "lo", "hi", "level", "source", "extrapolation")}


@dataclass
class Projection:
    """Recommended values at the target (``values``), textbook baselines, and flags.

    ``values`` may hold ``lr``, ``batch_size``, ``b_crit``, ``steps``, ``warmup_steps``,
    ``loss``, ``n_params``, ``tokens`` (whichever the given fits and target allow).
    ``baselines`` holds the textbook rules for comparison only — they are never used in
    place of a missing fit. ``extrapolated`` is true when any value comes from beyond
    ``k``× its fitted range; ``warnings`` says which, in words.
    """

    target: dict[str, float]
    values: dict[str, Estimate]
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    extrapolated: bool = False
    warnings: list[str] = field(default_factory=list)
    k: float = 10.0
    level: float = 0.9

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-safe dict (the transfer card's "projected values with intervals")."""
        return {
            "target": {k: _plain(v) for k, v in self.target.items()},
            "values": {k: e.to_dict() for k, e in self.values.items()},
            "baselines": {k: {kk: _plain(vv) for kk, vv in b.items()}
                          for k, b in self.baselines.items()},
            "extrapolated": bool(self.extrapolated),
            "extrapolation_limit": float(self.k),
            "interval_level": float(self.level),
            "warnings": list(self.warnings),
        }

    def report(self) -> str:
        lines = ["Projection to " + ", ".join(f"{k}={v:g}" for k, v in self.target.items())]
        for name, e in self.values.items():
            flag = f"  [extrapolated {e.extrapolation:.3g}×]" if e.extrapolation > self.k else ""
            lines.append(f"  {name:>12} = {e.value:.4g}  [{e.lo:.4g}, {e.hi:.4g}]  "
                         f"({e.source}){flag}")
        for name, b in self.baselines.items():
            lines.append(f"  baseline {name}: {b['value']:.4g}  ({b['rule']})")
        lines += [f"  WARNING: {w}" for w in self.warnings]
        return "\n".join(lines)


def _law_inputs(law: PowerLawFit, target: Mapping[str, float], what: str) -> dict[str, float]:
    missing = [n for n in law.x_names_ if n not in target]
    if missing:
        raise ValueError(f"the {what} law needs target value(s) {missing}; the target has "
                         f"{sorted(target)}.")
    return {n: float(target[n]) for n in law.x_names_}


def _from_law(law: PowerLawFit, target: Mapping[str, float], what: str,
              level: float) -> Estimate:
    x = _law_inputs(law, target, what)
    p = law.predict(x, level=level, kind="prediction")
    ext = float(law.extrapolation_factor(x)[0])
    terms = " · ".join(f"{n}^{law.params_[b]:.3g}"
                       for n, b in zip(law.x_names_, law.param_names_[1:], strict=True))
    src = f"power law {law.y} = {law.params_['a']:.3g} · {terms}"
    return Estimate(float(p.point[0]), float(p.lo[0]), float(p.hi[0]), level, src, ext)


def _steps_and_warmup(values: dict[str, Estimate], tgt: Mapping[str, float], warmup_fraction: float,
                      level: float, warnings: list[str]) -> None:
    """``steps = tokens / (batch_size · seq_len)`` (its interval from the batch's) and
    ``warmup_steps = warmup_fraction · steps``, added to ``values`` when the target allows."""
    bs = values.get("batch_size")
    if bs is not None and "tokens" in tgt and "seq_len" in tgt:
        per_step = tgt["seq_len"]
        steps = Estimate(tgt["tokens"] / (bs.value * per_step),
                         tgt["tokens"] / (bs.hi * per_step),
                         tgt["tokens"] / (bs.lo * per_step), level,
                         "tokens / (batch_size · seq_len)", bs.extrapolation)
        values["steps"] = steps
        values["warmup_steps"] = Estimate(
            warmup_fraction * steps.value, warmup_fraction * steps.lo,
            warmup_fraction * steps.hi, level,
            f"rule of thumb: {warmup_fraction:g} × steps (not fitted)", bs.extrapolation)
    elif bs is not None:
        warnings.append("steps and warmup were not projected: the target needs both "
                        "'tokens' and 'seq_len'.")


def project(
    target: Mapping[str, float],
    *,
    lr: PowerLawFit | None = None,
    batch_size: PowerLawFit | None = None,
    critical_batch: PowerLawFit | None = None,
    loss: ChinchillaFit | None = None,
    reference: Mapping[str, float] | None = None,
    warmup_fraction: float = 0.01,
    level: float = 0.9,
    k: float = 10.0,
) -> Projection:
    """Recommend LR, batch size, B_crit, steps and warmup at ``target``, with intervals.

    ``target`` maps results-table names to values: any of ``width``, ``depth``,
    ``n_params``, ``tokens``, ``compute`` (FLOPs), ``seq_len``, ``batch_size``. Each
    power-law fit reads the target values of the columns it was fitted on (e.g. an LR
    law fitted on ``width``, or the Step Law form on ``("n_params", "tokens")``), and
    gives a ``level`` (default 90 %) prediction interval
    (:meth:`PowerLawFit.predict`).

    * ``compute`` without ``n_params``/``tokens``: with a Chinchilla ``loss`` fit, the
      compute-optimal ``N``/``D`` (Hoffmann et al. 2022, eq. 4) fill them in; with both
      given and no ``compute``, ``compute = 6·N·D`` (Kaplan et al. 2020, §2.1).
    * ``batch_size`` from its law, else from ``target["batch_size"]`` (taken as exact).
      It is in sequences; ``steps = tokens / (batch_size · seq_len)``, its interval from
      the batch interval.
    * ``warmup_steps = warmup_fraction · steps`` — a rule of thumb (default 1 %), not a
      fitted law, and labelled as such.
    * ``reference = {"lr": η0, "batch_size": B0}`` (the proxy's optimum) adds the
      textbook baselines at the projected batch ``B``: ``η0·B/B0`` for SGD (Goyal et al.
      2017, "Accurate, Large Minibatch SGD", linear scaling rule) and ``η0·sqrt(B/B0)``
      for Adam (Malladi et al. 2022, "On the SDEs and Scaling Rules for Adaptive
      Gradient Algorithms", square-root rule). Baselines are reported beside the fitted
      values for comparison, never substituted for them.

    A value whose inputs lie more than ``k``× (default 10) outside its law's fitted
    range sets ``extrapolated`` and adds a sentence to ``warnings``.
    """
    level = check_level(level, "level")
    if not k >= 1:
        raise ValueError(f"k (the extrapolation limit) must be >= 1, got {k!r}.")
    if not 0 <= warmup_fraction < 1:
        raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction!r}.")
    tgt: dict[str, float] = {}
    for name, v in target.items():
        fv = float(v)
        if not (math.isfinite(fv) and fv > 0):
            raise ValueError(f"target {name}={v!r} must be a finite number > 0.")
        tgt[name] = fv
    if not any(law is not None for law in (lr, batch_size, critical_batch, loss)):
        raise ValueError("project() needs at least one fit (lr, batch_size, critical_batch "
                         "or loss).")
    values: dict[str, Estimate] = {}
    warnings: list[str] = []

    if loss is not None and "compute" in tgt and not ("n_params" in tgt and "tokens" in tgt):
        alloc = loss.compute_optimal(tgt["compute"], level=level)
        src = "compute-optimal allocation (Hoffmann et al. 2022, eq. 4)"
        values["n_params"] = Estimate(float(alloc.n_opt[0]), float(alloc.n_lo[0]),
                                      float(alloc.n_hi[0]), level, src)
        values["tokens"] = Estimate(float(alloc.d_opt[0]), float(alloc.d_lo[0]),
                                    float(alloc.d_hi[0]), level, src)
        tgt.setdefault("n_params", float(alloc.n_opt[0]))
        tgt.setdefault("tokens", float(alloc.d_opt[0]))
    if "compute" not in tgt and "n_params" in tgt and "tokens" in tgt:
        tgt["compute"] = 6.0 * tgt["n_params"] * tgt["tokens"]

    if lr is not None:
        values["lr"] = _from_law(lr, tgt, "lr", level)
    if batch_size is not None:
        values["batch_size"] = _from_law(batch_size, tgt, "batch_size", level)
    elif "batch_size" in tgt:
        b = tgt["batch_size"]
        values["batch_size"] = Estimate(b, b, b, level, "given in the target")
    if critical_batch is not None:
        values["b_crit"] = _from_law(critical_batch, tgt, "critical batch", level)
    if loss is not None and "n_params" in tgt and "tokens" in tgt:
        lp = loss.predict(tgt["n_params"], tgt["tokens"], level=level)
        ext = max(max(v / hi, lo / v) for v, (lo, hi) in
                  zip((tgt["n_params"], tgt["tokens"]), loss.x_range_.values(), strict=True))
        values["loss"] = Estimate(float(lp.point[0]), float(lp.lo[0]), float(lp.hi[0]),
                                  level, "Chinchilla law (bootstrap band of the law)",
                                  max(1.0, float(ext)))

    bs = values.get("batch_size")
    _steps_and_warmup(values, tgt, warmup_fraction, level, warnings)
    baselines: dict[str, dict[str, Any]] = {}
    if reference is not None and bs is not None:
        if "lr" not in reference or "batch_size" not in reference:
            raise ValueError("reference must give both 'lr' and 'batch_size'.")
        ratio = bs.value / float(reference["batch_size"])
        lr0 = float(reference["lr"])
        baselines["lr_sgd_linear"] = {"value": lr0 * ratio, "rule": "lr ∝ B (SGD)"}
        baselines["lr_adam_sqrt"] = {"value": lr0 * math.sqrt(ratio), "rule": "lr ∝ sqrt(B) (Adam)"}

    if bs is not None and "b_crit" in values and bs.value > values["b_crit"].value:
        warnings.append(
            f"the projected batch size {bs.value:.4g} exceeds the projected critical batch "
            f"{values['b_crit'].value:.4g}: more steps-efficiency is bought with many more "
            "tokens (McCandlish et al. 2018).")
    extrapolated = False
    for name, e in values.items():
        if e.extrapolation > k and name not in ("steps", "warmup_steps"):  # derived: said once
            extrapolated = True
            warnings.append(f"{name} is extrapolated {e.extrapolation:.3g}× beyond its "
                            f"fitted range (limit {k:g}×); treat it as a guess.")
    return Projection(target=tgt, values=values, baselines=baselines,
                      extrapolated=extrapolated, warnings=warnings, k=float(k), level=level)
