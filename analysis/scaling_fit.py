"""Fitting the scaling laws ``eta*(B, D)`` and ``B*(D)`` on a sweep's results table.

:class:`ScalingLawFit` = this module's fitting (optima per cell and budget, the two
estimators, tau, leave-one-seed-out) + :class:`~analysis.scaling_projection.ScalingPredictions`
(what the fitted laws predict, and the projection to a target) +
:class:`~analysis.scaling_doc.ScalingDocument` (FIT.json, written and read).
Batches ``B`` and budgets ``D`` are in tokens throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ._fitted import check_is_fitted
from ._io import finite_positive, require_columns, usable_rows
from ._stats import SeedSpread, check_level, check_n_boot, make_rng, percentile_interval, seed_spread
from .critical_batch import noise_scale_law
from .lr_surge import FORMS, fit_lr_form, power_choice
from .optimum import OptimumFit, _boot_locate_min, _locate, _resampled_means
from .scaling_doc import ScalingDocument
from .scaling_projection import ScalingPredictions
from .scaling_tau import TauMeasurement
from .schedule import ScheduleRules

__all__ = ["METHODS", "ScalingCurves", "ScalingLawFit"]

METHODS = ("optima", "band")
_LN2 = math.log(2.0)


@dataclass(frozen=True)
class ScalingCurves:
    """What the scaling plots draw (built by :meth:`ScalingLawFit.curves_`).

    ``cells``: the measured per-(B, D) optima (columns ``batch_tokens``, ``tokens``,
    ``lr_opt``, ``lr_lo``, ``lr_hi``, ``edge``). ``lr_lines``: for each measured budget,
    the fitted law over ``batch`` with its bootstrap band (``tokens``, ``batch``,
    ``lr``, ``lo``, ``hi``). ``budgets``: the measured per-budget optimal batch
    (``tokens``, ``batch_opt``, ``lo``, ``hi``, ``edge``); ``batch_line``: the fitted
    ``B*(D)`` over ``tokens`` with its band (``tokens``, ``batch``, ``lo``, ``hi``).
    """

    cells: pd.DataFrame
    lr_lines: pd.DataFrame
    budgets: pd.DataFrame
    batch_line: pd.DataFrame
    level: float
    lr_law: str
    batch_law: str




class ScalingLawFit(TauMeasurement, ScalingPredictions, ScalingDocument):
    """Power laws ``eta*(B, D) = c_eta · B^a · D^b`` and ``B*(D) = c_B · D^g``.

    Both are fitted, like Step Law (Li et al. 2025, "Predictable Scale: Part I", §3), by
    least squares in log space on the near-optimal runs, with bootstrap intervals.
    Diverged rows (``diverged`` true) and rows with a non-finite value are left out and
    counted. Two ways to pick the near-optimal runs (``method``):

    * ``"optima"`` (default): per ``(B, D)`` cell, the LR optimum from the seed-averaged
      quadratic in ``log2 eta`` (:class:`~analysis.OptimumFit`: vertex within argmin ± 2
      grid points, edge flags); per budget ``D``, the batch optimum from the same
      quadratic over ``log2 B`` of the cells' best losses. The laws are then fitted to
      these optima. The bootstrap resamples the seeds at every ``(B, D, eta)`` point
      (variance-corrected, as :class:`OptimumFit` does) — or the runs of a cell when
      each point has one seed — and repeats every step, ``n_boot`` times.
    * ``"band"``: Step Law's own recipe — keep every seed-averaged point whose loss is
      within ``band`` (default 0.25 %) of its cell's lowest (for eta) or its budget's
      lowest (for B), and regress ``log eta`` on ``log B, log D`` and ``log B`` on
      ``log D`` over those points; the bootstrap resamples the kept points.

    ``"optima"`` is the default because proxy sweeps have coarse grids (4–8 LRs a
    factor 2 apart, a few batches): the band then holds little more than each grid's
    argmin, so its fitted exponents move in whole grid steps and depend on which
    near-ties fall inside the band, whereas the quadratic vertex interpolates between
    grid points and averages the seeds. Step Law's grids were dense (LRs 2^0.5 apart),
    which is where the band recipe works; both are reported by the tests on the same
    synthetic sweeps.

    Seeds: every estimate above is made on the seed-averaged losses (the mean over the
    seeds at each ``(B, D, eta)`` point, as :class:`OptimumFit` does), never on one seed's
    curve, so one noisy seed cannot carry an optimum across a grid point. With at least
    2 seeds in the ``seed_col`` column, the whole fit is repeated without each seed in
    turn (leave-one-seed-out, ``loso=True``; no bootstrap in the refits) and
    ``sensitivity_`` gives each value's spread over those refits
    (:class:`~analysis._stats.SeedSpread`: ``max / min`` for the coefficients, tau, the
    law's LR at the reference point and B* at the largest budget; ``max − min`` for the
    exponents), with each refit's laws in ``loso_fits_`` (so a projection can be redone
    with each). With one seed there is nothing to leave out: ``sensitivity_`` is empty.

    The LR law's form in batch (``form``, default ``"auto"``): beside the power law the
    fit makes the Adam "surge" form, which rises with B, peaks at B_peak(D) and falls
    (:mod:`analysis.lr_surge`, Li et al. 2024), on the same cell optima, and keeps the one
    with the lower leave-one-batch-out error in log2 eta* (the surge only where the data
    show a peak); ``"power"`` or ``"surge"`` force one. The chosen form gives
    :meth:`predict_lr`, :meth:`lr_interval` and :meth:`lr_ratio` (its own bootstrap and
    misfit band); ``params_`` and ``ci_`` stay the power law's. The band method fits the
    power law only.

    Needs at least 3 budgets and 3 batch sizes (ValueError naming what is missing),
    each budget with at least 3 batches and each cell with at least 3 LRs.

    Fitted attributes: ``params_`` (``lr_coef``, ``lr_exp_batch``, ``lr_exp_tokens``,
    ``batch_coef``, ``batch_exp_tokens``, ``tau``), ``ci_`` (same keys -> (lo, hi),
    ``level`` percentile bootstrap), ``cells_`` (per-cell optima), ``budgets_``
    (per-budget batch optima), ``reference_`` (the proxy optimum at the largest budget:
    the anchor of the baselines), ``measured_``, ``n_rows_``, ``n_in_band_``,
    ``n_excluded_``, ``n_diverged_``, ``warnings_``, ``boot_lr_``/``boot_batch_`` (draws
    of the log-space coefficients), ``seeds_`` (the seed values of the usable rows),
    ``sensitivity_`` (name -> SeedSpread) and ``loso_fits_`` (one dict per refit: the left-out
    ``seed``, ``lr_coef_log``, ``batch_coef_log`` and, for a surge fit, ``lr_surge_log``),
    ``lr_form_`` ("power" | "surge"), ``lr_form_choice_`` (both forms' scores, the criterion,
    whether a peak is shown) and ``lr_surge_`` (the surge's ``coef_log`` [m0, m1, p0, p1],
    ``boot``, ``cov_log``, ``ci`` and ``misfit``; None with too few optima).
    """

    def __init__(
        self,
        band: float = 0.0025,
        n_boot: int = 1000,
        level: float = 0.9,
        seed: int | np.random.Generator | None = 0,
        *,
        method: str = "optima",
        window: int = 2,
        rules: ScheduleRules | None = None,
        loso: bool = True,
        form: str = "auto",
    ) -> None:
        if not (math.isfinite(band) and band >= 0):
            raise ValueError(f"band must be a non-negative fraction, got {band!r}.")
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
        if form not in ("auto", *FORMS):
            raise ValueError(f"form must be one of {('auto', *FORMS)}, got {form!r}.")
        if int(window) != window or window < 1:
            raise ValueError(f"window must be a positive integer, got {window!r}.")
        self.band = float(band)
        self.n_boot = check_n_boot(n_boot)
        self.level = check_level(level, "level")
        self.seed = seed
        self.method = method
        self.window = int(window)
        self.rules = rules or ScheduleRules()
        self.loso = bool(loso)
        self.form = form

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        df: pd.DataFrame,
        *,
        lr: str = "lr",
        batch: str = "batch_tokens",
        tokens: str = "tokens",
        loss: str = "loss",
        seed_col: str | None = "seed",
        diverged: str | None = "diverged",
        weight_decay: str | None = "weight_decay",
        seq_len: str | None = "seq_len",
    ) -> ScalingLawFit:
        """Fit both laws (and tau, when ``weight_decay`` is a column) on a results table."""
        require_columns(df, [lr, batch, tokens, loss], "scaling sweep")
        div = diverged if diverged is not None and diverged in df.columns else None
        n_div = 0
        if div is not None:
            n_div = int(df[div].fillna(False).astype(bool).sum())
        ok = usable_rows(df, [lr, batch, tokens, loss], div).copy()
        ok_all, ok = ok, self._one_weight_decay(ok, weight_decay, batch)
        self.n_rows_ = int(len(df))
        self.flags_ = None  # the edge flags of this fit, read from its document when first asked
        self.n_diverged_ = n_div
        self.n_excluded_ = int(len(df) - len(ok))
        if ok.empty:
            raise ValueError(f"all {len(df)} rows of the scaling sweep diverged or have a "
                             f"non-finite {lr}/{batch}/{tokens}/{loss}.")
        for col in (lr, batch, tokens):
            finite_positive(ok[col].to_numpy(dtype=float), f"column {col!r}")
        Ds = np.unique(ok[tokens].to_numpy(dtype=float))
        Bs = np.unique(ok[batch].to_numpy(dtype=float))
        missing = []
        if Ds.size < 3:
            missing.append(f"{Ds.size} token budget(s) {Ds.tolist()} (need at least 3 "
                           f"distinct {tokens!r})")
        if Bs.size < 3:
            missing.append(f"{Bs.size} batch size(s) {Bs.tolist()} (need at least 3 "
                           f"distinct {batch!r})")
        if missing:
            raise ValueError("a scaling fit needs at least 3 budgets and 3 batch sizes; the "
                             "usable rows have only " + " and ".join(missing) + ".")
        spread = ok.groupby([batch, tokens])[loss].agg(lambda v: float(np.ptp(v.to_numpy(dtype=float))))
        scale = float(np.abs(ok[loss].to_numpy(dtype=float)).max())
        if not (spread > 1e-12 * max(scale, 1e-300)).any():
            raise ValueError(f"no information: the loss does not change with {lr!r} in any (batch, "
                             f"budget) cell (flat at {ok[loss].iloc[0]:.6g}), so no optimum can be fitted; "
                             "is the loss column the training objective?")
        self.columns_ = {"lr": lr, "batch_tokens": batch, "tokens": tokens, "loss": loss}
        seed = seed_col if seed_col is not None and seed_col in ok.columns else None
        rng = make_rng(self.seed)

        cells = self._cells(ok, lr, batch, tokens, loss, seed)
        self._fit_cells(cells, rng)
        self._fit_tau(ok, weight_decay, lr, batch, tokens)
        self._fit_tau_measured(ok_all, weight_decay, lr, batch, tokens, loss, seed, rng)
        self.measured_ = {
            "tokens": [float(Ds.min()), float(Ds.max())],
            "batch_tokens": [float(Bs.min()), float(Bs.max())],
            "seq_len": self._seq_len(ok, seq_len),
            "n_params": self._single(ok, "n_params"),
        }
        self.noise_ = noise_scale_law(ok, self.measured_["seq_len"], lr=lr, batch=batch, tokens=tokens,
                                      loss=loss)
        self.seeds_: tuple[Any, ...] = ()
        self.sensitivity_: dict[str, SeedSpread] = {}
        self.loso_fits_: list[dict[str, Any]] = []
        if seed is not None:
            self.seeds_ = tuple(sorted(pd.unique(ok[seed]).tolist(), key=lambda s: (str(type(s)), s)))
            if self.loso and len(self.seeds_) >= 2:
                self._leave_one_seed_out(ok, seed, dict(
                    lr=lr, batch=batch, tokens=tokens, loss=loss, seed_col=seed, diverged=None,
                    weight_decay=weight_decay, seq_len=seq_len))
        return self

    #: the values whose LOSO spread is reported: name -> positive (ratio) or signed (max − min)
    LOSO_VALUES = {"lr_coef": True, "lr_exp_batch": False, "lr_exp_tokens": False,
                   "batch_coef": True, "batch_exp_tokens": False, "tau": True,
                   "lr_at_reference": True, "batch_at_max_tokens": True}

    def _leave_one_seed_out(self, ok: pd.DataFrame, seed: str, kw: dict[str, Any]) -> None:
        """Refit without each seed (no bootstrap, no nested LOSO); a refit that raises
        (too few cells left without that seed) is counted as failed."""
        ref, d_max = self.reference_, self.measured_["tokens"][1]
        refits: dict[str, dict[Any, float | None]] = {k: {} for k in self.LOSO_VALUES}
        for s in self.seeds_:
            sub = ScalingLawFit(band=self.band, n_boot=0, level=self.level, seed=self.seed,
                                method=self.method, window=self.window, rules=self.rules, loso=False,
                                form=self.lr_form_)
            try:
                sub.fit(ok[(ok[seed] != s).to_numpy()], **kw)
            except ValueError:
                for k in refits:
                    refits[k][s] = None
                continue
            vals = dict(sub.params_)
            vals["lr_at_reference"] = float(sub.predict_lr(ref["batch_tokens"], ref["tokens"])[0])
            vals["batch_at_max_tokens"] = float(sub.predict_batch(d_max)[0])
            for k in refits:
                refits[k][s] = vals.get(k)
            self.loso_fits_.append({"seed": s, "lr_coef_log": sub.lr_coef_log_.copy(),
                                    "batch_coef_log": sub.batch_coef_log_.copy(),
                                    "tau": sub.params_.get("tau"),
                                    "lr_surge_log": None if sub.lr_surge_ is None or self.lr_form_ != "surge"
                                    else sub.lr_surge_["coef_log"].copy()})
        for k, positive in self.LOSO_VALUES.items():
            if any(v is not None for v in refits[k].values()):
                self.sensitivity_[k] = seed_spread(k, refits[k], log_scale=positive)

    @staticmethod
    def _single(ok: pd.DataFrame, col: str | None) -> float | None:
        if col is None or col not in ok.columns:
            return None
        v = pd.to_numeric(ok[col], errors="coerce").dropna().unique()
        return float(v[0]) if v.size == 1 else None

    def _seq_len(self, ok: pd.DataFrame, col: str | None) -> int | None:
        v = self._single(ok, col)
        return None if v is None else int(v)

    def _cells(self, ok: pd.DataFrame, lr: str, batch: str, tokens: str, loss: str,
               seed: str | None) -> list[dict[str, Any]]:
        """Per (B, D) cell: the LR grid, the seed losses per LR, and the OptimumFit point.
        A cell with fewer than 3 usable LRs has no optimum: it is left out (and warned of),
        e.g. a batch added past the grid's edge at which most LRs diverged."""
        n_lr = ok.groupby([batch, tokens])[lr].transform("nunique")
        few = ok[n_lr < 3]
        self.dropped_cells_ = sorted({(float(b), float(d)) for b, d in zip(few[batch], few[tokens])})
        ok = ok[n_lr >= 3]
        if ok.empty:
            raise ValueError(f"no (batch, budget) cell has 3 usable {lr!r} values; an LR "
                             "optimum needs at least 3 points.")
        of = OptimumFit(x=lr, y=loss, group_by=(batch, tokens), diverged=None, seed=seed,
                        window=self.window, band=self.band, n_boot=0).fit(ok)
        self.optimum_fit_ = of
        out = []
        for o, (_, g) in zip(of.optima_, ok.groupby([batch, tokens], sort=True), strict=True):
            xv = g[lr].to_numpy(dtype=float)
            yv = g[loss].to_numpy(dtype=float)
            grid, inv = np.unique(xv, return_inverse=True)
            per_x = [yv[inv == j] for j in range(grid.size)]
            b, d = o.key
            near = o.mean_loss <= o.mean_loss.min() * (1.0 + self.band)
            out.append({"B": float(b), "D": float(d), "opt": o, "grid": grid, "per_x": per_x,
                        "inv": inv, "y": yv, "n_in_band": int(o.n_seeds[near].sum())})
        return out

    # ---- the two estimators, each giving point values and bootstrap draws of the
    # ---- log-space coefficients [log c_eta, a, b] and [log c_B, g]
    def _fit_cells(self, cells: list[dict[str, Any]], rng: np.random.Generator) -> None:
        warnings: list[str] = []
        self.warnings_ = warnings
        if self.dropped_cells_:
            where = ", ".join(f"B={b:g} D={d:g}" for b, d in self.dropped_cells_)
            warnings.append(f"{len(self.dropped_cells_)} (B, D) cell(s) have fewer than 3 usable LRs "
                            f"and were left out: {where}.")
        B = np.array([c["B"] for c in cells])
        D = np.array([c["D"] for c in cells])
        Ds = np.unique(D)
        for d in Ds:
            nb = int(np.sum(D == d))
            if nb < 3:
                raise ValueError(f"budget tokens={d:g} has only {nb} batch size(s) with "
                                 "usable runs; the optimal batch needs at least 3.")
        t_lr = np.array([math.log2(c["opt"].x_opt) for c in cells])
        l_opt = np.array([c["opt"].loss_opt for c in cells])
        edges = [c["opt"].edge for c in cells]
        self.n_in_band_ = int(sum(c["n_in_band"] for c in cells))

        # Draws of every cell's (log2 eta*, best loss).
        nb_ = self.n_boot
        T = np.empty((nb_, len(cells)))
        L = np.empty((nb_, len(cells)))
        for j, c in enumerate(cells):
            if nb_ == 0:
                break
            t = np.log2(c["grid"])
            if max(v.size for v in c["per_x"]) > 1:
                M = _resampled_means(c["per_x"], nb_, rng)
                T[:, j], L[:, j] = _boot_locate_min(t, M, self.window)
            else:
                T[:, j], L[:, j] = self._single_seed_boot(t, c["per_x"], rng)

        # Per budget: the batch optimum over log2 B of the cells' best losses.
        budgets = []
        tB = np.empty((nb_, Ds.size))
        for i, d in enumerate(Ds):
            idx = np.flatnonzero(D == d)
            idx = idx[np.argsort(B[idx])]
            tb = np.log2(B[idx])
            t_opt, l_best, method, edge, _, _ = _locate(tb, l_opt[idx], self.window)
            if nb_:
                tB[:, i] = _boot_locate_min(tb, L[:, idx], self.window)[0]
            budgets.append({"tokens": float(d), "batch_opt": float(2.0**t_opt),
                            "loss_opt": float(l_best), "method": method, "edge": edge,
                            "cells": idx})
            if edge:
                warnings.append(f"at tokens={d:g} the best batch is at the {edge} edge of "
                                f"the batch grid ({2.0**t_opt:g}); B* there is only a bound.")

        if self.method == "optima":
            use = np.array([e == "" for e in edges])
            Xc = np.column_stack([np.ones(len(cells)), np.log(B), np.log(D)])
            if use.sum() >= 4 and np.unique(B[use]).size >= 2 and np.unique(D[use]).size >= 2:
                if not use.all():
                    warnings.append(f"{int((~use).sum())} (B, D) cell(s) have their LR "
                                    "optimum at the grid edge and were left out of the LR law.")
            else:
                if not use.all():
                    warnings.append(f"{int((~use).sum())} (B, D) cell(s) have their LR optimum "
                                    "at the grid edge; too few others remain, so they were "
                                    "kept (the LR law is biased toward the grid).")
                use = np.ones(len(cells), dtype=bool)
            self.lr_coef_log_ = _ols(Xc[use], t_lr[use] * _LN2)
            self.boot_lr_ = _ols_many(Xc[use], T[:, use] * _LN2) if nb_ else np.empty((0, 3))
            self.lr_misfit_ = lr_misfit(Xc[use], t_lr[use] * _LN2, self.lr_coef_log_)
            self.lr_surge_, self.lr_form_choice_ = fit_lr_form(
                np.log(B[use]), np.log(D[use]), t_lr[use] * _LN2,
                T[:, use] * _LN2 if nb_ else np.empty((0, int(use.sum()))), form=self.form, level=self.level)
            self.lr_form_ = self.lr_form_choice_["form"]
            Xd = np.column_stack([np.ones(Ds.size), np.log(Ds)])
            t_b = np.array([math.log2(b["batch_opt"]) for b in budgets])
            self.batch_coef_log_ = _ols(Xd, t_b * _LN2)
            self.boot_batch_ = _ols_many(Xd, tB * _LN2) if nb_ else np.empty((0, 2))
            self.n_lr_points_, self.n_batch_points_ = int(use.sum()), int(Ds.size)
        else:
            self._fit_band(cells, B, D, rng)
            self.lr_surge_, self.lr_form_ = None, "power"
            self.lr_form_choice_ = power_choice("the band method fits the power law only")

        self.cells_ = pd.DataFrame({
            "batch_tokens": B, "tokens": D, "lr_opt": 2.0**t_lr, "loss_opt": l_opt,
            "lr_lo": _q(T, (1 - self.level) / 2, 2.0**t_lr), "lr_hi": _q(T, (1 + self.level) / 2, 2.0**t_lr),
            "edge": edges, "method": [c["opt"].method for c in cells],
            "n_lr": [c["grid"].size for c in cells],
        })
        self.budgets_ = pd.DataFrame({
            "tokens": [b["tokens"] for b in budgets],
            "batch_opt": [b["batch_opt"] for b in budgets],
            "lo": _q(tB, (1 - self.level) / 2, np.array([b["batch_opt"] for b in budgets])),
            "hi": _q(tB, (1 + self.level) / 2, np.array([b["batch_opt"] for b in budgets])),
            "loss_opt": [b["loss_opt"] for b in budgets],
            "edge": [b["edge"] for b in budgets],
        })
        self._boot_log_bstar = tB[:, -1] * _LN2  # draws of log B* at the largest budget
        # Anchor of the baselines: the best measured cell at the largest budget.
        last = budgets[-1]
        j = int(last["cells"][np.argmin(l_opt[last["cells"]])])
        self.reference_ = {"lr": float(2.0 ** t_lr[j]), "batch_tokens": float(B[j]),
                           "tokens": float(D[j]), "loss": float(l_opt[j])}
        self._set_params()

    def _single_seed_boot(self, t: np.ndarray, per_x: list[np.ndarray],
                          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One run per LR: resample the runs (as :class:`OptimumFit` does); a draw keeps
        the grid points it hit. The losses never change, so a draw's optimum depends only
        on its argmin window among the kept points: each window is solved once."""
        y = np.array([v[0] for v in per_x])
        n, nb_, w = y.size, self.n_boot, self.window
        present = np.zeros((nb_, n), dtype=bool)
        present[np.arange(nb_)[:, None], rng.integers(0, n, size=(nb_, n))] = True
        ia = np.argmin(np.where(present, y, np.inf), axis=1)  # grid index of each argmin
        rank = np.cumsum(present, axis=1) - 1  # position among the kept points
        count = present.sum(axis=1)
        r0 = rank[np.arange(nb_), ia]
        T, L = t[ia].astype(float), y[ia].astype(float)
        inner = (count >= 3) & (r0 > 0) & (r0 < count - 1)  # else: argmin or edge point
        if inner.any():
            win = present & (np.abs(rank - r0[:, None]) <= w)
            keys, inv = np.unique(win[inner], axis=0, return_inverse=True)
            rows = np.flatnonzero(inner)
            for u, key in enumerate(keys):
                cols = np.flatnonzero(key)
                r = _locate(t[cols], y[cols], w)
                T[rows[inv.ravel() == u]], L[rows[inv.ravel() == u]] = r[0], r[1]
        return T, L

    def _fit_band(self, cells: list[dict[str, Any]], B: np.ndarray, D: np.ndarray,
                  rng: np.random.Generator) -> None:
        """Step Law's recipe on seed-averaged points inside the near-optimal band."""
        rows_lr, rows_b = [], []
        for c in cells:
            m = c["opt"].mean_loss
            near = m <= m.min() * (1.0 + self.band)
            for x in c["grid"][near]:
                rows_lr.append((c["B"], c["D"], float(x)))
        for d in np.unique(D):
            idx = np.flatnonzero(D == d)
            best = min(cells[j]["opt"].mean_loss.min() for j in idx)
            for j in idx:
                if np.any(cells[j]["opt"].mean_loss <= best * (1.0 + self.band)):
                    rows_b.append((float(d), cells[j]["B"]))
        a = np.array(rows_lr)
        b = np.array(rows_b)
        Xl = np.column_stack([np.ones(len(a)), np.log(a[:, 0]), np.log(a[:, 1])])
        yl = np.log(a[:, 2])
        Xb = np.column_stack([np.ones(len(b)), np.log(b[:, 0])])
        yb = np.log(b[:, 1])
        if np.linalg.matrix_rank(Xl) < 3:
            raise ValueError("the near-optimal band holds too few distinct (B, D) points to "
                             "fit the LR law; widen --band or use method='optima'.")
        if np.linalg.matrix_rank(Xb) < 2:
            raise ValueError("the near-optimal band holds too few budgets to fit B*(D).")
        self.lr_coef_log_ = _ols(Xl, yl)
        self.lr_misfit_ = lr_misfit(Xl, yl, self.lr_coef_log_)
        self.batch_coef_log_ = _ols(Xb, yb)
        self.boot_lr_ = _pairs_boot(Xl, yl, self.n_boot, rng)
        self.boot_batch_ = _pairs_boot(Xb, yb, self.n_boot, rng)
        self.n_lr_points_, self.n_batch_points_ = int(len(a)), int(len(b))

    def _set_params(self) -> None:
        cl, cb = self.lr_coef_log_, self.batch_coef_log_
        self.params_: dict[str, float | None] = {
            "lr_coef": float(np.exp(cl[0])), "lr_exp_batch": float(cl[1]),
            "lr_exp_tokens": float(cl[2]), "batch_coef": float(np.exp(cb[0])),
            "batch_exp_tokens": float(cb[1]), "tau": None,
        }
        self.ci_: dict[str, tuple[float, float]] = {}
        self.cov_lr_ = np.zeros((3, 3))
        self.cov_batch_ = np.zeros((2, 2))
        if self.boot_lr_.shape[0] > 2 and self.boot_batch_.shape[0] > 2:
            lo, hi = percentile_interval(self.boot_lr_, self.level)
            self.ci_["lr_coef"] = (float(np.exp(lo[0])), float(np.exp(hi[0])))
            self.ci_["lr_exp_batch"] = (float(lo[1]), float(hi[1]))
            self.ci_["lr_exp_tokens"] = (float(lo[2]), float(hi[2]))
            lo, hi = percentile_interval(self.boot_batch_, self.level)
            self.ci_["batch_coef"] = (float(np.exp(lo[0])), float(np.exp(hi[0])))
            self.ci_["batch_exp_tokens"] = (float(lo[1]), float(hi[1]))
            self.cov_lr_ = np.cov(self.boot_lr_, rowvar=False)
            self.cov_batch_ = np.cov(self.boot_batch_, rowvar=False)


    # ------------------------------------------------------- what the plots draw
    def curves_(self, n_points: int = 50) -> ScalingCurves:
        """The data the scaling plots draw (measured optima, laws, bootstrap bands)."""
        check_is_fitted(self, "params_")
        if not hasattr(self, "cells_"):
            raise ValueError("curves_ needs a fit on data (a fit restored by from_dict "
                             "keeps the laws but not the per-run optima).")
        bmin, bmax = self.measured_["batch_tokens"]
        dmin, dmax = self.measured_["tokens"]
        bg = np.geomspace(bmin, bmax, n_points)
        rows = []
        for d in np.unique(self.cells_["tokens"]):
            p, lo, hi = self.lr_interval(bg, np.full_like(bg, d))
            rows.append(pd.DataFrame({"tokens": d, "batch": bg, "lr": p, "lo": lo, "hi": hi}))
        dg = np.geomspace(dmin, dmax, n_points)
        p, lo, hi = self.batch_interval(dg)
        return ScalingCurves(
            cells=self.cells_.copy(), lr_lines=pd.concat(rows, ignore_index=True),
            budgets=self.budgets_.copy(),
            batch_line=pd.DataFrame({"tokens": dg, "batch": p, "lo": lo, "hi": hi}),
            level=self.level, lr_law=self._chosen_lr_law(), batch_law=self._batch_law())

    def bracketing(self) -> pd.DataFrame:
        """Per budget: is the optimal batch, and every batch's optimal LR, bracketed?

        A grid optimum is bracketed when it is not at the edge of its grid (the edge flags
        of :class:`~analysis.OptimumFit` for the LR of each ``(B, D)`` cell, and of the
        same locator over ``log2 B`` for the batch of each budget): only then is it an
        optimum rather than a bound. Columns: ``tokens``, ``batch_opt``,
        ``batch_bracketed``, ``batch_edge`` ("" | "low" | "high"), ``lr_bracketed``
        (every cell of the budget), ``lr_edge_cells`` (how many are not) and
        ``lr_edges`` (``[(batch_tokens, edge), ...]`` of those cells)."""
        check_is_fitted(self, "params_")
        if not hasattr(self, "cells_"):
            raise ValueError("bracketing needs a fit on data (a fit restored by from_dict keeps "
                             "the laws but not the per-run optima).")
        rows = []
        for b in self.budgets_.to_dict("records"):
            at = self.cells_[self.cells_["tokens"] == b["tokens"]]
            edges = [(float(r["batch_tokens"]), str(r["edge"])) for r in at.to_dict("records") if r["edge"]]
            rows.append({"tokens": float(b["tokens"]), "batch_opt": float(b["batch_opt"]),
                         "batch_bracketed": not b["edge"], "batch_edge": str(b["edge"]),
                         "lr_bracketed": not edges, "lr_edge_cells": len(edges), "lr_edges": edges})
        return pd.DataFrame(rows)

    def _lr_law(self) -> str:
        p = self.params_
        return (f"eta* = {p['lr_coef']:.4g} · B^{p['lr_exp_batch']:.3f} · "
                f"D^{p['lr_exp_tokens']:.3f}")

    def _surge_law(self) -> str:
        m0, m1, p0, p1 = (float(v) for v in self.lr_surge_["coef_log"])
        return (f"eta* = 2·eta_max/(sqrt(B_peak/B) + sqrt(B/B_peak)), eta_max = {math.exp(m0):.4g}·D^{m1:.3f}, "
                f"B_peak = {math.exp(p0):.4g}·D^{p1:.3f}")

    def _chosen_lr_law(self) -> str:
        return self._surge_law() if self.lr_form == "surge" else self._lr_law()

    def _form_text(self) -> list[str]:
        ch = getattr(self, "lr_form_choice_", None)
        if not ch:
            return [f"  LR form in batch: {self.lr_form} (no choice recorded)"]
        sc = ", ".join(f"{k} {'n/a' if v is None else f'{v:.3f}'}" for k, v in ch["scores"].items())
        out = [f"  LR form in batch: {self.lr_form} ({ch['criterion']}: {sc}; peak shown: {ch.get('peak_shown')})"]
        if self._surge() is not None:
            out.append(f"    surge form: {self._surge_law()}")
        return out

    def _batch_law(self) -> str:
        p = self.params_
        return f"B* = {p['batch_coef']:.4g} · D^{p['batch_exp_tokens']:.3f}"

    # ------------------------------------------------------------------ output
    def report(self) -> str:
        """Readable summary: both laws with intervals, tau, counts and warnings."""
        check_is_fitted(self, "params_")

        def ci(k: str) -> str:
            c = self.ci_.get(k)
            return f" [{c[0]:.4g}, {c[1]:.4g}]" if c else ""

        p = self.params_
        lines = [f"ScalingLawFit ({self.method}, band {self.band:.2%}, {self.level:.0%} "
                 f"bootstrap intervals, {self.n_boot} resamples)",
                 f"  {self._lr_law()}",
                 f"    a (batch) = {p['lr_exp_batch']:.4f}{ci('lr_exp_batch')}, "
                 f"b (tokens) = {p['lr_exp_tokens']:.4f}{ci('lr_exp_tokens')}",
                 *self._form_text(),
                 f"  {self._batch_law()}",
                 f"    g (tokens) = {p['batch_exp_tokens']:.4f}{ci('batch_exp_tokens')}"]
        if p.get("tau") is not None and getattr(self, "tau_source_", None) == "measured":
            lines.append(f"  tau* = B/(eta·lambda·D) = {p['tau']:.4g}{ci('tau')} measured at its optimum "
                         "over the weight decays, largest budget; per budget: " + ", ".join(
                             f"D={r['tokens']:.4g}: {r['value']:.4g}" for r in self.tau_by_tokens_))
        elif p.get("tau") is not None:
            lines.append(f"  tau = B/(eta·lambda·D) = {p['tau']:.4g}{ci('tau')} at the proxy "
                         "optimum of the largest budget (the sweep's one weight decay)")
        lines.append(f"  {self.n_rows_} rows, {self.n_excluded_} excluded ({self.n_diverged_} "
                     f"diverged), {self.n_in_band_} in the near-optimal band")
        lines.append("  " + self._loso_text())
        lines += [f"  WARNING: {w}" for w in self.warnings_]
        return "\n".join(lines)

    def _loso_text(self) -> str:
        doc = getattr(self, "_sensitivity_doc", None) or self.sensitivity_dict()
        n, vals = doc.get("n_seeds", 0), doc.get("values") or {}
        if not vals:
            return (f"leave-one-seed-out: n/a ({n} seed{'s' if n != 1 else ''}; losses averaged "
                    "over the seeds the table holds)")
        parts = []
        for k, v in vals.items():
            if v.get("ratio") is not None:
                parts.append(f"{k} ×{v['ratio']:.3g}")
            elif v.get("spread") is not None:
                parts.append(f"{k} ±{v['spread']:.3g}")
        return f"leave-one-seed-out spread over {n} seeds (seed-averaged fits): " + ", ".join(parts)


# ------------------------------------------------------------------ numerics
def lr_misfit(X: np.ndarray, y: np.ndarray, coef: np.ndarray) -> dict[str, Any]:
    """How far the measured optima sit off the fitted LR law, for its prediction band.

    The bootstrap of :class:`ScalingLawFit` resamples each cell's seeds, so it sees only
    how noisy each cell's optimum is, not how well a power law in B and D describes the
    optima: on the card-regret proxy's sweep (4 budgets × 6 batches), holding out one
    budget or one end batch at a time, its 90% band held the held-out optimum at 20 of
    32 cells (63%). The law's misfit is the residual variance of the optima about it,

        s² = Σ r_i² / (n − p),   r_i = ln η*_i − x_i·c,   x_i = (1, ln B_i, ln D_i),

    and a new cell's optimum at x is predicted with variance
    ``x·(Σ_boot + s²·(XᵀX)⁻¹)·x + s²`` (the ordinary least-squares prediction interval,
    e.g. Seber & Lee 2003, §5.3, with the bootstrap's covariance added), quantile from
    Student's t with n − p degrees of freedom: 28 of 32 (88%) on the same held-out cells
    (``benchmarks/interval_coverage.py``). Returns ``{"sd_log": s, "dof": n − p,
    "cov_log": s²·(XᵀX)⁻¹}``; with no residual degrees of freedom s is 0 and dof 0."""
    n, p = X.shape
    if n <= p:
        return {"sd_log": 0.0, "dof": 0, "cov_log": np.zeros((p, p))}
    r = y - X @ coef
    s2 = float(r @ r) / (n - p)
    return {"sd_log": math.sqrt(s2), "dof": int(n - p), "cov_log": s2 * np.linalg.pinv(X.T @ X)}


def _ols(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    if np.linalg.matrix_rank(X) < X.shape[1]:
        raise ValueError("the optima do not span enough distinct batch sizes and budgets "
                         "to fit the exponents.")
    return np.linalg.lstsq(X, y, rcond=None)[0]


def _ols_many(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """OLS coefficients for every row of ``Y`` (same design): shape ``(n, p)``."""
    return Y @ np.linalg.pinv(X).T


def _pairs_boot(X: np.ndarray, y: np.ndarray, n_boot: int,
                rng: np.random.Generator) -> np.ndarray:
    p = X.shape[1]
    if n_boot == 0:
        return np.empty((0, p))
    n = X.shape[0]
    idx = rng.integers(0, n, size=(n_boot, n))
    Xb = X[idx]
    ok = np.linalg.matrix_rank(Xb) == p
    return np.einsum("bpn,bn->bp", np.linalg.pinv(Xb[ok]), y[idx][ok])


def _q(T: np.ndarray, q: float, point: np.ndarray) -> np.ndarray:
    """Quantile of log2 draws as a value (``point`` where there are no draws)."""
    if T.shape[0] == 0:
        return np.asarray(point, dtype=float)
    return 2.0 ** np.quantile(T, q, axis=0)

