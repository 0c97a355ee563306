"""tau* measured at its optimum by ScalingLawFit, on a table with a weight-decay axis at one
batch whose loss surface has a known tau* (sweeps.runners.synthetic_tau_loss)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.scaling_fit import ScalingLawFit
from sweeps.runners import SYNTHETIC_TAU, synthetic_tau_loss

SEQ = 64


def _table(lams: tuple[float, ...] = (0.1, 0.2, 0.4, 0.8, 1.6), seeds: int = 2, noise: float = 0.005,
           seed: int = 0) -> pd.DataFrame:
    """4 budgets x 4 batches at lambda 0.1; the lambdas at batch 16; 7 LRs around sqrt(B)."""
    rng = np.random.default_rng(seed)
    rows = []
    for d in (32768, 65536, 131072, 262144):
        for b in (8, 16, 32, 64):
            for lam in lams if b == 16 else (0.1,):
                for o in (-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5):
                    lr = 0.0072 * (b / 8) ** 0.5 * 2**o
                    for s in range(seeds):
                        rows.append(dict(lr=lr, batch_tokens=b * SEQ, tokens=d, seed=s, weight_decay=lam,
                                         diverged=False, seq_len=SEQ,
                                         loss=synthetic_tau_loss(lr, b * SEQ, d, lam) + rng.normal(0, noise)))
    return pd.DataFrame(rows)


def test_seeded_tau_star_lies_in_its_interval_and_the_laws_ignore_the_axis() -> None:
    df = _table()
    fit = ScalingLawFit(n_boot=200).fit(df)
    doc = fit.to_dict()["tau"]
    assert doc["source"] == "measured" and doc["at"]["batch_tokens"] == 16 * SEQ
    lo, hi = doc["ci"]
    assert lo <= SYNTHETIC_TAU <= hi and hi / lo < 1.6  # the seed bootstrap: noise 0.005, 2 seeds
    assert abs(math.log2(doc["value"] / SYNTHETIC_TAU)) < 0.2
    # the laws are fitted on lambda 0.1 only: the same as without the axis
    alone = ScalingLawFit(n_boot=0).fit(df[df["weight_decay"] == 0.1])
    both = ScalingLawFit(n_boot=0).fit(df)
    for k in ("lr_coef", "lr_exp_batch", "lr_exp_tokens", "batch_coef", "batch_exp_tokens"):
        assert both.params_[k] == alone.params_[k]
    assert alone.to_dict()["tau"]["source"] == "default λ"


def test_tau_star_past_the_lambda_grid_is_a_flagged_bound() -> None:
    """lambda* at the largest budget is ~0.43: a grid of 0.1..0.2 gives timescales all above
    tau* = 1, so tau* sits at the low edge of the tau grid: the value is a bound (the largest
    lambda's tau) and the interval is open below, yet holds tau*."""
    fit = ScalingLawFit(n_boot=100).fit(_table(lams=(0.1, 0.14, 0.2), noise=0.0, seeds=1))
    doc = fit.to_dict()
    assert doc["tau"]["source"] == "measured" and doc["tau"]["by_tokens"][-1]["edge"] == "low"
    assert doc["tau"]["value"] > SYNTHETIC_TAU and doc["tau"]["ci"][0] is None  # open: null, not 0
    assert SYNTHETIC_TAU <= doc["tau"]["ci"][1]
    assert doc["tau"]["weight_decay"] == pytest.approx(0.2, rel=1e-6)
    assert any("only a bound" in w for w in doc["warnings"])
    back = ScalingLawFit.from_dict(doc)
    assert back.params_["tau"] == pytest.approx(doc["tau"]["value"]) and back.tau_source_ == "measured"
