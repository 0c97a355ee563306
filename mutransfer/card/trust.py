"""How far to trust a card: its warnings and its ``trust`` block.

- :func:`card_warnings` reads a card and lists what makes it less trustworthy than its
  intervals say: a failed held-out audit, a target wider than the widest measured proxy,
  a depth change larger than any measured, a change of context, vocabulary or tokenizer
  from proxy to target, a batch its schedule cannot split across the data-parallel ranks.
- :func:`trust_block` gives the interval of each projected value (LR, batch, steps, tokens,
  weight decay) as a factor hi/lo, and which one extra measurement narrows the LR interval
  most, from the scaling fit's own covariance (or its exponent intervals).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["EXTRA_FACTOR", "MEASURED_DEPTH_MOVE", "card_warnings", "trust_block"]

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
    seqs, dp, micro = batch.get("sequences"), batch.get("dp_size") or 1, batch.get("micro_batch") or 1
    if _num(seqs) and _num(dp) and _num(micro) and seqs % (dp * micro):
        out.append(f"the batch of {seqs} sequences does not split across dp_size {dp} × micro_batch "
                   f"{micro}: each step would give the ranks unequal shares")
    return out


#: How far (×, either side) the hidden matrices' LR may sit from the published laws' range
#: before the card says so: the two laws themselves differ by up to ~3x at 1B scale.
PUBLISHED_LR_SLACK = 2.0


def _published_lr_warning(card: Mapping[str, Any]) -> list[str]:
    base = (card.get("projected") or {}).get("baselines") or {}
    pub = {k: float(base[k]["lr"]) for k in ("deepseek", "step_law")
           if isinstance(base.get(k), Mapping) and _num(base[k].get("lr"))}
    hidden = [float(g["lr"]) for g in card.get("param_groups") or []
              if isinstance(g, Mapping) and g.get("role") == "hidden" and g.get("optimizer") == "adamw"
              and _num(g.get("lr"))]
    if not (pub and hidden):
        return []
    h, lo, hi = max(hidden), min(pub.values()), max(pub.values())
    if lo / PUBLISHED_LR_SLACK <= h <= hi * PUBLISHED_LR_SLACK:
        return []
    side, f = ("above", h / hi) if h > hi else ("below", lo / h)
    return [f"the hidden matrices' LR {h:.3g} is {f:.3g}x {side} the published LRs at this size "
            f"({lo:.3g}-{hi:.3g}: DeepSeek LLM eta(C), Step Law eta(N, D), both for standard-parametrization "
            "models): the projection moved it further than those laws would; check the LR law's batch and "
            "budget exponents (projected.lr) before the run"]


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


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
) -> dict[str, Any]:
    """The card's ``trust`` section: the interval of each projected value and the one extra
    measurement that narrows the LR interval most.

    Intervals are the projection's own (``projected``): LR, batch (tokens), weight decay;
    steps follow from the batch's (ceil(D / B_hi), ceil(D / B_lo)); the token budget is
    chosen, so its interval is the value. ``factor`` = hi / lo.

    Extra measurements (with a :class:`analysis.scaling_fit.ScalingLawFit`, ``extra`` = 4):

    - *a budget at 4× the largest measured* D_max: the LR anchor moves from the proxy's
      budget D_p to D' = min(4·D_max, D_t), so the law extrapolates over ln(D_t / D') instead
      of ln(D_t / D_p); and B*(D) is evaluated as if the target were 4× closer
      (max(D_t / 4, D_max)).
    - *a batch at 4× the largest measured* B_max: the LR anchor's batch moves from B_p to
      min(4·B_max, B_t).

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
    b_iv = _interval(batch_tokens, bt.get("lo"), bt.get("hi"), str(bt.get("source", "")))
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

        def lr_factor(anchor_b: float, anchor_d: float) -> float | None:
            _, lo, hi = laws.lr_ratio((anchor_b, batch_tokens), (anchor_d, tokens))
            return None if p_factor is None else p_factor * hi / lo

        if tokens > d_max:
            d_new = min(extra * d_max, tokens)
            _, blo, bhi = laws.batch_at(max(tokens / extra, d_max))
            options.append({"measurement": f"a budget at {extra:g}× the largest measured "
                                           f"({d_new:.3g} tokens)",
                            "lr_factor": lr_factor(proxy_batch_tokens, d_new),
                            "batch_factor": bhi / blo if blo > 0 else None})
        if batch_tokens > b_max:
            b_new = min(extra * b_max, batch_tokens)
            options.append({"measurement": f"a batch at {extra:g}× the largest measured ({b_new:.3g} tokens)",
                            "lr_factor": lr_factor(b_new, proxy_tokens), "batch_factor": b_iv["factor"]})
    ranked = [o for o in options if o["lr_factor"] is not None]
    best = min(ranked, key=lambda o: o["lr_factor"]) if ranked else None
    summary = [f"{level:.0%} intervals" + (f"; {n_warnings} warning(s) below" if n_warnings else "")]
    for key, name in (("lr", "base LR"), ("batch_tokens", "batch (tokens)"), ("steps", "steps"),
                      ("tokens", "tokens"), ("weight_decay", "weight decay")):
        iv = intervals[key]
        span = (f"[{iv['lo']:.3g}, {iv['hi']:.3g}] ({iv['factor']:.3g}×)" if iv["factor"] is not None
                else "interval open or unknown")
        summary.append(f"{name} {iv['value']:.4g}: {span}")
    if best is not None and lr_iv["factor"] is not None:
        summary.append(f"narrows most: {best['measurement']} narrows the LR interval from "
                       f"{lr_iv['factor']:.3g}× to about {best['lr_factor']:.3g}×")
    elif laws is None:
        summary.append("narrows most: a scaling sweep (sweep scaling, fit scaling): without it the LR is "
                       "not moved to the target's batch and budget, and its interval is the proxy sweep's")
    else:
        summary.append("narrows most: the LR interval is open or the target lies inside the measured "
                       "range; more seeds at the proxy narrow it")
    return {"level": level, "intervals": intervals, "options": options,
            "narrows_most": best, "warnings": int(n_warnings), "summary": summary}
