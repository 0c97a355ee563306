"""A compute budget turned into the proxy runs that ``mutransfer tune`` makes: how many
widths the LR ladder climbs, how long its runs are, and the token budgets and batches of
the scaling sweep, each choice with its reason.

The cost of one run is measured, not guessed: :class:`CostModel` holds the seconds per
training token at two widths (a short probe run at each) and interpolates as a power of
the width between and past them. :func:`plan_budget` splits the budget over the stages
(:data:`SHARES`) and sizes each stage's runs to fill its share on the given workers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SHARES", "CostModel", "TunePlan", "least_budget", "plan_budget", "refine_seed_s", "scaling_stage_cost"]

#: The budget's split over the stages: the coordinate check and the coarse LR search at the
#: base width; the LR x width ladder (μP's optimum and its drift); the LR x batch x budget
#: sweep and its held-out audit (the laws that move the LR and batch to the target). The
#: scaling stage gets the most: the card's LR interval is its laws' interval.
SHARES: dict[str, float] = {"search": 0.10, "ladder": 0.35, "scaling": 0.55}
#: The coarse search's LRs at the base width (log2): every 2 octaves over 2^-12..2^-2,
#: widened past an edge until bracketed.
SEARCH_LOG2_LRS: tuple[float, ...] = (-12.0, -10.0, -8.0, -6.0, -4.0, -2.0)
#: The ladder's LR grid around the searched centre (octaves), both seeds.
LADDER_OFFSETS: tuple[float, ...] = (-0.5, 0.0, 0.5)
#: The scaling sweep's LR grid around sqrt(B) scaling of the ladder's optimum (octaves).
SCALING_OFFSETS: tuple[float, ...] = (-1.0, -0.5, 0.0, 0.5, 1.0)
#: Runs of an edge optimum's extension, as a share of a grid (1.4: up to 2 more points per 5).
EXTENSION_SLACK = 1.4
#: The fewest steps a ladder run may have: below it the optimum is the warmup's.
MIN_STEPS = 100
#: The most steps a ladder run needs: past it, more widths or seeds buy more.
MAX_STEPS = 2000


@dataclass(frozen=True)
class CostModel:
    """Seconds one worker spends on a run: a fixed overhead, a cost per optimizer step
    (the step's own work whatever its batch: at batch 1 on a small proxy it is most of the
    time) and a cost per training token at the width, from two measured widths:
    s(w) = s0 · (w / w0)^p, p from the two probes (clipped to [0, 2]: between constant
    per-token cost, overhead-bound, and the quadratic cost of the hidden matrices)."""

    width0: int
    """The base width, probed."""
    seconds_per_token0: float
    """Seconds per training token at ``width0`` (one worker, setup excluded)."""
    width1: int
    """A wider width, probed."""
    seconds_per_token1: float
    """Seconds per training token at ``width1``."""
    overhead_s: float = 0.0
    """Seconds of one run beyond its steps (model build, data, evaluation)."""
    seconds_per_step: float = 0.0
    """Seconds of one optimizer step beyond its tokens (at the base width)."""

    @property
    def exponent(self) -> float:
        p = math.log(self.seconds_per_token1 / self.seconds_per_token0) / math.log(self.width1 / self.width0)
        return min(2.0, max(0.0, p))

    def seconds_per_token(self, width: int) -> float:
        return self.seconds_per_token0 * (width / self.width0) ** self.exponent

    def run_s(self, width: int, tokens: float, batch_tokens: float) -> float:
        """Seconds of one run of ``tokens`` in batches of ``batch_tokens`` at ``width`` on one worker."""
        return self.overhead_s + tokens / batch_tokens * self.seconds_per_step + tokens * self.seconds_per_token(width)


@dataclass(frozen=True)
class TunePlan:
    """The runs ``tune`` makes, and why."""

    base_width: int
    widths: tuple[int, ...]
    """The LR ladder's widths, the base first."""
    seeds: tuple[int, ...]
    steps: int
    """Steps of every ladder and search run."""
    batch_size: int
    seq_len: int
    search_log2_lrs: tuple[float, ...]
    ladder_offsets: tuple[float, ...]
    scaling_batch_sizes: tuple[int, ...]
    scaling_tokens: tuple[int, ...]
    """The scaling sweep's budgets: the largest is trained, the others are its WSD branches."""
    scaling_offsets: tuple[float, ...]
    check_width: int
    audit_seeds: int
    estimate_s: dict[str, float] = field(default_factory=dict)
    """The plan's own estimate of each stage's wall seconds on the workers."""
    reasons: dict[str, str] = field(default_factory=dict)
    """Each choice and why it was made."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TunePlan:
        tuples = ("widths", "seeds", "search_log2_lrs", "ladder_offsets", "scaling_batch_sizes",
                  "scaling_tokens", "scaling_offsets")
        return cls(**{k: tuple(v) if k in tuples else v for k, v in d.items()})


def scaling_stage_cost(cost: CostModel, *, base_width: int, check_width: int, tokens: float,
                       batches: Sequence[int], seq_len: int, audit: bool = True) -> float:
    """Worker-seconds of one seed of the scaling stage at a largest budget ``tokens``: every
    batch's LRs (:data:`SCALING_OFFSETS` x :data:`EXTENSION_SLACK`), the width check at the
    middle batch, and the audit (about 4 runs at the smallest batch, 4 at the largest)."""
    grid = sum(len(SCALING_OFFSETS) * EXTENSION_SLACK * cost.run_s(base_width, tokens, b * seq_len)
               for b in batches)
    mid = batches[len(batches) // 2] * seq_len
    check = len(SCALING_OFFSETS) * cost.run_s(check_width, tokens, mid)
    runs = 4 * cost.run_s(base_width, tokens, batches[0] * seq_len) + \
        4 * cost.run_s(base_width, tokens, batches[-1] * seq_len)
    return grid + check + (runs if audit else 0.0)


def refine_seed_s(cost: CostModel, plan: TunePlan, workers: int) -> float:
    """Wall seconds, on ``workers``, of one more seed of ``plan``'s scaling sweep and the
    audit redone at the refitted prediction: what ``tune``'s second pass pays per seed."""
    return scaling_stage_cost(cost, base_width=plan.base_width, check_width=plan.check_width,
                              tokens=max(plan.scaling_tokens), batches=plan.scaling_batch_sizes,
                              seq_len=plan.seq_len) / workers


def _pow2_floor(x: float) -> int:
    return 1 << max(0, int(math.floor(math.log2(max(x, 1.0)))))


class _TooSmall(ValueError):
    """A budget that buys less than a plan that stands; :func:`plan_budget` names the least
    budget that does."""


def plan_budget(cost: CostModel, *, budget_s: float, **kw: Any) -> TunePlan:
    """The proxy runs a ``budget_s`` wall-second budget on ``workers`` buys
    (:func:`_plan_budget` says how). A budget too small for a plan that stands is refused
    naming the least budget that buys one (found by bisection on the same pure planner, so
    it satisfies the ladder's and the scaling sweep's floors together)."""
    try:
        return _plan_budget(cost, budget_s=budget_s, **kw)
    except _TooSmall as exc:
        need = least_budget(cost, budget_s=budget_s, **kw)
        if need is None:
            raise ValueError(f"{exc}; no budget up to {1e4 * budget_s:.3g} s buys a plan: more workers, or a "
                             "narrower base width") from None
        raise ValueError(f"{exc}; give at least {need} s (--budget), more workers, or a narrower base "
                         "width") from None


def least_budget(cost: CostModel, *, budget_s: float, **kw: Any) -> int | None:
    """The least whole-second budget at or above ``budget_s`` for which :func:`plan_budget`
    plans with the same arguments (to 1%, by bisection on the pure planner), or None when
    none up to 10^4 × ``budget_s`` does."""
    if _plans(cost, budget_s, kw):
        return math.ceil(budget_s)
    lo, hi = budget_s, budget_s * 2
    while not _plans(cost, hi, kw):
        lo, hi = hi, hi * 2
        if hi > 1e4 * budget_s:
            return None
    while hi - lo > max(1.0, 0.01 * hi):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _plans(cost, mid, kw) else (mid, hi)
    return math.ceil(hi)


def _plans(cost: CostModel, budget_s: float, kw: dict[str, Any]) -> bool:
    try:
        _plan_budget(cost, budget_s=budget_s, **kw)
        return True
    except _TooSmall:
        return False


def _plan_budget(cost: CostModel, *, budget_s: float, workers: int, base_width: int,
                valid_widths: Sequence[int], seq_len: int, batch_size: int = 8,
                seeds: Sequence[int] = (0, 1), max_doublings: int = 3,
                max_tokens: float | None = None, arms: int = 1, min_steps: int = MIN_STEPS,
                min_batch_steps: int = 8) -> TunePlan:
    """The proxy runs a ``budget_s`` wall-second budget on ``workers`` buys.

    - Ladder: the base width and up to ``max_doublings`` doublings of it (only widths in
      ``valid_widths``); each width runs 3 LRs x the seeds (x :data:`EXTENSION_SLACK`). The
      steps are what the ladder's share buys; below :data:`MIN_STEPS` the widest width is
      dropped, and with only the base and one doubling left the budget is refused, saying
      what it would take. ``arms`` 2 (``tune --compare-sp``) runs SP beside μP at every
      width above the base (at the base width μP is SP: those runs serve both), and
      ``min_steps`` lowers the floor (the demo's test size only, as ``min_batch_steps``
      lowers the scaling sweep's 8 steps below).
    - Search: :data:`SEARCH_LOG2_LRS` at the base width, one seed, the ladder's steps.
    - Scaling: batches 1..16 sequences, 4 budgets a factor 2 apart (the largest trained,
      the others WSD branches of it), 5 LRs, one seed, a check at twice the base width at
      the middle batch, and the held-out audit (about 8 runs of the largest budget): the
      largest budget is what the scaling share buys, a power of two. The smallest budget
      must give the largest batch 8 steps; batches are dropped from the top until it does
      (down to 4: the held-out audit fits on 3 and holds one out).
      Never past ``max_tokens`` (the target's budget): a proxy trained longer than its
      target measures nothing the card uses.
    """
    if not (math.isfinite(budget_s) and budget_s > 0):
        raise ValueError(f"budget must be a positive number of seconds, got {budget_s!r}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers!r}")
    if base_width not in valid_widths:
        raise ValueError(f"base width {base_width} is not a width this model can take ({list(valid_widths)[:8]})")
    seeds = tuple(seeds)
    worker_s = budget_s * workers
    reasons: dict[str, str] = {}
    ladder_s = SHARES["ladder"] * worker_s
    widths = [base_width * 2**k for k in range(max_doublings + 1) if base_width * 2**k in set(valid_widths)]
    tok_per_step = batch_size * seq_len

    if arms not in (1, 2):
        raise ValueError(f"arms must be 1 (muP) or 2 (muP and SP), got {arms!r}")

    def runs_at(w: int) -> float:
        return len(LADDER_OFFSETS) * len(seeds) * EXTENSION_SLACK * (1 if w == base_width else arms)

    def per_step_over(ws: Sequence[int]) -> tuple[float, float]:
        per_step = sum(runs_at(w) * (cost.seconds_per_step + cost.seconds_per_token(w) * tok_per_step)
                       for w in ws)
        return per_step, sum(runs_at(w) * cost.overhead_s for w in ws)

    def steps_for(ws: Sequence[int]) -> float:
        per_step, over = per_step_over(ws)
        return (ladder_s - over) / per_step if per_step > 0 else 0.0

    while len(widths) > 2 and steps_for(widths) < min_steps:
        widths.pop()
    steps = steps_for(widths)
    if len(widths) < 2 or steps < min_steps:
        raise _TooSmall(f"a budget of {budget_s:.0f} s on {workers} worker(s) buys ladder runs of "
                        f"{max(steps, 0):.0f} steps at widths {widths}: fewer than {min_steps}")
    steps_i = int(min(MAX_STEPS, steps))
    held = max_tokens is not None and steps_i * tok_per_step > max_tokens
    if held:  # a ladder run longer than the target finds the optimum of another horizon
        steps_i = max(1, int(max_tokens // tok_per_step))
    reasons["widths"] = (f"{len(widths)} widths ({widths[-1] // widths[0]}x): the most doublings whose ladder "
                         f"runs get >= {min_steps} steps in the ladder's {SHARES['ladder']:.0%} of the budget"
                         + (", SP beside muP above the base width" if arms == 2 else ""))
    reasons["steps"] = (f"{steps_i} steps of {batch_size} x {seq_len} tokens: what the ladder's share buys "
                        f"for {len(LADDER_OFFSETS)} LRs x {len(seeds)} seeds per width"
                        + (f" (capped at {MAX_STEPS})" if steps > MAX_STEPS and not held else "")
                        + (f" (held at the target's {max_tokens:.3g} tokens: the optimum is the horizon's)"
                           if held else ""))

    check_width = base_width * 2 if base_width * 2 in set(valid_widths) else base_width
    scaling_s = SHARES["scaling"] * worker_s
    batches = [1, 2, 4, 8, 16]
    def scaling_cost(d: float, bs: Sequence[int]) -> float:
        return scaling_stage_cost(cost, base_width=base_width, check_width=check_width, tokens=d,
                                  batches=bs, seq_len=seq_len)

    while True:
        # the cost is affine in d: solve scaling_cost(d) = the stage's share
        fixed, slope = scaling_cost(0.0, batches), scaling_cost(1.0, batches) - scaling_cost(0.0, batches)
        d_max = _pow2_floor((scaling_s - fixed) / slope) if scaling_s > fixed else 1
        capped = max_tokens is not None and d_max > max_tokens
        if capped:
            d_max = _pow2_floor(max_tokens)
        # down to 4 batches: the audit holds one of them out
        if d_max // 8 >= min_batch_steps * max(batches) * seq_len or len(batches) <= 4:
            break
        batches.pop()
    if d_max // 8 < min_batch_steps * max(batches) * seq_len:
        raise _TooSmall(f"a budget of {budget_s:.0f} s buys scaling runs of {d_max} tokens: its smallest "
                        f"budget gives batch {max(batches)} fewer than {min_batch_steps} steps")
    tokens = tuple(d_max // 2**k for k in (3, 2, 1, 0))
    reasons["scaling_tokens"] = (f"budgets {tokens[0]}..{tokens[-1]} tokens: the largest power of two the "
                                 f"scaling share ({SHARES['scaling']:.0%}) buys for {len(batches)} batches x "
                                 f"{len(SCALING_OFFSETS)} LRs, the width check and the audit"
                                 + (f", held at the target's {max_tokens:.3g} tokens" if capped else ""))
    reasons["scaling_batches"] = (f"batches {batches} sequences: B* of small proxies sits at a few sequences; "
                                  "the grid is extended past an edge optimum")
    est = {
        "search": len(SEARCH_LOG2_LRS) * EXTENSION_SLACK
        * cost.run_s(base_width, steps_i * tok_per_step, tok_per_step) / workers,
        "ladder": sum(runs_at(w) * cost.run_s(w, steps_i * tok_per_step, tok_per_step)
                      for w in widths) / workers,
        "scaling": scaling_cost(d_max, batches) / workers,
    }
    return TunePlan(base_width=base_width, widths=tuple(widths), seeds=seeds, steps=steps_i,
                    batch_size=batch_size, seq_len=seq_len, search_log2_lrs=SEARCH_LOG2_LRS,
                    ladder_offsets=LADDER_OFFSETS, scaling_batch_sizes=tuple(batches), scaling_tokens=tokens,
                    scaling_offsets=SCALING_OFFSETS, check_width=check_width, audit_seeds=2,
                    estimate_s=est, reasons=reasons)
