"""The published laws as a prior and the card's LR weighed between it and the data
(analysis.prior): known answers, properties, and the bound case."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis.baselines import deepseek_llm, step_law
from analysis.prior import LAW_SD_LOG, OUT_OF_RANGE_SD_PER_E_FOLD, published_lr_prior, weigh

Z = NormalDist().inv_cdf(0.95)


def test_prior_inside_both_ranges_is_the_laws_log_mean_with_their_spread() -> None:
    n, d = 5e8, 5e10  # inside Step Law's N and D ranges; C = 1.5e20 is past DeepSeek's 2e19
    p = published_lr_prior(n, d)
    ds, sl = deepseek_llm(6 * n * d)["lr"], step_law(n, d)["lr"]
    assert p["value"] == pytest.approx(math.sqrt(ds * sl), rel=1e-12)
    assert p["laws"]["step_law"]["e_folds_outside"] == 0.0
    out = math.log(6 * n * d / 2e19)
    assert p["laws"]["deepseek"]["e_folds_outside"] == pytest.approx(out)
    half = abs(math.log(ds / sl)) / 2
    assert p["sd_log"] == pytest.approx(math.sqrt(LAW_SD_LOG**2 + half**2 + (OUT_OF_RANGE_SD_PER_E_FOLD * out)**2))
    assert p["lo"] == pytest.approx(p["value"] * math.exp(-Z * p["sd_log"]))
    assert published_lr_prior(None, d) is None
    with pytest.raises(ValueError, match="n_params"):
        published_lr_prior(-1, d)


def test_a_target_far_below_the_laws_ranges_gets_a_wide_prior() -> None:
    small, big = published_lr_prior(7e6, 1.3e5), published_lr_prior(1e9, 2e10)
    assert small["e_folds_outside"] > 9 and small["sd_log"] > 2 * big["sd_log"]


def test_equal_spreads_give_the_geometric_mean_and_a_sqrt2_narrower_interval() -> None:
    prior = {"value": 4e-3, "sd_log": 0.5, "laws": {}, "e_folds_outside": 0.0, "source": "s"}
    lo, hi = 1e-3 * math.exp(-Z * 0.5), 1e-3 * math.exp(Z * 0.5)
    r = weigh(1e-3, lo, hi, 0.9, prior, hidden_mult=1.0)
    assert r["weight_prior"] == pytest.approx(0.5)
    assert r["value"] == pytest.approx(2e-3, rel=1e-12)
    assert math.log(r["hi"] / r["lo"]) == pytest.approx(math.log(hi / lo) / math.sqrt(2), rel=1e-9)
    # the prior is in hidden-matrix units: a hidden LR 1/8 of the base puts it at 8x in base units
    r8 = weigh(1e-3, lo, hi, 0.9, prior, hidden_mult=0.125)
    assert r8["prior"]["value"] == pytest.approx(3.2e-2) and r8["value"] == pytest.approx(math.sqrt(1e-3 * 3.2e-2))


@given(st.floats(-8, -1), st.floats(0.01, 5), st.floats(-8, -1), st.floats(0.05, 3))
def test_the_result_lies_between_data_and_prior_and_is_never_wider(log_d: float, sd_d: float,
                                                                   log_p: float, sd_p: float) -> None:
    prior = {"value": 10**log_p, "sd_log": sd_p, "laws": {}, "e_folds_outside": 0.0, "source": "s"}
    v = 10**log_d
    r = weigh(v, v * math.exp(-Z * sd_d), v * math.exp(Z * sd_d), 0.9, prior, hidden_mult=1.0)
    a, b = sorted((v, 10**log_p))
    assert a * (1 - 1e-9) <= r["value"] <= b * (1 + 1e-9)
    assert r["hi"] / r["lo"] <= math.exp(2 * Z * min(sd_d, sd_p)) * (1 + 1e-9)
    # the narrower side dominates
    assert (r["weight_prior"] > 0.5) == (sd_p < sd_d) or math.isclose(sd_p, sd_d, rel_tol=1e-6)


def test_a_bound_keeps_its_open_side_and_shows_the_prior_beside_it() -> None:
    prior = published_lr_prior(1e9, 2e10)
    r = weigh(0.01, 0.005, None, 0.9, prior, hidden_mult=0.25)
    assert r["weight_prior"] == 0.0 and (r["value"], r["lo"], r["hi"]) == (0.01, 0.005, None)
    assert r["prior"]["value"] == pytest.approx(prior["value"] / 0.25)
    with pytest.raises(ValueError, match="hidden_mult"):
        weigh(0.01, 0.005, 0.02, 0.9, prior, hidden_mult=0.0)
