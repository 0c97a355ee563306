"""The AdamW timescale tau of a scaling sweep: at the proxy optimum with the sweep's one
weight decay, or tau* measured at its optimum over a weight-decay axis.

:class:`TauMeasurement` is the part of :class:`~analysis.ScalingLawFit` that measures it
(Wang & Aitchison 2024; Bergsma et al. 2025, "Power Lines").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ._stats import percentile_interval
from .optimum import OptimumFit, _boot_locate_min, _locate, _resampled_means
from .tau import tau_from

__all__ = ["TauMeasurement"]


class TauMeasurement:
    """tau at the proxy optimum and tau* over a weight-decay axis (mixed into ScalingLawFit)."""

    level: float
    n_boot: int
    window: int
    band: float
    warnings_: list[str]
    params_: dict[str, float | None]
    ci_: dict[str, tuple[float, float]]

    @staticmethod
    def _one_weight_decay(ok: pd.DataFrame, wd: str | None, batch: str) -> pd.DataFrame:
        """The rows of the sweep's own weight decay, the one run at the most batches: the
        laws are fitted at one lambda; a weight-decay axis (at one batch) is for tau*."""
        if wd is None or wd not in ok.columns:
            return ok
        lam = pd.to_numeric(ok[wd], errors="coerce")
        if lam.nunique() < 2:
            return ok
        spread = ok.assign(_lam=lam).groupby("_lam").agg(n_b=(batch, "nunique"), n=(batch, "size"))
        lam0 = spread.sort_values(["n_b", "n"], ascending=False).index[0]
        return ok[lam == lam0]

    def _fit_tau_measured(self, ok: pd.DataFrame, wd: str | None, lr: str, batch: str, tokens: str,
                          loss: str, seed: str | None, rng: np.random.Generator) -> None:
        """tau* at its optimum, when a batch was run at >= 3 positive weight decays.

        Per budget D and weight decay lambda at that batch B, the LR is re-optimised
        (:class:`OptimumFit`: the quadratic in log2 eta), which gives the profile
        ``(tau(lambda) = B/(eta*(lambda)·lambda·D), loss*(lambda))``; tau*(D) is the
        optimum of that profile in log2 tau (:class:`OptimumFit` again, with its edge
        flags: at an edge of the lambda grid tau* is only a bound). The interval: with
        several seeds, every step repeated on seed resamples (:meth:`_tau_seed_ci`); with one
        seed, :class:`OptimumFit`'s bootstrap over the profile's weight decays. The value
        is tau* at the largest budget; ``tau_by_tokens_`` holds every budget's, for a check
        that tau* stays constant across D (Wang & Aitchison 2024; Bergsma et al. 2025 find it does at a
        fixed tokens-per-parameter). The measured tau* replaces the default lambda's."""
        self.tau_source_ = "default λ" if self.params_.get("tau") is not None else None
        self.tau_by_tokens_: list[dict[str, Any]] = []
        if wd is None or wd not in ok.columns:
            return
        lam = pd.to_numeric(ok[wd], errors="coerce")
        pos = ok[lam > 0].assign(**{wd: lam[lam > 0]})
        n_lam = pos.groupby(batch)[wd].nunique()
        if n_lam.empty or n_lam.max() < 3:
            return
        b_tau = float(n_lam.idxmax())
        rows = pos[pos[batch] == b_tau]
        n_lr = rows.groupby([tokens, wd])[lr].transform("nunique")
        rows = rows[n_lr >= 3]
        if rows.empty or rows.groupby(tokens)[wd].nunique().max() < 3:
            self.warnings_.append(f"the weight-decay axis at batch {b_tau:g} has fewer than 3 weight "
                                  "decays with 3 usable LRs; tau* was not measured.")
            return
        of = OptimumFit(x=lr, y=loss, group_by=(tokens, wd), diverged=None, seed=seed,
                        window=self.window, band=self.band, n_boot=0).fit(rows)
        prof = of.results_.copy()
        n_d = prof.groupby(tokens)[wd].transform("size")
        prof = prof[n_d >= 3]
        prof["tau"] = tau_from(b_tau, prof["x_opt"].to_numpy(), prof[wd].to_numpy(),
                               prof[tokens].to_numpy())
        edges = prof[prof["at_edge"]]
        if len(edges):
            where = ", ".join(f"lambda={w:g} D={d:g}" for w, d in zip(edges[wd], edges[tokens]))
            self.warnings_.append(f"the best LR sat at an edge of its grid for {where} on the weight-decay "
                                  "axis: those tau values are bounds.")
        seeded = bool((rows.groupby([tokens, wd, lr])[loss].size() > 1).any())
        tf = OptimumFit(x="tau", y="loss_opt", group_by=(tokens,), diverged=None, seed=None,
                        window=self.window, band=self.band, n_boot=self.n_boot, level=self.level,
                        random_state=rng).fit(prof)
        for o in tf.optima_:
            g = prof[prof[tokens] == o.key].sort_values("tau")
            t = np.log2(g["tau"].to_numpy())
            eta = float(2.0 ** np.interp(math.log2(o.x_opt), t, np.log2(g["x_opt"].to_numpy())))
            # an open side is infinite here, null in the JSON (a tau of 0 would be a lambda of inf)
            lo = -math.inf if o.edge == "low" else float(o.ci[0])
            ci = None if self.n_boot == 0 else (lo, float(o.ci[1]))
            if ci is not None and seeded:
                ci = self._tau_seed_ci(rows[rows[tokens] == o.key], lr, loss, wd, b_tau, float(o.key),
                                       o.edge, rng)
            lam_opt = float(tau_from(b_tau, eta, o.x_opt, o.key))  # lambda = B/(eta·tau·D): same form
            self.tau_by_tokens_.append({"tokens": float(o.key), "value": o.x_opt, "ci": ci, "edge": o.edge,
                                        "lr": eta, "weight_decay": lam_opt, "weight_decays": g[wd].tolist()})
        top = self.tau_by_tokens_[-1]
        if top["edge"]:
            lam_end = "largest" if top["edge"] == "low" else "smallest"
            self.warnings_.append(f"tau* sat at the {top['edge']} edge of its grid (the {lam_end} weight "
                                  f"decay) at the largest budget: {top['value']:.4g} is only a bound; widen "
                                  "weight_decays.")
        self.params_["tau"] = top["value"]
        self.ci_.pop("tau", None)
        if top["ci"] is not None:
            self.ci_["tau"] = top["ci"]
        self.tau_at_ = {"tokens": top["tokens"], "batch_tokens": b_tau, "lr": top["lr"],
                        "weight_decay": top["weight_decay"]}
        self.weight_decay_ = top["weight_decay"]
        self.tau_source_ = "measured"
        self.tau_boot_ = np.empty(0)

    def _tau_seed_ci(self, rows: pd.DataFrame, lr: str, loss: str, wd: str, b_tau: float, d: float,
                     edge: str, rng: np.random.Generator) -> tuple[float, float]:
        """tau*'s interval at one budget when the runs have several seeds: the bootstrap of
        the laws (and of :class:`OptimumFit`) -- resample the seeds at every (lambda, eta)
        point (variance-corrected), re-optimise the LR per lambda, locate tau* on the
        resampled profile -- ``n_boot`` times; one-sided at an edge of the lambda grid."""
        n = self.n_boot
        groups = list(rows.groupby(wd, sort=True))
        T, L = np.empty((n, len(groups))), np.empty((n, len(groups)))
        for j, (lam, g) in enumerate(groups):
            grid, inv = np.unique(g[lr].to_numpy(dtype=float), return_inverse=True)
            yv = g[loss].to_numpy(dtype=float)
            M = _resampled_means([yv[inv == k] for k in range(grid.size)], n, rng)
            t_b, L[:, j] = _boot_locate_min(np.log2(grid), M, self.window)
            T[:, j] = math.log2(b_tau / (float(lam) * d)) - t_b  # log2 tau = log2 B/(eta·lambda·D)
        boot = np.empty(n)
        for b in range(n):
            order = np.argsort(T[b])
            boot[b] = _locate(T[b, order], L[b, order], self.window)[0]
        if edge == "low":
            return -math.inf, float(2.0 ** np.quantile(boot, self.level))
        if edge == "high":
            return float(2.0 ** np.quantile(boot, 1.0 - self.level)), math.inf
        lo, hi = percentile_interval(boot, self.level)
        return float(2.0**lo), float(2.0**hi)

    def _fit_tau(self, ok: pd.DataFrame, wd: str | None, lr: str, batch: str,
                 tokens: str) -> None:
        """tau at the proxy optimum of the largest budget, with the weight decay run there."""
        self.weight_decay_ = None
        self.tau_at_ = None
        self.tau_boot_ = np.empty(0)
        if wd is None or wd not in ok.columns:
            return
        d_max = float(ok[tokens].max())
        lam = pd.to_numeric(ok.loc[ok[tokens] == d_max, wd], errors="coerce").dropna().unique()
        if lam.size != 1:
            self.warnings_.append(f"column {wd!r} takes {lam.size} values at the largest "
                                  "budget; tau needs one weight decay, so it was not measured.")
            return
        lam0 = float(lam[0])
        if not (math.isfinite(lam0) and lam0 >= 0):
            raise ValueError(f"column {wd!r} holds {lam0!r}; a weight decay must be >= 0.")
        self.weight_decay_ = lam0
        if lam0 == 0:
            self.warnings_.append("the sweep ran without weight decay (lambda = 0): tau is "
                                  "infinite and the projection keeps lambda = 0.")
            return
        b_star = float(self.budgets_["batch_opt"].iloc[-1])
        eta = float(self.predict_lr(b_star, d_max)[0])
        self.params_["tau"] = float(tau_from(b_star, eta, lam0, d_max))
        self.tau_at_ = {"tokens": d_max, "batch_tokens": b_star, "lr": eta,
                        "weight_decay": lam0}
        if self.boot_lr_.shape[0] and self._boot_log_bstar.size:
            # the measured B* and the LR law, drawn from the same resamples
            n = min(self.boot_lr_.shape[0], self._boot_log_bstar.size)
            lb = self._boot_log_bstar[:n]
            le = self.boot_lr_[:n] @ np.array([1.0, 0.0, math.log(d_max)]) + \
                self.boot_lr_[:n, 1] * lb
            self.tau_boot_ = np.exp(lb - le) / (lam0 * d_max)
            lo, hi = percentile_interval(self.tau_boot_, self.level)
            self.ci_["tau"] = (float(lo), float(hi))
