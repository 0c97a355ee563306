"""The measured best loss and the seed-paired ratio of two arms: known answers, never below
the data, exactly 1 for the same runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.best_loss import measured_best, paired_best_ratio
from analysis.optimum import OptimumFit


def scan(curve: dict[float, list[float]]) -> pd.DataFrame:
    """{log2 lr: [loss of seed 0, seed 1, ...]} -> rows."""
    return pd.DataFrame([{"lr": 2.0**t, "seed": s, "loss": v} for t, vs in curve.items()
                         for s, v in enumerate(vs)])


def test_known_answer_and_the_edge_flag() -> None:
    df = scan({-7: [2.10, 2.14], -6: [2.00, 2.04], -5: [2.02, 2.03]})
    b = measured_best(df)
    assert b["best"] == pytest.approx(2.02) and b["lr"] == 2.0**-6 and not b["at_edge"]
    assert measured_best(df, seeds=[1])["best"] == pytest.approx(2.03)  # seed 1 alone: 2^-5
    edge = measured_best(scan({-7: [2.1], -6: [2.0]}))
    assert edge["at_edge"] and edge["lr"] == 2.0**-6


def test_a_diverged_run_rules_its_lr_out() -> None:
    df = scan({-6: [2.00, float("nan")], -5: [2.05, 2.06]})
    assert measured_best(df)["lr"] == 2.0**-5
    with pytest.raises(ValueError, match="no lr has a finite loss on every seed"):
        measured_best(scan({-6: [float("nan")]}))


def test_the_quadratic_can_undershoot_the_data_the_measured_best_cannot() -> None:
    """The issue's case: a quadratic through an asymmetric curve puts its minimum below every
    measured point; the measured best is the lowest seed mean itself."""
    df = scan({-9: [1.990, 1.994], -8: [1.9673, 1.9680], -7: [1.975, 1.976], -6: [2.02, 2.03]})
    fit = OptimumFit(x="lr", y="loss", group_by=("width",), n_boot=0).fit(df.assign(width=256))
    quad = float(fit.results_["loss_opt"].iloc[0])
    lowest = df.groupby("lr")["loss"].mean().min()
    assert quad < lowest  # the fit undershoots
    assert measured_best(df)["best"] == pytest.approx(lowest)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(1.5, 3.0), min_size=6, max_size=6), st.lists(st.floats(1.5, 3.0), min_size=6,
                                                                         max_size=6))
def test_ratio_is_within_the_data_and_inside_its_interval(a: list[float], b: list[float]) -> None:
    """Property: each best is one of the arm's measured seed means, none lower, and the
    point ratio lies inside its interval."""
    num, den = scan({-6: a[:2], -5: a[2:4], -4: a[4:]}), scan({-8: b[:2], -7: b[2:4], -6: b[4:]})
    r = paired_best_ratio(num, den, n_boot=200)
    means_a = num.groupby("lr")["loss"].mean()
    means_b = den.groupby("lr")["loss"].mean()
    assert r["num"]["best"] == pytest.approx(means_a.min()) and r["den"]["best"] == pytest.approx(means_b.min())
    assert r["ratio"] == pytest.approx(means_a.min() / means_b.min())
    assert r["ci"][0] <= r["ratio"] <= r["ci"][1]


def test_the_same_runs_give_exactly_one() -> None:
    """SP and μP at the base width are one model: the same rows give 1.0 and [1.0, 1.0]."""
    df = scan({-6: [2.0, 2.1], -5: [1.9, 2.3], -4: [2.2, 2.2]})
    r = paired_best_ratio(df, df.copy())
    assert r["ratio"] == 1.0 and r["ci"] == [1.0, 1.0] and r["seeds"] == [0, 1]


def test_the_interval_pairs_seeds() -> None:
    """Two arms that differ by a constant factor on every seed, while the seeds differ a
    lot, give a tight interval: the seed effect cancels because both arms get one draw."""
    rng = np.random.default_rng(0)
    base = {t: list(2.0 + rng.normal(0, 0.2, size=4)) for t in (-6, -5, -4)}
    base[-5] = [v - 0.3 for v in base[-5]]  # the optimum, on every seed
    num = scan({t: [1.01 * v for v in vs] for t, vs in base.items()})
    r = paired_best_ratio(num, scan(base))
    assert r["ratio"] == pytest.approx(1.01) and r["ci"][1] - r["ci"][0] < 1e-9
    with pytest.raises(ValueError, match="share no seed"):
        paired_best_ratio(num[num["seed"] == 0], scan(base)[lambda d: d["seed"] == 1])
