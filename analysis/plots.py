"""Headless plots of the fit objects (matplotlib Agg, PNG/PDF/SVG by suffix, written atomically).

Every ``plot_*`` function only renders data a fit already holds; no fitting happens here.
Each returns the path of the file it wrote. Where a figure needs more than a fit object
holds (seed bands, projections, iso-FLOP curves), a builder (``lr_curve_data``,
``optimum_series``, ``isoflop_curves``) returns a plain data object first and the
``plot_*`` function renders exactly that object, so tests can assert on what is drawn.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._fitted import check_is_fitted
from ._io import atomic_path, savefig_atomic, usable_rows
from .critical_batch import CriticalBatchFit, CriticalBatchResults
from .loss_law import ChinchillaFit, SaturatingPowerLawFit
from .optimum import OptimumFit
from .powerlaw import PowerLawFit

__all__ = [
    "IsoFlopCurves",
    "LRCurve",
    "OptimumSeries",
    "isoflop_curves",
    "lr_curve_data",
    "optimum_series",
    "plot_critical_batch",
    "plot_isoflop",
    "plot_loss_law",
    "plot_lr_curves",
    "plot_lr_panels",
    "plot_optimum_series",
    "plot_optimum_vs_width",
    "plot_power_law",
]

PathLike = str | os.PathLike[str]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)  # never open a window, even with a display
    import matplotlib.pyplot as plt

    return plt


FORMATS = ("png", "pdf", "svg")


def _save(fig: Any, path: PathLike) -> Path:
    """Save atomically in the format the suffix names (.png/.pdf/.svg; anything else: PNG)."""
    plt = _pyplot()
    try:
        fmt = Path(path).suffix.lower().lstrip(".")
        if fmt not in FORMATS or fmt == "png":
            return savefig_atomic(fig, path)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, bbox_inches="tight")
        return Path(path)
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
            band = d.law.predict(grid, level=0.9, kind="confidence")
            ax.plot(grid, band.point, "-", color=color,
                    label=f"{name}slope {d.slope:.2f}")
            ax.fill_between(grid, band.lo, band.hi, color=color, alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel(across)
    ax.set_ylabel(f"optimal {fit.x}")
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_power_law(fit: PowerLawFit, path: PathLike, level: float = 0.9) -> Path:
    """Data, fitted power law, its confidence band and prediction band (one x variable)."""
    plt = _pyplot()
    check_is_fitted(fit, "params_")
    if len(fit.x_names_) != 1:
        raise ValueError("plot_power_law draws one-variable laws; this fit has "
                         f"{len(fit.x_names_)} variables.")
    x, y = fit.x_data_[:, 0], fit.y_data_
    grid = np.geomspace(x.min(), x.max(), 100)
    conf = fit.predict(grid, level=level, kind="confidence")
    pred = fit.predict(grid, level=level, kind="prediction")
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.plot(x, y, "o", label="data")
    ax.plot(grid, conf.point, "-", label=f"a={fit.params_['a']:.3g}, b={fit.params_['b']:.3g}")
    ax.fill_between(grid, conf.lo, conf.hi, alpha=0.3, label=f"{level:.0%} confidence")
    ax.fill_between(grid, pred.lo, pred.hi, alpha=0.12, label=f"{level:.0%} prediction")
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
        check_is_fitted(f, "params_")
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
                  level: float = 0.9) -> Path:
    """Loss against the first variable with the fitted law and its bootstrap band (for
    Chinchilla, at three token counts spanning the data), and observed vs predicted."""
    plt = _pyplot()
    check_is_fitted(fit, "params_")
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
                p = fit.predict(grid, dd, level=level)
                ax1.fill_between(grid, p.lo, p.hi, alpha=0.2, color="gray")
                line = p.point
            else:
                line = fit.predict(grid, dd)
            ax1.plot(grid, line, "-", lw=1.5, label=f"{fit.xs[1]}={d:.3g}")
        pred = fit.predict(X[:, 0], X[:, 1])
    else:
        ax1.plot(X[:, 0], L, "o", ms=4)
        if has_band:
            p = fit.predict(grid, level=level)
            ax1.fill_between(grid, p.lo, p.hi, alpha=0.3, label=f"{level:.0%} band")
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


# ------------------------------------------------------------ data objects + renderers
@dataclass(frozen=True)
class LRCurve:
    """One line of an LR-curve figure: seed-averaged loss with a ±1 sd band over seeds.

    ``panel`` is the value of the panel column (e.g. ``"mup"``; ``None`` for one panel),
    ``group`` the remaining group key (e.g. the width). ``mean`` is the fit's own
    seed-averaged loss at the grid ``x``; ``lo``/``hi`` are ``mean ∓ sd`` over seeds (equal
    to ``mean`` where a point has a single seed). ``x_opt``/``loss_opt``/``ci``/``at_edge``
    come straight from :class:`~analysis.optimum.GroupOptimum`.
    """

    panel: Any
    group: Any
    label: str
    x: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    n_seeds: np.ndarray
    x_opt: float
    loss_opt: float
    ci: tuple[float, float]
    at_edge: bool


def lr_curve_data(fit: OptimumFit, data: pd.DataFrame, panel: str | None = None) -> list[LRCurve]:
    """The curves of :func:`plot_lr_panels` from a fitted :class:`OptimumFit` and its data.

    ``panel`` (e.g. ``"parametrization"``) must be one of the fit's ``group_by`` columns;
    each of its values gets a panel, the other group columns a line. The seed band is the
    standard deviation over the rows the fit used (diverged and non-finite rows dropped).
    """
    check_is_fitted(fit, "optima_")
    cols = list(fit.group_by)
    if panel is not None and panel not in cols:
        raise ValueError(f"panel column {panel!r} is not among the fit's groups {cols}.")
    ok = usable_rows(data, [fit.x, fit.y], fit.diverged)
    out = []
    for o in fit.optima_:
        key = o.key if isinstance(o.key, tuple) else (o.key,)
        sel = np.ones(len(ok), dtype=bool)
        for c, v in zip(cols, key, strict=True):
            sel &= (ok[c] == v).to_numpy()
        rows = ok.loc[sel]
        sd = rows.groupby(rows[fit.x].astype(float))[fit.y].std(ddof=1)
        sd = sd.reindex(o.x).fillna(0.0).to_numpy(dtype=float)
        rest = [(c, v) for c, v in zip(cols, key, strict=True) if c != panel]
        group: Any = rest[0][1] if len(rest) == 1 else tuple(v for _, v in rest) or None
        out.append(LRCurve(
            panel=dict(zip(cols, key, strict=True))[panel] if panel else None, group=group,
            label=", ".join(f"{c}={v}" for c, v in rest) or "all", x=o.x, mean=o.mean_loss,
            lo=o.mean_loss - sd, hi=o.mean_loss + sd, n_seeds=o.n_seeds, x_opt=o.x_opt,
            loss_opt=o.loss_opt, ci=o.ci, at_edge=o.at_edge))
    return out


def plot_lr_panels(curves: Sequence[LRCurve], path: PathLike, x_name: str = "lr",
                   y_name: str = "loss") -> Path:
    """Loss against log2 x, one line per group with its seed band and a dot at the optimum
    (open triangle at a grid edge), one panel per ``panel`` value side by side with a
    shared y axis — the look of Tensor Programs V (Yang et al. 2021), figure 1."""
    if not curves:
        raise ValueError("no curves to plot.")
    plt = _pyplot()
    panels = list(dict.fromkeys(c.panel for c in curves))
    groups = list(dict.fromkeys(c.group for c in curves))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.3), sharey=True,
                             squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, pv in zip(axes[0], panels, strict=True):
        for c in (c for c in curves if c.panel == pv):
            color = cmap(groups.index(c.group) / max(1, len(groups) - 1))
            t = np.log2(c.x)
            ax.plot(t, c.mean, "-", color=color, lw=1.5, label=c.label)
            ax.fill_between(t, c.lo, c.hi, color=color, alpha=0.25, lw=0)
            ax.plot([np.log2(c.x_opt)], [c.loss_opt], "^" if c.at_edge else "o", color=color,
                    ms=7, mfc="none" if c.at_edge else color, mec="k", mew=0.6)
        ax.set_title(str(pv) if pv is not None else f"{y_name} vs {x_name}")
        ax.set_xlabel(f"log2 {x_name}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(f"{y_name} (mean ± sd over seeds)")
    lows = min(float(np.min(c.lo)) for c in curves)
    tops = max(float(np.percentile(c.hi, 75)) for c in curves)
    if tops > lows:
        axes[0][0].set_ylim(lows - 0.05 * (tops - lows), tops + 0.1 * (tops - lows))
    return _save(fig, path)


@dataclass(frozen=True)
class OptimumSeries:
    """Optimum against ``across`` for one series (e.g. one parametrization).

    ``x_opt``/``ci_lo``/``ci_hi``/``at_edge`` per group (an open interval side is 0 or
    inf, as the fit gives it); ``slope``/``slope_ci``/``octaves`` from
    :meth:`OptimumFit.drift`; ``grid``/``line``/``band_lo``/``band_hi`` the power law and
    its confidence band (``None`` when fewer than 3 widths); ``target`` the projected
    point at ``target_across`` with its prediction interval (``None`` without a law).
    """

    name: Any
    across_name: str
    across: np.ndarray
    x_opt: np.ndarray
    ci_lo: np.ndarray
    ci_hi: np.ndarray
    at_edge: np.ndarray
    octaves: float
    slope: float | None
    slope_ci: tuple[float, float] | None
    grid: np.ndarray | None
    line: np.ndarray | None
    band_lo: np.ndarray | None
    band_hi: np.ndarray | None
    target_across: float | None
    target: tuple[float, float, float] | None  # (point, lo, hi)
    extrapolation: float | None


def optimum_series(fit: OptimumFit, across: str = "width", by: str | None = None,
                   target: float | None = None, level: float = 0.9) -> list[OptimumSeries]:
    """The series of :func:`plot_optimum_series`: one per value of ``by`` (or one)."""
    check_is_fitted(fit, "optima_")
    res = fit.results_
    if across not in res.columns:
        raise ValueError(f"{across!r} is not a group column of the fit ({list(fit.group_by)}).")
    if by is not None and by not in res.columns:
        raise ValueError(f"{by!r} is not a group column of the fit ({list(fit.group_by)}).")
    names = [None] if by is None else list(dict.fromkeys(sorted(res[by].unique())))
    out = []
    for name in names:
        where = None if by is None else {by: name}
        sub = res if by is None else res[res[by] == name]
        d = fit.drift(across=across, where=where)
        xs = sub[across].to_numpy(float)
        grid = line = blo = bhi = None
        tgt = ext = None
        if d.law is not None:
            hi_x = max(xs.max(), target) if target else xs.max()
            grid = np.geomspace(xs.min(), hi_x, 60)
            band = d.law.predict(grid, level=level, kind="confidence")
            line, blo, bhi = band.point, band.lo, band.hi
            if target is not None:
                p = d.law.predict([target], level=level, kind="prediction")
                tgt = (float(p.point[0]), float(p.lo[0]), float(p.hi[0]))
                ext = float(d.law.extrapolation_factor([target])[0])
        out.append(OptimumSeries(
            name=name, across_name=across, across=xs, x_opt=sub["x_opt"].to_numpy(float),
            ci_lo=sub["ci_lo"].to_numpy(float), ci_hi=sub["ci_hi"].to_numpy(float),
            at_edge=sub["at_edge"].to_numpy(bool), octaves=d.octaves, slope=d.slope,
            slope_ci=d.slope_ci, grid=grid, line=line, band_lo=blo, band_hi=bhi,
            target_across=target, target=tgt, extrapolation=ext))
    return out


def plot_optimum_series(series: Sequence[OptimumSeries], path: PathLike,
                        x_name: str = "lr") -> Path:
    """Optimum (with bootstrap intervals) against width or size on log-log axes, the
    fitted power law with its confidence band, and the projected target point with its
    prediction interval (a diamond); edge optima are open triangles."""
    if not series:
        raise ValueError("no series to plot.")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for i, s in enumerate(series):
        color = f"C{i}"
        name = "" if s.name is None else f"{s.name}: "
        lo = np.where(s.ci_lo > 0, s.ci_lo, s.x_opt)
        hi = np.where(np.isfinite(s.ci_hi), s.ci_hi, s.x_opt)
        ax.errorbar(s.across, s.x_opt, yerr=[s.x_opt - lo, hi - s.x_opt], fmt="o", color=color,
                    capsize=3, label=f"{name}drift {s.octaves:.2f} octaves")
        if s.at_edge.any():
            ax.plot(s.across[s.at_edge], s.x_opt[s.at_edge], "^", mfc="none", color="k", ms=12)
        if s.grid is not None and s.line is not None:
            ax.plot(s.grid, s.line, "-", color=color, label=f"{name}slope {s.slope:.3f}")
            ax.fill_between(s.grid, s.band_lo, s.band_hi, color=color, alpha=0.2, lw=0)
        if s.target is not None:
            p, plo, phi = s.target
            ax.errorbar([s.target_across], [p], yerr=[[p - plo], [phi - p]], fmt="D", color=color,
                        mec="k", capsize=4, ms=8, label=f"{name}target {s.target_across:g}: {p:.3g}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel(series[0].across_name)
    ax.set_ylabel(f"optimal {x_name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


@dataclass(frozen=True)
class IsoFlopCurves:
    """Loss along iso-FLOP lines ``D = C/(6N)`` of a Chinchilla fit, and the optimum.

    ``n``/``loss`` are ``(len(compute), m)``; ``n_opt``/``d_opt`` (with bootstrap bands
    ``n_lo``..``d_hi``) and ``loss_opt`` per budget; ``n_obs``/``d_obs``/``loss_obs`` are
    the fitted runs.
    """

    compute: np.ndarray
    n: np.ndarray
    loss: np.ndarray
    n_opt: np.ndarray
    d_opt: np.ndarray
    loss_opt: np.ndarray
    n_lo: np.ndarray
    n_hi: np.ndarray
    d_lo: np.ndarray
    d_hi: np.ndarray
    n_obs: np.ndarray
    d_obs: np.ndarray
    loss_obs: np.ndarray
    names: tuple[str, str, str]


def isoflop_curves(fit: ChinchillaFit, compute: Sequence[float] | None = None, n_grid: int = 80,
                   level: float = 0.9) -> IsoFlopCurves:
    """Iso-FLOP curves of a fitted law; ``compute`` defaults to 5 budgets spanning the
    data's ``6·N·D``."""
    check_is_fitted(fit, "params_")
    X, L = fit.x_data_, fit.y_data_
    if compute is None:
        c_data = 6.0 * X[:, 0] * X[:, 1]
        compute = np.geomspace(c_data.min(), c_data.max(), 5)
    c = np.asarray(compute, dtype=float)
    opt = fit.compute_optimal(c, level=level)
    n = np.geomspace(opt.n_opt / 30.0, opt.n_opt * 30.0, n_grid, axis=1)
    loss = fit.predict(n, c[:, None] / (6.0 * n))
    return IsoFlopCurves(
        compute=c, n=n, loss=loss, n_opt=opt.n_opt, d_opt=opt.d_opt,
        loss_opt=fit.predict(opt.n_opt, opt.d_opt), n_lo=opt.n_lo, n_hi=opt.n_hi,
        d_lo=opt.d_lo, d_hi=opt.d_hi, n_obs=X[:, 0], d_obs=X[:, 1], loss_obs=L,
        names=(fit.xs[0], fit.xs[1], fit.y))


def plot_isoflop(curves: IsoFlopCurves, path: PathLike) -> Path:
    """Left: loss along each iso-FLOP line with its minimum starred, observed runs in grey.
    Right: the compute-optimal N and D against C with their bootstrap bands."""
    plt = _pyplot()
    n_name, d_name, y_name = curves.names
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    ax1.plot(curves.n_obs, curves.loss_obs, "o", color="0.6", ms=3, label="runs")
    cmap = plt.get_cmap("plasma")
    k = curves.compute.size
    for i in range(k):
        color = cmap(i / max(1, k - 1) * 0.85)
        ax1.plot(curves.n[i], curves.loss[i], "-", color=color, label=f"C={curves.compute[i]:.2g}")
        ax1.plot([curves.n_opt[i]], [curves.loss_opt[i]], "*", color=color, ms=12, mec="k")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel(n_name)
    ax1.set_ylabel(y_name)
    ax1.set_title("iso-FLOP curves, D = C/(6N) (★ = optimum)")
    ax1.legend(fontsize=7)
    ax2.plot(curves.compute, curves.n_opt, "-o", color="C0", ms=4, label=f"{n_name} opt")
    ax2.fill_between(curves.compute, curves.n_lo, curves.n_hi, color="C0", alpha=0.2, lw=0)
    ax2.plot(curves.compute, curves.d_opt, "-o", color="C1", ms=4, label=f"{d_name} opt")
    ax2.fill_between(curves.compute, curves.d_lo, curves.d_hi, color="C1", alpha=0.2, lw=0)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("compute C (FLOPs)")
    ax2.set_title("compute-optimal allocation")
    ax2.legend(fontsize=7)
    return _save(fig, path)
