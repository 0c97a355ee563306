from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.powerlaw import PowerLawFit


@settings(max_examples=25, deadline=None)
@given(
    a=st.floats(1e-3, 1e3),
    b=st.floats(-2.0, 2.0),
    n=st.integers(3, 12),
)
def test_exact_recovery_one_variable(a: float, b: float, n: int) -> None:
    x = np.geomspace(1.0, 1e4, n)
    fit = PowerLawFit(n_boot=0).fit(x, a * x**b)
    assert fit.params_["a"] == pytest.approx(a, rel=1e-9)
    assert fit.params_["b"] == pytest.approx(b, abs=1e-10)
    assert fit.sigma_ == pytest.approx(0.0, abs=1e-9)


@settings(max_examples=20, deadline=None)
@given(b=st.floats(-1.0, 1.0), c=st.floats(-1.0, 1.0))
def test_exact_recovery_two_variables_step_law_form(b: float, c: float) -> None:
    rng = np.random.default_rng(0)
    n_ = np.exp(rng.uniform(15, 22, 20))
    d_ = np.exp(rng.uniform(20, 27, 20))
    df = pd.DataFrame({"n_params": n_, "tokens": d_, "lr": 1.79 * n_**b * d_**c})
    fit = PowerLawFit(("n_params", "tokens"), "lr", n_boot=50).fit(df)
    assert set(fit.params_) == {"a", "b", "c"}
    assert fit.params_["b"] == pytest.approx(b, abs=1e-9)
    assert fit.params_["c"] == pytest.approx(c, abs=1e-9)
    assert fit.params_["a"] == pytest.approx(1.79, rel=1e-7)
    pred = fit.predict({"n_params": 1e10, "tokens": 1e12})
    assert pred[0] == pytest.approx(1.79 * 1e10**b * 1e12**c, rel=1e-7)


def test_prediction_interval_coverage_on_noisy_data() -> None:
    """90% prediction intervals cover ~90% of new observations (normal log noise)."""
    rng = np.random.default_rng(1)
    x = np.geomspace(10, 1e4, 12)
    hits, conf_hits, reps = 0, 0, 400
    for _ in range(reps):
        y = 2.0 * x**-0.5 * np.exp(rng.normal(0, 0.1, x.size))
        fit = PowerLawFit(n_boot=0).fit(x, y)
        x0 = 3e4
        new = 2.0 * x0**-0.5 * np.exp(rng.normal(0, 0.1))
        p = fit.predict(x0, level=0.9)
        hits += p.lo[0] <= new <= p.hi[0]
        c = fit.predict(x0, level=0.9, kind="confidence")
        conf_hits += c.lo[0] <= 2.0 * x0**-0.5 <= c.hi[0]
        assert c.hi[0] - c.lo[0] < p.hi[0] - p.lo[0]
    assert 0.85 <= hits / reps <= 0.95
    assert 0.85 <= conf_hits / reps <= 0.95


def test_bootstrap_ci_coverage_of_exponent() -> None:
    rng = np.random.default_rng(2)
    x = np.geomspace(1, 1e3, 20)
    covered, reps = 0, 100
    for i in range(reps):
        y = 5.0 * x**0.7 * np.exp(rng.normal(0, 0.2, x.size))
        fit = PowerLawFit(n_boot=200, level=0.9, random_state=i).fit(x, y)
        lo, hi = fit.ci_["b"]
        covered += lo <= 0.7 <= hi
        assert lo < fit.params_["b"] < hi
    # Percentile bootstrap with n=20 undercovers slightly; it must still be near 90%.
    assert 0.8 <= covered / reps <= 0.98


def test_default_bootstrap_count_is_1000_and_ci_brackets_estimate() -> None:
    x = np.geomspace(1, 100, 8)
    y = 3 * x**0.5 * np.exp(np.random.default_rng(0).normal(0, 0.05, 8))
    fit = PowerLawFit().fit(x, y)
    assert fit.n_boot == 1000
    assert fit.n_boot_used_ > 950  # only all-same-x draws are dropped
    for k in ("a", "b"):
        assert fit.ci_[k][0] < fit.params_[k] < fit.ci_[k][1]


def test_weights_zero_ignore_an_outlier() -> None:
    x = np.array([1.0, 2, 4, 8, 16, 32])
    y = 2 * x**0.3
    y_bad = y.copy()
    y_bad[-1] *= 10
    w = np.array([1, 1, 1, 1, 1, 0.0])
    fit = PowerLawFit(n_boot=0).fit(x, y_bad, weights=w)
    assert fit.params_["b"] == pytest.approx(0.3, abs=1e-12)
    unweighted = PowerLawFit(n_boot=0).fit(x, y_bad)
    assert abs(unweighted.params_["b"] - 0.3) > 0.1


def test_weight_column_from_dataframe() -> None:
    df = pd.DataFrame({"width": [1.0, 2, 4, 8, 16], "lr": [1, 0.5, 0.25, 0.125, 9.0],
                       "w": [1, 1, 1, 1, 0.0]})
    fit = PowerLawFit(weight="w", n_boot=0).fit(df)
    assert fit.params_["b"] == pytest.approx(-1.0, abs=1e-12)


def test_extrapolation_factor() -> None:
    fit = PowerLawFit(n_boot=0).fit([10.0, 20, 40, 80], [1.0, 2, 4, 8])
    np.testing.assert_allclose(fit.extrapolation_factor([40, 800, 1]), [1.0, 10.0, 10.0])


@pytest.mark.parametrize(
    ("x", "y", "match"),
    [
        ([1.0, 2.0], [1.0, 2.0], "at least 3 points"),
        ([1.0, 0.0, 2.0], [1.0, 2.0, 3.0], "0.0"),
        ([1.0, 2.0, 4.0], [1.0, -2.0, 3.0], "-2.0"),
        ([1.0, 2.0, np.nan], [1.0, 2.0, 3.0], "nan"),
        ([2.0, 2.0, 2.0], [1.0, 2.0, 3.0], "single value"),
    ],
)
def test_bad_input_raises_one_clear_error(x: list[float], y: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PowerLawFit(n_boot=0).fit(x, y)


def test_missing_column_is_named() -> None:
    df = pd.DataFrame({"width": [1, 2, 3], "loss": [1, 2, 3]})
    with pytest.raises(ValueError, match="'lr'"):
        PowerLawFit().fit(df)


def test_report_mentions_parameters_and_interval() -> None:
    fit = PowerLawFit("flops", "n_star", n_boot=100).fit([1.0, 2, 4, 8], [1.0, 1.5, 2.1, 3.2])
    text = fit.report()
    assert "n_star = a · flops^b" in text
    assert f"{fit.params_['b']:.6g}" in text
    assert "95% percentile bootstrap" in text


def test_predict_before_fit_raises() -> None:
    with pytest.raises(ValueError, match="not fitted"):
        PowerLawFit().predict(3.0)
