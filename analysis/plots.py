"""Headless plots of the fit objects (matplotlib Agg, PNG, written atomically).

Every ``plot_*`` function only renders data a fit already holds; no fitting happens here.
Each returns the path of the PNG it wrote.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ._io import savefig_atomic
from .critical_batch import CriticalBatchFit, CriticalBatchResults
from .loss_law import ChinchillaFit, SaturatingPowerLawFit
from .optimum import OptimumFit
from .powerlaw import PowerLawFit

__all__ = [
    "plot_critical_batch",
    "plot_loss_law",
    "plot_lr_curves",
    "plot_optimum_vs_width",
    "plot_power_law",
]

PathLike = str | os.PathLike[str]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)  # never open a window, even with a display
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: PathLike) -> Path:
    plt = _pyplot()
    try:
        return savefig_atomic(fig, path)
    finally:
        plt.close(fig)


def plot_lr_curves(fit: OptimumFit, path: PathLike,
                   where: Mapping[str, Any] | None = None) -> Path:
    """Seed-averaged loss against log2(x), one line per group, with the fitted quadratic
    over its window and the optimum (with its interval) marked; edge optima are drawn as
    open triangles, argmin fallbacks as crosses."""
    plt = _pyplot()
    optima = fit._select(where)
    if not optima:
        raise ValueError(f"no group matches where={where!r}.")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    cmap = plt.get_cmap("viridis")
    for i, o in enumerate(optima):
        color = cmap(i / max(1, len(optima) - 1))
        t = np.log2(o.x)
        ax.plot(t, o.mean_loss, "o-", color=color, ms=3, lw=1, alpha=0.7, label=o.label)
        if o.coef is not None:
            lo, hi = o.window
            tt = np.linspace(t[lo], t[hi - 1], 50)
            ax.plot(tt, np.polyval(o.coef, tt), "-", color=color, lw=2)
        marker = {"quadratic": "*", "argmin": "x", "edge": "^"}[o.method]
        ax.plot([o.log2_x_opt], [o.loss_opt], marker, color=color, ms=12,
                mfc="none" if o.at_edge else color)
        lo_ci = np.log2(o.ci[0]) if o.ci[0] > 0 else t.min()
        hi_ci = np.log2(o.ci[1]) if np.isfinite(o.ci[1]) else t.max()
        ax.hlines(o.loss_opt, lo_ci, hi_ci, color=color, lw=3, alpha=0.5)
    ax.set_xlabel(f"log2 {fit.x}")
    ax.set_ylabel(f"{fit.y} (mean over seeds)")
    ymin = min(o.mean_loss.min() for o in optima)
    ymax = max(np.percentile(o.mean_loss, 75) for o in optima)
    ax.set_ylim(ymin - 0.05 * (ymax - ymin), ymax + 0.1 * (ymax - ymin))
    ax.legend(fontsize=7)
    ax.set_title(f"{fit.y} vs {fit.x}: quadratic fit around each optimum")
    return _save(fig, path)


def plot_optimum_vs_width(fit: OptimumFit, path: PathLike, across: str = "width",
                          by: str | None = None) -> Path:
    """Optimal x (with bootstrap intervals) against ``across`` on log-log axes, with the
    power-law fit of :meth:`OptimumFit.drift` and its confidence band, one series per
    value of ``by`` (e.g. ``"parametrization"``)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    res = fit.results_
    series = [(None, None)] if by is None else [
        (v, {by: v}) for v in sorted(res[by].unique())]
    for i, (val, where) in enumerate(series):
        d = fit.drift(across=across, where=where)
        sub = res if where is None else res[res[by] == val]
        xs = sub[across].to_numpy(float)
        y = sub["x_opt"].to_numpy(float)
        lo = np.where(sub["ci_lo"] > 0, sub["ci_lo"], y)
        hi = np.where(np.isfinite(sub["ci_hi"]), sub["ci_hi"], y)
        color = f"C{i}"
        name = "" if val is None else f"{val}: "
        ax.errorbar(xs, y, yerr=[y - lo, hi - y], fmt="o", color=color, capsize=3,
                    label=f"{name}drift {d.octaves:.2f} oct [{d.ci[0]:.2f}, {d.ci[1]:.2f}]")
        edge = sub["at_edge"].to_numpy(bool)
        if edge.any():
            ax.plot(xs[edge], y[edge], "^", mfc="none", color="k", ms=12, label="at grid edge")
        if d.law is not None:
            grid = np.geomspace(xs.min(), xs.max(), 50)
            band = d.law.predict(grid, interval=0.9, kind="confidence")
            ax.plot(grid, band.point, "-", color=color,
                    label=f"{name}slope {d.slope:.2f}")
            ax.fill_between(grid, band.lo, band.hi, color=color, alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel(across)
    ax.set_ylabel(f"optimal {fit.x}")
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_power_law(fit: PowerLawFit, path: PathLike, interval: float = 0.9) -> Path:
    """Data, fitted power law, its confidence band and prediction band (one x variable)."""
    plt = _pyplot()
    fit._check_fitted()
    if len(fit.x_names_) != 1:
        raise ValueError("plot_power_law draws one-variable laws; this fit has "
                         f"{len(fit.x_names_)} variables.")
    x, y = fit.x_data_[:, 0], fit.y_data_
    grid = np.geomspace(x.min(), x.max(), 100)
    conf = fit.predict(grid, interval=interval, kind="confidence")
    pred = fit.predict(grid, interval=interval, kind="prediction")
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.plot(x, y, "o", label="data")
    ax.plot(grid, conf.point, "-", label=f"a={fit.params_['a']:.3g}, b={fit.params_['b']:.3g}")
    ax.fill_between(grid, conf.lo, conf.hi, alpha=0.3, label=f"{interval:.0%} confidence")
    ax.fill_between(grid, pred.lo, pred.hi, alpha=0.12, label=f"{interval:.0%} prediction")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(fit.x_names_[0])
    ax.set_ylabel(fit.y)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_critical_batch(fit: CriticalBatchFit | CriticalBatchResults, path: PathLike) -> Path:
    """Left: steps to target S against batch B with the fit and B_crit marked.
    Right: the time/compute trade-off, S against examples E = B·S (McCandlish et al.
    2018, fig. 1), with the knee (2·S_min, 2·E_min) marked."""
    plt = _pyplot()
    fits = list(fit.fits.items()) if isinstance(fit, CriticalBatchResults) else [(None, fit)]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for i, (key, f) in enumerate(fits):
        f._check_fitted()
        color = f"C{i}"
        name = "" if key is None else f"{key}: "
        b, s = f.batch_data_, f.steps_data_
        grid = np.geomspace(b.min() / 2, b.max() * 2, 200)
        p = f.params_
        ax1.plot(b, s, "o", color=color)
        ax1.plot(grid, f.predict(grid), "-", color=color,
                 label=f"{name}B_crit={p['B_crit']:.4g}, CBS={p['CBS']:.4g}")
        ax1.axvline(p["B_crit"], color=color, ls="--", lw=1)
        ax2.plot(b * s, s, "o", color=color)
        ax2.plot(f.examples(grid), f.predict(grid), "-", color=color, label=f"{name}fit")
        ax2.plot([2 * p["E_min"]], [2 * p["S_min"]], "*", color=color, ms=12)
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
        ax.set_ylabel("steps to target S")
    ax1.set_xlabel("batch size B")
    ax2.set_xlabel("examples to target E = B·S")
    ax1.set_title("S(B) = S_min + E_min/B")
    ax2.set_title("time/compute trade-off (★ = knee at B_crit)")
    return _save(fig, path)


def plot_loss_law(fit: ChinchillaFit | SaturatingPowerLawFit, path: PathLike,
                  interval: float = 0.9) -> Path:
    """Loss against the first variable with the fitted law and its bootstrap band (for
    Chinchilla, at three token counts spanning the data), and observed vs predicted."""
    plt = _pyplot()
    fit._check_fitted()
    X, L = fit.x_data_, fit.y_data_
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    grid = np.geomspace(X[:, 0].min(), X[:, 0].max(), 100)
    has_band = fit.boot_.shape[0] > 0
    if isinstance(fit, ChinchillaFit):
        sc = ax1.scatter(X[:, 0], L, c=np.log10(X[:, 1]), s=12, cmap="viridis")
        fig.colorbar(sc, ax=ax1, label=f"log10 {fit.xs[1]}")
        for d in np.quantile(X[:, 1], [0.0, 0.5, 1.0]):
            dd = np.full_like(grid, d)
            if has_band:
                p = fit.predict(grid, dd, interval=interval)
                ax1.fill_between(grid, p.lo, p.hi, alpha=0.2, color="gray")
                line = p.point
            else:
                line = fit.predict(grid, dd)
            ax1.plot(grid, line, "-", lw=1.5, label=f"{fit.xs[1]}={d:.3g}")
        pred = fit.predict(X[:, 0], X[:, 1])
    else:
        ax1.plot(X[:, 0], L, "o", ms=4)
        if has_band:
            p = fit.predict(grid, interval=interval)
            ax1.fill_between(grid, p.lo, p.hi, alpha=0.3, label=f"{interval:.0%} band")
            ax1.plot(grid, p.point, "-", label="fit")
        else:
            ax1.plot(grid, fit.predict(grid), "-", label="fit")
        pred = fit.predict(X[:, 0])
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel(fit.xs[0])
    ax1.set_ylabel(fit.y)
    ax1.legend(fontsize=7)
    ax1.set_title(fit._law_text())
    lims = [min(L.min(), pred.min()), max(L.max(), pred.max())]
    ax2.plot(lims, lims, "k--", lw=1)
    ax2.plot(L, pred, "o", ms=4)
    ax2.set_xlabel(f"observed {fit.y}")
    ax2.set_ylabel(f"predicted {fit.y}")
    ax2.set_title("observed vs predicted")
    return _save(fig, path)
