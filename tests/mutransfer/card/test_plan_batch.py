"""The run plan's batch in the token budget, its cap at the critical batch, the LR held past
the saturation batch and beta2 by token half-life (mutransfer.card.plan, its batch part
mutransfer.card.batch_plan)."""

from __future__ import annotations

import math
import re

import pytest

from analysis.baselines import published_batch
from analysis.scaling_fit import ScalingLawFit
from mutransfer.card.batch_plan import beta2_for
from mutransfer.training.config import TrainConfig
from mutransfer.training.trainer import Trainer

FIT = {
    "kind": "scaling",
    "lr": {"coef": 0.5, "exponents": {"batch_tokens": 0.3, "tokens": -0.1},
           "ci": {"batch_tokens": [0.25, 0.35], "tokens": [-0.15, -0.05]}},
    "batch": {"coef": 2.0, "exponents": {"tokens": 0.4}, "ci": {"tokens": [0.35, 0.45]}},
    "measured": {"tokens": [1e6, 8e6], "batch_tokens": [512, 8192], "seq_len": 64},
}
NOISE = {"coef": 0.05, "exponent": 0.5, "law": "B_simple(D) = 0.05 · D^0.5 tokens", "source": "synthetic",
         "measured_tokens": [1e6, 8e6], "by_tokens": []}
KW = {"proxy_lr": 0.01, "proxy_lr_interval": None, "seq_len": 64, "proxy_batch_tokens": 1024.0,
      "proxy_tokens": 8e6}


def laws(**extra: object) -> ScalingLawFit:
    return ScalingLawFit.from_dict({**FIT, **extra})


def test_batch_in_doubt_is_the_published_law_in_tokens_and_off_range_tpp_warns(plan_kw) -> None:
    # 0.2 tokens per parameter, 10^3x past the budgets: the published laws in D, not B(6·N·D)
    d, n = 8e9, 4e10
    plan = plan_kw(tokens=d, laws=laws(), n_params=n, **KW)
    pub = published_batch(d)
    assert plan.projected["batch_tokens"]["value"] == pytest.approx(pub["batch_tokens"])
    assert 0.5 <= plan.batch_tokens / pub["batch_tokens"] <= 2.0  # within 2x of the B(D) laws
    assert (plan.projected["batch_tokens"]["lo"], plan.projected["batch_tokens"]["hi"]) == (
        pytest.approx(pub["lo"]), pytest.approx(pub["hi"]))
    assert any("0.2 tokens per parameter" in w for w in plan.warnings)
    # 20 tokens per parameter: no such warning
    assert not any("tokens per parameter" in w for w in plan_kw(tokens=d, laws=laws(), n_params=4e8,
                                                                 **KW).warnings)


def test_batch_capped_at_the_critical_batch_inside_the_limit_only(plan_kw) -> None:
    # B*(8e7) = 2·(8e7)^0.4 = 3,170 tokens; B_crit(8e7) = 0.05·(8e7)^0.5 = 447 tokens: capped
    plan = plan_kw(tokens=8e7, laws=laws(noise_scale=NOISE), batch_rule="fit", **KW)
    crit = plan.projected["critical_batch"]
    assert crit["capped"] and crit["value"] == pytest.approx(0.05 * 8e7**0.5)
    assert crit["batch_tokens_before_cap"] == pytest.approx(2.0 * 8e7**0.4)
    # 447 tokens -> 6.99 sequences; 8 (a multiple of 8, or of 4) lies above the cap, and 6
    # (a multiple of 2) is 0.22 octave below it: 7 whole sequences, the cap to the sequence
    assert plan.batch_tokens == 7 * 64 and plan.batch_tokens - 64 < crit["value"] < plan.batch_tokens
    assert crit["token_cost"] == pytest.approx(1 + plan.batch_tokens / crit["value"])
    assert any("capped there" in w for w in plan.warnings)
    # 10^4x past the GNS law's budgets (limit 100x): reported and warned, not capped
    far = plan_kw(tokens=8e10, laws=laws(noise_scale=NOISE), batch_rule="fit", accept_edge=(), **KW)
    assert not far.projected["critical_batch"]["capped"]
    assert far.projected["batch_tokens"]["value"] == pytest.approx(2.0 * 8e10**0.4)
    # a given batch is never changed
    given = plan_kw(tokens=8e7, laws=laws(noise_scale=NOISE), batch_sequences=64, **KW)
    assert given.batch_sequences == 64 and not given.projected["critical_batch"]["capped"]
    # no GNS in the fit: no critical batch section
    assert "critical_batch" not in plan_kw(tokens=8e7, laws=laws(), batch_rule="fit", **KW).projected


def test_lr_held_at_the_largest_measured_batch(plan_kw) -> None:
    inside = plan_kw(tokens=8e6, laws=laws(), batch_sequences=64, **KW)  # 4,096 tokens, measured
    assert inside.lr == pytest.approx(0.01 * (4096 / 1024) ** 0.3, rel=1e-12)
    past = plan_kw(tokens=8e6, laws=laws(), batch_sequences=1024, **KW)  # 65,536 tokens: 8x past 8,192
    assert past.lr == pytest.approx(0.01 * (8192 / 1024) ** 0.3, rel=1e-12)
    assert any("the LR is that batch's" in w for w in past.warnings)


def test_beta2_by_token_half_life(plan_kw) -> None:
    # the proxy's beta2 kept by default, the half-life rule's value beside it
    b = beta2_for(1_286_144, beta2=0.95, proxy_batch_tokens=64)
    assert b["value"] == 0.95 and "not rescaled" in b["source"]
    t_half = 64 * math.log(0.5) / math.log(0.95)
    # 1,486 half-lives per step: the rule's beta2 (1e-447) is no Adam setting, so it is left
    # out with the reason, not printed as 0.0
    assert "halflife_rule" not in b
    assert "the half-life rule is left out: at 1.49e+03 half-lives" in b["source"]
    near = beta2_for(640, beta2=0.95, proxy_batch_tokens=64)  # 0.95^10 = 0.60: still an Adam beta2
    assert near["halflife_rule"]["halflife_tokens"] == pytest.approx(t_half)  # 865 tokens
    assert near["halflife_rule"]["value"] == pytest.approx(0.95 ** 10)
    assert "halflife_rule" not in beta2_for(64 * 14, beta2=0.95, proxy_batch_tokens=64)  # 0.95^14 = 0.49
    assert beta2_for(64, beta2=0.95, proxy_batch_tokens=64)["halflife_rule"]["value"] == pytest.approx(0.95)
    # opted in: 0.5^(B / t½) at the target's batch
    on = beta2_for(4096, halflife_tokens=t_half)
    assert on["value"] == pytest.approx(0.95 ** 64) and "Marek" in on["source"]
    plan = plan_kw(tokens=8e6, laws=laws(), batch_sequences=64, beta2_halflife_tokens=t_half, **KW)
    assert plan.beta2 == pytest.approx(0.5 ** (4096 / t_half)) == plan.projected["beta2"]["value"]
    with pytest.raises(ValueError, match="beta2_halflife_tokens"):
        beta2_for(64, halflife_tokens=-1.0)
    # extremes whose beta2 rounds to 1 (torch's error) or to 0 (no second moment, silently)
    for t, got in ((1e300, "1"), (1e-300, "0")):
        with pytest.raises(ValueError, match=re.escape(f"beta2_halflife_tokens={t!r} gives beta2 = {got} ")):
            beta2_for(4096, halflife_tokens=t)


@pytest.mark.parametrize(("t_half", "got"), [(1e300, "1"), (1e-300, "0")])
def test_a_half_life_whose_beta2_rounds_to_0_or_1_is_refused_naming_it(t_half, got) -> None:
    from mutransfer.training.config import OptimSection

    with pytest.raises(ValueError, match=re.escape(f"beta2_halflife_tokens={t_half!r} gives Adam's beta2 = ")
                       + rf".* = {got} at a batch of 256 tokens"):
        OptimSection(beta2_halflife_tokens=t_half).adam_beta2(256)


def test_beta2_and_its_half_life_together_are_refused() -> None:
    from mutransfer.training.config import OptimSection

    with pytest.raises(ValueError, match="beta2=0.9 and beta2_halflife_tokens=1000.0 are both set"):
        TrainConfig.from_flat({"beta2": 0.9, "beta2_halflife_tokens": 1000.0})
    assert OptimSection(beta2_halflife_tokens=1000.0).adam_beta2(256) == 0.5 ** (256 / 1000.0)


def test_trainer_takes_beta2_from_the_half_life() -> None:
    base = dict(preset="gpt-tiny", width=32, depth=1, head_dim=16, seq_len=32, batch_size=8, steps=1,
                threads=1, data_max_bytes=200_000, device="cpu")
    t = Trainer(TrainConfig.from_flat({**base, "beta2_halflife_tokens": 1000.0}))
    betas = [g["betas"] for o in t.opt.optimizers for g in o.param_groups if "betas" in g]
    assert betas and all(b == (0.9, pytest.approx(0.5 ** (256 / 1000.0))) for b in betas)  # 8 x 32 tokens
    plain = Trainer(TrainConfig.from_flat(base))
    assert all(g["betas"][1] == 0.95 for o in plain.opt.optimizers for g in o.param_groups if "betas" in g)


def test_card_warns_when_the_hidden_lr_leaves_the_published_range() -> None:
    from mutransfer.card.trust import card_warnings

    card = {"projected": {"baselines": {"deepseek": {"lr": 4e-4}, "step_law": {"lr": 2e-4}}},
            "param_groups": [{"role": "hidden", "optimizer": "adamw", "lr": 7e-4},
                             {"role": "input", "optimizer": "adamw", "lr": 0.1}]}
    assert not any("published LRs" in w for w in card_warnings(card))  # 1.75x the highest: within 2x
    card["param_groups"][0]["lr"] = 1.6e-3  # 4x the highest
    (w,) = [w for w in card_warnings(card) if "published LRs" in w]
    assert "4x above" in w and "(0.0002-0.0004" in w
    card["param_groups"][0]["lr"] = 2e-5  # 10x below the lowest
    assert any("10x below" in w for w in card_warnings(card))
    card["param_groups"][0]["optimizer"] = "muon"  # Muon's LRs are on another scale: not judged
    assert not any("published LRs" in w for w in card_warnings(card))


def test_batch_in_doubt_grows_the_proxys_bracketed_best_batch_as_the_published_laws_grow(plan_kw) -> None:
    from analysis.baselines import anchored_published_batch

    # known answer: the anchor 34 tokens at 16,384 grown 8x in D by D^(0.3271/0.4757) and D^0.571
    a = anchored_published_batch(2**17, 2**14, 34.0, 16.0, 46.0)
    g = 0.3271 / 0.4757
    assert a["batch_tokens"] == pytest.approx(34.0 * 8**g, rel=1e-12)
    assert a["laws"]["step_law"] == pytest.approx(34.0 * 8**0.571, rel=1e-12)
    assert (a["lo"], a["hi"]) == (pytest.approx(16.0 * 8**0.571), pytest.approx(46.0 * 8**g))
    # at the anchor's own budget the anchor comes back, whatever the exponent
    assert anchored_published_batch(2**14, 2**14, 34.0)["batch_tokens"] == pytest.approx(34.0)
    with pytest.raises(ValueError, match="anchor_batch"):
        anchored_published_batch(2**17, 2**14, -1.0)

    # three budgets at the grid's edge and the largest bracketed: auto takes the anchored law
    budgets = [{"tokens": 1e6, "batch_opt": 512.0, "lo": 512.0, "hi": 600.0, "edge": "low"},
               {"tokens": 2e6, "batch_opt": 512.0, "lo": 512.0, "hi": 700.0, "edge": "low"},
               {"tokens": 4e6, "batch_opt": 512.0, "lo": 512.0, "hi": 800.0, "edge": "low"},
               {"tokens": 8e6, "batch_opt": 900.0, "lo": 700.0, "hi": 1200.0, "edge": ""}]
    fit = laws(budgets=budgets)
    assert fit.batch_anchor() == {"tokens": 8e6, "batch_tokens": 900.0, "lo": 700.0, "hi": 1200.0}
    d = 6.4e7
    plan = plan_kw(tokens=d, laws=fit, **KW)
    want = anchored_published_batch(d, 8e6, 900.0, 700.0, 1200.0)
    est = plan.projected["batch_tokens"]
    assert est["value"] == pytest.approx(want["batch_tokens"])
    assert (est["lo"], est["hi"]) == (pytest.approx(want["lo"]), pytest.approx(want["hi"]))
    assert "bracketed B*" in est["source"] and any("bracketed B*" in w for w in plan.warnings)
    # --batch-rule published still takes the published laws; with no bracketed budget, auto does too
    pub = plan_kw(tokens=d, laws=fit, batch_rule="published", **KW)
    assert pub.projected["batch_tokens"]["value"] == pytest.approx(published_batch(d)["batch_tokens"])
    none = laws(budgets=[{**b, "edge": "low"} for b in budgets])
    assert none.batch_anchor() is None
    assert plan_kw(tokens=d, laws=none, **KW).projected["batch_tokens"]["value"] == pytest.approx(
        published_batch(d)["batch_tokens"])
    with pytest.raises(ValueError, match="anchored needs a budget"):
        plan_kw(tokens=d, laws=none, batch_rule="anchored", **KW)


def test_a_baseline_stretched_past_any_trainable_lr_is_flagged() -> None:
    from analysis.baselines import scaling_baselines
    from mutransfer.card.plan import flag_absurd_baselines

    # the demo's numbers: proxy optimum 0.018 at 1,024 tokens per step, target batch 2,048x
    b = scaling_baselines(tokens=1e9, batch_tokens=2_097_152, ref_lr=0.0175, ref_batch_tokens=1024,
                          ref_tokens=2e6, n_params=1e8)
    flag_absurd_baselines(b, 0.0175, 2048.0)
    assert b["linear_rule"]["lr"] == pytest.approx(35.84) and b["linear_rule"]["applies"] is False
    assert "beyond any trainable Adam LR" in b["linear_rule"]["why_not"]
    assert b["sqrt_rule"]["lr"] == pytest.approx(0.792, rel=1e-3)
    assert b["sqrt_rule"]["applies"] is False  # 45x the anchor
    assert "applies" not in b["power_lines"] and "applies" not in b["deepseek"]  # plausible ones untouched
    near = scaling_baselines(tokens=1e7, batch_tokens=4096, ref_lr=0.0175, ref_batch_tokens=1024,
                             ref_tokens=2e6)
    flag_absurd_baselines(near, 0.0175, 4.0)
    assert not any("applies" in v for v in near.values())
