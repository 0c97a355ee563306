"""Optimal hyperparameter per group (e.g. LR per width) from a sweep's results table."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ._fitted import check_is_fitted
from ._io import as_tuple, finite_positive, group_label, require_columns, usable_rows
from ._stats import (
    SeedSpread,
    check_level,
    check_n_boot,
    make_rng,
    percentile_interval,
    seed_spread,
)
from .powerlaw import PowerLawFit

__all__ = ["Drift", "GroupOptimum", "OptimumFit"]

# Methods recorded per group; anything but "quadratic" is a flagged fallback.
QUADRATIC, ARGMIN, EDGE = "quadratic", "argmin", "edge"


@dataclass(frozen=True)
class GroupOptimum:
    """Everything known about one group's optimum (the data a plot needs, too).

    ``x``/``mean_loss`` are the seed-averaged grid (sorted by x, diverged rows removed);
    ``window`` is the ``[start, stop)`` index range the quadratic was fitted on; ``coef``
    are the quadratic's coefficients in ``t = log2 x`` (highest power first, as
    ``numpy.polyval`` takes them), or ``None`` when no quadratic was used.
    ``seeds`` are the seed values of the group's usable rows (empty without a seed
    column); ``sensitivity`` is the leave-one-seed-out spread of ``x_opt``
    (:class:`~analysis._stats.SeedSpread`), ``None`` with fewer than 2 seeds.
    """

    key: Hashable
    label: str
    x: np.ndarray
    mean_loss: np.ndarray
    n_seeds: np.ndarray
    window: tuple[int, int]
    coef: np.ndarray | None
    x_opt: float
    loss_opt: float
    method: str
    edge: str
    ci: tuple[float, float]
    band: tuple[float, float]
    n_rows: int
    n_diverged: int
    boot_log2: np.ndarray = field(repr=False)
    seeds: tuple[Any, ...] = ()
    sensitivity: SeedSpread | None = None

    @property
    def at_edge(self) -> bool:
        return self.edge != ""

    @property
    def log2_x_opt(self) -> float:
        return float(np.log2(self.x_opt))

    def sensitivity_dict(self) -> dict[str, Any]:
        """The leave-one-seed-out spread as JSON: the refit optimum without each seed,
        ``ratio`` = max/min of them (null with fewer than 2 seeds)."""
        if self.sensitivity is not None:
            return self.sensitivity.to_dict()
        return {"method": "leave-one-seed-out", "n_seeds": len(self.seeds), "left_out": {}, "n_failed": 0,
                "ratio": None, "octaves": None}


@dataclass(frozen=True)
class Drift:
    """How far the optimum moves across groups, in octaves (log2 units).

    ``octaves = max log2 x_opt − min log2 x_opt`` over the selected groups, with a
    percentile-bootstrap interval from the groups' independent bootstrap draws.
    ``slope`` is the exponent of ``x_opt ∝ across^slope`` (equal to the slope of
    ``log2 x_opt`` against ``log2 across``) from :class:`PowerLawFit`, when at least
    three groups with distinct ``across`` values exist; otherwise ``None``.
    ``any_at_edge`` warns that an optimum sat on its grid's edge, which makes
    ``octaves`` only a bound.
    """

    across: str
    octaves: float
    ci: tuple[float, float]
    n_groups: int
    any_at_edge: bool
    slope: float | None
    slope_ci: tuple[float, float] | None
    law: PowerLawFit | None = field(repr=False, default=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "across": self.across,
            "drift_octaves": self.octaves,
            "ci": list(self.ci),
            "n_groups": self.n_groups,
            "any_at_edge": self.any_at_edge,
            "slope": self.slope,
            "slope_ci": list(self.slope_ci) if self.slope_ci else None,
        }


def _locate(t: np.ndarray, m: np.ndarray, window: int) -> tuple[float, float, str, str,
                                                                 np.ndarray | None,
                                                                 tuple[int, int]]:
    """Optimum of one seed-averaged curve: ``(t_opt, loss_opt, method, edge, coef, win)``."""
    n = t.size
    i = int(np.argmin(m))
    if i == 0 or i == n - 1:
        return float(t[i]), float(m[i]), EDGE, "low" if i == 0 else "high", None, (i, i + 1)
    lo, hi = max(0, i - window), min(n, i + window + 1)
    coef = np.polyfit(t[lo:hi], m[lo:hi], 2)
    t_opt = _vertex(coef, t[lo], t[hi - 1])
    if t_opt is None:
        return float(t[i]), float(m[i]), ARGMIN, "", None, (lo, hi)
    return t_opt, float(np.polyval(coef, t_opt)), QUADRATIC, "", coef, (lo, hi)


def _vertex(coef: np.ndarray, t_lo: float, t_hi: float) -> float | None:
    """Vertex of a convex quadratic if it lies inside ``[t_lo, t_hi]``; else ``None``.

    A concave or flat fit has no minimum, and a vertex outside the fitted span would be an
    extrapolation, so both are refused (the caller falls back to the argmin).
    """
    c2, c1, _ = coef
    scale = max(abs(c1), 1e-300)
    if not c2 > 1e-12 * scale:
        return None
    t_opt = -c1 / (2.0 * c2)
    if not t_lo <= t_opt <= t_hi:
        return None
    return float(t_opt)


def _boot_locate(t: np.ndarray, M: np.ndarray, window: int) -> np.ndarray:
    """Vectorized ``_locate`` over bootstrap rows of ``M`` (one curve per row): t_opt."""
    return _boot_locate_min(t, M, window)[0]


def _boot_locate_min(t: np.ndarray, M: np.ndarray,
                     window: int) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized ``_locate`` over rows of ``M``: ``(t_opt, loss_opt)`` per row.

    ``loss_opt`` is the quadratic's value at its vertex, or the grid value where the
    row fell back to its argmin or an edge (the same rules as ``_locate``).
    """
    n = t.size
    idx = np.argmin(M, axis=1)
    out = t[idx].astype(float)
    low = M[np.arange(M.shape[0]), idx].astype(float)
    # Rows sharing an argmin share a window, so one pseudo-inverse serves them all.
    for i in np.unique(idx):
        if i == 0 or i == n - 1:
            continue
        rows = np.flatnonzero(idx == i)
        lo, hi = max(0, i - window), min(n, i + window + 1)
        V = np.vander(t[lo:hi], 3)
        coef = M[np.ix_(rows, np.arange(lo, hi))] @ np.linalg.pinv(V).T
        c2, c1 = coef[:, 0], coef[:, 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            v = -c1 / (2.0 * c2)
        good = (c2 > 1e-12 * np.maximum(np.abs(c1), 1e-300)) & (v >= t[lo]) & (v <= t[hi - 1])
        out[rows[good]] = v[good]
        vg = v[good]
        low[rows[good]] = coef[good, 0] * vg**2 + c1[good] * vg + coef[good, 2]
    return out, low


def _resampled_means(per_x: list[np.ndarray], n_boot: int,
                     rng: np.random.Generator) -> np.ndarray:
    """Bootstrap seed means, one column per grid point, shape ``(n_boot, len(per_x))``.

    A resampled mean of k seeds has variance (k-1)/k of the mean's; with the usual 2–5
    seeds that shrinks the interval noticeably, so each resampled mean is pushed back out
    by sqrt(k/(k-1)) around the observed mean (the variance-corrected bootstrap, Davison
    & Hinkley 1997, "Bootstrap Methods and their Application", §3.3).
    """
    cols = []
    for v in per_x:
        mu = v.mean()
        bm = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(axis=1)
        infl = np.sqrt(v.size / (v.size - 1)) if v.size > 1 else 1.0
        cols.append(mu + infl * (bm - mu))
    return np.column_stack(cols)


class OptimumFit:
    """Optimal ``x`` (learning rate, batch size, ...) per group from a sweep.

    Procedure, per group (e.g. per width):

    1. Drop diverged rows (``diverged`` true) and rows with a non-finite ``x`` or ``y``.
    2. Average ``y`` over seeds at each ``x``: the arithmetic mean of every usable row
       at that ``x`` (one per seed), so the curve that is fitted is the seed-averaged
       one and a single seed's noise moves it by only 1/k of its size (a raw argmin, or
       a 3-point fit, of one seed moves a whole grid step between seeds, and between
       machines whose float rounding differs). An ``x`` where some seeds diverged is
       averaged over the seeds that did not; ``n_seeds`` records how many.
    3. Fit ``y ≈ c2·t² + c1·t + c0`` with ``t = log2 x`` to the seed-averaged points
       within ``argmin ± window`` grid points (default 2, i.e. up to 5 points); the
       optimum is the vertex ``t* = −c1 / (2·c2)``.
    4. Flags instead of extrapolation: an argmin on the first or last surviving grid
       point gives ``at_edge=True``, the optimum is that grid point and the interval is
       one-sided (``0`` or ``inf`` on the open side, the ``level`` quantile on the other);
       a concave/degenerate quadratic, or a vertex outside the fitted span, falls back
       to the argmin with ``method="argmin"``. A diverged neighbour counts as the grid's
       end, since the optimum then sits at the stability edge.
    5. Bootstrap interval: resample, with replacement, the seeds at each ``x`` (or, when
       every ``x`` has a single trial, the group's trials) and repeat steps 2–4. The
       resampled means are variance-corrected (see ``_bootstrap``), yet with few seeds
       the interval still undercovers: with 4 seeds per ``x`` a nominal 95 % interval
       covered the true optimum in about 87 % of simulated sweeps (the spread itself is
       estimated from only 3 degrees of freedom per point).
    6. Leave-one-seed-out (LOSO) sensitivity, when the group holds at least 2 seeds:
       steps 2–4 are repeated without each seed in turn (a grid point left with no row
       is dropped; a refit with fewer than 3 points is counted as failed) and
       ``sensitivity`` reports the spread of the refit optima, ``max / min`` (1.0: no
       single seed moves the optimum; 2.0: one seed is worth an octave). It is the
       reproducibility figure: how far the reported optimum would move if one seed's
       losses came out differently, as they do across machines.
    7. Near-optimal band: the grid ``x`` whose seed-averaged loss is within ``band``
       (default 0.25 %) of the lowest seed-averaged loss, i.e. ``y ≤ (1 + band)·min y``
       — the criterion of DeepSeek-AI 2024 ("DeepSeek LLM", §3.1) and Li et al. 2025
       ("Predictable Scale: Part I", Step Law, §3).

    Parameters
    ----------
    x, y, group_by, diverged, seed:
        Column names (results-table defaults ``lr``, ``loss``, ``("width",)``,
        ``diverged``, ``seed``). ``diverged`` and ``seed`` may be absent from the data;
        when ``seed`` is present, a repeated ``(group, x, seed)`` raises, since it means
        a varying column is missing from ``group_by``.
    window, band, n_boot, level, random_state:
        As described above (defaults 2, 0.0025, 1000, 0.95, 0); ``ci=`` is the old
        spelling of ``level``, still taken.

    Fitted attributes
    -----------------
    ``results_`` (tidy DataFrame, one row per group), ``optima_`` (list of
    :class:`GroupOptimum`, same order), ``params_`` (group key -> ``x_opt``), ``ci_``
    (group key -> ``(lo, hi)``), ``sensitivity_`` (group key -> LOSO
    :class:`~analysis._stats.SeedSpread` or ``None``). A group key is the value of the single ``group_by``
    column, or a tuple when there are several.
    """

    def __init__(
        self,
        x: str = "lr",
        y: str = "loss",
        group_by: str | Sequence[str] = ("width",),
        *,
        diverged: str | None = "diverged",
        seed: str | None = "seed",
        window: int = 2,
        band: float = 0.0025,
        n_boot: int = 1000,
        level: float = 0.95,
        random_state: int | np.random.Generator | None = 0,
    ) -> None:
        if int(window) != window or window < 1:
            raise ValueError(f"window must be a positive integer, got {window!r}.")
        if not band >= 0:
            raise ValueError(f"band must be a non-negative fraction, got {band!r}.")
        self.x, self.y = x, y
        self.group_by = as_tuple(group_by)
        self.diverged, self.seed = diverged, seed
        self.window = int(window)
        self.band = float(band)
        self.n_boot = check_n_boot(n_boot)
        self.level = check_level(level, "level")
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    def fit(self, data: pd.DataFrame) -> OptimumFit:
        """Estimate the optimum of every group; raises ValueError on unusable groups."""
        require_columns(data, [self.x, self.y, *self.group_by], "results table")
        rng = make_rng(self.random_state)
        if self.group_by:
            groups = list(data.groupby(list(self.group_by), sort=True, dropna=False))
        else:
            groups = [((), data)]
        optima = [self._fit_group(key, df, rng) for key, df in groups]
        self.optima_ = optima
        self.params_ = {o.key: o.x_opt for o in optima}
        self.ci_ = {o.key: o.ci for o in optima}
        self.sensitivity_ = {o.key: o.sensitivity for o in optima}
        self.results_ = self._table()
        return self

    def _fit_group(self, key: Any, df: pd.DataFrame, rng: np.random.Generator) -> GroupOptimum:
        if isinstance(key, tuple) and len(key) == 1:
            key = key[0]
        label = group_label(self.group_by, key)
        ok = usable_rows(df, [self.x, self.y], self.diverged)
        n_div = len(df) - len(ok)
        if ok.empty:
            raise ValueError(f"group {label}: all {len(df)} rows diverged or have no finite "
                             f"{self.y!r}, so no optimum can be estimated.")
        xv = finite_positive(ok[self.x].to_numpy(dtype=float), f"{self.x!r} in group {label}")
        yv = ok[self.y].to_numpy(dtype=float)
        if self.seed is not None and self.seed in ok.columns:
            dup = pd.DataFrame({"x": xv, "s": ok[self.seed].to_numpy()}).duplicated()
            if dup.any():
                raise ValueError(
                    f"group {label}: {self.x}={xv[dup.to_numpy()][0]!r} has repeated "
                    f"{self.seed!r} values; add the column that varies to group_by."
                )
        grid, inv = np.unique(xv, return_inverse=True)
        if grid.size < 3:
            raise ValueError(f"group {label}: only {grid.size} distinct {self.x!r} value(s) "
                             "survive; an optimum needs at least 3 points.")
        t = np.log2(grid)
        per_x = [yv[inv == j] for j in range(grid.size)]
        mean = np.array([v.mean() for v in per_x])
        n_seeds = np.array([v.size for v in per_x])
        t_opt, loss_opt, method, edge, coef, win = _locate(t, mean, self.window)

        boot = self._bootstrap(t, per_x, inv, rng)
        if boot.size:
            if edge == "low":
                ci_log2 = (-np.inf, float(np.quantile(boot, self.level)))
            elif edge == "high":
                ci_log2 = (float(np.quantile(boot, 1.0 - self.level)), np.inf)
            else:
                lo, hi = percentile_interval(boot, self.level)
                ci_log2 = (float(lo), float(hi))
            ci = (float(2.0**ci_log2[0]), float(2.0**ci_log2[1]))
        else:
            ci = (float("-inf"), float("inf"))  # n_boot=0: no interval was asked for
        near = mean <= mean.min() * (1.0 + self.band) if mean.min() > 0 else (
            mean <= mean.min() + abs(mean.min()) * self.band)
        band = (float(grid[near].min()), float(grid[near].max()))
        seeds: tuple[Any, ...] = ()
        sens = None
        if self.seed is not None and self.seed in ok.columns:
            sv = ok[self.seed].to_numpy()
            seeds = tuple(sorted(pd.unique(sv).tolist(), key=lambda s: (str(type(s)), s)))
            if len(seeds) >= 2:
                sens = seed_spread(self.x, {s: self._refit_without(t, yv, inv, sv != s)
                                            for s in seeds})
        return GroupOptimum(
            key=key, label=label, x=grid, mean_loss=mean, n_seeds=n_seeds, window=win,
            coef=coef, x_opt=float(2.0**t_opt), loss_opt=loss_opt, method=method, edge=edge,
            ci=ci, band=band, n_rows=len(ok), n_diverged=n_div, boot_log2=boot,
            seeds=seeds, sensitivity=sens,
        )

    def _refit_without(self, t: np.ndarray, yv: np.ndarray, inv: np.ndarray,
                       keep: np.ndarray) -> float | None:
        """``x_opt`` of the seed-averaged curve of the rows in ``keep`` (steps 2–4), or
        None when fewer than 3 grid points keep a row."""
        cols = [j for j in range(t.size) if np.any(keep & (inv == j))]
        if len(cols) < 3:
            return None
        m = np.array([yv[keep & (inv == j)].mean() for j in cols])
        return float(2.0 ** _locate(t[cols], m, self.window)[0])

    def _bootstrap(self, t: np.ndarray, per_x: list[np.ndarray], inv: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
        B = self.n_boot
        if B == 0:
            return np.empty(0)
        if max(v.size for v in per_x) > 1:
            return _boot_locate(t, _resampled_means(per_x, B, rng), self.window)
        # One trial per x: resample the trials themselves, so a draw may miss grid points.
        single = np.array([v[0] for v in per_x])
        n = inv.size
        out = np.empty(B)
        draws = rng.integers(0, n, size=(B, n))
        for b in range(B):
            cols = np.unique(inv[draws[b]])
            tb, ys = t[cols], single[cols]
            out[b] = tb[np.argmin(ys)] if tb.size < 3 else _locate(tb, ys, self.window)[0]
        return out

    def _table(self) -> pd.DataFrame:
        rows = []
        for o in self.optima_:
            keys = o.key if isinstance(o.key, tuple) else (o.key,)
            row: dict[str, Any] = dict(zip(self.group_by, keys, strict=False))
            row.update(
                x_opt=o.x_opt, log2_x_opt=o.log2_x_opt, ci_lo=o.ci[0], ci_hi=o.ci[1],
                loss_opt=o.loss_opt, n_points=o.window[1] - o.window[0], n_x=o.x.size,
                n_rows=o.n_rows, n_diverged=o.n_diverged, at_edge=o.at_edge, edge=o.edge,
                method=o.method, band_lo=o.band[0], band_hi=o.band[1], n_seeds=len(o.seeds),
                loso_ratio=(o.sensitivity.ratio if o.sensitivity and o.sensitivity.ratio is not None
                            else float("nan")),
            )
            rows.append(row)
        return pd.DataFrame(rows)

    # ------------------------------------------------------------------- using
    def group(self, key: Hashable) -> GroupOptimum:
        """The :class:`GroupOptimum` of one group key."""
        check_is_fitted(self, "optima_")
        for o in self.optima_:
            if o.key == key:
                return o
        raise ValueError(f"no group {key!r}; groups are {[o.key for o in self.optima_]}.")

    def predict(self, x: Any, group: Hashable) -> np.ndarray:
        """The fitted quadratic's loss at ``x`` for one group (raises if none was fitted)."""
        o = self.group(group)
        if o.coef is None:
            raise ValueError(f"group {o.label} has no fitted quadratic (method={o.method!r}).")
        xs = finite_positive(np.atleast_1d(x), "x")
        return np.polyval(o.coef, np.log2(xs))

    def _select(self, where: Mapping[str, Any] | None) -> list[GroupOptimum]:
        check_is_fitted(self, "optima_")
        sel = []
        for o, (_, row) in zip(self.optima_, self.results_.iterrows(), strict=True):
            if where is None or all(row[k] == v for k, v in where.items()):
                sel.append(o)
        return sel

    def drift(self, across: str = "width", where: Mapping[str, Any] | None = None) -> Drift:
        """Drift of the optimum across the groups selected by ``where`` (all by default).

        ``where`` maps group columns to required values, e.g. ``{"parametrization":
        "mup"}``. Needs at least two groups.
        """
        check_is_fitted(self, "optima_")
        if across not in self.group_by:
            raise ValueError(f"across={across!r} is not one of the group_by columns "
                             f"{list(self.group_by)}.")
        if where:
            bad = [k for k in where if k not in self.group_by]
            if bad:
                raise ValueError(f"where names {bad}, which are not group_by columns.")
        sel = self._select(where)
        if len(sel) < 2:
            raise ValueError(f"drift needs at least 2 groups, {len(sel)} match where={where!r}.")
        log2 = np.array([o.log2_x_opt for o in sel])
        octaves = float(log2.max() - log2.min())
        boots = [o.boot_log2 for o in sel]
        if all(b.size for b in boots):
            n = min(b.size for b in boots)
            D = np.column_stack([b[:n] for b in boots])
            lo, hi = percentile_interval(D.max(axis=1) - D.min(axis=1), self.level)
            ci = (float(lo), float(hi))
        else:
            ci = (float("-inf"), float("inf"))
        pos = self.group_by.index(across)
        xs = np.array([(o.key if isinstance(o.key, tuple) else (o.key,))[pos] for o in sel],
                      dtype=float)
        slope = slope_ci = law = None
        if len(sel) >= 3 and np.unique(xs).size >= 2:
            law = PowerLawFit(across, "x_opt", n_boot=self.n_boot, level=self.level,
                              random_state=self.random_state)
            law.fit(xs, np.array([o.x_opt for o in sel]))
            slope = law.params_["b"]
            slope_ci = law.ci_.get("b")
        return Drift(across=across, octaves=octaves, ci=ci, n_groups=len(sel),
                     any_at_edge=any(o.at_edge for o in sel), slope=slope, slope_ci=slope_ci,
                     law=law)

    def drift_table(self, by: str | Sequence[str] = "parametrization",
                    across: str = "width") -> pd.DataFrame:
        """One :meth:`drift` row per value of ``by`` (e.g. SP and muP side by side)."""
        check_is_fitted(self, "optima_")
        by_t = as_tuple(by)
        rows = []
        for vals, _ in self.results_.groupby(list(by_t), sort=True):
            vals_t = vals if isinstance(vals, tuple) else (vals,)
            where = dict(zip(by_t, vals_t, strict=True))
            d = self.drift(across=across, where=where)
            rows.append({**where, "drift_octaves": d.octaves, "ci_lo": d.ci[0],
                         "ci_hi": d.ci[1], "slope": d.slope,
                         "slope_lo": d.slope_ci[0] if d.slope_ci else None,
                         "slope_hi": d.slope_ci[1] if d.slope_ci else None,
                         "n_groups": d.n_groups, "any_at_edge": d.any_at_edge})
        return pd.DataFrame(rows)

    def report(self) -> str:
        """Readable table of the optima with intervals, bands and flags."""
        check_is_fitted(self, "optima_")
        lines = [f"OptimumFit: optimal {self.x} per {', '.join(self.group_by) or 'all'} "
                 f"(quadratic in log2 {self.x}, argmin ± {self.window}, {self.level:.0%} "
                 f"bootstrap CI, band = within {self.band:.2%} of min {self.y}; seeds averaged, "
                 "LOSO = max/min of the optimum refitted without each seed)"]
        for o in self.optima_:
            flag = {QUADRATIC: "", ARGMIN: "  [fallback: argmin]",
                    EDGE: f"  [AT {o.edge.upper()} EDGE of grid]"}[o.method]
            sens = (f"  LOSO ×{o.sensitivity.ratio:.3g} over {len(o.seeds)} seeds"
                    if o.sensitivity and o.sensitivity.ratio is not None
                    else f"  LOSO n/a ({len(o.seeds)} seed{'s' if len(o.seeds) != 1 else ''})")
            lines.append(
                f"  {o.label}: {self.x}* = {o.x_opt:.4g} [{o.ci[0]:.4g}, {o.ci[1]:.4g}]"
                f"  {self.y} = {o.loss_opt:.5g}  band [{o.band[0]:.4g}, {o.band[1]:.4g}]"
                f"  ({o.n_rows} runs, {o.n_diverged} diverged){sens}{flag}"
            )
        return "\n".join(lines)
