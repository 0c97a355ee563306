"""The batch part of the target's run plan: the batch, its split over devices and beta2.

:func:`~mutransfer.card.plan.plan_run` takes the target's batch from here: a given one
(``--batch-size``, ``--batch-tokens``), else the fitted law B*(D) of ``mutransfer fit
scaling`` or, when that is in doubt, the published batch laws
(:func:`fitted_or_published_batch`, the one place that decides between them); capped at
the proxy's measured critical batch (:func:`cap_at_critical_batch`); rounded to whole
sequences and split over data-parallel ranks and micro-batches (:func:`default_micro_batch`);
and Adam's beta2 for it (:func:`beta2_for`). As in the LR part, the laws, their intervals and
their edge flags are those of :class:`analysis.ScalingLawFit`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from analysis.baselines import anchored_published_batch, published_batch
from mutransfer.card._estimate import _Bounds, _estimate

if TYPE_CHECKING:
    from analysis.scaling_fit import ScalingLawFit

__all__ = [
    "ROUNDING_TOLERANCE",
    "TOKENS_PER_PARAM_RANGE",
    "beta2_for",
    "cap_at_critical_batch",
    "default_micro_batch",
    "whole_sequences",
]

#: Tokens per parameter inside which the published batch laws were fitted and agree (their
#: forms in C = 6·N·D and in D part outside it; at 0.2 tokens per parameter by 4.5x).
TOKENS_PER_PARAM_RANGE = (2.0, 200.0)


#: How far (a ratio) rounding a projected batch to a hardware-friendly multiple may move it
#: before a finer multiple is taken: 2^(1/8), an eighth of an octave, a quarter of the
#: narrowest batch interval a scaling fit has given here (2×, on the card-decision proxy).
ROUNDING_TOLERANCE = 2 ** 0.125


def whole_sequences(lo: float | None, hi: float | None, seq_len: int) -> tuple[float | None, float | None]:
    """A batch interval (tokens) rounded out to whole sequences of ``seq_len`` tokens (at
    least one): a batch is a count of sequences, and an interval narrower than one sequence
    (a law inside its measured range) would hold no batch a run can have. An open side
    (None) stays open."""
    return (None if lo is None else max(1, math.floor(lo / seq_len * (1 + 1e-12))) * seq_len,
            None if hi is None else math.ceil(hi / seq_len * (1 - 1e-12)) * seq_len)


def default_micro_batch(sequences: int, dp_size: int = 1) -> int:
    """The largest power of two (at most 8) that divides each rank's share of the batch:
    a micro-batch every usual accelerator count and memory size can take."""
    share = sequences // max(dp_size, 1)
    micro = 1
    while micro < 8 and share % (micro * 2) == 0:
        micro *= 2
    return micro


def fitted_or_published_batch(laws: ScalingLawFit | None, *, tokens: float, n_params: float | None,
                              batch_rule: str, level: float, ext_tokens: float, extrapolation_limit: float,
                              bound: _Bounds, warnings: list[str]
                              ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The target's batch when none is given: (the batch used, the fitted law's batch
    shown beside it or None). ``fit`` takes our B*(D); ``published`` takes the published
    laws in the token budget (:func:`analysis.baselines.published_batch`: DeepSeek LLM's
    B_opt written in D, 0.0869·D^0.6876 tokens, with Step Law's 0.58·D^0.571 as the other
    end of its interval); ``anchored`` grows the proxy's largest bracketed B* as those laws
    grow in D, B_a·(D/D_a)^0.6876 (Step Law's 0.571 and B*'s interval give the interval;
    :func:`analysis.baselines.anchored_published_batch`): the papers' exponent with the
    proxy's own level, which carries its data, tokenizer and context; ``auto`` takes ours
    unless :meth:`~analysis.ScalingLawFit.batch_law_doubts` finds a reason to doubt it,
    then the anchored one when some budget's B* was bracketed, else the published one,
    with a warning. Either way, tokens per parameter (``n_params``) outside
    :data:`TOKENS_PER_PARAM_RANGE` are warned about. The one place that decides between
    the fitted and the published batch law."""
    doubts: list[str] = []
    fit_est = None
    if n_params:
        tpp = tokens / float(n_params)
        lo_t, hi_t = TOKENS_PER_PARAM_RANGE
        if not lo_t <= tpp <= hi_t:
            warnings.append(f"the target trains {tpp:.3g} tokens per parameter, outside {lo_t:g}-{hi_t:g}, "
                            "where the published batch laws were fitted and agree: their forms in compute "
                            "and in tokens part there, and the batch is uncertain beyond its interval")
    if laws is not None:
        b, lo, hi = laws.batch_at(tokens)
        fit_est = _estimate(b, lo, hi, level, f"B*(D) = {laws.batch_coef:.4g} · "
                            f"D^{laws.batch_exponent:.4g} ({laws.source})", ext_tokens)
        doubts = laws.batch_law_doubts(tokens, extrapolation_limit)
    if laws is not None and batch_rule == "fit":
        bound("batch", laws.batch_bounds, "fitted B*(D)")
    if batch_rule not in ("published", "anchored") and not (batch_rule == "auto" and doubts):
        if laws is not None:
            warnings.extend(laws.batch_law_cautions())
        return fit_est, None  # type: ignore[return-value]
    anchor = laws.batch_anchor() if laws is not None and batch_rule != "published" else None
    if batch_rule == "anchored" and anchor is None:
        raise ValueError("--batch-rule anchored needs a budget whose best batch was bracketed; the scaling "
                         "fit has none (every budget's best batch sat at the grid's edge): extend the batch "
                         "grid, or use --batch-rule published")
    why = "; ".join(doubts) if doubts else f"asked for (--batch-rule {batch_rule})"
    if anchor is not None:
        pub = anchored_published_batch(tokens, anchor["tokens"], anchor["batch_tokens"], anchor["lo"],
                                       anchor["hi"])
        what = "the published laws' growth from the proxy's bracketed B*"
    else:
        pub = published_batch(tokens)
        what = "the published laws in tokens"
    b_est = _estimate(pub["batch_tokens"], pub["lo"], pub["hi"], level, f"{pub['source']}, because {why}")
    if fit_est is not None:
        warnings.append(f"batch from {what} ({pub['batch_tokens']:.4g} tokens), not from "
                        f"the fitted B*(D) ({fit_est['value']:.4g} tokens): {why}")
    return b_est, fit_est


def cap_at_critical_batch(b_est: dict[str, Any], laws: ScalingLawFit | None, *, tokens: float,
                          extrapolation_limit: float, given: bool, warnings: list[str]
                          ) -> dict[str, Any] | None:
    """``projected.critical_batch``: the proxy's measured-GNS law B_simple(D) at the target's
    budget (:meth:`~analysis.ScalingLawFit.critical_batch_at`), and the token cost
    ``1 + B/B_crit`` of the batch (McCandlish et al. 2018, eq. 2.11: the multiple of the
    fewest tokens that reach the same loss). A projected batch above B_crit is capped at
    it when the law is inside ``extrapolation_limit``× its measured budgets (past it the
    law is a guess and only warns); a given batch is never changed. ``b_est`` is updated
    in place. None when the fit has no GNS law."""
    at = laws.critical_batch_at(tokens) if laws is not None else None
    if at is None:
        return None
    b_crit, ext = at
    before = float(b_est["value"])
    capped = not given and before > b_crit and ext <= extrapolation_limit
    if capped:
        b_est.update(value=b_crit, hi=b_crit if b_est.get("hi") is None else min(b_est["hi"], b_crit),
                     lo=None if b_est.get("lo") is None else min(b_est["lo"], b_crit),
                     source=f"{b_est['source']}; capped at the proxy's critical batch B_simple(D)")
        warnings.append(f"the batch ({before:.4g} tokens) is above the proxy's critical batch at this budget "
                        f"({b_crit:.4g} tokens, B_simple(D) measured by GNS): capped there, where a larger "
                        f"batch would cost {1 + before / b_crit:.2f}x the fewest tokens instead of 2x")
    elif before > b_crit:
        warnings.append(f"the batch ({before:.4g} tokens) is above the proxy's critical batch law at this "
                        "budget "
                        f"({b_crit:.4g} tokens, {ext:.3g}x past its measured budgets): it costs about "
                        f"{1 + before / b_crit:.2f}x the fewest tokens by that law"
                        + ("" if given else f"; not capped, the law lies beyond the {extrapolation_limit:g}x "
                           "limit"))
    n = laws.noise_  # type: ignore[union-attr]
    return {"value": b_crit, "law": n["law"], "source": n["source"], "extrapolation": ext,
            "batch_tokens_before_cap": before, "capped": capped,
            "token_cost": 1.0 + float(b_est["value"]) / b_crit}


def beta2_for(batch_tokens: float, *, beta2: float = 0.95, halflife_tokens: float | None = None,
              proxy_batch_tokens: float | None = None) -> dict[str, Any]:
    """``projected.beta2``: Adam's beta2 for a run at ``batch_tokens`` per step.

    With a token half-life ``t½`` (the proxy's ``beta2_halflife_tokens``), beta2 =
    0.5^(B_tokens / t½): the second-moment average then forgets over the same number of
    tokens at every batch (Marek et al. 2025, "Small batch size training for language
    models", §4; a fixed beta2 of 0.95 has a half-life of 13.5 steps, 865 tokens at a
    batch of one 64-token sequence and 17.4M at 1.29M tokens per step). Without one, the
    proxy's ``beta2`` is kept, and the half-life rule's value (from the proxy's own batch)
    is shown beside it.
    """
    if halflife_tokens is not None:
        if not (math.isfinite(halflife_tokens) and halflife_tokens > 0):
            raise ValueError(f"beta2_halflife_tokens must be a positive finite number, got "
                             f"{halflife_tokens!r}")
        value = 0.5 ** (batch_tokens / halflife_tokens)
        if not 0.0 < value < 1.0:  # beta2 0 or 1: no second-moment average, or one that never moves
            raise ValueError(f"beta2_halflife_tokens={halflife_tokens!r} gives beta2 = {value:g} at the "
                             f"target's {batch_tokens:g} tokens per step; it must lie strictly between "
                             "0 and 1")
        return {"value": value, "halflife_tokens": float(halflife_tokens),
                "source": f"0.5^(B/t½), token half-life t½ = {halflife_tokens:.4g} as the proxy's "
                          "(Marek et al. 2025)"}
    out: dict[str, Any] = {"value": float(beta2), "source": "the proxy's beta2, not rescaled (opt in with "
                           "beta2_halflife_tokens to keep its token half-life instead)"}
    if proxy_batch_tokens and 0 < beta2 < 1:
        t_half = proxy_batch_tokens * math.log(0.5) / math.log(beta2)
        rule = 0.5 ** (batch_tokens / t_half)
        if rule >= HALFLIFE_RULE_MIN_BETA2:
            out["halflife_rule"] = {"value": rule, "halflife_tokens": t_half,
                                    "source": "0.5^(B/t½) with the proxy's half-life (Marek et al. 2025)"}
        else:  # a beta2 like 5.7e-56 is no Adam setting: the rule does not reach this batch
            out["source"] += (f"; the half-life rule is left out: at {batch_tokens / t_half:.3g} half-lives "
                              f"per step (t½ = {t_half:.4g} tokens) its beta2 would be {rule:.2g}, under "
                              f"{HALFLIFE_RULE_MIN_BETA2:g}")
    return out


#: Below this beta2 the second-moment average forgets half of itself within one step: the
#: half-life rule has left the range where it is an Adam setting (0.5^(B/t½) < 0.5 means a
#: batch larger than the half-life itself), so ``projected.beta2`` omits it.
HALFLIFE_RULE_MIN_BETA2 = 0.5


def _plan_batch(laws: ScalingLawFit | None, *, tokens: float, seq_len: int, batch_sequences: int | None,
                batch_tokens: float | None, dp: int, micro_batch: int | None, n_params: float | None,
                batch_rule: str, level: float, ext_tokens: float, extrapolation_limit: float, bound: _Bounds,
                warnings: list[str]) -> tuple[dict[str, Any], float, dict[str, Any] | None]:
    """(the batch's estimate, the batch in sequences before rounding, the fitted law's batch
    shown beside a published one): given (``--batch-size``, ``--batch-tokens``), else
    :func:`fitted_or_published_batch`."""
    if batch_sequences is not None:
        if batch_sequences % (dp * (micro_batch or 1)):
            raise ValueError(f"--batch-size {batch_sequences} is not a multiple of --dp-size {dp}"
                             + (f" × --micro-batch {micro_batch}" if micro_batch else ""))
        return (_estimate(batch_sequences * seq_len, None, None, level, "given (--batch-size)"),
                float(batch_sequences), None)
    if batch_tokens is not None:
        return (_estimate(batch_tokens, None, None, level, "given (--batch-tokens)"), batch_tokens / seq_len,
                None)
    if laws is None and batch_rule != "published":
        raise ValueError("no batch for the target: the batch size needs the scaling fit "
                         "B*(D) (--scaling-fit FIT.json from `mutransfer fit scaling`), or give it "
                         "with --batch-tokens or --batch-size")
    b_est, fit_est = fitted_or_published_batch(
        laws, tokens=tokens, n_params=n_params, batch_rule=batch_rule, level=level, ext_tokens=ext_tokens,
        extrapolation_limit=extrapolation_limit, bound=bound, warnings=warnings)
    return b_est, b_est["value"] / seq_len, fit_est


def _split_batch(raw_seqs: float, batch_sequences: int | None, dp: int, micro_batch: int | None, *,
                 within: tuple[float | None, float | None] = (None, None),
                 warnings: list[str] | None = None) -> dict[str, Any]:
    """The batch in whole sequences and its split over ``dp`` ranks (``projected.batch_split``).

    A projected batch is rounded to a multiple of the split's unit (dp_size × micro_batch,
    else dp_size × a power of two <= 8) after its interval ``within`` (sequences; a side
    None is open) was computed, so the nearest multiple can fall outside it: the demo's
    1,269,760 tokens over an interval ending at 1,266,413. The multiple nearest the
    projection (in log) inside the interval is taken when one exists. Without
    ``--micro-batch`` the coarsest power of two whose multiple lands within
    :data:`ROUNDING_TOLERANCE` of the projection is taken, else the nearest multiple of any:
    a coarse unit on a small batch is a large move (5.57 sequences to a multiple of 4 is 4,
    0.48 octave, more than the batch's own interval [4.27, 7.26] allows; a multiple of 2
    gives 6). When no multiple lies inside, the flags force the batch out, and
    ``warnings`` gets a line naming them."""
    lo, hi = within
    if batch_sequences is not None:
        seqs, unit = batch_sequences, dp * (micro_batch or 1)
        how = "given (--batch-size)"
    else:
        if micro_batch is not None:
            units = [(dp * micro_batch, f"a multiple of --dp-size {dp} × --micro-batch {micro_batch}")]
        else:
            pow2 = 8
            while pow2 > 1 and raw_seqs / dp < pow2:
                pow2 //= 2
            units = [(dp * p, f"a multiple of dp_size {dp} × {p} (power-of-two default: no --micro-batch given)")
                     for p in (pow2, pow2 // 2, pow2 // 4, pow2 // 8) if p >= 1]
        fits = [(s_, unit, how) for unit, how in units
                if (s_ := _multiple_within(raw_seqs, unit, lo, hi)) is not None]
        close = [f for f in fits if abs(math.log(f[0] / raw_seqs)) <= math.log(ROUNDING_TOLERANCE)]
        if fits:  # the coarsest unit close enough, else the nearest multiple of any unit
            seqs, unit, how = close[0] if close else min(fits, key=lambda f: abs(math.log(f[0] / raw_seqs)))
        else:
            unit, how = units[0]
            seqs = max(unit, int(round(raw_seqs / unit)) * unit)
            if warnings is not None:
                span = f"[{'open' if lo is None else f'{lo:.6g}'}, {'open' if hi is None else f'{hi:.6g}'}]"
                flags = (f"--dp-size {dp} × --micro-batch {micro_batch}" if micro_batch is not None
                         else f"--dp-size {dp}")
                why = (f"{flags} ({unit} sequences per step) leaves no multiple inside it, so the flags "
                       f"force it out (and the steps with it); a smaller "
                       f"{'--micro-batch or ' if micro_batch is not None else ''}--dp-size fits")
                warnings.append(f"the batch of {seqs} sequences lies outside its own interval {span} "
                                f"(sequences): {why}")
    micro = micro_batch or default_micro_batch(seqs, dp)
    return {"sequences": seqs, "dp_size": dp, "micro_batch": micro,
            "grad_accum": seqs // (dp * micro), "rounded_to": unit, "rule": how,
            "micro_batch_source": "given (--micro-batch)" if micro_batch else
            "default: the largest power of two <= 8 dividing each rank's share"}


def _multiple_within(raw: float, unit: int, lo: float | None, hi: float | None) -> int | None:
    """The positive multiple of ``unit`` nearest ``raw`` in log inside [lo, hi] (a side
    None is open; a relative 1e-9 slack for the float interval), or None when there is
    none. In log because a batch's error is a ratio: between 4 and 8 the midpoint is 5.66."""
    slack = 1e-9
    first = unit if lo is None else max(unit, math.ceil(lo * (1 - slack) / unit) * unit)
    last = None if hi is None else math.floor(hi * (1 + slack) / unit) * unit
    if last is not None and last < first:
        return None
    below = max(unit, math.floor(raw / unit) * unit)
    near = min((below, below + unit), key=lambda m: abs(math.log(m / raw)))
    near = max(first, near)
    return near if last is None else min(near, last)
