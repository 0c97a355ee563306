"""The plan of the target's run: the card's ``projected`` section.

:func:`plan_run` moves the proxy's optimum to the target's batch and token budget with the
laws of ``mutransfer fit scaling``, and gives batch, steps, warmup, weight decay (through
the AdamW timescale tau) and the WSD decay fraction, each with its interval and
extrapolation factor. It holds no rule of its own: the laws, their intervals, the LR ratio,
the warmup rule, the edge flags and the extrapolation factor are those of the one
projection object, :class:`analysis.ScalingLawFit` (read from FIT.json by its own reader,
:meth:`~analysis.ScalingLawFit.from_dict`). What it adds: the proxy anchor (the base LR
is the proxy's μP optimum moved by the laws' ratio), the values the user gives, the
split of the batch over devices, and the published batch law as a fallback. The batch
part (the batch, the critical-batch cap, the split and beta2) is
:mod:`mutransfer.card.batch_plan`; this module holds the LR, weight decay and schedule
and puts the plan together.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.baselines import scaling_baselines
from analysis.prior import log_sd, published_lr_prior, weigh
from analysis.scaling_fit import ScalingLawFit
from analysis.scaling_projection import extrapolation_factor
from analysis.tau import PUBLISHED_ETA_LAMBDA, PUBLISHED_ETA_LAMBDA_SOURCE, TAU_RULE, weight_decay_for
from mutransfer._io import read_json
from mutransfer.card._estimate import _Bounds, _estimate
from mutransfer.card.batch_plan import (
    _plan_batch,
    _split_batch,
    beta2_for,
    cap_at_critical_batch,
    whole_sequences,
)
from mutransfer.card.request import ProxyPoint, RunChoices, check_int

__all__ = [
    "RunPlan",
    "lr_sensitivity",
    "plan_run",
    "read_scaling_fit",
]

#: The laws of ``mutransfer fit scaling`` as the run plan reads them: the one projection
#: object (kept under this name for the code that imports it from mutransfer.card.target).


def read_scaling_fit(path: str | Path) -> ScalingLawFit:
    """The fit in the FIT.json of ``mutransfer fit scaling``, through its own reader."""
    p = Path(path)
    doc = read_json(p, "scaling fit")
    fit = ScalingLawFit.from_dict(doc, f"scaling fit {p.name!r}")
    # what the fitted rows say the proxy was (architecture, tokenizer, vocab, context, dtype)
    fit.proxy_ = dict(doc["proxy"]) if isinstance(doc, dict) and isinstance(doc.get("proxy"), dict) else {}
    return fit


def lr_sensitivity(proxy: Mapping[str, Any] | None, laws: ScalingLawFit | None, *,
                   proxy_batch_tokens: float | None, proxy_tokens: float | None,
                   batch_tokens: float, tokens: float) -> dict[str, Any]:
    """Leave-one-seed-out spread of the card's base LR (``projected.lr.loso_ratio``).

    The base LR is the proxy optimum times the laws' ratio eta*(B_t, D_t) / eta*(B_p, D_p).
    Each part has its own refits without each seed: the proxy optimum's (``proxy``: the
    ``sensitivity`` of ``fit optimum``, ``ratio`` = max/min of the refit optima) and the
    ratio redone with each refit's law in the fit's form (``laws.lr_ratio_loso``). The two sweeps' seeds
    are different runs, so the card's ratio is the product of the two: the most that
    one seed of each could move the LR. ``loso_ratio`` is None when no part could be
    refitted; ``loso.complete`` is false when a part the LR depends on has fewer than 2
    seeds (e.g. a one-seed scaling sweep): the ratio is then a lower bound.
    """
    proxy = proxy or {}
    r = proxy.get("ratio")
    if r is not None and not (isinstance(r, (int, float)) and not isinstance(r, bool)
                              and math.isfinite(r) and r >= 1):
        raise ValueError(f"the proxy optimum's sensitivity.ratio must be a number >= 1 or null, got {r!r}")
    parts: dict[str, dict[str, Any]] = {
        "proxy": {"n_seeds": proxy.get("n_seeds"), "ratio": proxy.get("ratio")}}
    if laws is not None:
        ratio = None
        rs = laws.lr_ratio_loso((proxy_batch_tokens, batch_tokens), (proxy_tokens, tokens)) \
            if proxy_batch_tokens and proxy_tokens else []
        if len(rs) >= 2:
            ratio = max(rs) / min(rs)
        parts["law"] = {"n_seeds": laws.n_seeds, "ratio": ratio}
    known = [p["ratio"] for p in parts.values() if p["ratio"] is not None]
    total = math.prod(known) if known else None
    return {"loso_ratio": total, "loso_octaves": None if total is None else math.log2(total),
            "loso": {"method": "leave-one-seed-out: max/min of the LR refitted without each seed",
                     **parts, "complete": len(known) == len(parts)}}


@dataclass
class RunPlan:
    """Batch, steps, LR, weight decay, warmup and schedule of the target run."""

    lr: float
    batch_sequences: int
    micro_batch: int
    batch_tokens: int
    steps: int
    warmup_tokens: float
    warmup_steps: int
    decay_fraction: float
    weight_decay: float
    tau: float | None
    projected: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    beta2: float = 0.95
    """Adam's beta2 for the target (``projected.beta2`` says where it comes from)."""


def _check_plan_args(proxy: Any, run: Any, *, tokens: Any, seq_len: Any, n_params: Any) -> None:
    """:func:`plan_run`'s arguments, each by type and range before any arithmetic: a
    TypeError or ValueError naming the argument."""
    if not isinstance(proxy, ProxyPoint):
        raise TypeError(f"proxy must be a ProxyPoint, got {type(proxy).__name__}")
    if not isinstance(run, RunChoices):
        raise TypeError(f"run must be a RunChoices, got {type(run).__name__}")
    check_int("seq_len", seq_len, none=False)
    for name, v in (("tokens", tokens), ("n_params", n_params)):
        if v is None and name == "n_params":
            continue
        if not isinstance(v, numbers.Real) or isinstance(v, bool):
            raise TypeError(f"{name} must be a positive finite number, got {type(v).__name__} {v!r}")
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive finite number, got {v!r}")


def _check_plan_inputs(*, batch_rule: str, accept_edge: Sequence[str], laws: ScalingLawFit | None,
                       tokens: float, seq_len: int, batch_sequences: int | None, batch_tokens: float | None,
                       micro_batch: int | None) -> None:
    """The contradictions and bad values :func:`plan_run` refuses, before any work."""
    for what in accept_edge:
        if batch_rule != "fit":
            raise ValueError(f"--accept-edge {what} contradicts --batch-rule {batch_rule}: only --batch-rule "
                             "fit takes the fit's values as they are; drop one")
    if "batch" in accept_edge and (batch_sequences is not None or batch_tokens is not None):
        flag = "--batch-size" if batch_sequences is not None else "--batch-tokens"
        raise ValueError(f"--accept-edge batch contradicts {flag}: the batch is given, not taken from the "
                         "fit; drop one")
    if accept_edge and laws is None:
        raise ValueError(f"--accept-edge {accept_edge[0]} needs --scaling-fit: there is no fit whose edge "
                         "it would accept")
    if not (math.isfinite(tokens) and tokens > 0):
        raise ValueError(f"token budget must be a positive finite number, got {tokens!r}")
    given = ("--batch-size", batch_sequences) if batch_sequences is not None else (
        ("--batch-tokens", batch_tokens) if batch_tokens is not None else None)
    if given is not None and batch_rule != "auto":  # a fixed batch would silently drop the rule
        raise ValueError(f"--batch-rule {batch_rule} contradicts {given[0]} {given[1]:g}: the rule picks "
                         "the batch, the flag fixes it; give one")
    if batch_tokens is not None and batch_tokens < seq_len:
        raise ValueError(f"--batch-tokens {batch_tokens:g} is below one sequence of {seq_len} tokens")
    if micro_batch is not None and not (isinstance(micro_batch, int) and micro_batch >= 1):
        raise ValueError(f"--micro-batch must be a positive integer, got {micro_batch!r}")




def _plan_lr(laws: ScalingLawFit | None, *, proxy_lr: float, proxy_lr_interval: Sequence[float | None] | None,
             proxy_batch_tokens: float | None, proxy_tokens: float | None, b_tok: int, tokens: float,
             level: float, ext: Mapping[str, float], bound: _Bounds, warnings: list[str],
             ext_limit: float = 100.0) -> tuple[float, dict[str, Any]]:
    """The base LR: the proxy optimum moved by the laws' ratio eta*(B_t, D_t)/eta*(B_p, D_p)
    (:meth:`~analysis.ScalingLawFit.lr_ratio`), in the form the fit chose (``laws.lr_form``):
    the power law is held past the saturation batch (:meth:`~analysis.ScalingLawFit.lr_batch`),
    the surge form is evaluated at the target's batch itself (it says what happens past the
    peak). No interval given (--lr): the law's alone; an open side (optimum at the grid's
    edge) stays open (None)."""
    p_lo, p_hi = (list(proxy_lr_interval) + [None, None])[:2] if proxy_lr_interval else (
        proxy_lr, proxy_lr)
    if laws is not None:
        if proxy_batch_tokens is None or proxy_tokens is None:
            raise ValueError("--scaling-fit moves the proxy's LR to the target's batch and tokens, so "
                             "it needs the proxy's batch and token budget: give --proxy-batch-tokens "
                             "and --proxy-tokens (or --results with batch_tokens and tokens columns)")
        bound("lr", laws.lr_bounds, "fitted LR law eta*(B, D)")
        b_law = laws.lr_batch(b_tok, tokens, ext_limit)
        r, r_lo, r_hi = laws.lr_ratio((proxy_batch_tokens, b_law), (proxy_tokens, tokens))
        lr = proxy_lr * r
        held = ""
        if b_law < b_tok:
            held = (f"; held at the saturation batch {b_law:.4g} (the larger of the largest measured "
                    f"and the critical batch: the LR law is not extrapolated {b_tok / b_law:.3g}x past it)")
            unheld = proxy_lr * laws.lr_ratio((proxy_batch_tokens, b_tok), (proxy_tokens, tokens))[0]
            warnings.append(f"the target's batch ({b_tok} tokens) is {b_tok / b_law:.3g}x the batch past "
                            f"which the LR law is held ({b_law:.4g}: the largest measured, or the critical "
                            "batch if larger); the LR is that batch's, not the power law's "
                            f"({unheld:.4g}"
                            "), since the optimal LR saturates in batch")
        form = "" if laws.lr_form == "power" else " (surge form: rises to B_peak(D), falls past it)"
        lr_est = _estimate(lr, None if p_lo is None else p_lo * r_lo,
                           None if p_hi is None else p_hi * r_hi, level,
                           f"proxy optimum {proxy_lr:.4g} × eta*(B, D){form} ratio {r:.4g} from (B "
                           f"{proxy_batch_tokens:.4g}, D {proxy_tokens:.4g}) to (B {b_tok}, D "
                           f"{tokens:.4g}){held}", max(ext.values()))
    else:
        lr = proxy_lr
        lo_hi = (p_lo, p_hi) if proxy_lr_interval else (None, None)
        lr_est = _estimate(lr, *lo_hi, level, "proxy optimum (no scaling fit: not moved to the "
                           "target's batch and tokens)")
        if proxy_batch_tokens is not None and proxy_batch_tokens != b_tok:
            warnings.append(f"the batch changes from the proxy's {proxy_batch_tokens:.6g} to {b_tok} "
                            "tokens but there is no --scaling-fit, so the LR is not moved with it")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"the projected base LR is not a positive finite number ({lr!r})")
    return lr, lr_est


def _weigh_published(lr: float, lr_est: dict[str, Any], *, n_params: float, tokens: float, level: float,
                     hidden_lr_mult: float) -> tuple[float, dict[str, Any]]:
    """The LR moved by the laws, weighed against the published laws at the target
    (:func:`analysis.prior.weigh`): the card's ``projected.lr`` keeps ``data`` (the moved
    LR and its interval), ``prior`` (the published laws' LR in base-LR units, with each
    law's value at the hidden matrices and its distance outside its fitted range) and
    ``weight_prior`` beside the result."""
    prior = published_lr_prior(n_params, tokens)
    if prior is None:
        return lr, lr_est
    res = weigh(lr, lr_est["lo"], lr_est["hi"], level, prior, hidden_lr_mult)
    w = res["weight_prior"]
    est = {**lr_est, "value": res["value"], "lo": res["lo"], "hi": res["hi"],
           "data": res["data"], "prior": res["prior"], "weight_prior": w,
           "source": f"{lr_est['source']}; weighed with the published laws' prior "
                     f"{res['prior']['value']:.4g} (weight {w:.1%}: data sd {_sd(lr_est, level)}, prior "
                     f"sd_log {res['prior']['sd_log']:.3g})"}
    return float(res["value"]), est


def _sd(est: Mapping[str, Any], level: float) -> str:
    if est.get("lo") is None or est.get("hi") is None:
        return "open (a bound)"
    return f"{log_sd(est['lo'], est['hi'], level):.3g}"


def _plan_weight_decay(laws: ScalingLawFit | None, *, weight_decay: float | None, wd_mode: str,
                       proxy_tau: float | None, lr: float, b_tok: int, tokens: float, level: float,
                       ext: Mapping[str, float], lr_interval: tuple[float | None, float | None] = (None, None),
                       warnings: list[str] | None = None, proxy_weight_decay: float | None = None
                       ) -> tuple[float, float | None, dict[str, Any], Any]:
    """(weight decay, tau, their estimates): given; from tau* measured over a weight-decay
    axis, held fixed, lambda = B / (eta · tau · D) (:func:`analysis.tau.weight_decay_for`;
    ``independent`` decay is per step lambda, so its eta is 1), its interval from tau*'s and
    the LR's (lambda* moves as 1/eta*); from a tuned proxy's tau (``--proxy-config``); from a
    scaling sweep at one weight decay (its tau never optimised): the published per-step
    eta·lambda (:data:`analysis.tau.PUBLISHED_ETA_LAMBDA`), its source named, its interval
    unknown, and a warning in ``warnings``; with none of these the same published rule,
    warned about (never a silent 0), unless the tuned proxy's own weight decay
    (``proxy_weight_decay``) was 0: its LR was tuned without decay, so the target keeps 0.
    A given 0 stays 0, its source ``given``.

    Across run lengths the card holds tau as a fraction of the run (:data:`analysis.tau.TAU_RULE`,
    measured by ``benchmarks/wd_horizon.py``): at the same batch and LR a target trained on 4x
    the proxy's tokens gets a quarter of its lambda, not the same per-step eta·lambda."""
    warnings = [] if warnings is None else warnings
    eta = 1.0 if wd_mode == "independent" else lr
    formula = f"lambda = B / ({'' if wd_mode == 'independent' else 'eta · '}tau · D)"

    def lam_from_tau(t: float) -> float:
        return float(weight_decay_for(t, b_tok, eta, tokens))

    if weight_decay is not None:
        if not (math.isfinite(weight_decay) and weight_decay >= 0):
            raise ValueError(f"--weight-decay must be a finite number >= 0, got {weight_decay!r}")
        tau = (b_tok / (eta * weight_decay * tokens)) if weight_decay > 0 else None
        return (weight_decay, tau, _estimate(weight_decay, None, None, level, "given (--weight-decay)"),
                None if tau is None else _estimate(tau, None, None, level, "from the given weight decay"))
    if laws is not None and laws.tau is not None and laws.tau_source != "default λ":
        tau = laws.tau
        t_lo, t_hi = laws.tau_ci or (tau, tau)
        e_lo, e_hi = lr_interval if wd_mode != "independent" else (1.0, 1.0)
        # lambda* = B / (eta* tau* D): the LR's interval moves it as much as tau*'s
        lo = lam_from_tau(t_hi) * (eta / e_hi if e_hi else math.nan)
        hi = lam_from_tau(t_lo) * (eta / e_lo if e_lo else math.nan)
        wd_est = _estimate(lam_from_tau(tau), lo if math.isfinite(lo) else None,
                           hi if math.isfinite(hi) else None, level,
                           f"{formula}, tau {tau:.4g} (interval: tau's and the LR's); {TAU_RULE}",
                           max(ext.values()))
        what = ("tau* measured at its optimum over the weight decays" if laws.tau_source == "measured"
                else "AdamW timescale of the fit (its source not recorded)")
        return lam_from_tau(tau), tau, wd_est, _estimate(tau, t_lo, t_hi, level, f"{what} ({laws.source})")
    if proxy_tau is not None:
        if not (math.isfinite(proxy_tau) and proxy_tau > 0):
            raise ValueError(f"the proxy's weight-decay timescale tau must be a positive finite number, "
                             f"got {proxy_tau!r}")
        wd = lam_from_tau(proxy_tau)
        return wd, proxy_tau, _estimate(wd, None, None, level, f"{formula}, tau {proxy_tau:.4g} of the tuned "
                                        f"proxy; {TAU_RULE}"), _estimate(proxy_tau, None, None, level,
                                                            "the tuned proxy's weight decay (--proxy-config)")
    if proxy_weight_decay == 0:  # tuned (or trained) without decay: no timescale to keep
        warnings.append("weight decay 0: the proxy's runs had none (its LR was tuned without decay), so the "
                        "card keeps 0; a long run usually wants decay: sweep it (`sweep scaling "
                        "--weight-decays`) or give --weight-decay")
        return 0.0, None, _estimate(0.0, None, None, level, "the tuned proxy's weight decay 0 (its LR was "
                                    "tuned without decay)"), None
    # Not measured: a tau at the sweep's one lambda says nothing about the best tau (it moves
    # with whatever LR the proxy had), and no tau at all says less, so the per-step decay of
    # published recipes stands in, never a silent 0.
    wd = PUBLISHED_ETA_LAMBDA / eta
    tau = b_tok / (eta * wd * tokens)
    if laws is not None and laws.tau is not None:
        sweep_eta_lam = 1.0 / (laws.tau * tokens / b_tok)
        why = (f"the scaling sweep ran one weight decay, so its tau {laws.tau:.4g} was not optimised (held "
               f"fixed it would give eta·lambda {sweep_eta_lam:.2g} per step)")
    else:
        why = ("none was given (--weight-decay), measured (a scaling fit's tau) or tuned (--proxy-config, "
               "or the results' weight_decay with their batch and budget)")
    warnings.append(f"weight decay not optimised: {why}; the card takes the {PUBLISHED_ETA_LAMBDA_SOURCE}, "
                    f"so lambda {wd:.3g} at LR {lr:.3g}; measure tau with `sweep scaling --weight-decays` or "
                    "give --weight-decay")
    return wd, tau, _estimate(wd, None, None, level, f"{PUBLISHED_ETA_LAMBDA_SOURCE} / eta: not measured "
                              "here, interval unknown; per step as those runs used it, not moved with the "
                              "target's length (their step counts are not recorded here)"), _estimate(
        tau, None, None, level, f"from the {PUBLISHED_ETA_LAMBDA_SOURCE}: not measured here")


def _plan_schedule(laws: ScalingLawFit | None, *, warmup_tokens: float | None, warmup_fraction: float | None,
                   decay_fraction: float | None, n_params: float | None, b_tok: int, tokens: float,
                   level: float, ext_tokens: float) -> tuple[float, dict[str, Any], float, dict[str, Any]]:
    """(warmup tokens, its estimate, WSD decay fraction, its estimate): given, from the
    fit's rules (:meth:`~analysis.ScalingLawFit.warmup_tokens`, ``decay_fraction``), or the
    defaults (1 % of the budget; 0.2)."""
    w_rule = laws.warmup_tokens(tokens, b_tok, n_params) if laws is not None else None
    if warmup_tokens is not None:
        w, w_est = warmup_tokens, _estimate(warmup_tokens, None, None, level, "given (--warmup-tokens)")
    elif warmup_fraction is None and w_rule is not None:
        w = w_rule
        w_est = _estimate(w, None, None, level, f"warmup rule of {laws.source}",  # type: ignore[union-attr]
                          ext_tokens)
    else:
        frac = 0.01 if warmup_fraction is None else warmup_fraction
        w = frac * tokens
        w_est = _estimate(w, None, None, level, f"{frac:g} of the token budget")
    if decay_fraction is not None:
        dec, d_est = decay_fraction, _estimate(decay_fraction, None, None, level, "given (--decay-fraction)")
    elif laws is not None and laws.decay_fraction is not None:
        dec = laws.decay_fraction
        lo, hi = laws.decay_fraction_ci or (dec, dec)
        d_est = _estimate(dec, lo, hi, level, f"WSD decay fraction of {laws.source}")
    else:
        dec, d_est = 0.2, _estimate(0.2, None, None, level, "default (Hägele et al. 2024: 10-20%)")
    return w, w_est, dec, d_est


def _flags_and_baselines(ext: Mapping[str, float], limit: float, warnings: list[str], *, proxy_lr: float,
                         proxy_batch_tokens: float | None, proxy_tokens: float | None, tokens: float,
                         b_tok: int, n_params: float | None) -> tuple[bool, dict[str, Any]]:
    """(extrapolated beyond ``limit`` on an axis, with a warning each; the textbook rules
    beside ours, anchored at the proxy optimum: shown, never used)."""
    extrapolated = any(f > limit for f in ext.values())
    for axis, f in ext.items():
        if f > limit:
            warnings.append(f"the target's {axis} lies {f:.3g}× outside the measured range of the "
                            f"scaling sweep (limit {limit:g}×): treat the projection as a guess")
    baselines: dict[str, Any] = {}
    if proxy_batch_tokens and proxy_tokens:
        baselines = scaling_baselines(tokens=tokens, batch_tokens=b_tok, ref_lr=proxy_lr,
                                      ref_batch_tokens=proxy_batch_tokens, ref_tokens=proxy_tokens,
                                      n_params=n_params)
        flag_absurd_baselines(baselines, proxy_lr, b_tok / proxy_batch_tokens)
    return extrapolated, baselines


#: An Adam LR above this trains no transformer; a baseline beyond it (or beyond
#: :data:`BASELINE_MAX_FACTOR` × the proxy's LR) is a rule stretched past where it applies.
BASELINE_MAX_LR = 1.0
BASELINE_MAX_FACTOR = 30.0


def flag_absurd_baselines(baselines: dict[str, Any], proxy_lr: float, batch_ratio: float) -> None:
    """Mark, in place, each baseline whose LR no run could use: above
    :data:`BASELINE_MAX_LR` (1.0), or more than :data:`BASELINE_MAX_FACTOR` (30) × the proxy's
    own optimum. The linear rule at a 2,000× larger batch says lr 35.9 from 0.018: it is
    kept (the card shows every rule) with ``applies: false`` and why, so the number is not
    read as a recommendation."""
    for entry in baselines.values():
        lr = entry.get("lr") if isinstance(entry, dict) else None
        if lr is None:
            continue
        factor = lr / proxy_lr
        if lr > BASELINE_MAX_LR or factor > BASELINE_MAX_FACTOR:
            entry["applies"] = False
            entry["why_not"] = (f"lr {lr:.3g} is {factor:.3g}x the proxy's optimum {proxy_lr:.3g} (batch "
                                f"{batch_ratio:.3g}x the proxy's): beyond any trainable Adam LR "
                                f"(> {BASELINE_MAX_LR:g} or > {BASELINE_MAX_FACTOR:g}x the anchor), the rule "
                                "does not apply this far from its anchor; shown, not a recommendation")


def plan_run(
    proxy: ProxyPoint,
    run: RunChoices = RunChoices(),
    *,
    tokens: float,
    seq_len: int,
    laws: ScalingLawFit | None = None,
    n_params: float | None = None,
    hidden_lr_mult: float | None = None,
) -> RunPlan:

    """Project the run of the target from the proxy optimum and (optionally) the laws.

    - Batch: ``batch_sequences`` or ``batch_tokens`` if given, else B*(D) of the laws;
      rounded to whole sequences and to a multiple of ``dp_size × micro_batch``. Without
      ``micro_batch`` a projected batch is rounded to a multiple of ``dp_size × 8`` (or of
      the largest power of two that fits a smaller batch), so it splits over any usual
      device count; the micro-batch is then the largest power of two <= 8 dividing each
      rank's share (:func:`~mutransfer.card.batch_plan.default_micro_batch`), recorded in
      ``projected.batch_split``. A given ``batch_sequences`` must be such a multiple.
    - Base LR: the proxy's μP optimum ``proxy_lr`` moved by the fitted law's ratio
      eta*(B_t, D_t) / eta*(B_p, D_p) from the proxy's batch and tokens to the target's;
      past the largest measured batch the power law is held at that batch
      (:meth:`~analysis.ScalingLawFit.lr_batch`: the optimal LR saturates in batch); a fit
      that chose the surge form is evaluated at the target's batch (it peaks and falls).
    - Critical batch: with the sweep's measured GNS law B_simple(D), a projected batch above
      it is capped there (inside the extrapolation limit), and ``projected.critical_batch``
      records it with the token cost 1 + B/B_crit
      (:func:`~mutransfer.card.batch_plan.cap_at_critical_batch`).
    - beta2: the proxy's, or by token half-life (:func:`~mutransfer.card.batch_plan.beta2_for`), in
      ``projected.beta2``.
    - Weight decay: given, or lambda = B / (eta · tau · D) with the laws' tau (coupled
      AdamW decay, per step eta·lambda; ``independent`` decay is per step lambda, so
      lambda = B / (tau · D)), else with ``proxy_tau``, the timescale of a tuned proxy
      (the weight decay its sweep chose, as a fraction of its run: Wang & Aitchison 2024
      find the optimal tau roughly constant across model and data size). tau is
      recorded either way.
    - Steps = ceil(D / B); warmup tokens given, from the laws' rule (``n_params``, the
      target's non-embedding N, feeds it), or ``warmup_fraction`` of D (default 1%);
      WSD decay fraction given, from the laws, or 0.2.
    - Baselines (sqrt and linear LR–batch rules, DeepSeek LLM, Step Law, Power Lines;
      :func:`analysis.baselines.scaling_baselines`) anchored at the proxy optimum, for
      comparison only.
    Each projected value carries its interval and its extrapolation factor (target ÷
    largest measured, per axis); beyond ``extrapolation_limit`` a warning says so.

    ``run.batch_rule`` (:data:`mutransfer.card.request.BATCH_RULES`): small proxies measure B* over a few hundred
    thousand tokens, and a law fitted there can be 10^5x short of a real budget, or not
    resolved at all (:meth:`~analysis.ScalingLawFit.batch_law_doubts`; inside the limit
    our B*(D) carries it). Then ``auto`` takes the published laws written in the token
    budget D (:func:`analysis.baselines.published_batch`: DeepSeek LLM's B_opt through its
    D_opt(C), 0.0869·D^0.6876 tokens, interval to Step Law's 0.58·D^0.571), and says so;
    our law's value stays in the card as ``batch_fit`` beside it. (DeepSeek's B(C) at
    C = 6·N·D, used before, agrees with it at ~20 tokens per parameter and is 4.5x too
    large at 0.2.) Tokens per parameter outside
    :data:`~mutransfer.card.batch_plan.TOKENS_PER_PARAM_RANGE` warn.

    A bound is never a value: with ``batch_rule="fit"`` a B* (or an LR optimum) that the
    fit flags as at its grid's edge (:attr:`~analysis.ScalingLawFit.batch_bounds`, ``lr_bounds``) is a
    ValueError naming where, unless ``accept_edge`` names it (``"batch"``, ``"lr"``); then
    it is taken, recorded in ``projected.accepted_edges`` and warned about. Under ``auto``
    an edge batch falls back to the published laws (as above) and an edge LR is a warning.
    """
    _check_plan_args(proxy, run, tokens=tokens, seq_len=seq_len, n_params=n_params)
    proxy_lr, proxy_lr_interval = proxy.lr, proxy.lr_interval
    proxy_batch_tokens, proxy_tokens, proxy_tau = proxy.batch_tokens, proxy.tokens, proxy.tau
    beta2 = proxy.betas[1] if proxy.betas else 0.95
    beta2_halflife_tokens = proxy.beta2_halflife_tokens
    batch_tokens, batch_sequences, dp_size, micro_batch = (
        run.batch_tokens, run.batch_sequences, run.dp_size, run.micro_batch)
    weight_decay, wd_mode = run.weight_decay, run.wd_mode or "coupled"
    warmup_tokens, warmup_fraction, decay_fraction = run.warmup_tokens, run.warmup_fraction, run.decay_fraction
    extrapolation_limit, batch_rule, accept_edge = run.extrapolation_limit, run.batch_rule, run.accept_edge
    _check_plan_inputs(batch_rule=batch_rule, accept_edge=accept_edge, laws=laws, tokens=tokens,
                       seq_len=seq_len, batch_sequences=batch_sequences, batch_tokens=batch_tokens,
                       micro_batch=micro_batch)
    warnings: list[str] = []
    bound = _Bounds(laws, batch_rule, accept_edge, warnings)
    dp = dp_size or 1
    level = laws.level if laws else 0.9
    ext = {"tokens": 1.0, "batch_tokens": 1.0}
    if laws is not None:
        ext["tokens"] = extrapolation_factor(tokens, laws.measured_tokens)

    b_est, raw_seqs, projected_batch_fit = _plan_batch(
        laws, tokens=tokens, seq_len=seq_len, batch_sequences=batch_sequences, batch_tokens=batch_tokens,
        dp=dp, micro_batch=micro_batch, n_params=n_params, batch_rule=batch_rule, level=level,
        ext_tokens=ext["tokens"], extrapolation_limit=extrapolation_limit, bound=bound, warnings=warnings)
    crit = cap_at_critical_batch(b_est, laws, tokens=tokens, extrapolation_limit=extrapolation_limit,
                                 given=batch_sequences is not None or batch_tokens is not None,
                                 warnings=warnings)
    if crit is not None and crit["capped"]:
        raw_seqs = b_est["value"] / seq_len
    # rounded inside the batch's own interval, in whole sequences (as the trust block gives
    # it), where the split allows; the steps follow it in
    within = whole_sequences(b_est.get("lo"), b_est.get("hi"), seq_len)
    within = tuple(None if v is None else v / seq_len for v in within)
    split = _split_batch(raw_seqs, batch_sequences, dp, micro_batch, within=within,  # type: ignore[arg-type]
                         warnings=warnings)
    seqs, micro = split["sequences"], split["micro_batch"]
    b_tok = seqs * seq_len
    if laws is not None:
        ext["batch_tokens"] = extrapolation_factor(b_tok, laws.measured_batch_tokens)
        b_est["extrapolation"] = max(b_est["extrapolation"], ext["batch_tokens"])
    if tokens < b_tok:
        raise ValueError(f"the token budget {tokens:.6g} is below one batch of {b_tok} tokens "
                         f"({seqs} sequences of {seq_len})")
    steps = math.ceil(tokens / b_tok)

    lr, lr_est = _plan_lr(laws, proxy_lr=proxy_lr, proxy_lr_interval=proxy_lr_interval,
                          proxy_batch_tokens=proxy_batch_tokens, proxy_tokens=proxy_tokens, b_tok=b_tok,
                          tokens=tokens, level=level, ext=ext, bound=bound, warnings=warnings,
                          ext_limit=extrapolation_limit)
    if laws is not None and run.published_prior and hidden_lr_mult and n_params:
        lr, lr_est = _weigh_published(lr, lr_est, n_params=n_params, tokens=tokens, level=level,
                                      hidden_lr_mult=hidden_lr_mult)
    wd, tau, wd_est, tau_est = _plan_weight_decay(laws, weight_decay=weight_decay, wd_mode=wd_mode,
                                                  proxy_tau=proxy_tau, proxy_weight_decay=proxy.weight_decay,
                                                  lr=lr, b_tok=b_tok, tokens=tokens,
                                                  level=level, ext=ext, warnings=warnings,
                                                  lr_interval=(lr_est["lo"], lr_est["hi"]))
    w, w_est, dec, d_est = _plan_schedule(laws, warmup_tokens=warmup_tokens, warmup_fraction=warmup_fraction,
                                          decay_fraction=decay_fraction, n_params=n_params, b_tok=b_tok,
                                          tokens=tokens, level=level, ext_tokens=ext["tokens"])
    warmup_steps = min(steps, int(round(w / b_tok)))

    extrapolated, baselines = _flags_and_baselines(
        ext, extrapolation_limit, warnings, proxy_lr=proxy_lr, proxy_batch_tokens=proxy_batch_tokens,
        proxy_tokens=proxy_tokens, tokens=tokens, b_tok=b_tok, n_params=n_params)
    projected = {
        "lr": {**lr_est, "interval": [lr_est["lo"], lr_est["hi"]], "method": lr_est["source"]},
        "batch_tokens": b_est, "batch_sequences": seqs, "batch_split": split, "steps": steps,
        "weight_decay": wd_est, "tau": tau_est, "warmup_tokens": w_est, "decay_fraction": d_est,
        "extrapolation": ext, "extrapolation_limit": float(extrapolation_limit),
        "extrapolated": extrapolated, "baselines": baselines,
        "proxy": {"lr": proxy_lr, "batch_tokens": proxy_batch_tokens, "tokens": proxy_tokens},
        "warnings": warnings,
    }
    if bound.accepted:  # bounds the user took as values (--accept-edge), and where they were flagged
        projected["accepted_edges"] = bound.accepted
    if crit is not None:
        projected["critical_batch"] = {**crit, "token_cost": 1.0 + b_tok / crit["value"]}
    projected["beta2"] = beta2_for(b_tok, beta2=beta2, halflife_tokens=beta2_halflife_tokens,
                                   proxy_batch_tokens=proxy_batch_tokens)
    for what in dict.fromkeys(accept_edge):  # a flag that changed nothing is said, not ignored
        if what not in bound.accepted:
            warnings.append(f"--accept-edge {what} accepted nothing: the fit's {what} is not at an edge "
                            "of its grid here")
    if projected_batch_fit is not None:  # the fitted law's batch, shown beside the one used
        projected["batch_fit"] = projected_batch_fit
    return RunPlan(lr=lr, batch_sequences=seqs, micro_batch=micro, batch_tokens=b_tok, steps=steps,
                   warmup_tokens=w, warmup_steps=warmup_steps, decay_fraction=dec, weight_decay=wd, tau=tau,
                   projected=projected, warnings=warnings, beta2=projected["beta2"]["value"])
