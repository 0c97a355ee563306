from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.critical_batch import (
    CriticalBatchFit,
    first_crossing,
    fit_critical_batch,
    fit_noise_scale,
    steps_to_target,
)
from analysis.powerlaw import PowerLawFit

B = np.array([32.0, 64, 128, 256, 512, 1024, 2048, 4096])


def test_exact_recovery_noise_free() -> None:
    s = 1500.0 + 3.0e6 / B
    fit = CriticalBatchFit(n_boot=0).fit(B, s)
    assert fit.params_["S_min"] == pytest.approx(1500.0, rel=1e-9)
    assert fit.params_["E_min"] == pytest.approx(3.0e6, rel=1e-9)
    assert fit.params_["B_crit"] == pytest.approx(2000.0, rel=1e-9)
    # CBS = E_min/(5 S_min) + 1.2 B0 = 400 + 307.2
    assert fit.params_["CBS"] == pytest.approx(707.2, rel=1e-9)
    np.testing.assert_allclose(fit.predict(B), s, rtol=1e-9)
    np.testing.assert_allclose(fit.examples(B), B * s, rtol=1e-9)


def test_cbs_overshoot_definition_solves_the_examples_equation() -> None:
    fit = CriticalBatchFit(n_boot=0, b0=128, overshoot=0.3).fit(B, 900.0 + 1.0e6 / B)
    cbs = fit.params_["CBS"]
    assert fit.examples(cbs)[0] == pytest.approx(1.3 * fit.examples(128)[0], rel=1e-12)


def test_noisy_recovery_within_bootstrap_ci() -> None:
    rng = np.random.default_rng(0)
    s = (1500.0 + 3.0e6 / B) * np.exp(rng.normal(0, 0.03, B.size))
    fit = CriticalBatchFit(n_boot=200).fit(pd.DataFrame({"batch_size": B, "steps_to_target": s}))
    assert fit.ci_["B_crit"][0] <= 2000.0 <= fit.ci_["B_crit"][1]
    assert fit.ci_["S_min"][0] <= 1500.0 <= fit.ci_["S_min"][1]
    assert fit.ci_["E_min"][0] <= 3.0e6 <= fit.ci_["E_min"][1]


def test_first_crossing_interpolates() -> None:
    steps = np.array([0.0, 10, 20, 30])
    loss = np.array([4.0, 3.0, 2.0, 1.0])
    assert first_crossing(steps, loss, 2.5) == pytest.approx(15.0)
    assert first_crossing(steps, loss, 4.0) == 0.0
    assert first_crossing(steps, loss, 0.5) == np.inf


def test_first_crossing_rejects_nan_curve() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        first_crossing([1, 2, 3], [3.0, np.nan, 1.0], 2.0)


def test_curves_to_steps_to_target_to_fit_end_to_end() -> None:
    """Loss curves built so that the target is reached after exactly S(B) steps."""
    s_min, e_min = 800.0, 1.6e6
    rows = []
    for b in B:
        s_true = s_min + e_min / b
        for step in np.arange(0.0, 3 * s_true, 25.0):
            rows.append({"batch_size": b, "step": step, "loss": 3.0 + 1.0 / (1 + step / s_true)})
    curves = pd.DataFrame(rows)
    table = steps_to_target(curves, 3.5, group_by="batch_size")
    assert table["reached"].all()
    np.testing.assert_allclose(table["steps_to_target"], s_min + e_min / B, rtol=2e-3)
    fit = CriticalBatchFit(n_boot=0).fit(table)
    assert fit.params_["B_crit"] == pytest.approx(e_min / s_min, rel=0.01)


def test_unreached_runs_dropped_and_counted() -> None:
    df = pd.DataFrame({"batch_size": [*B, 8192.0], "steps_to_target": [*(900 + 1e6 / B), np.inf]})
    fit = CriticalBatchFit(n_boot=0).fit(df)
    assert fit.n_dropped_ == 1 and fit.n_ == B.size


def test_too_few_batch_sizes_raises() -> None:
    with pytest.raises(ValueError, match="at least 3 distinct batch sizes"):
        CriticalBatchFit().fit([64, 128, 128], [10.0, 8.0, 8.1])


def test_group_errors_name_the_group() -> None:
    df = pd.DataFrame({"n_params": [1, 1, 1, 2, 2, 2], "batch_size": [1.0, 2, 4, 1, 2, 4],
                       "steps_to_target": [10.0, 6, 4, 10, -6, 4]})
    with pytest.raises(ValueError, match="n_params=2"):
        fit_critical_batch(df, group_by="n_params")


def test_noise_scale_power_law_in_loss() -> None:
    # Kaplan et al. 2020: B_crit(L) = B* / L^(1/alpha_B), B* = 2e8, alpha_B = 0.21
    loss = np.linspace(2.5, 5.0, 15)
    gns = 2e8 * loss ** (-1 / 0.21) * np.exp(np.random.default_rng(1).normal(0, 0.05, 15))
    df = pd.DataFrame({"loss": loss, "gns": gns, "diverged": False})
    df.loc[len(df)] = {"loss": np.nan, "gns": 5.0, "diverged": True}
    fit = fit_noise_scale(df, n_boot=200)
    assert isinstance(fit, PowerLawFit) and fit.n_ == 15
    assert fit.ci_["b"][0] <= -1 / 0.21 <= fit.ci_["b"][1]
    assert fit.params_["b"] == pytest.approx(-1 / 0.21, rel=0.05)


def test_percentile_interval_is_unbounded_not_nan_next_to_an_infinite_replicate() -> None:
    """A bootstrap B_crit = E_min/S_min with S_min fitted to 0 is +inf; linear
    interpolation next to it would give inf·0 = NaN. The interval's upper side is then
    +inf (unbounded) and the finite side and finite columns are the usual percentiles."""
    from analysis._stats import percentile_interval

    finite = np.arange(1.0, 101.0)
    col = finite.copy()
    col[-10:] = np.inf  # 10% of replicates unbounded: the 95th percentile lands among them
    with np.errstate(invalid="ignore"):
        assert np.isnan(np.percentile(col, 95))  # what plain interpolation gives
    lo, hi = percentile_interval(np.stack([finite, col], axis=1), 0.9)
    assert not np.isnan(lo).any() and not np.isnan(hi).any()
    assert lo[0] == pytest.approx(np.percentile(finite, 5))
    assert hi[0] == pytest.approx(np.percentile(finite, 95))
    assert lo[1] == pytest.approx(np.percentile(finite, 5)) and hi[1] == np.inf
