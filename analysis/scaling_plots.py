"""Figures of the scaling fits: eta*(B, D) and B*(D) with bootstrap bands, and the measured
gradient noise scale beside the steps-to-target critical batch.

As in :mod:`analysis.plots`, fitting code returns a data object (:class:`ScalingCurves`
from :meth:`ScalingLawFit.curves_`, :class:`CriticalBatchComparison` from
:func:`critical_batch_comparison`) and the ``plot_*`` functions render exactly that object.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ._io import require_columns, usable_rows
from ._stats import check_level, percentile_interval
from .critical_batch import CriticalBatchFit
from .plots import PathLike, _pyplot, _save
from .scaling_fit import ScalingCurves

__all__ = [
    "CriticalBatchComparison",
    "critical_batch_comparison",
    "plot_critical_batch_comparison",
    "plot_scaling",
]


def plot_scaling(curves: ScalingCurves, path: PathLike) -> Path:
    """Two panels: eta* against B, one line per budget D with its band and the measured
    per-cell optima (bootstrap error bars; edge optima as open triangles); and B* against
    D with its band and the measured per-budget optima."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    budgets = np.unique(curves.cells["tokens"])
    colors = plt.cm.viridis(np.linspace(0.1, 0.85, budgets.size))
    for d, col in zip(budgets, colors, strict=True):
        line = curves.lr_lines[curves.lr_lines["tokens"] == d]
        ax1.plot(line["batch"], line["lr"], color=col, label=f"D = {d:.3g}")
        ax1.fill_between(line["batch"], line["lo"], line["hi"], color=col, alpha=0.2, lw=0)
        c = curves.cells[curves.cells["tokens"] == d]
        inner, edge = c[c["edge"] == ""], c[c["edge"] != ""]
        ax1.errorbar(inner["batch_tokens"], inner["lr_opt"],
                     yerr=[inner["lr_opt"] - inner["lr_lo"], inner["lr_hi"] - inner["lr_opt"]],
                     fmt="o", color=col, ms=4, capsize=2)
        if len(edge):
            ax1.plot(edge["batch_tokens"], edge["lr_opt"], "^", mfc="none", color=col)
    ax1.set(xscale="log", yscale="log", xlabel="batch (tokens)", ylabel="optimal LR",
            title=curves.lr_law)
    ax1.legend(fontsize=8)
    bl, b = curves.batch_line, curves.budgets
    ax2.plot(bl["tokens"], bl["batch"], color="C3", label=f"fit ({curves.level:.0%} band)")
    ax2.fill_between(bl["tokens"], bl["lo"], bl["hi"], color="C3", alpha=0.2, lw=0)
    ax2.errorbar(b["tokens"], b["batch_opt"], yerr=[b["batch_opt"] - b["lo"], b["hi"] - b["batch_opt"]],
                 fmt="o", color="k", ms=4, capsize=2, label="measured B*")
    ax2.set(xscale="log", yscale="log", xlabel="tokens D", ylabel="optimal batch (tokens)",
            title=curves.batch_law)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


@dataclass(frozen=True)
class CriticalBatchComparison:
    """The two critical-batch estimates on the same runs.

    ``batch``/``gns``: each run's batch and its measured simple noise scale ``B_simple``
    (McCandlish et al. 2018, eq. 2.8); ``b_simple`` is their median with a ``level``
    percentile range over runs. ``b_crit`` (with ``b_crit_ci``) is ``E_min/S_min`` of
    the steps-to-target fit ``S = S_min + E_min/B`` (McCandlish et al. 2018, eq. 2.11;
    :class:`CriticalBatchFit`); ``steps_batch``/``steps`` are its measured points and
    ``curve_batch``/``curve_steps`` the fitted curve. ``ratio = b_simple / b_crit``:
    McCandlish et al. find ``B_simple`` close to ``B_crit`` up to a small factor.
    """

    batch: np.ndarray
    gns: np.ndarray
    b_simple: float
    b_simple_range: tuple[float, float]
    b_crit: float
    b_crit_ci: tuple[float, float] | None
    steps_batch: np.ndarray
    steps: np.ndarray
    curve_batch: np.ndarray
    curve_steps: np.ndarray
    ratio: float
    unit: str


def critical_batch_comparison(
    runs: pd.DataFrame,
    cbs: CriticalBatchFit,
    *,
    gns: str = "gns",
    batch: str = "batch_size",
    diverged: str | None = "diverged",
    level: float = 0.9,
    unit: str = "sequences",
    n_points: int = 60,
) -> CriticalBatchComparison:
    """Put the measured GNS of ``runs`` beside a fitted :class:`CriticalBatchFit`.

    ``runs`` has one row per run with its final ``gns`` (the trainer's B_simple, in
    sequences) and its ``batch``; diverged rows and rows without a finite positive GNS
    are left out. ``cbs`` must be fitted with batches in the same ``unit``.
    """
    require_columns(runs, [gns, batch], "runs")
    lv = check_level(level, "level")
    if not hasattr(cbs, "params_"):
        raise ValueError("the CriticalBatchFit is not fitted yet; call fit() first.")
    ok = usable_rows(runs, [gns, batch], diverged)
    g = ok[gns].to_numpy(dtype=float)
    keep = g > 0
    if not keep.any():
        raise ValueError(f"no run has a finite positive {gns!r}; the noise scale was not logged.")
    g, b = g[keep], ok[batch].to_numpy(dtype=float)[keep]
    lo, hi = percentile_interval(g, lv)
    bb = np.geomspace(min(cbs.b_range_[0], b.min()), max(cbs.b_range_[1], b.max()), n_points)
    med = float(np.median(g))
    bc = float(cbs.params_["B_crit"])
    ci = cbs.ci_.get("B_crit")
    return CriticalBatchComparison(
        batch=b, gns=g, b_simple=med, b_simple_range=(float(lo), float(hi)), b_crit=bc,
        b_crit_ci=None if ci is None else (float(ci[0]), float(ci[1])),
        steps_batch=np.asarray(cbs.batch_data_, float), steps=np.asarray(cbs.steps_data_, float),
        curve_batch=bb, curve_steps=cbs.predict(bb), ratio=med / bc, unit=unit)


def plot_critical_batch_comparison(comp: CriticalBatchComparison, path: PathLike) -> Path:
    """Left: steps to target against batch with the S–E fit and both critical batches.
    Right: each run's measured GNS against its batch, with B_crit as a reference line."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax1.plot(comp.steps_batch, comp.steps, "o", color="k", ms=4, label="measured")
    ax1.plot(comp.curve_batch, comp.curve_steps, color="C0", label="S = S_min + E_min/B")
    ax1.axvline(comp.b_crit, color="C0", ls="--", label=f"B_crit = {comp.b_crit:.3g}")
    if comp.b_crit_ci is not None:
        ax1.axvspan(*comp.b_crit_ci, color="C0", alpha=0.12, lw=0)
    ax1.axvline(comp.b_simple, color="C1", ls=":", label=f"GNS B_simple = {comp.b_simple:.3g}")
    ax1.set(xscale="log", yscale="log", xlabel=f"batch ({comp.unit})", ylabel="steps to target")
    ax1.legend(fontsize=8)
    ax2.plot(comp.batch, comp.gns, "o", color="C1", ms=4, label="GNS per run")
    ax2.axhline(comp.b_crit, color="C0", ls="--", label="B_crit (S–E fit)")
    ax2.axhspan(*comp.b_simple_range, color="C1", alpha=0.12, lw=0)
    ax2.set(xscale="log", yscale="log", xlabel=f"batch ({comp.unit})",
            ylabel=f"B_simple ({comp.unit})", title=f"B_simple / B_crit = {comp.ratio:.2g}")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)
