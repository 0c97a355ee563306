"""The batch laws the card falls back on and caps with: the published laws in the token
budget (DeepSeek LLM's B_opt through its D_opt(C), Step Law's B(D)), the measured-GNS
critical batch B_simple(D), and the LR law held past the saturation batch."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.baselines import deepseek_batch_in_tokens, deepseek_llm, published_batch, step_law
from analysis.critical_batch import noise_scale_law
from analysis.scaling_fit import ScalingLawFit

SEQ = 64


@given(st.floats(min_value=1e17, max_value=1e25))
@settings(max_examples=50, deadline=None)
def test_on_deepseeks_frontier_the_batch_in_tokens_is_their_batch_in_compute(c: float) -> None:
    """B(D) written through D_opt(C) = 5.8316·C^0.4757 equals B_opt(C) where D = D_opt(C)."""
    d = 5.8316 * c**0.4757
    assert deepseek_batch_in_tokens(d)["batch_tokens"] == pytest.approx(deepseek_llm(c)["batch_tokens"],
                                                                        rel=1e-9)


def test_published_batch_known_answers() -> None:
    """0.0869·D^0.6876 (the issue's form of DeepSeek in D) and Step Law 0.58·D^0.571; the
    interval spans both; off the frontier B(6·N·D) parts from B(D) as the card-regret target
    showed (0.14 tokens per parameter: 136 sequences of 16 against 18)."""
    for d in (1e5, 1e8, 2.6e10):
        p = published_batch(d)
        assert p["batch_tokens"] == pytest.approx(0.0869 * d**0.6876, rel=2e-3)
        assert p["laws"]["step_law"] == pytest.approx(step_law(None, d)["batch_tokens"])
        assert p["lo"] == min(p["laws"].values()) and p["hi"] == max(p["laws"].values())
    # the demo's target at 20 tokens per parameter: within 2% of B(6·N·D) (N non-embedding 1.3e9)
    d, n = 2.6e10, 1.3e9
    b_c = deepseek_llm(6 * n * d)["batch_tokens"]
    assert published_batch(d)["batch_tokens"] == pytest.approx(b_c, rel=0.02)
    # the card-regret target (width 128, depth 4, 2^17 tokens, ~0.9M non-embedding parameters)
    d, n = 2.0**17, 9.3e5
    assert deepseek_llm(6 * n * d)["batch_tokens"] / published_batch(d)["batch_tokens"] > 4


def _sweep(with_gns: bool = True) -> pd.DataFrame:
    """Known laws: eta* = 2^-12·B^0.5·D^-0.25, B* = 16·D^0.5, and the best-LR runs' GNS
    B_simple = 0.5·D^0.47 tokens (gns is in sequences)."""
    r = np.random.default_rng(1)
    rows = []
    for d in (2.0**20, 2.0**21, 2.0**22, 2.0**23):
        for b in (2.0**k for k in range(12, 18)):
            eta = 2.0**-12 * b**0.5 * d**-0.25
            for t in np.arange(-14.0, -5.5):
                for s in range(2):
                    loss = (3 + 50 * d**-0.3 + 0.02 * (t - math.log2(eta)) ** 2
                            + 0.01 * (math.log2(b) - 0.5 * math.log2(d) - 4) ** 2 + r.normal(0, 0.002))
                    gns = 0.5 * d**0.47 / SEQ * math.exp(r.normal(0, 0.05))
                    rows.append(dict(lr=2.0**t, batch_tokens=b, tokens=d, loss=loss, seed=s, diverged=False,
                                     weight_decay=0.1, seq_len=SEQ, **({"gns": gns} if with_gns else {})))
    return pd.DataFrame(rows)


def test_noise_scale_law_recovers_the_critical_batch_law() -> None:
    law = noise_scale_law(_sweep(), SEQ)
    assert law is not None
    assert law["exponent"] == pytest.approx(0.47, abs=0.03)
    assert law["coef"] * (2.0**22) ** law["exponent"] == pytest.approx(0.5 * (2.0**22) ** 0.47, rel=0.05)
    assert [r["tokens"] for r in law["by_tokens"]] == [2.0**20, 2.0**21, 2.0**22, 2.0**23]
    assert noise_scale_law(_sweep(with_gns=False), SEQ) is None
    assert noise_scale_law(_sweep(), None) is None


def test_fit_carries_the_noise_law_through_its_document() -> None:
    fit = ScalingLawFit(n_boot=50, loso=False).fit(_sweep())
    b, ext = fit.critical_batch_at(2.0**26)
    assert b == pytest.approx(0.5 * (2.0**26) ** 0.47, rel=0.15) and ext == pytest.approx(8.0)
    back = ScalingLawFit.from_dict(fit.to_dict())
    assert back.critical_batch_at(2.0**26) == pytest.approx((b, ext))
    with pytest.raises(ValueError, match="noise_scale.coef"):
        doc = fit.to_dict()
        ScalingLawFit.from_dict({**doc, "noise_scale": {**doc["noise_scale"], "coef": -1}})
    assert ScalingLawFit(n_boot=20, loso=False).fit(_sweep(with_gns=False)).critical_batch_at(1e9) is None


def test_lr_law_is_held_past_the_saturation_batch() -> None:
    """Inside the measured batches (and up to the critical batch) the fitted power law;
    past max(largest measured, B_simple(D)) the LR stays where it was."""
    fit = ScalingLawFit(n_boot=50, loso=False).fit(_sweep(with_gns=False))
    top = fit.measured_batch_tokens[1]
    assert fit.lr_batch(top / 4, 2.0**23) == top / 4
    assert fit.lr_batch(top * 64, 2.0**23) == top
    d = 2.0**30  # B_simple(2^30) = 0.5·2^14.1 = 8.8e3 tokens < 2^17: the measured edge holds it
    assert fit.lr_saturation_batch(d) == top
    gns = ScalingLawFit(n_boot=50, loso=False).fit(_sweep())
    d = 2.0**40  # B_simple(2^40) = 0.5·2^18.8 = 2.3e5 tokens > 2^17: the critical batch holds it,
    # when its law is trusted that far out (2^17x past its budgets; default limit 100x: not)
    assert gns.lr_saturation_batch(d, limit=1e6) == pytest.approx(gns.critical_batch_at(d)[0])
    assert gns.lr_saturation_batch(d) == top
    p = fit.project(2.0**26, seq_len=SEQ, batch_sequences=int(top * 64 / SEQ))
    assert p.lr.value == pytest.approx(float(fit.predict_lr(top, 2.0**26)[0]), rel=1e-9)
    assert "saturation batch" in p.lr.source
