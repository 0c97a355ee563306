"""The LR law's surge form in batch (analysis.lr_surge) and the choice between it and the power law.

Known answers: sweeps drawn from a loss surface whose LR optima follow either the surge
eta*(B) = 2·eta_max/(sqrt(B_peak/B) + sqrt(B/B_peak)) with eta_max(D), B_peak(D) power laws
in D, or the power law c·B^a·D^b; the fit must pick the form the sweep was drawn from and,
for the surge, recover eta_max and B_peak inside their intervals.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.lr_surge import choose_form, fit_surge, surge_log_lr
from analysis.scaling_fit import ScalingLawFit

BUDGETS = (2.0**20, 2.0**21, 2.0**22, 2.0**23)
BATCHES = tuple(2.0**k for k in range(12, 18))


def eta_max(d: float) -> float:
    return 2.0**-3 * d**-0.25


def b_peak(d: float) -> float:
    return 2.0**-5 * d  # 2^15 at the smallest budget, 2^18 at the largest: peaks inside and past the grid


def surge_eta(b: float, d: float) -> float:
    return 2 * eta_max(d) / (math.sqrt(b_peak(d) / b) + math.sqrt(b / b_peak(d)))


def power_eta(b: float, d: float) -> float:
    return 2.0**-12 * b**0.5 * d**-0.25


def sweep(form: str, rng: int = 0, noise: float = 0.002, seeds: int = 3) -> pd.DataFrame:
    """loss = 3 + 50·D^-0.3 + 0.02·(log2 eta − log2 eta*)² + 0.01·(log2 B − log2 B*)² + noise,
    eta* from ``form``; LR grid 9 points a factor 2 apart around each cell's optimum."""
    r = np.random.default_rng(rng)
    rows = []
    for d in BUDGETS:
        for b in BATCHES:
            eta = surge_eta(b, d) if form == "surge" else power_eta(b, d)
            c = math.floor(math.log2(eta))
            for t in np.arange(c - 4.0, c + 5.0):
                for s in range(seeds):
                    loss = (3 + 50 * d**-0.3 + 0.02 * (t - math.log2(eta)) ** 2
                            + 0.01 * (math.log2(b) - 0.5 * math.log2(d) - 4) ** 2 + r.normal(0, noise))
                    rows.append(dict(lr=2.0**t, batch_tokens=b, tokens=d, loss=loss, seed=s, diverged=False,
                                     weight_decay=0.1, seq_len=128))
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def surge_fit() -> ScalingLawFit:
    return ScalingLawFit(n_boot=300).fit(sweep("surge", rng=1))


@pytest.fixture(scope="module")
def power_fit() -> ScalingLawFit:
    return ScalingLawFit(n_boot=300).fit(sweep("power", rng=2))


def test_surge_sweep_recovers_peak_and_max_within_their_intervals(surge_fit: ScalingLawFit) -> None:
    assert surge_fit.lr_form == "surge"
    scores = surge_fit.lr_form_choice_["scores"]
    assert scores["surge"] < 0.1 < scores["power"], scores  # the power law misses by > 0.1 octave
    for d in BUDGETS:
        at = surge_fit.surge_at(d)
        for name, true in (("lr_max", eta_max(d)), ("batch_peak", b_peak(d))):
            v, lo, hi = at[name]
            assert lo <= true <= hi, (name, d, at[name], true)
            assert abs(math.log2(v / true)) < 0.1, (name, d, v, true)
    # the law predicts the optimum past the peak, where the LR falls with batch
    b, d = 2.0**17, 2.0**20
    assert surge_fit.predict_lr(b, d)[0] == pytest.approx(surge_eta(b, d), rel=0.05)
    assert surge_fit.predict_lr(b, d)[0] < surge_fit.predict_lr(2.0**15, d)[0]


def test_power_sweeps_keep_the_power_law() -> None:
    """A sweep whose optima rise as B^0.5 all the way shows no peak: the power law is kept,
    in each of 4 fresh sweeps (the surge's rising flank is also B^0.5, so only the peak
    can tell them apart)."""
    for r in range(4):
        f = ScalingLawFit(n_boot=0, loso=False).fit(sweep("power", rng=10 + r))
        assert f.lr_form == "power", (r, f.lr_form_choice_)
        assert f.lr_form_choice_["peak_shown"] is False


def test_choose_form_on_exact_optima() -> None:
    """Noise-free optima: the surge's held-out error is ~0 and the power law's is not."""
    lb, ld = np.meshgrid(np.log(BATCHES), np.log(BUDGETS), indexing="ij")
    lb, ld = lb.ravel(), ld.ravel()
    y = np.log([surge_eta(math.exp(b), math.exp(d)) for b, d in zip(lb, ld, strict=True)])
    theta = fit_surge(lb, ld, y)
    assert np.allclose(surge_log_lr(theta, lb, ld), y, atol=1e-6)
    assert theta[3] == pytest.approx(1.0, abs=1e-4) and math.exp(theta[2]) == pytest.approx(2.0**-5, rel=1e-3)
    ch = choose_form(lb, ld, y, theta)
    assert ch["form"] == "surge" and ch["scores"]["surge"] < 1e-3 < 0.1 < ch["scores"]["power"]
    y_pow = np.log([power_eta(math.exp(b), math.exp(d)) for b, d in zip(lb, ld, strict=True)])
    ch = choose_form(lb, ld, y_pow)
    assert ch["form"] == "power" and ch["scores"]["power"] < 1e-9


def test_no_saturation_hold_for_the_surge(surge_fit: ScalingLawFit, power_fit: ScalingLawFit) -> None:
    """The power law is held past the largest measured batch; the surge is evaluated at the
    batch itself, and its LR ratio past the peak is below 1 (the LR falls)."""
    far = 2.0**22
    assert power_fit.lr_batch(far, 2.0**23) == power_fit.measured_batch_tokens[1]
    assert surge_fit.lr_batch(far, 2.0**23) == far
    r, lo, hi = surge_fit.lr_ratio((2.0**18, far), (2.0**23, 2.0**23))
    true = surge_eta(far, 2.0**23) / surge_eta(2.0**18, 2.0**23)
    assert lo <= true <= hi and r < 1 and r == pytest.approx(true, rel=0.1)


def test_fit_json_keeps_the_form_and_an_old_one_reads_as_the_power_law(surge_fit: ScalingLawFit) -> None:
    doc = json.loads(json.dumps(surge_fit.to_dict()))
    assert doc["lr"]["form"] == "surge"
    assert set(doc["lr"]["form_scores"]) >= {"power", "surge", "criterion"}
    back = ScalingLawFit.from_dict(doc)
    assert back.lr_form == "surge"
    assert back.report().count("LR form in batch: surge") == 1
    assert back.to_dict()["lr"]["form_scores"] == doc["lr"]["form_scores"]
    assert back.to_dict()["lr"]["surge"] == doc["lr"]["surge"]
    for b, d in ((2.0**13, 2.0**20), (2.0**20, 2.0**25)):
        assert np.allclose(back.lr_interval(b, d), surge_fit.lr_interval(b, d), rtol=1e-9)
    assert back.project(2.0**25).lr.value == pytest.approx(surge_fit.project(2.0**25).lr.value, rel=1e-9)
    old = {**doc, "lr": {k: v for k, v in doc["lr"].items() if k not in ("form", "form_scores", "surge")}}
    assert ScalingLawFit.from_dict(old).lr_form == "power"
    with pytest.raises(ValueError, match=r"lr\.form must be 'power' or 'surge', got 'peak'"):
        ScalingLawFit.from_dict({**doc, "lr": {**doc["lr"], "form": "peak"}})
    with pytest.raises(ValueError, match=r"lr\.surge\.coef_log must be 4 finite numbers"):
        ScalingLawFit.from_dict({**doc, "lr": {**doc["lr"], "surge": {"coef_log": [1.0, None, 2.0, 3.0]}}})


def test_report_names_the_form_and_both_scores(surge_fit: ScalingLawFit) -> None:
    text = surge_fit.report()
    s = surge_fit.lr_form_choice_["scores"]
    assert "LR form in batch: surge" in text
    assert f"power {s['power']:.3f}" in text and f"surge {s['surge']:.3f}" in text
    assert "B_peak =" in text


def test_forced_form_and_bad_form() -> None:
    f = ScalingLawFit(n_boot=0, loso=False, form="power").fit(sweep("surge", rng=3))
    assert f.lr_form == "power"
    with pytest.raises(ValueError, match="form must be one of .* got 'cosh'"):
        ScalingLawFit(form="cosh")


@settings(max_examples=40, deadline=None)
@given(log2_b=st.floats(8.0, 26.0), log2_d=st.floats(16.0, 34.0), form=st.sampled_from(["power", "surge"]))
def test_both_forms_bands_are_finite_and_hold_the_point(surge_fit: ScalingLawFit, log2_b: float, log2_d: float,
                                                        form: str) -> None:
    doc = surge_fit.to_dict()
    f = ScalingLawFit.from_dict({**doc, "lr": {**doc["lr"], "form": form}})
    assert f.lr_form == form
    p, lo, hi = (float(v[0]) for v in f.lr_interval(2.0**log2_b, 2.0**log2_d))
    assert all(math.isfinite(v) and v > 0 for v in (p, lo, hi))
    assert lo < p < hi
    r, rlo, rhi = f.lr_ratio((2.0**15, 2.0**log2_b), (2.0**22, 2.0**log2_d))
    assert all(math.isfinite(v) and v > 0 for v in (r, rlo, rhi)) and rlo <= r <= rhi
