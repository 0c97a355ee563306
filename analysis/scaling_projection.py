"""The one projection of a scaling fit to a target budget: every rule the card and the
analysis use to move a proxy's optimum to a big run, in one place.

:class:`ScalingPredictions` is the half of :class:`~analysis.ScalingLawFit` that needs
only the fitted laws (so it works the same on a fit just made and on one read back from
FIT.json by :meth:`~analysis.ScalingLawFit.from_dict`): the laws ``eta*(B, D)`` and
``B*(D)`` with their bands, the LR ratio between two points, the warmup rule, tau, the
extrapolation factor, the flags that say where a fitted optimum is only a bound, and
:meth:`~ScalingPredictions.project`. ``mutransfer``'s run plan (the card's
``projected`` section) calls the same methods; it only adds the proxy anchor and the
user's given values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from ._fitted import check_is_fitted
from ._io import finite_or_none as _num
from ._stats import SeedSpread, check_level, seed_spread
from .baselines import scaling_baselines
from .lr_surge import surge_grad, surge_log_lr
from .projection import Estimate
from .scaling_doc import edge_flags
from .schedule import ScheduleRules, warmup_from_section
from .tau import PUBLISHED_ETA_LAMBDA, PUBLISHED_ETA_LAMBDA_SOURCE, _arr, tau_from, weight_decay_for

__all__ = ["ScalingPredictions", "ScalingProjection", "extrapolation_factor"]


def extrapolation_factor(value: float, measured: tuple[float, float] | list[float]) -> float:
    """How far ``value`` lies outside the measured ``[lo, hi]``: ``max(1, value / hi,
    lo / value)`` (1 inside the range)."""
    return max(1.0, value / measured[1], measured[0] / value)


def _usable_cov(cov: np.ndarray) -> bool:
    """A bootstrap covariance worth using: finite with some positive variance."""
    return bool(cov.size and np.all(np.isfinite(cov)) and np.any(np.diag(cov) > 0))


@dataclass
class ScalingProjection:
    """Projected big-run settings; :meth:`to_dict` is the card's ``projected`` section."""

    lr: Estimate
    batch_tokens: Estimate
    batch_sequences: int
    steps: int
    weight_decay: Estimate | None
    tau: Estimate | None
    warmup_tokens: Estimate
    decay_fraction: Estimate
    extrapolation: dict[str, float]
    extrapolation_limit: float
    extrapolated: bool
    baselines: dict[str, dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    lr_loso: SeedSpread | None = None
    """the projected LR redone with each leave-one-seed-out refit's law (None: < 2 seeds)."""

    def to_dict(self) -> dict[str, Any]:
        def est(e: Estimate | None) -> dict[str, Any] | None:
            return None if e is None else e.to_dict()

        return {
            "lr": est(self.lr), "lr_loso": None if self.lr_loso is None else self.lr_loso.to_dict(),
            "batch_tokens": est(self.batch_tokens),
            "batch_sequences": int(self.batch_sequences), "steps": int(self.steps),
            "weight_decay": est(self.weight_decay), "tau": est(self.tau),
            "warmup_tokens": est(self.warmup_tokens),
            "decay_fraction": est(self.decay_fraction),
            "extrapolation": {k: float(v) for k, v in self.extrapolation.items()},
            "extrapolation_limit": float(self.extrapolation_limit),
            "extrapolated": bool(self.extrapolated),
            "baselines": {k: {kk: (_num(vv) if kk != "source" else vv) for kk, vv in b.items()}
                          for k, b in self.baselines.items()},
            "warnings": list(self.warnings),
        }

    def report(self) -> str:
        lines = ["ScalingProjection"]
        for name in ("lr", "batch_tokens", "weight_decay", "tau", "warmup_tokens"):
            e = getattr(self, name)
            if e is not None:
                lines.append(f"  {name:>13} = {e.value:.4g}  [{e.lo:.4g}, {e.hi:.4g}]  ({e.source})")
        if self.lr_loso is not None and self.lr_loso.ratio is not None:
            lines.append(f"  lr leave-one-seed-out: ×{self.lr_loso.ratio:.3g} over "
                         f"{len(self.lr_loso.seeds)} refits")
        lines.append(f"  batch = {self.batch_sequences} sequences, {self.steps} steps, "
                     f"decay fraction {self.decay_fraction.value:g}")
        lines.append("  extrapolation: " + ", ".join(f"{k} {v:.3g}×"
                                                      for k, v in self.extrapolation.items()))
        for k, b in self.baselines.items():
            lr = "n/a" if b.get("lr") is None else f"{b['lr']:.4g}"
            bt = "n/a" if b.get("batch_tokens") is None else f"{b['batch_tokens']:.4g}"
            lines.append(f"  baseline {k}: lr {lr}, batch_tokens {bt}")
        lines += [f"  WARNING: {w}" for w in self.warnings]
        return "\n".join(lines)



class ScalingPredictions:
    """What a scaling fit predicts, from its fitted laws alone (see the module docstring).

    Mixed into :class:`~analysis.ScalingLawFit`; reads its ``lr_coef_log_``,
    ``batch_coef_log_``, ``cov_lr_``, ``cov_batch_``, ``params_``, ``ci_``, ``level``,
    ``measured_``, ``rules`` and (after :meth:`from_dict`) ``warmup_``, ``flags_``.
    """

    level: float
    rules: ScheduleRules
    params_: dict[str, float | None]
    ci_: dict[str, tuple[float, float]]
    measured_: dict[str, Any]

    # ---------------------------------------------------------------------- laws
    def predict_lr(self, batch_tokens: Any, tokens: Any) -> np.ndarray:
        """The chosen LR law at ``(B, D)`` (arrays broadcast): ``eta*(B, D) = c_eta · B^a · D^b``,
        or the surge form (:attr:`lr_form`, :mod:`analysis.lr_surge`)."""
        check_is_fitted(self, "params_")
        b = np.atleast_1d(_arr(batch_tokens, "batch_tokens"))
        d = np.atleast_1d(_arr(tokens, "tokens"))
        b, d = np.broadcast_arrays(b, d)
        return np.exp(self._lr_log_and_grad(np.log(b), np.log(d))[0]).reshape(b.shape)

    @property
    def lr_form(self) -> str:
        """The LR law's form in batch: ``"power"`` (c·B^a·D^b, held past the saturation
        batch) or ``"surge"`` (rises, peaks at B_peak(D), falls: :mod:`analysis.lr_surge`),
        chosen per fit by the data; a fit that recorded none (an older FIT.json) is ``"power"``."""
        return "surge" if getattr(self, "lr_form_", "power") == "surge" and self._surge() else "power"

    def _surge(self) -> dict[str, Any] | None:
        return getattr(self, "lr_surge_", None)

    def _lr_log_and_grad(self, log_b: np.ndarray, log_d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ln eta*, ∂ ln eta*/∂coefficients)`` of the chosen form at each point (flattened)."""
        log_b, log_d = (np.ravel(v).astype(float) for v in np.broadcast_arrays(log_b, log_d))
        if self.lr_form == "surge":
            theta = np.asarray(self._surge()["coef_log"], dtype=float)  # type: ignore[index]
            return surge_log_lr(theta, log_b, log_d), surge_grad(theta, log_b, log_d)
        X = np.column_stack([np.ones(log_b.size), log_b, log_d])
        return X @ self.lr_coef_log_, X

    def surge_at(self, tokens: float, level: float | None = None) -> dict[str, tuple[float, float, float]]:
        """The surge form's ``eta_max(D)`` and ``B_peak(D)`` at one budget, each ``(value,
        lo, hi)`` from the coefficients' bootstrap and misfit covariance (the law's
        uncertainty, not a new cell's scatter). ValueError when the fit has no surge form."""
        check_is_fitted(self, "params_")
        s = self._surge()
        if s is None:
            raise ValueError(f"{self.source} has no surge form of the LR law (too few optima).")
        lv = self.level if level is None else check_level(level, "level")
        theta = np.asarray(s["coef_log"], dtype=float)
        cov = np.asarray(s["cov_log"], dtype=float) + np.asarray(s["misfit"]["cov_log"], dtype=float)
        q = self._quantile(lv, int(s["misfit"]["dof"]), float(s["misfit"]["sd_log"]))
        ld = math.log(float(_arr(tokens, "tokens")))
        out = {}
        for name, g in (("lr_max", np.array([1.0, ld, 0.0, 0.0])), ("batch_peak", np.array([0.0, 0.0, 1.0, ld]))):
            m, se = float(g @ theta), math.sqrt(max(float(g @ cov @ g), 0.0))
            out[name] = (math.exp(m), math.exp(m - q * se), math.exp(m + q * se))
        return out

    def predict_batch(self, tokens: Any) -> np.ndarray:
        """``B*(D) = c_B · D^g`` in tokens."""
        check_is_fitted(self, "params_")
        d = np.atleast_1d(_arr(tokens, "tokens"))
        c = self.batch_coef_log_
        return np.exp(c[0] + c[1] * np.log(d))

    @staticmethod
    def _band(X: np.ndarray, coef: np.ndarray, cov: np.ndarray,
              level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Point and normal-theory band in log space from the bootstrap covariance."""
        mean = X @ coef
        se = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", X, cov, X), 0.0))
        z = NormalDist().inv_cdf(0.5 + level / 2.0)
        return np.exp(mean), np.exp(mean - z * se), np.exp(mean + z * se)

    def _misfit(self) -> tuple[float, int, np.ndarray]:
        """``(s, dof, s²·(XᵀX)⁻¹)`` of the chosen LR law (:func:`analysis.scaling_fit.lr_misfit`,
        :func:`analysis.lr_surge.surge_misfit`); ``(0, 0, zeros)`` for a fit that recorded
        none (an older FIT.json)."""
        if self.lr_form == "surge":
            m = self._surge()["misfit"]  # type: ignore[index]
            return float(m["sd_log"]), int(m["dof"]), np.asarray(m["cov_log"], dtype=float)
        m = getattr(self, "lr_misfit_", None) or {}
        cov = np.asarray(m.get("cov_log", np.zeros((3, 3))), dtype=float)
        return float(m.get("sd_log", 0.0)), int(m.get("dof", 0)), cov

    def _lr_boot_cov(self) -> np.ndarray:
        if self.lr_form == "surge":
            return np.asarray(self._surge()["cov_log"], dtype=float)  # type: ignore[index]
        return self.cov_lr_

    @staticmethod
    def _quantile(level: float, dof: int, s: float) -> float:
        if dof > 0 and s > 0:
            from scipy.stats import t as student_t

            return float(student_t.ppf(0.5 + level / 2.0, dof))
        return NormalDist().inv_cdf(0.5 + level / 2.0)

    def _lr_band(self, mean: np.ndarray, G: np.ndarray, level: float, point_share: np.ndarray | float = 1.0,
                 boot_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The LR law's prediction band at log-LR values ``mean`` with gradient rows ``G``
        (∂ ln eta*/∂coefficients; for the power law the design rows ``x = (1, ln B, ln D)``):
        ``exp(mean ± q·sqrt(g·(Σ_boot + Σ_misfit)·g + share·s²))`` with ``q`` Student's t at the
        misfit's degrees of freedom (the normal quantile when the fit recorded none), so
        the band holds a new cell's optimum, not only the law's coefficients
        (:func:`analysis.scaling_fit.lr_misfit`); for the surge form ``g`` linearises it (the
        delta method). ``point_share`` (0–1 per row) is how much of one cell's own misfit s²
        the row carries; ``boot_scale`` scales the bootstrap covariance (n/(n+1): the band
        one more seed of the sweep would give, the misfit kept)."""
        s, dof, cov_m = self._misfit()
        var = np.einsum("ij,jk,ik->i", G, boot_scale * self._lr_boot_cov() + cov_m, G) \
            + np.asarray(point_share) * s * s
        se = np.sqrt(np.maximum(var, 0.0))
        q = self._quantile(level, dof, s)
        return np.exp(mean), np.exp(mean - q * se), np.exp(mean + q * se)

    def lr_interval(self, batch_tokens: Any, tokens: Any,
                    level: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(point, lo, hi)`` of the LR law: the band in which a cell's measured optimum
        at ``(B, D)`` is expected (:meth:`_lr_band`): the bootstrap covariance of the
        log-space coefficients plus the law's misfit, so it is the same after
        :meth:`from_dict`.
        """
        check_is_fitted(self, "params_")
        lv = self.level if level is None else check_level(level, "level")
        b = np.atleast_1d(_arr(batch_tokens, "batch_tokens"))
        d = np.atleast_1d(_arr(tokens, "tokens"))
        b, d = np.broadcast_arrays(b, d)
        return self._lr_band(*self._lr_log_and_grad(np.log(b), np.log(d)), lv)

    def batch_interval(self, tokens: Any,
                       level: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(point, lo, hi)`` of ``B*(D)`` (band of the law, as :meth:`lr_interval`)."""
        check_is_fitted(self, "params_")
        lv = self.level if level is None else check_level(level, "level")
        d = np.atleast_1d(_arr(tokens, "tokens")).ravel()
        X = np.column_stack([np.ones(d.size), np.log(d)])
        return self._band(X, self.batch_coef_log_, self.cov_batch_, lv)

    def batch_anchor(self) -> dict[str, float] | None:
        """The largest budget whose best batch was bracketed (not at the grid's edge):
        ``{"tokens", "batch_tokens", "lo", "hi"}`` from the fitted ``budgets_`` or FIT.json's
        ``budgets``; None when every budget's best batch is a bound (or none is recorded)."""
        rows = getattr(self, "budget_optima_", None)
        if rows is None and getattr(self, "budgets_", None) is not None:
            rows = self.budgets_.to_dict("records")  # type: ignore[attr-defined]
        ok = []
        for r in rows or []:
            t, b = r.get("tokens"), r.get("batch_opt")
            if r.get("edge") or not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0
                                        for v in (t, b)):
                continue
            lo, hi = r.get("lo"), r.get("hi")
            fine = [isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (lo, hi)]
            ok.append({"tokens": float(t), "batch_tokens": float(b),
                       "lo": float(lo) if fine[0] else float(b), "hi": float(hi) if fine[1] else float(b)})
        return max(ok, key=lambda r: r["tokens"]) if ok else None

    def batch_at(self, tokens: float) -> tuple[float, float, float]:
        """``B*(D)`` at one budget with its interval: the band of :meth:`batch_interval`
        when the fit has a bootstrap covariance, else the exponent's interval pivoted at
        the geometric centre of the measured budgets (where the fitted line is pinned
        best, so coefficient and exponent are nearly uncorrelated there)."""
        check_is_fitted(self, "params_")
        if _usable_cov(self.cov_batch_):
            return tuple(float(v[0]) for v in self.batch_interval(tokens))  # type: ignore[return-value]
        g = self.batch_exponent
        value = self.batch_coef * tokens**g
        lo_d, hi_d = self.measured_tokens
        centre = math.sqrt(lo_d * hi_d)
        at_centre = self.batch_coef * centre**g
        ends = [at_centre * (tokens / centre) ** x for x in self.ci_.get("batch_exp_tokens", (g, g))]
        return value, min(ends), max(ends)

    def lr_ratio(self, batch: tuple[float, float], tokens: tuple[float, float], *, boot_scale: float = 1.0
                 ) -> tuple[float, float, float]:
        """``eta*(B1, D1) / eta*(B0, D0)`` of the chosen form (``(B1/B0)^a (D1/D0)^b`` for the
        power law) and its (lo, hi): the band of the law with the gradient difference
        ``g1 − g0`` (for the power law ``x = (0, ln B1/B0, ln D1/D0)``, :meth:`_lr_band`) when
        the fit has a bootstrap covariance or is the surge form, else over the corners of
        the exponent intervals (the ratio is monotone in each exponent). ``batch`` and
        ``tokens`` are (from, to).

        The far end's own misfit s² enters in proportion to the distance moved, in full
        from one octave on (min(1, δ²), δ the move in octaves of B and D together): a
        point next to the anchor shares its deviation from the law, a distant one does not.
        ``boot_scale`` as in :meth:`_lr_band` (the ratio with one more seed)."""
        check_is_fitted(self, "params_")
        rb, rd = batch[1] / batch[0], tokens[1] / tokens[0]
        a, b = self.lr_coef_log_[1], self.lr_coef_log_[2]
        if self.lr_form == "surge" or _usable_cov(self.cov_lr_):
            m, G = self._lr_log_and_grad(np.log([batch[0], batch[1]]), np.log([tokens[0], tokens[1]]))
            octaves2 = (math.log2(rb) ** 2 + math.log2(rd) ** 2)
            return tuple(float(v[0]) for v in self._lr_band(
                np.array([m[1] - m[0]]), G[1:2] - G[0:1], self.level, min(1.0, octaves2), boot_scale)
                         )  # type: ignore[return-value]
        ca = self.ci_.get("lr_exp_batch", (a, a))
        cb = self.ci_.get("lr_exp_tokens", (b, b))
        corners = [rb**x * rd**y for x in ca for y in cb]
        return float(rb**a * rd**b), min(corners), max(corners)

    def critical_batch_at(self, tokens: float) -> tuple[float, float] | None:
        """``(B_simple(D), extrapolation factor)`` in tokens at budget ``tokens`` from the fit's
        measured-GNS law (:func:`~analysis.critical_batch.noise_scale_law`); None when the
        sweep measured no GNS."""
        n = getattr(self, "noise_", None)
        if not n:
            return None
        value = float(n["coef"]) * float(tokens) ** float(n["exponent"])
        return value, extrapolation_factor(tokens, n["measured_tokens"])

    def lr_batch(self, batch_tokens: float, tokens: float | None = None, limit: float = 100.0) -> float:
        """The batch at which the LR law is evaluated for a run at ``batch_tokens`` (and
        budget ``tokens``): the batch itself up to the saturation batch, that batch above.

        eta*(B) is not a power law without end: for SGD it saturates as
        eta_max / (1 + B_noise / B) (McCandlish et al. 2018, eq. 2.6), and for Adam it
        peaks near the noise scale and then falls (Li et al. 2024, "Surge phenomenon in
        optimal learning rate and batch size scaling"). The power law fitted on the
        measured batches is therefore followed up to the larger of the largest measured
        batch and the sweep's critical batch at that budget (B_simple(D),
        :meth:`critical_batch_at`, when the sweep measured GNS and ``tokens`` lies within
        ``limit``x its measured budgets: further out its power law is a guess), and held
        flat beyond (on
        the demo's card, B^0.56 over 1,256x in batch gave a hidden-matrix LR 3-6x the
        published recipes at its size). Below the measured batches the small-batch regime,
        where the LR does follow a power of B (Malladi et al. 2022), is extrapolated as fitted.
        When the fit chose the surge form (:attr:`lr_form`) nothing is held: the batch is
        returned as given.
        """
        if self.lr_form == "surge":  # the form itself says what happens past the peak
            return float(batch_tokens)
        return float(min(batch_tokens, self.lr_saturation_batch(tokens, limit)))

    def lr_saturation_batch(self, tokens: float | None = None, limit: float = 100.0) -> float:
        """The batch past which :meth:`lr_batch` holds the LR (see there)."""
        top = float(self.measured_batch_tokens[1])
        crit = self.critical_batch_at(tokens) if tokens is not None else None
        return max(top, crit[0]) if crit is not None and crit[1] <= limit else top

    def warmup_tokens(self, tokens: float, batch_tokens: float, n_params: float | None) -> float | None:
        """The fit's warmup rule (:func:`~analysis.schedule.warmup_from_section` on its
        ``warmup`` section; a fit made here has :class:`ScheduleRules`' fields there). None
        when a FIT.json read back has no warmup rule."""
        section = getattr(self, "warmup_", None)
        if section is None:
            section = {k: v for k, v in self.rules.to_dict().items() if k != "decay_fraction"}
        return warmup_from_section(section, tokens, batch_tokens, n_params, self.source)

    def batch_law_doubts(self, tokens: float, limit: float) -> list[str]:
        """Why ``B*(D)`` of this fit should not set the target's batch (empty: it may).

        A best batch at the edge of the grid at half the budgets or more is a bound, not an
        optimum; beyond ``limit``× the measured budgets the law is a guess. Inside the limit
        an uncertain exponent is no reason to borrow someone else's law: it widens the
        batch's interval (:meth:`batch_law_cautions` says so), the law still carries it."""
        out = []
        edge, n = self.flags["batch_edges"]
        if n and 2 * edge >= n:
            out.append(f"the best batch sat at the edge of the batch grid at {edge} of {n} budgets")
        f = extrapolation_factor(tokens, self.measured_tokens)
        if f > limit:
            out.append(f"the target's {tokens:.3g} tokens lie {f:.3g}x beyond the measured budgets "
                       f"(limit {limit:g}x)")
        return out

    def batch_law_cautions(self) -> list[str]:
        """What makes ``B*(D)`` uncertain without ruling it out: an exponent whose interval
        reaches 0 (growth with D not resolved; the target's batch interval is wide)."""
        lo = self.ci_.get("batch_exp_tokens", (self.batch_exponent, self.batch_exponent))[0]
        if not lo > 0:
            return [f"the B*(D) exponent's interval reaches {lo:.3g} (no growth with D is resolved): "
                    "the batch's interval is wide; more budgets, or seeds, narrow it"]
        return []

    # ------------------------------------------------------ named views of the fit
    @property
    def flags(self) -> dict[str, Any]:
        """Where the fit's optima are bounds: ``batch_bounds``, ``lr_bounds`` (each entry
        names the FIT.json field that says so and its budget) and ``batch_edges``
        ``(budgets whose best batch sat at the grid's edge, budgets)``."""
        if getattr(self, "flags_", None) is None:  # read from the document, as FIT.json's reader does
            self.flags_ = edge_flags(self.to_dict())  # type: ignore[attr-defined]
        return self.flags_

    @property
    def batch_bounds(self) -> tuple[str, ...]:
        return self.flags["batch_bounds"]

    @property
    def lr_bounds(self) -> tuple[str, ...]:
        return self.flags["lr_bounds"]

    @property
    def source(self) -> str:
        """Where the fit came from, for messages (``scaling fit 'FIT.json'``)."""
        return getattr(self, "source_", "the scaling fit")

    @property
    def measured_tokens(self) -> tuple[float, float]:
        return tuple(self.measured_["tokens"])  # type: ignore[return-value]

    @property
    def measured_batch_tokens(self) -> tuple[float, float]:
        return tuple(self.measured_["batch_tokens"])  # type: ignore[return-value]

    @property
    def batch_coef(self) -> float:
        return float(self.params_["batch_coef"])  # type: ignore[arg-type]

    @property
    def batch_exponent(self) -> float:
        return float(self.params_["batch_exp_tokens"])  # type: ignore[arg-type]

    @property
    def tau(self) -> float | None:
        """The AdamW timescale at the proxy optimum (None: not measured)."""
        return self.params_.get("tau")

    @property
    def tau_ci(self) -> tuple[float, float] | None:
        """tau's interval when both sides are finite (an open side: None)."""
        ci = self.ci_.get("tau")
        return (float(ci[0]), float(ci[1])) if ci and all(math.isfinite(v) for v in ci) else None

    @property
    def tau_source(self) -> str | None:
        """``measured`` (tau* over a weight-decay axis), ``default λ`` or None."""
        s = getattr(self, "tau_source_", None)
        return s if s in ("measured", "default λ") else None

    @property
    def decay_fraction(self) -> float | None:
        """The WSD decay fraction of the fit (None: a FIT.json read back has none)."""
        return getattr(self, "decay_fraction_", self.rules.decay_fraction)

    @property
    def decay_fraction_ci(self) -> tuple[float, float] | None:
        return getattr(self, "decay_fraction_ci_", None)

    @property
    def lr_loso(self) -> tuple[tuple[float, float], ...]:
        """(a, b) of ``eta*(B, D)`` refitted without each seed (empty with one seed)."""
        return tuple((float(f["lr_coef_log"][1]), float(f["lr_coef_log"][2]))
                     for f in getattr(self, "loso_fits_", []))

    def lr_ratio_loso(self, batch: tuple[float, float], tokens: tuple[float, float]) -> list[float]:
        """``eta*(B1, D1) / eta*(B0, D0)`` redone with each leave-one-seed-out refit's law in
        the chosen form (:attr:`lr_form`; for the power law ``(B1/B0)^a (D1/D0)^b`` with each
        refit's exponents). Empty with fewer than 2 seeds."""
        if self.lr_form == "surge":
            lb, ld = np.log([batch[0], batch[1]]), np.log([tokens[0], tokens[1]])
            out = []
            for f in getattr(self, "loso_fits_", []):
                if f.get("lr_surge_log") is not None:
                    m = surge_log_lr(np.asarray(f["lr_surge_log"], dtype=float), lb, ld)
                    out.append(float(np.exp(m[1] - m[0])))
            return out
        rb, rd = batch[1] / batch[0], tokens[1] / tokens[0]
        return [rb**a * rd**b for a, b in self.lr_loso]

    @property
    def n_seeds(self) -> int:
        """Seeds of the scaling sweep (0 when a FIT.json read back does not say)."""
        n = getattr(self, "n_seeds_", None)
        return int(n) if n is not None else len(getattr(self, "seeds_", ()))

    # ---------------------------------------------------------------- projection
    def project(
        self,
        tokens: float,
        n_params: float | None = None,
        seq_len: int | None = None,
        dp_size: int | None = None,
        limit: float = 100.0,
        *,
        tau_tpp_exponent: float | None = None,
        batch_sequences: int | None = None,
    ) -> ScalingProjection:
        """Settings for a run of ``tokens`` tokens, each with its interval and flags.

        * batch: ``B*(D)`` (:meth:`batch_at`), rounded to whole sequences of ``seq_len``
          (default: the sweep's) and, with ``dp_size``, to a multiple of ``dp_size``
          sequences; or ``batch_sequences`` when given (as the card's ``--batch-size``);
        * lr: ``eta*(B, D)`` at that batch (held past :meth:`lr_saturation_batch`, see
          :meth:`lr_batch`); steps ``= ceil(D / B)``;
        * weight decay: ``lambda = B/(eta·tau·D)`` with the proxy's tau held fixed
          (Wang & Aitchison 2024). With ``tau_tpp_exponent = m`` and ``n_params`` for
          both proxy (the sweep's ``n_params`` column) and target, tau follows Power
          Lines' ``tau_opt ∝ (D/N)^m`` instead (Bergsma et al. 2025: tau_opt is a power
          law in tokens per parameter);
        * warmup tokens (:meth:`warmup_tokens`) and WSD decay fraction from the fit's
          :class:`ScheduleRules`;
        * extrapolation per axis = target ÷ largest measured; a factor above ``limit``
          sets ``extrapolated`` and adds a warning;
        * baselines (:func:`~analysis.scaling_baselines`) anchored at ``reference_``;
        * ``lr_loso``: the LR redone with each leave-one-seed-out refit's law (its
          ``max / min`` is ``lr_loso.ratio`` in :meth:`ScalingProjection.to_dict`).
        """
        check_is_fitted(self, "params_")
        d = float(_arr(tokens, "tokens"))
        if not (math.isfinite(limit) and limit >= 1):
            raise ValueError(f"limit (the extrapolation limit) must be >= 1, got {limit!r}.")
        level = self.level
        warnings: list[str] = list(self.warnings_)
        seqs, batch = self._projected_batch(d, seq_len, dp_size, batch_sequences)
        b_tok = batch.value
        steps = int(math.ceil(d / b_tok - 1e-9))
        ext = {"tokens": float(d / self.measured_["tokens"][1]),
               "batch_tokens": float(b_tok / self.measured_["batch_tokens"][1])}
        e_lr = max(batch.extrapolation, extrapolation_factor(b_tok, self.measured_batch_tokens))
        b_law = self.lr_batch(b_tok, d, limit)  # the LR law is held past the saturation batch
        lp, llo, lhi = (float(v[0]) for v in self.lr_interval(b_law, d))
        lsrc = (self._surge_law() if self.lr_form == "surge" else
                f"eta*(B, D) = {self.params_['lr_coef']:.4g}·B^{self.params_['lr_exp_batch']:.4g}"
                f"·D^{self.params_['lr_exp_tokens']:.4g}"
                + (f", held at B = {b_law:.4g} (saturation batch)" if b_law < b_tok else ""))
        lr_e = Estimate(lp, llo, lhi, level, lsrc, e_lr)
        tau_e, wd_e = self._projected_decay(d, b_tok, lr_e, n_params, tau_tpp_exponent, warnings)
        w_tok = self.warmup_tokens(d, b_tok, n_params)
        if w_tok is None:
            w_tok = self.rules.warmup_tokens(d, b_tok, n_params)
        warm = Estimate(w_tok, w_tok, w_tok, level, self.rules.source(n_params), 1.0)
        df = self.decay_fraction if self.decay_fraction is not None else self.rules.decay_fraction
        dec = Estimate(df, df, df, level, "WSD cooldown fraction (Hägele et al. 2024: 20 % matches cosine)",
                       1.0)

        loso = self._loso_lr(b_law, d)
        ref = self.reference_
        if not ref:
            raise ValueError(f"{self.source} has no reference (the proxy optimum the baselines are "
                             "anchored at); refit with `mutransfer fit scaling`.")
        base = scaling_baselines(tokens=d, batch_tokens=b_tok, ref_lr=ref["lr"],
                                 ref_batch_tokens=ref["batch_tokens"], ref_tokens=ref["tokens"],
                                 n_params=n_params)
        extrapolated = False
        for axis, f in ext.items():
            if f > limit:
                extrapolated = True
                warnings.append(f"{axis} is {f:.3g}× the largest measured value (limit "
                                f"{limit:g}×); the projected values are extrapolations.")
        return ScalingProjection(
            lr=lr_e, batch_tokens=batch, batch_sequences=int(seqs), steps=steps,
            weight_decay=wd_e, tau=tau_e, warmup_tokens=warm, decay_fraction=dec,
            extrapolation=ext, extrapolation_limit=float(limit), extrapolated=extrapolated,
            baselines=base, warnings=warnings, lr_loso=loso)

    def _loso_lr(self, b: float, d: float) -> SeedSpread | None:
        """The LR at (b, d) redone with each leave-one-seed-out refit's law, in the chosen form
        (a refit with no surge coefficients recorded is left out of a surge fit's spread)."""
        if not self.loso_fits_:
            return None
        if self.lr_form == "surge":
            vals = {f["seed"]: float(np.exp(surge_log_lr(np.asarray(f["lr_surge_log"], dtype=float),
                                                          np.log([b]), np.log([d]))[0]))
                    for f in self.loso_fits_ if f.get("lr_surge_log") is not None}
            return seed_spread("lr", vals) if vals else None
        x = np.array([1.0, math.log(b), math.log(d)])
        return seed_spread("lr", {f["seed"]: float(np.exp(f["lr_coef_log"] @ x)) for f in self.loso_fits_})

    def _projected_batch(self, d: float, seq_len: int | None, dp_size: int | None,
                         batch_sequences: int | None) -> tuple[int, Estimate]:
        """(sequences, batch-tokens estimate) of :meth:`project`."""
        sl = seq_len if seq_len is not None else self.measured_.get("seq_len")
        if sl is None:
            raise ValueError("seq_len is needed to round the batch to whole sequences; the "
                             "sweep has no single seq_len, so pass seq_len=.")
        if int(sl) != sl or sl < 1:
            raise ValueError(f"seq_len must be a positive integer, got {sl!r}.")
        sl = int(sl)
        if dp_size is not None and (int(dp_size) != dp_size or dp_size < 1):
            raise ValueError(f"dp_size must be a positive integer, got {dp_size!r}.")
        e_b = extrapolation_factor(d, self.measured_tokens)
        if batch_sequences is not None:
            if int(batch_sequences) != batch_sequences or batch_sequences < 1:
                raise ValueError(f"batch_sequences must be a positive integer, got {batch_sequences!r}.")
            seqs, how = int(batch_sequences), "given"
            b_tok = float(seqs * sl)
            batch = Estimate(b_tok, b_tok, b_tok, self.level, f"given: {seqs} × {sl}", 1.0)
        else:
            bp, blo, bhi = self.batch_at(d)
            seqs = max(1, round(bp / sl))
            if dp_size:
                seqs = max(int(dp_size), int(round(seqs / dp_size)) * int(dp_size))
            how = (f"B*(D) = {self.params_['batch_coef']:.4g}·D^{self.params_['batch_exp_tokens']:.4g}"
                   f", rounded to {seqs} × {sl}" + (f" (multiple of dp_size {dp_size})" if dp_size else ""))
            b_tok = float(seqs * sl)
            batch = Estimate(b_tok, blo, bhi, self.level, how, e_b)
        if b_tok > d:
            raise ValueError(f"the token budget {d:g} is below one batch ({b_tok:g} tokens = "
                             f"{seqs} × {sl}); give a larger budget.")
        return seqs, batch

    def _projected_decay(self, d: float, b_tok: float, lr: Estimate, n_params: float | None,
                         tau_tpp_exponent: float | None, warnings: list[str]
                         ) -> tuple[Estimate | None, Estimate | None]:
        """(tau, weight decay) estimates of :meth:`project`."""
        level, e_lr = self.level, lr.extrapolation
        tau = self.params_.get("tau")
        if tau is None:
            if getattr(self, "weight_decay_", None) == 0:
                return None, Estimate(0.0, 0.0, 0.0, level, "the sweep used no weight decay", 1.0)
            warnings.append("no weight decay projected: the sweep has no single "
                            "weight_decay at its largest budget, so tau is unknown.")
            return None, None
        if self.tau_source == "default λ" and tau_tpp_exponent is None:
            # tau at the sweep's one lambda was never optimised: a published per-step eta·lambda
            lam = PUBLISHED_ETA_LAMBDA / lr.value
            nan = float("nan")
            warnings.append(f"weight decay not optimised: the sweep ran one weight decay, so its tau {tau:.4g} "
                            f"was not optimised; the projection takes the {PUBLISHED_ETA_LAMBDA_SOURCE}")
            return (Estimate(float(tau_from(b_tok, lr.value, lam, d)), nan, nan, level,
                             f"from the {PUBLISHED_ETA_LAMBDA_SOURCE}; the sweep's tau {tau:.4g} was at "
                             "one weight decay, not optimised", e_lr),
                    Estimate(float(lam), nan, nan, level, f"{PUBLISHED_ETA_LAMBDA_SOURCE} / eta: not "
                             "measured here, interval unknown", e_lr))
        t_lo, t_hi = self.ci_.get("tau", (tau, tau))
        how = "tau* measured at its optimum" if self.tau_source == "measured" else \
            "tau = B/(eta·lambda·D) at the proxy optimum"
        src = f"{how}, held fixed (Wang & Aitchison 2024)"
        n_p = self.measured_.get("n_params")
        if tau_tpp_exponent is not None:
            if n_params is None or n_p is None:
                raise ValueError("tau_tpp_exponent needs n_params for the target and a "
                                 "single n_params in the sweep.")
            f = ((d / float(n_params)) / (self.tau_at_["tokens"] / n_p)) ** tau_tpp_exponent
            tau, t_lo, t_hi = tau * f, t_lo * f, t_hi * f
            src = (f"tau ∝ (D/N)^{tau_tpp_exponent:g} from the proxy's tau (Bergsma et al. "
                   "2025, Power Lines)")
        tau_e = Estimate(tau, t_lo, t_hi, level, src, e_lr)
        wd = weight_decay_for(tau, b_tok, lr.value, d)
        # Outer bounds from the component intervals: conservative, never too narrow.
        wd_lo = b_tok / (lr.hi * t_hi * d)
        wd_hi = b_tok / (lr.lo * t_lo * d)
        wd_e = Estimate(float(wd), float(wd_lo), float(wd_hi), level,
                        "lambda = B/(eta·tau·D) (Wang & Aitchison 2024; Bergsma et al. 2025)", e_lr)
        return tau_e, wd_e
