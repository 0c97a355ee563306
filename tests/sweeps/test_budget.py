"""sweeps.budget: a compute budget planned into proxy runs, on known cost models."""

from __future__ import annotations

import math

import pytest

from sweeps.budget import (
    MIN_STEPS,
    SHARES,
    CostModel,
    TunePlan,
    plan_budget,
    refine_seed_s,
    scaling_stage_cost,
)

WIDTHS = list(range(16, 2049, 16))


def _cost(s0: float = 1e-5, p: float = 1.0, overhead: float = 0.5, step: float = 1e-3) -> CostModel:
    return CostModel(width0=32, seconds_per_token0=s0, width1=256, seconds_per_token1=s0 * 8**p, overhead_s=overhead,
                     seconds_per_step=step)


def test_the_cost_model_interpolates_as_a_power_of_the_width() -> None:
    c = _cost(p=1.5)
    assert c.exponent == pytest.approx(1.5)
    assert c.seconds_per_token(64) == pytest.approx(1e-5 * 2**1.5)
    assert c.run_s(32, 1e6, 1000) == pytest.approx(0.5 + 1000 * 1e-3 + 10.0)
    # the same tokens in smaller batches cost more: more steps
    assert c.run_s(32, 1e6, 100) > c.run_s(32, 1e6, 1000)
    # a cheaper wider probe (noise) is not a negative exponent, a steeper one is capped at 2
    assert CostModel(32, 1e-5, 64, 0.5e-5).exponent == 0.0
    assert CostModel(32, 1e-5, 64, 8e-5).exponent == 2.0


@pytest.mark.parametrize("budget", [600.0, 3600.0, 4 * 3600.0])
def test_the_plan_fills_its_budget_and_each_stage_its_share(budget: float) -> None:
    cost = _cost()
    plan = plan_budget(cost, budget_s=budget, workers=2, base_width=32, valid_widths=WIDTHS, seq_len=64)
    assert plan.widths[0] == 32 and all(b == 2 * a for a, b in zip(plan.widths, plan.widths[1:]))
    assert plan.steps >= MIN_STEPS
    # every stage's estimate within its share of the budget (the steps are floored, so at most)
    for stage, share in SHARES.items():
        assert plan.estimate_s[stage] <= share * budget * 1.001, stage
    assert sum(plan.estimate_s.values()) <= budget
    # the scaling budgets: powers of two a factor 2 apart, the smallest giving the largest batch 8 steps
    toks = plan.scaling_tokens
    assert all(math.log2(t).is_integer() for t in toks) and all(b == 2 * a for a, b in zip(toks, toks[1:]))
    assert toks[0] >= 8 * max(plan.scaling_batch_sizes) * plan.seq_len
    assert set(plan.reasons) >= {"widths", "steps", "scaling_tokens", "scaling_batches"}
    assert TunePlan.from_dict(plan.to_dict()) == plan  # plan.json round-trips


def test_a_larger_budget_buys_more_not_less() -> None:
    small = plan_budget(_cost(), budget_s=600, workers=2, base_width=32, valid_widths=WIDTHS, seq_len=64)
    large = plan_budget(_cost(), budget_s=6000, workers=2, base_width=32, valid_widths=WIDTHS, seq_len=64)
    assert len(large.widths) >= len(small.widths)
    assert large.steps >= small.steps and large.scaling_tokens[-1] >= small.scaling_tokens[-1]


def test_a_budget_too_small_is_refused_with_what_it_would_take() -> None:
    with pytest.raises(ValueError, match=r"fewer than 100; give at least \d+ s"):
        plan_budget(_cost(s0=1e-3), budget_s=60, workers=1, base_width=32, valid_widths=WIDTHS, seq_len=64)
    with pytest.raises(ValueError, match="budget must be a positive"):
        plan_budget(_cost(), budget_s=0, workers=1, base_width=32, valid_widths=WIDTHS, seq_len=64)
    with pytest.raises(ValueError, match="not a width this model can take"):
        plan_budget(_cost(), budget_s=600, workers=1, base_width=33, valid_widths=WIDTHS, seq_len=64)


def test_widths_the_model_cannot_take_are_skipped() -> None:
    plan = plan_budget(_cost(), budget_s=3600, workers=2, base_width=32, valid_widths=[32, 64, 256],
                       seq_len=64)
    assert plan.widths == (32, 64, 256)  # 128 skipped: no such proxy


def test_the_scaling_budgets_stop_at_the_targets() -> None:
    free = plan_budget(_cost(), budget_s=36000, workers=2, base_width=32, valid_widths=WIDTHS, seq_len=16)
    held = plan_budget(_cost(), budget_s=36000, workers=2, base_width=32, valid_widths=WIDTHS, seq_len=16,
                       max_tokens=2**17 + 5)
    assert free.scaling_tokens[-1] > 2**17 and held.scaling_tokens[-1] == 2**17
    assert "held at the target's" in held.reasons["scaling_tokens"]


def test_the_ladder_runs_stop_at_the_targets_tokens() -> None:
    plan = plan_budget(_cost(), budget_s=36000, workers=2, base_width=32, valid_widths=WIDTHS, seq_len=16,
                       max_tokens=2**17)
    assert plan.steps * plan.batch_size * plan.seq_len <= 2**17
    assert "held at the target's" in plan.reasons["steps"]


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_a_second_pass_seed_costs_what_the_plan_gave_one_seed_of_the_scaling_stage(workers: int) -> None:
    """tune's second pass prices another seed with the plan's own formula, so the two never
    disagree about what the budget buys."""
    cost = _cost()
    plan = plan_budget(cost, budget_s=3600.0, workers=workers, base_width=32, valid_widths=WIDTHS, seq_len=64)
    assert refine_seed_s(cost, plan, workers) == pytest.approx(plan.estimate_s["scaling"], rel=1e-12)
    # without the audit's runs it is cheaper, and it grows with the largest budget
    kw = dict(base_width=32, check_width=64, batches=plan.scaling_batch_sizes, seq_len=64)
    d = max(plan.scaling_tokens)
    assert scaling_stage_cost(cost, tokens=d, audit=False, **kw) < scaling_stage_cost(cost, tokens=d, **kw)
    assert scaling_stage_cost(cost, tokens=2 * d, **kw) > scaling_stage_cost(cost, tokens=d, **kw)


def test_sp_beside_mup_is_counted_in_the_ladder_and_the_base_width_once() -> None:
    """``arms=2`` (the demo's SP arm): every width above the base costs twice, the base
    once (μP is SP there), so the same budget buys fewer ladder steps, in that ratio."""
    cost = _cost(overhead=0.0, step=0.0, p=1.0)
    one = plan_budget(cost, budget_s=300.0, workers=2, base_width=32, valid_widths=WIDTHS, seq_len=64)
    two = plan_budget(cost, budget_s=300.0, workers=2, base_width=32, valid_widths=WIDTHS, seq_len=64, arms=2)
    assert one.widths == two.widths and len(one.widths) >= 3 and two.steps < 2000
    rel = [w / 32 for w in one.widths]  # per-token cost ∝ width here
    assert two.steps == pytest.approx(one.steps * sum(rel) / (rel[0] + 2 * sum(rel[1:])), abs=1)
    assert "SP beside muP" in two.reasons["widths"]
    with pytest.raises(ValueError, match="arms must be 1"):
        plan_budget(cost, budget_s=3600.0, workers=2, base_width=32, valid_widths=WIDTHS, seq_len=64, arms=3)


def test_the_scaling_grid_keeps_four_batches_for_the_audit_and_names_the_budget_it_needs() -> None:
    """Batches are dropped from the top only down to 4 (the audit fits on 3 and holds one
    out); a budget too small for that, or for ladder runs of ``min_steps``, is refused with
    the budget whose share would buy them."""
    cost = _cost(overhead=0.2, step=2e-3)
    for budget in (900.0, 3600.0, 4 * 3600.0):
        plan = plan_budget(cost, budget_s=budget, workers=2, base_width=32, valid_widths=WIDTHS, seq_len=64)
        assert len(plan.scaling_batch_sizes) >= 4
    with pytest.raises(ValueError, match=r"give at least (\d+) s") as err:
        plan_budget(cost, budget_s=20.0, workers=1, base_width=32, valid_widths=WIDTHS, seq_len=64)
    need = float(err.value.args[0].split("give at least ")[1].split(" s")[0])
    # the named budget buys a plan that stands on every floor at once (ladder and scaling),
    # and is the least that does (1% less does not)
    plan = plan_budget(cost, budget_s=need, workers=1, base_width=32, valid_widths=WIDTHS, seq_len=64)
    assert plan.steps >= MIN_STEPS and len(plan.scaling_batch_sizes) >= 4
    with pytest.raises(ValueError, match="give at least"):
        plan_budget(cost, budget_s=need * 0.98, workers=1, base_width=32, valid_widths=WIDTHS, seq_len=64)
    with pytest.raises(ValueError, match="scaling runs of"):  # the ladder fits at 8 steps, the sweep not
        plan_budget(cost, budget_s=20.0, workers=1, base_width=32, valid_widths=WIDTHS, seq_len=16, min_steps=8)
    low = plan_budget(cost, budget_s=60.0, workers=1, base_width=32, valid_widths=WIDTHS, seq_len=16,
                      min_steps=8, min_batch_steps=1)
    assert low.steps >= 8 and len(low.scaling_batch_sizes) >= 4


def test_least_budget_is_the_threshold_of_the_planner() -> None:
    """least_budget is where plan_budget starts to plan: it plans there and not 2% below;
    a budget that already plans is its own answer."""
    from sweeps.budget import least_budget

    cost = _cost(overhead=0.2, step=2e-3)
    kw = {"workers": 2, "base_width": 32, "valid_widths": WIDTHS, "seq_len": 64, "arms": 2}
    need = least_budget(cost, budget_s=10.0, **kw)
    assert need is not None and need > 10
    assert plan_budget(cost, budget_s=need, **kw).steps >= MIN_STEPS
    with pytest.raises(ValueError, match="give at least"):
        plan_budget(cost, budget_s=need * 0.98, **kw)
    assert least_budget(cost, budget_s=4.0 * need, **kw) == math.ceil(4.0 * need)
