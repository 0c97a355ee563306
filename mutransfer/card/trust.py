"""How far to trust a card: its warnings and its ``trust`` block.

- :func:`card_warnings` reads a card and lists what makes it less trustworthy than its
  intervals say: a failed held-out audit, a target wider than the widest measured proxy,
  a depth change larger than any measured, a change of context, vocabulary or tokenizer
  from proxy to target, a batch its schedule cannot split across the data-parallel ranks.
- :func:`horizon` says how far the target's steps reach past the proxy's own runs and past
  the longest horizon at which the repository measured width transfer.
- :func:`trust_block` gives the interval of each projected value (LR, batch, steps, tokens,
  weight decay) as a factor hi/lo, and which one extra measurement narrows the LR interval
  most, from the scaling fit's own covariance (or its exponent intervals).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from analysis.prior import with_prior
from mutransfer.card.batch_plan import whole_sequences

__all__ = [
    "EXTRA_FACTOR",
    "MEASURED_DEPTH_MOVE",
    "MEASURED_HORIZON",
    "STAND_BEHIND_LR_FACTOR",
    "card_warnings",
    "data_demand",
    "horizon",
    "objections",
    "published_lr_gap",
    "trust_block",
]

#: How much larger than the largest measured value the extra measurement of
#: :func:`trust_block` is (a budget, or a batch, 4× the largest).
EXTRA_FACTOR = 4.0

#: The largest depth change whose LR transfer was measured, with the width moved at once:
#: ``benchmarks/width_depth.py`` (``results/width_depth.json``) moved the demo's proxy
#: (llama-small, width 32, depth 2, 125 steps of 16×64 bytes) to width 256 at depth 16
#: under CompleteP α=1 (1 seed: the 2-core CPU's budget; at depth 8, 2 seeds, the shift
#: was −0.08 octave [−1.42, +0.26]): the target's optimal log2 LR minus the proxy's, in
#: octaves, with its 95% bootstrap interval. A card moving depth further has no measurement.
MEASURED_DEPTH_MOVE: dict[str, Any] = {
    "depth_ratio": 8, "width_ratio": 8, "parametrization": "CompleteP α=1", "seeds": 1,
    "shift_octaves": 0.11, "shift_ci": (-1.35, 0.97),
    "source": "benchmarks/width_depth.py"}

#: The longest horizon at which width transfer was measured and held: the horizon ladder
#: (``benchmarks/readout_ladder.py --steps 1000``, record
#: ``benchmarks/results/readout_ladder_1000_steps.json``): the demo's proxy (llama-small,
#: 1,000 steps of 8×64 bytes, cosine), the default ``fan_in`` readout, widths 32, 128 and 256,
#: seeds 0-2: the optimal log2 LR drifted 0.07 octave [0, 0.5] (max − min, 95% bootstrap)
#: with a trend of −0.06 [−0.17, −0.02] octave per width doubling, inside the 0.25-octave
#: bar, and μP's best loss was 0.9835× SP's at 256. A 2,000-step point exists
#: (``readout_ladder_2000_steps.json``: drift 0.10 [0, 1.0], one seed at width 256), too wide
#: to decide the bar, so the horizon where transfer was shown to hold stays 1,000 steps.
MEASURED_HORIZON: dict[str, Any] = {
    "steps": 1000, "widths": (32, 128, 256), "seeds": "0-2", "drift_octaves": 0.07,
    "drift_ci": (0.0, 0.5), "source": "benchmarks/results/readout_ladder_1000_steps.json"}


def horizon(target_steps: float, proxy_steps: float | None = None,
            measured: Mapping[str, Any] = MEASURED_HORIZON) -> dict[str, Any]:
    """How far the target's run reaches past the horizons at which transfer was measured:
    ``{target_steps, proxy_steps, past_proxy, measured_steps, past_measured, beyond,
    measured_drift_octaves, source}``. ``past_*`` = the target's steps ÷ that horizon's
    (None when unknown); ``beyond``: the target runs longer than :data:`MEASURED_HORIZON`'s
    steps, the longest measured. ``proxy_steps``: the proxy's own run (its budget ÷ its
    batch), which tuned the LR the card moves."""
    if not (_num(target_steps)):
        raise ValueError(f"the target's steps must be a positive number, got {target_steps!r}")
    m = float(measured["steps"])
    p = float(proxy_steps) if _num(proxy_steps) else None
    return {"target_steps": int(round(target_steps)),
            "proxy_steps": None if p is None else max(1, int(round(p))),
            "past_proxy": None if p is None else target_steps / p, "measured_steps": int(m),
            "past_measured": target_steps / m, "beyond": bool(target_steps > m),
            "measured_drift_octaves": float(measured["drift_octaves"]), "source": str(measured["source"])}


def _card_horizon(card: Mapping[str, Any]) -> dict[str, Any] | None:
    """:func:`horizon` of a card: ``schedule.total_steps`` against the proxy's run
    (``projected.proxy``: its tokens ÷ its batch tokens); None without the target's steps."""
    steps = (card.get("schedule") or {}).get("total_steps")
    if not _num(steps):
        return None
    px = (card.get("projected") or {}).get("proxy") or {}
    d, b = px.get("tokens"), px.get("batch_tokens")
    return horizon(steps, d / b if _num(d) and _num(b) else None)


def _horizon_warning(h: Mapping[str, Any] | None) -> list[str]:
    if not h or not h["beyond"]:
        return []
    m = MEASURED_HORIZON
    lo, hi = m["drift_ci"]
    proxy = (f"; the proxy ran {h['proxy_steps']:,} steps ({h['past_proxy']:.3g}x shorter)"
             if h["proxy_steps"] else "")
    return [f"the target runs {h['target_steps']:,} steps, {h['past_measured']:.3g}x past the longest "
            f"horizon at which width transfer was measured ({m['steps']:,} steps: drift "
            f"{m['drift_octaves']:.2g} octave [{lo:g}, {hi:g}], {m['source']}){proxy}: whether the LR optimum stays put that long "
            "is not measured"]


def card_warnings(card: Mapping[str, Any]) -> list[str]:
    """What the card's own fields say against trusting it (empty for a clean card).

    - ``audit.passed`` false: the held-out check of the projection failed;
    - ``target.width`` over the widest measured proxy width (the widest of
      ``source.proxy_widths``; a card from a bare ``--lr`` has no ladder and no such warning),
      by how far: μP's transfer is exact only in the limit and every octave beyond the
      ladder is unmeasured;
    - ``target.depth`` ÷ ``source.base_depth`` over the largest depth change measured
      (:data:`MEASURED_DEPTH_MOVE`), with that measurement's optimum shift;
    - the context (``source.seq_len`` vs ``target.seq_len``), the vocabulary
      (``target.vocab_change``) or the tokenizer (``source.tokenizer`` vs
      ``target.tokenizer``) changes from proxy to target: the LR was tuned on other
      embeddings, readout or token statistics;
    - ``batch.sequences`` not a multiple of ``dp_size × micro_batch``: the schedule's step
      cannot be split evenly over the ranks (the validator refuses such a card, and
      ``transfer`` rounds the batch, so this fires only on a card built by hand);
    - ``schedule.total_steps`` past the longest horizon at which width transfer was
      measured (:data:`MEASURED_HORIZON`), by how far, and how far past the proxy's own run
      (:func:`horizon`);
    - the hidden matrices' Adam LR (``param_groups`` of role ``hidden``) more than
      :data:`PUBLISHED_LR_SLACK`× outside the published absolute LRs at the target's size
      (``projected.baselines``: DeepSeek LLM's eta(C) and Step Law's eta(N, D), both fitted
      on standard-parametrization models, whose one LR is what μP's hidden matrices get).
    """
    out: list[str] = []
    audit = card.get("audit") or {}
    if audit.get("passed") is False:
        out.append("the held-out audit failed (audit.passed: false): the projection missed the measured "
                   "optimum at the held-out point, so its values are not confirmed")
    src, tgt, batch = card.get("source") or {}, card.get("target") or {}, card.get("batch") or {}
    widths = [w for w in (src.get("proxy_widths") or []) if _num(w)]
    widest = max(widths) if widths else None
    if widest and _num(tgt.get("width")) and tgt["width"] > widest:
        out.append(f"the target width {tgt['width']} is {tgt['width'] / widest:.3g}× beyond the widest "
                   f"measured width {widest:g}: μP carries the LR there, but nothing measured it")
    base_depth, depth, m = src.get("base_depth"), tgt.get("depth"), MEASURED_DEPTH_MOVE
    if _num(base_depth) and _num(depth) and depth / base_depth > m["depth_ratio"]:
        lo, hi = m["shift_ci"]
        out.append(f"the target depth {depth} is {depth / base_depth:.3g}× the proxy's {base_depth}, beyond "
                   f"the largest depth change measured (depth ×{m['depth_ratio']} with width "
                   f"×{m['width_ratio']} under {m['parametrization']}, {m['seeds']} seed(s): the optimal LR "
                   f"moved {m['shift_octaves']:+.2f} octave [{lo:+.2f}, {hi:+.2f}], {m['source']}): "
                   "CompleteP carries the LR there, but nothing measured it")
    if _num(src.get("seq_len")) and _num(tgt.get("seq_len")) and src["seq_len"] != tgt["seq_len"]:
        whence = f" ({tgt['seq_len_from']})" if tgt.get("seq_len_from") else ""
        out.append(f"the context changes from the proxy's {src['seq_len']} to the target's {tgt['seq_len']} "
                   f"tokens{whence}: the LR and batch were tuned at the proxy's")
    vc = tgt.get("vocab_change")
    if isinstance(vc, Mapping):
        out.append(f"the vocabulary changes from the proxy's {vc.get('proxy')} to the target's "
                   f"{vc.get('target')} (--allow-vocab-change): embedding and readout differ from the "
                   "tuned ones")
    if src.get("tokenizer") and tgt.get("tokenizer") and src["tokenizer"] != tgt["tokenizer"]:
        out.append(f"the tokenizer changes from the proxy's {src['tokenizer']!r} to the target's "
                   f"{tgt['tokenizer']!r}: the token statistics the LR was tuned on differ")
    out += _published_lr_warning(card)
    out += _horizon_warning(_card_horizon(card))
    seqs, dp, micro = batch.get("sequences"), batch.get("dp_size") or 1, batch.get("micro_batch") or 1
    if _num(seqs) and _num(dp) and _num(micro) and seqs % (dp * micro):
        out.append(f"the batch of {seqs} sequences does not split across dp_size {dp} × micro_batch "
                   f"{micro}: each step would give the ranks unequal shares")
    return out


#: How far (×, either side) the hidden matrices' LR may sit from the published laws' range
#: before the card says so: the two laws themselves differ by up to ~3x at 1B scale.
PUBLISHED_LR_SLACK = 2.0


def published_lr_gap(card: Mapping[str, Any]) -> tuple[float, float, float, str, float] | None:
    """(the hidden matrices' Adam LR, the published LRs' low and high end, ``above`` or
    ``below``, how many times outside that range; 1 inside it), or None when the card has
    no hidden Adam group or no published baseline (``projected.baselines``)."""
    base = (card.get("projected") or {}).get("baselines") or {}
    pub = {k: float(base[k]["lr"]) for k in ("deepseek", "step_law")
           if isinstance(base.get(k), Mapping) and _num(base[k].get("lr"))}
    hidden = [float(g["lr"]) for g in card.get("param_groups") or []
              if isinstance(g, Mapping) and g.get("role") == "hidden" and g.get("optimizer") == "adamw"
              and _num(g.get("lr"))]
    if not (pub and hidden):
        return None
    h, lo, hi = max(hidden), min(pub.values()), max(pub.values())
    side, f = ("above", h / hi) if h > hi else ("below", lo / h)
    return h, lo, hi, side, max(f, 1.0)


def data_demand(card: Mapping[str, Any]) -> str | None:
    """Why the card's LR may sit far from the published laws: the sentence saying, with
    the numbers, that the data's own interval (``projected.lr.data``, before the prior)
    excludes the published laws' prior interval (``projected.lr.prior``) and how much the
    prior weighed; None when the card was not weighed against the prior or the two
    intervals overlap (then a large gap is not what the data demand)."""
    lr = (card.get("projected") or {}).get("lr") or {}
    data, prior = lr.get("data"), lr.get("prior")
    if not (isinstance(data, Mapping) and isinstance(prior, Mapping)):
        return None
    d_lo, d_hi, p_lo, p_hi = data.get("lo"), data.get("hi"), prior.get("lo"), prior.get("hi")
    if not all(_num(v) for v in (d_lo, d_hi, p_lo, p_hi)):
        return None
    if d_hi < p_lo:
        side, gap = "below", p_lo / d_hi
    elif d_lo > p_hi:
        side, gap = "above", d_lo / p_hi
    else:
        return None
    return (f"the data demand it: the scaling fit's own 90% interval for the base LR "
            f"[{d_lo:.3g}, {d_hi:.3g}] "
            f"lies {gap:.3g}x {side} the published laws' prior [{p_lo:.3g}, {p_hi:.3g}] (base-LR units), so "
            f"the prior weighed {float(lr.get('weight_prior', 0.0)):.1%}")


def _published_lr_warning(card: Mapping[str, Any]) -> list[str]:
    gap = published_lr_gap(card)
    if gap is None or gap[4] <= PUBLISHED_LR_SLACK:
        return []
    h, lo, hi, side, f = gap
    why = data_demand(card)
    if why is not None:
        return [f"the hidden matrices' LR {h:.3g} is {f:.3g}x {side} the published LRs at this size "
                f"({lo:.3g}-{hi:.3g}: DeepSeek LLM eta(C), Step Law eta(N, D)); {why}"]
    return [f"the hidden matrices' LR {h:.3g} is {f:.3g}x {side} the published LRs at this size "
            f"({lo:.3g}-{hi:.3g}: DeepSeek LLM eta(C), Step Law eta(N, D), both for standard-parametrization "
            "models): the projection moved it further than those laws would; check the LR law's batch and "
            "budget exponents (projected.lr) before the run"]


#: How far (×, either side) the hidden matrices' Adam LR may sit from the published LRs at
#: the target's size before the tool no longer stands behind the card (:func:`objections`):
#: the laws differ from each other by up to ~3x at 1B scale and a μP projection may
#: legitimately sit a few times off them, but 10x is more than any of that explains.
STAND_BEHIND_LR_FACTOR = 10.0

#: The card's values that must lie inside their own trust intervals, with where the card
#: holds each one (section, field).
_HELD_VALUES = {"lr": ("optimizer", "lr"), "batch_tokens": ("batch", "tokens"),
                "steps": ("schedule", "total_steps"), "weight_decay": ("optimizer", "weight_decay")}


def objections(card: Mapping[str, Any]) -> list[str]:
    """Why the tool does not stand behind ``card``, one sentence each; empty: it does.

    Warnings say what to check; an objection says the card's own numbers contradict
    themselves or were never confirmed, so it should not be launched as is:

    - a value (``lr``, ``batch_tokens``, ``steps``, ``weight_decay``) outside its own
      ``trust.intervals`` entry (both sides known; the card's field, e.g.
      ``optimizer.lr``, is the value checked);
    - the hidden matrices' Adam LR more than :data:`STAND_BEHIND_LR_FACTOR`× from the
      published LRs at the target's size (``projected.baselines``: DeepSeek LLM, Step Law),
      unless the data demand it (:func:`data_demand`: the LR was weighed against the
      published laws and the data's own interval excludes their prior);
    - the held-out audit not passed (``audit.passed`` false: failed; null or absent: missing
      or incomplete), since only the audit measured the projection at a point it was not
      fitted on.

    A wide LR interval is not an objection (the interval says it; a warning may)."""
    out: list[str] = []
    intervals = (card.get("trust") or {}).get("intervals") or {}
    for key, (section, name) in _HELD_VALUES.items():
        iv = intervals.get(key)
        if not isinstance(iv, Mapping):
            continue
        held = (card.get(section) or {}).get(name, iv.get("value"))
        lo, hi = iv.get("lo"), iv.get("hi")
        if not (isinstance(held, (int, float)) and _num(lo) and _num(hi)):
            continue
        if not lo * (1 - 1e-9) <= held <= hi * (1 + 1e-9):
            out.append(f"{section}.{name} {held:.6g} lies outside its own interval [{lo:.6g}, {hi:.6g}] "
                       f"(trust.intervals.{key}): the card contradicts its own projection")
    gap = published_lr_gap(card)
    if gap is not None and gap[4] > STAND_BEHIND_LR_FACTOR and data_demand(card) is None:
        h, lo, hi, side, f = gap
        out.append(f"the hidden matrices' Adam LR {h:.3g} is {f:.3g}x {side} the published LRs at the "
                   "target's "
                   f"size ({lo:.3g}-{hi:.3g}, projected.baselines deepseek/step_law), more than "
                   f"{STAND_BEHIND_LR_FACTOR:g}x, and the data do not demand it (their interval, "
                   "projected.lr.data, reaches the published laws' prior, or the card was not weighed "
                   "against it)")
    passed = (card.get("audit") or {}).get("passed")
    if passed is False:
        out.append("the held-out audit failed (audit.passed: false): the projection missed the optimum "
                   "measured at a point it was not fitted on")
    elif passed is not True:
        rows = (card.get("audit") or {}).get("holdout") or []
        out.append("the held-out audit is " + ("incomplete (audit.passed: null: a value it needs was not "
                                               "measured)" if rows else "missing (no --audit)")
                   + ": nothing measured the projection at a point it was not fitted on; run `sweep scaling "
                   "--holdout` and pass its AUDIT.json as --audit")
    return out


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _prior_line(lr: Mapping[str, Any]) -> list[str]:
    """Data, published prior and the card's LR side by side (base-LR units), when the LR
    was weighed against the prior (``projected.lr.data``/``prior``)."""
    data, prior = lr.get("data"), lr.get("prior")
    if not (isinstance(data, Mapping) and isinstance(prior, Mapping)):
        return []

    def iv(d: Mapping[str, Any]) -> str:
        lo, hi = d.get("lo"), d.get("hi")
        if _num(lo) and _num(hi):
            return f"{d['value']:.4g} [{lo:.3g}, {hi:.3g}]"
        return f"{d['value']:.4g} (open)"

    return [f"  base LR from the data {iv(data)}, the published laws' prior {iv(prior)}: weighed "
            f"{float(lr.get('weight_prior', 0.0)):.1%} toward the prior"]


def _interval(value: float, lo: float | None, hi: float | None, how: str) -> dict[str, Any]:
    """``{value, lo, hi, factor, how}``: factor = hi / lo (None when a side is open)."""
    factor = hi / lo if lo is not None and hi is not None and lo > 0 else None
    return {"value": float(value), "lo": lo, "hi": hi, "factor": factor, "how": how}


def trust_block(
    *,
    projected: Mapping[str, Any],
    laws: Any | None,
    proxy_lr_interval: Sequence[float | None] | None,
    proxy_lr: float,
    proxy_batch_tokens: float | None,
    proxy_tokens: float | None,
    batch_tokens: float,
    tokens: float,
    steps: int,
    n_warnings: int,
    extra: float = EXTRA_FACTOR,
    seq_len: int | None = None,
) -> dict[str, Any]:
    """The card's ``trust`` section: the interval of each projected value and the one extra
    measurement that narrows the LR interval most.

    Intervals are the projection's own (``projected``): LR, batch (tokens), weight decay;
    steps follow from the batch's (ceil(D / B_hi), ceil(D / B_lo)); the token budget is
    chosen, so its interval is the value. ``factor`` = hi / lo. With ``seq_len`` the batch's
    interval is rounded out to whole sequences
    (:func:`~mutransfer.card.batch_plan.whole_sequences`), as the planner rounds the batch
    inside it: a batch inside it has its steps inside theirs.

    ``horizon`` (:func:`horizon`): the target's steps against the proxy's run (``projected.proxy``)
    and the longest horizon at which width transfer was measured (:data:`MEASURED_HORIZON`);
    ``beyond`` true adds a summary line (the warning is :func:`card_warnings`').

    Extra measurements (with a :class:`analysis.scaling_fit.ScalingLawFit`, ``extra`` = 4),
    each with a ``kind`` (``budget``, ``batch``, ``seed``) that ``mutransfer tune``'s second
    pass reads (the same computation chooses its runs):

    - *a budget at 4× the largest measured* D_max: the LR anchor moves from the proxy's
      budget D_p to D' = min(4·D_max, D_t), so the law extrapolates over ln(D_t / D') instead
      of ln(D_t / D_p); and B*(D) is evaluated as if the target were 4× closer
      (max(D_t / 4, D_max)).
    - *a batch at 4× the largest measured* B_max: the LR anchor's batch moves from B_p to
      min(4·B_max, B_t).
    - *another seed of the scaling sweep* (n seeds → n + 1): the bootstrap covariance of
      the law and the anchor's interval shrink as n/(n+1) (the variance of a mean); the
      law's misfit is kept as it is (conservative: part of it is seed noise).

    Approximation: the new LR interval is the proxy's own interval factor (assumed the same
    at the new anchor) times the law's ratio interval over the shorter distance, from
    :meth:`ScalingLawFit.lr_ratio` (the bootstrap covariance of the exponents, ln r ± z·sd
    with var = x'Cx, else the corners of the exponent intervals). The exponents' covariance
    is kept as fitted; in truth the new point also lengthens the lever arm and shrinks it,
    so the narrowed factor is an upper bound (conservative). Only measurements beyond the
    measured range are offered: inside it the law interpolates.
    """
    level = float((projected.get("lr") or {}).get("level", getattr(laws, "level", 0.9)))
    lr = projected.get("lr") or {}
    lr_iv = _interval(lr.get("value", proxy_lr), lr.get("lo"), lr.get("hi"), str(lr.get("source", "")))
    bt = projected.get("batch_tokens") or {}
    b_lo, b_hi = (bt.get("lo"), bt.get("hi")) if seq_len is None else whole_sequences(bt.get("lo"), bt.get("hi"),
                                                                                       seq_len)
    b_iv = _interval(batch_tokens, b_lo, b_hi, str(bt.get("source", "")))
    s_lo = math.ceil(tokens / b_iv["hi"]) if b_iv["hi"] else None
    s_hi = math.ceil(tokens / b_iv["lo"]) if b_iv["lo"] else None
    s_iv = _interval(steps, s_lo, s_hi, "token budget / batch")
    t_iv = _interval(tokens, tokens, tokens, "chosen (--tokens or --tokens-per-param), not estimated")
    wd = projected.get("weight_decay") or {}
    w_iv = _interval(wd.get("value", 0.0), wd.get("lo"), wd.get("hi"), str(wd.get("source", "")))
    intervals = {"lr": lr_iv, "batch_tokens": b_iv, "steps": s_iv, "tokens": t_iv, "weight_decay": w_iv}

    p_lo, p_hi = (list(proxy_lr_interval or []) + [None, None])[:2]
    p_factor = (p_hi / p_lo if p_lo and p_hi else None) if proxy_lr_interval else 1.0
    options: list[dict[str, Any]] = []
    if laws is not None and proxy_batch_tokens and proxy_tokens:
        d_max, b_max = laws.measured_tokens[1], laws.measured_batch_tokens[1]

        prior_sd = ((projected.get("lr") or {}).get("prior") or {}).get("sd_log")

        # the LR law is evaluated where the plan evaluates it (held past the saturation batch)
        b_law = laws.lr_batch(batch_tokens, tokens)

        def lr_factor(anchor_b: float, anchor_d: float, boot_scale: float = 1.0) -> float | None:
            _, lo, hi = laws.lr_ratio((anchor_b, b_law), (anchor_d, tokens), boot_scale=boot_scale)
            if p_factor is None:
                return None
            # weighed against the same prior as the card's LR (analysis.prior.weigh), so the
            # narrowed interval is compared with the card's own, like with like
            return with_prior(p_factor ** math.sqrt(boot_scale) * hi / lo, prior_sd, level)

        if tokens > d_max:
            d_new = min(extra * d_max, tokens)
            _, blo, bhi = laws.batch_at(max(tokens / extra, d_max))
            options.append({"measurement": f"a budget at {extra:g}× the largest measured "
                                           f"({d_new:.3g} tokens)", "kind": "budget", "tokens": d_new,
                            "lr_factor": lr_factor(proxy_batch_tokens, d_new),
                            "batch_factor": bhi / blo if blo > 0 else None})
        if batch_tokens > b_max:
            b_new = min(extra * b_max, batch_tokens)
            options.append({"measurement": f"a batch at {extra:g}× the largest measured ({b_new:.3g} tokens)",
                            "kind": "batch", "batch_tokens": b_new,
                            "lr_factor": lr_factor(b_new, proxy_tokens), "batch_factor": b_iv["factor"]})
        n = int(getattr(laws, "n_seeds", 0) or 0)
        if n >= 1:  # the seeds' bootstrap (and the anchor's) shrink as n/(n+1); the misfit stays
            options.append({"measurement": f"another seed of the scaling sweep ({n + 1} in all)",
                            "kind": "seed", "seeds": n + 1,
                            "lr_factor": lr_factor(proxy_batch_tokens, proxy_tokens, n / (n + 1)),
                            "batch_factor": None})
    # an option narrows only what it makes narrower: one at or above the LR interval's own
    # factor (its anchor's law over a batch the card's LR is held below) would widen it
    ranked = [o for o in options if o["lr_factor"] is not None and lr_iv["factor"] is not None
              and o["lr_factor"] < lr_iv["factor"]]
    best = min(ranked, key=lambda o: o["lr_factor"]) if ranked else None
    summary = [f"{level:.0%} intervals" + (f"; {n_warnings} warning(s) below" if n_warnings else "")]
    for key, name in (("lr", "base LR"), ("batch_tokens", "batch (tokens)"), ("steps", "steps"),
                      ("tokens", "tokens"), ("weight_decay", "weight decay")):
        iv = intervals[key]
        span = (f"[{iv['lo']:.3g}, {iv['hi']:.3g}] ({iv['factor']:.3g}×)" if iv["factor"] is not None
                else "interval open or unknown")
        summary.append(f"{name} {iv['value']:.4g}: {span}")
        if key == "lr":
            summary += _prior_line(projected.get("lr") or {})
    px = projected.get("proxy") or {}
    d_p, b_p = px.get("tokens"), px.get("batch_tokens")
    hz = horizon(steps, d_p / b_p if _num(d_p) and _num(b_p) else None)
    if hz["beyond"]:
        summary.append(f"horizon: {hz['target_steps']:,} steps, {hz['past_measured']:.3g}x past the longest "
                       f"at which width transfer was measured ({hz['measured_steps']:,})")
    if best is not None and lr_iv["factor"] is not None:
        summary.append(f"narrows most: {best['measurement']} narrows the LR interval from "
                       f"{lr_iv['factor']:.3g}× to about {best['lr_factor']:.3g}×")
    elif options and lr_iv["factor"] is not None:
        summary.append(f"narrows most: no extra budget or batch narrows the LR interval ({lr_iv['factor']:.3g}×: "
                       "the options above leave it as wide or wider); more seeds at the proxy, or a proxy "
                       "LR sweep with a finer grid, would")
    elif laws is None:
        summary.append("narrows most: a scaling sweep (sweep scaling, fit scaling): without it the LR is "
                       "not moved to the target's batch and budget, and its interval is the proxy sweep's")
    else:
        summary.append("narrows most: the LR interval is open or the target lies inside the measured "
                       "range; more seeds at the proxy narrow it")
    return {"level": level, "intervals": intervals, "options": options, "horizon": hz,
            "narrows_most": best, "warnings": int(n_warnings), "summary": summary}
