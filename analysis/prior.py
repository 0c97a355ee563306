"""The published LR laws as a prior, and the card's LR weighed between it and the data.

A card moves the proxy's measured optimum to the target through the sweep's own laws. Far
past what the sweep measured, those laws are guesses with wide intervals, while the
published laws were fitted on thousands of real runs at the target's scale. The two are
combined where the card extrapolates, each weighted by how sure it is:

- **the prior** (:func:`published_lr_prior`): DeepSeek LLM's η(C) and Step Law's η(N, D)
  at the target, in log space their mean, with a spread that adds (1) each law's own
  near-optimal band, (2) half their disagreement, and (3) a term that grows with how far
  the target lies outside the range each law was fitted on;
- **the data**: the card's LR and interval from the proxy (:func:`weigh`), read as a normal
  in log space (interval = point ± q·sd);
- **the result**: the precision-weighted mean in log space (the normal–normal posterior),
  ``ln η = (ln η_d/sd_d² + ln η_p/sd_p²) / (1/sd_d² + 1/sd_p²)``, with
  ``sd² = 1 / (1/sd_d² + 1/sd_p²)``. Narrow data (a short extrapolation) leave the LR
  where they put it; a 1000× data interval hands it to the published laws.

Both laws were fitted on standard-parametrization models; their one LR is compared with
what μP gives the hidden matrices, so :func:`weigh` takes the ratio of the hidden
matrices' Adam LR to the card's base LR.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

from .baselines import deepseek_llm, step_law

__all__ = ["LAW_SD_LOG", "OUT_OF_RANGE_SD_PER_E_FOLD", "PUBLISHED_RANGES", "log_sd", "published_lr_prior",
           "weigh", "with_prior"]

#: One law's own spread (sd of ln η) where it was fitted: both papers report a broad,
#: flat optimum (Step Law: the landscape is convex "with a broad optimum", its predictions
#: within 0.09% of the best loss; DeepSeek LLM fits the band of near-optimal runs, not one
#: point), about a factor 2 either way at 90%: sd = ln 2 / 1.645.
LAW_SD_LOG = math.log(2.0) / 1.645

#: How fast the prior's spread grows outside a law's fitted range: sd of ln η per e-fold
#: of extrapolation. The published exponents disagree by about this much (DeepSeek's
#: η ∝ C^-0.125 vs Step Law's N^-0.713·D^0.307, i.e. C^-0.2 along N ∝ D), so a law carried
#: e-folds past its data carries that exponent doubt times the distance.
OUT_OF_RANGE_SD_PER_E_FOLD = 0.1

#: The ranges the laws were fitted on (approximate, from the papers' experiment tables):
#: DeepSeek LLM's hyperparameter runs spanned compute budgets of about 1e17–2e19 FLOPs
#: (Bi et al. 2024, §3.1); Step Law's grids models of about 60M–1B non-embedding
#: parameters on about 2B–100B tokens (Li et al. 2025, §3).
PUBLISHED_RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "deepseek": {"compute": (1e17, 2e19)},
    "step_law": {"n_params": (6e7, 1e9), "tokens": (2e9, 1e11)},
}


def log_sd(lo: float, hi: float, level: float) -> float:
    """The sd in log space of a normal whose ``level`` interval is [lo, hi]:
    (ln hi − ln lo) / (2·q), q the normal quantile of (1 + level) / 2."""
    return (math.log(hi) - math.log(lo)) / (2.0 * NormalDist().inv_cdf(0.5 + level / 2.0))


def with_prior(factor: float, prior_sd: float | None, level: float) -> float:
    """A data interval's factor (hi/lo at ``level``) after :func:`weigh` with a log-normal
    prior of sd ``prior_sd``: exp(2·q·sd), 1/sd² = 1/sd_data² + 1/prior_sd²; the factor
    itself without a prior. Never wider than the factor: a prior only adds information."""
    if not prior_sd or factor <= 1.0:
        return factor
    q = NormalDist().inv_cdf(0.5 + level / 2.0)
    sd = 1.0 / math.sqrt(1.0 / log_sd(1.0, factor, level) ** 2 + 1.0 / float(prior_sd) ** 2)
    return math.exp(2.0 * q * sd)


def _e_folds_outside(value: float, lo: float, hi: float) -> float:
    return max(0.0, math.log(lo / value), math.log(value / hi))


def published_lr_prior(n_params: float | None, tokens: float) -> dict[str, Any] | None:
    """The published laws' LR at the target (``n_params`` non-embedding, ``tokens``) as a
    log-normal prior ``{"value", "sd_log", "lo", "hi" (90%), "laws": {name: {"lr",
    "e_folds_outside"}}, "source"}``; None without ``n_params``.

    ``value`` = exp(mean of the laws' ln η); ``sd_log``² = :data:`LAW_SD_LOG`² + (half the
    laws' spread in ln η)² + (:data:`OUT_OF_RANGE_SD_PER_E_FOLD` × the largest distance, in
    e-folds, of the target outside a law's fitted range, :data:`PUBLISHED_RANGES`)².
    DeepSeek's compute is C = 6·N·D (as :func:`analysis.baselines.scaling_baselines`)."""
    if n_params is None:
        return None
    n, d = float(n_params), float(tokens)
    if not (math.isfinite(n) and n > 0 and math.isfinite(d) and d > 0):
        raise ValueError(f"published_lr_prior needs positive finite n_params and tokens, got {n_params!r}, "
                         f"{tokens!r}")
    c = 6.0 * n * d
    ds, sl = deepseek_llm(c)["lr"], step_law(n, d)["lr"]
    r = PUBLISHED_RANGES
    laws = {"deepseek": {"lr": ds, "e_folds_outside": _e_folds_outside(c, *r["deepseek"]["compute"])},
            "step_law": {"lr": sl, "e_folds_outside": max(_e_folds_outside(n, *r["step_law"]["n_params"]),
                                                          _e_folds_outside(d, *r["step_law"]["tokens"]))}}
    logs = [math.log(v["lr"]) for v in laws.values()]
    mean = sum(logs) / len(logs)
    half_spread = (max(logs) - min(logs)) / 2.0
    out = max(v["e_folds_outside"] for v in laws.values())
    sd = math.sqrt(LAW_SD_LOG**2 + half_spread**2 + (OUT_OF_RANGE_SD_PER_E_FOLD * out) ** 2)
    z = NormalDist().inv_cdf(0.95)
    return {"value": math.exp(mean), "sd_log": sd,
            "lo": math.exp(mean - z * sd), "hi": math.exp(mean + z * sd),
            "laws": laws, "e_folds_outside": out,
            "source": "DeepSeek LLM eta(C) (Bi et al. 2024, eq. 1) and Step Law eta(N, D) (Li et al. 2025): "
                      "mean in log space; sd from each law's band, their disagreement and the distance "
                      "outside their fitted ranges"}


def weigh(value: float, lo: float | None, hi: float | None, level: float, prior: dict[str, Any],
          hidden_mult: float) -> dict[str, Any]:
    """The card's base LR weighed between its data (``value`` with its ``level`` interval
    [lo, hi], base-LR units) and ``prior`` (:func:`published_lr_prior`, in hidden-matrix
    LR units; ``hidden_mult`` = hidden LR ÷ base LR).

    Returns ``{"value", "lo", "hi", "weight_prior", "data": {...}, "prior": {...}}`` in
    base-LR units. The data's sd is (ln hi − ln lo) / (2·q), q the normal quantile of
    ``level``. An open side (None: the optimum was a bound at the grid's edge) makes the
    data a bound, not a measurement: the data's value and interval are kept (weight 0) and
    the prior is only shown beside them."""
    if not (math.isfinite(hidden_mult) and hidden_mult > 0):
        raise ValueError(f"hidden_mult must be a positive finite number, got {hidden_mult!r}")
    q = NormalDist().inv_cdf(0.5 + level / 2.0)
    p_mu = math.log(prior["value"] / hidden_mult)
    p_sd = float(prior["sd_log"])
    data = {"value": value, "lo": lo, "hi": hi}
    prior_base = {"value": math.exp(p_mu), "lo": math.exp(p_mu - q * p_sd), "hi": math.exp(p_mu + q * p_sd),
                  "sd_log": p_sd, "hidden_value": prior["value"], "laws": prior["laws"],
                  "e_folds_outside": prior["e_folds_outside"], "source": prior["source"]}
    if lo is None or hi is None:
        # the data are a bound, not a measurement: the card keeps their value and open side
        # (the open side says "not measured"; the objections name it) and shows the prior
        return {"value": value, "lo": lo, "hi": hi, "weight_prior": 0.0, "data": data, "prior": prior_base}
    d_mu = math.log(value)
    d_sd = max(log_sd(lo, hi, level), 1e-12)
    prec_d, prec_p = 1.0 / d_sd**2, 1.0 / p_sd**2
    w = prec_p / (prec_d + prec_p)
    mu = (1.0 - w) * d_mu + w * p_mu
    sd = math.sqrt(1.0 / (prec_d + prec_p))
    return {"value": math.exp(mu), "lo": math.exp(mu - q * sd), "hi": math.exp(mu + q * sd),
            "weight_prior": w, "data": data, "prior": prior_base}
