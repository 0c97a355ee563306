"""Seed averaging and leave-one-seed-out (LOSO) sensitivity of OptimumFit and ScalingLawFit.

Known answers: every seed's curve is the true parabola c·(t − t*)² in t = log2 lr plus a
linear tilt k_s·(t − t*). A tilt is what one seed's noise does to the bowl near its
minimum, and a quadratic fits it exactly: seed s alone has its optimum at
t* − k_s/(2c), and the mean over seeds at t* − mean(k)/(2c). So the answers are exact.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.optimum import OptimumFit
from analysis.scaling_fit import ScalingLawFit

T_STAR, C = -7.3, 0.02  # true optimum (off grid) and curvature
GRID = np.arange(-10.0, -3.0)  # 2^-10 ... 2^-4, one octave apart, as a proxy sweep


def tilted(tilts: list[float], base: float = 3.0) -> pd.DataFrame:
    """One row per (lr, seed): loss = base + c·(t − t*)² + k_s·(t − t*)."""
    rows = [{"width": 64, "lr": 2.0**t, "seed": s, "diverged": False,
             "loss": base + C * (t - T_STAR) ** 2 + k * (t - T_STAR)}
            for t in GRID for s, k in enumerate(tilts)]
    return pd.DataFrame(rows)


def sweep(seeds: int, noise: float, rng: int = 0) -> pd.DataFrame:
    """Scaling sweep on known laws, eta* = 2^-12·B^0.5·D^-0.25 and B* = 16·D^0.5 (tokens),
    3 budgets x 4 batches x 7 LRs, with ``noise`` per run (0: every seed identical)."""
    r = np.random.default_rng(rng)
    rows = []
    for d in (2.0**20, 2.0**21, 2.0**22):
        for b in (2.0**12, 2.0**13, 2.0**14, 2.0**15):
            t_opt = math.log2(2.0**-12 * b**0.5 * d**-0.25)
            for t in np.arange(-13.0, -6.0):
                for s in range(seeds):
                    loss = (3 + 0.02 * (t - t_opt) ** 2 + 0.01 * (math.log2(b) - math.log2(16 * d**0.5)) ** 2
                            + r.normal(0, noise))
                    rows.append(dict(lr=2.0**t, batch_tokens=b, tokens=d, loss=loss, seed=s, diverged=False,
                                     weight_decay=0.1, seq_len=128))
    return pd.DataFrame(rows)


def fit(df: pd.DataFrame) -> OptimumFit:
    return OptimumFit(n_boot=0).fit(df)


def test_a_noisy_seed_moves_its_own_optimum_a_grid_step_but_not_the_seed_average() -> None:
    """Tilts ±0.04 move each seed's own optimum a whole octave (one grid step), in opposite
    directions; the seed average sits exactly on the true optimum."""
    df = tilted([0.04, -0.04, 0.0])
    for s, shift in ((0, -1.0), (1, 1.0)):
        alone = fit(df[df["seed"] == s]).group(64)
        assert alone.log2_x_opt == pytest.approx(T_STAR + shift, abs=1e-9)
    both = fit(df).group(64)
    assert both.log2_x_opt == pytest.approx(T_STAR, abs=1e-9)
    assert both.n_seeds.tolist() == [3] * GRID.size and both.seeds == (0, 1, 2)


def test_one_noisy_seed_among_four_moves_the_average_by_a_quarter_of_its_shift() -> None:
    """Only seed 0 is tilted (its own optimum an octave off): the mean's tilt is k/4, so
    the optimum moves by a quarter octave, inside the same grid cell as the truth; its
    LOSO refits are t* (without seed 0) and t* − k/(6c) (without another), so the ratio
    is 2^(k/(6c)) = 2^(1/3)."""
    k = 0.04
    o = fit(tilted([k, 0.0, 0.0, 0.0])).group(64)
    assert o.log2_x_opt == pytest.approx(T_STAR - k / (8 * C), abs=1e-9)
    assert math.floor(o.log2_x_opt) == math.floor(T_STAR)  # no flip across a grid point
    sp = o.sensitivity
    assert sp is not None and sp.seeds == (0, 1, 2, 3) and sp.n_failed == 0
    assert math.log2(sp.values[0]) == pytest.approx(T_STAR, abs=1e-9)
    for v in sp.values[1:]:
        assert math.log2(v) == pytest.approx(T_STAR - k / (6 * C), abs=1e-9)
    assert sp.ratio == pytest.approx(2.0 ** (k / (6 * C)), rel=1e-9)
    assert sp.octaves == pytest.approx(1 / 3, abs=1e-9)


def test_identical_seeds_have_zero_spread_and_one_seed_has_none() -> None:
    o = fit(tilted([0.01, 0.01, 0.01])).group(64)
    assert o.sensitivity is not None and o.sensitivity.ratio == 1.0 and o.sensitivity.octaves == 0.0
    one = OptimumFit(n_boot=0).fit(tilted([0.01]))
    assert one.group(64).sensitivity is None and one.sensitivity_ == {64: None}
    assert "LOSO n/a (1 seed)" in one.report()
    assert np.isnan(one.results_["loso_ratio"].iloc[0])


def test_sensitivity_in_results_table_and_report() -> None:
    f = fit(tilted([0.04, 0.0, 0.0, 0.0]))
    r = f.results_.iloc[0]
    assert r["n_seeds"] == 4 and r["loso_ratio"] == pytest.approx(2 ** (1 / 3))
    assert "LOSO ×1.26 over 4 seeds" in f.report()


def test_a_refit_with_too_few_points_is_counted_not_guessed() -> None:
    """Seed 1 ran only 2 LRs: without seed 0 nothing fits, so that refit fails and is counted."""
    df = tilted([0.0, 0.0])
    df = df[(df["seed"] == 0) | df["lr"].isin([2.0**-8, 2.0**-7])]
    sp = fit(df).group(64).sensitivity
    assert sp is not None and sp.n_failed == 1 and sp.seeds == (1,) and sp.ratio is None
    assert sp.to_dict()["n_seeds"] == 2


# ---- the scaling fit ----------------------------------------------------------------------


def test_scaling_fit_identical_seeds_have_zero_spread() -> None:
    """Noise-free, 2 identical seeds: every refit is the same fit, so every ratio is 1.0
    and every exponent spread 0; the JSON carries one law per left-out seed."""
    f = ScalingLawFit(n_boot=0).fit(sweep(seeds=2, noise=0.0))
    assert f.seeds_ == (0, 1)
    for name, sp in f.sensitivity_.items():
        if sp.log_scale:
            assert sp.ratio == 1.0, name
        else:
            assert sp.spread == 0.0, name
    doc = json.loads(json.dumps(f.to_dict(), allow_nan=False))
    sens = doc["sensitivity"]
    assert sens["n_seeds"] == 2 and [e["seed"] for e in sens["loso"]] == ["0", "1"]
    assert sens["loso"][0]["lr"]["exponents"]["tokens"] == pytest.approx(f.params_["lr_exp_tokens"])
    assert sens["values"]["lr_at_reference"]["ratio"] == 1.0
    assert "leave-one-seed-out spread over 2 seeds" in f.report()
    # the document keeps it through from_dict
    assert ScalingLawFit.from_dict(doc).to_dict()["sensitivity"] == sens


def test_scaling_fit_noisy_seeds_spread_above_one_and_matches_refits() -> None:
    data = sweep(seeds=3, noise=0.002, rng=5)
    f = ScalingLawFit(n_boot=0).fit(data)
    sp = f.sensitivity_["lr_at_reference"]
    assert sp.ratio is not None and sp.ratio > 1.0 and sp.n_failed == 0
    # each value is the fit without that seed, done by hand
    ref = f.reference_
    for s, v in zip(sp.seeds, sp.values, strict=True):
        alone = ScalingLawFit(n_boot=0, loso=False).fit(data[data["seed"] != s])
        assert v == pytest.approx(alone.predict_lr(ref["batch_tokens"], ref["tokens"])[0], rel=1e-12)
    assert f.sensitivity_["lr_exp_tokens"].spread > 0


def test_scaling_fit_one_seed_reports_no_loso() -> None:
    f = ScalingLawFit(n_boot=0).fit(sweep(seeds=1, noise=0.0))
    assert f.sensitivity_ == {} and f.loso_fits_ == []
    d = f.to_dict()["sensitivity"]
    assert d["n_seeds"] == 1 and d["values"] == {} and d["loso"] == []
    assert "leave-one-seed-out: n/a (1 seed" in f.report()


def test_projection_carries_the_lr_spread_of_the_refits_also_after_from_dict() -> None:
    """The projected LR redone with each refit's law: its max/min is projected lr_loso.ratio,
    the same from the fitted object and from its JSON document."""
    data = sweep(seeds=3, noise=0.002, rng=5)
    f = ScalingLawFit(n_boot=0).fit(data)
    p = f.project(2.0**25)
    b = f.lr_batch(p.batch_tokens.value, 2.0**25)  # the batch the LR law is evaluated at
    refits = [ScalingLawFit(n_boot=0, loso=False).fit(data[data["seed"] != s]).predict_lr(b, 2.0**25)[0]
              for s in f.seeds_]
    d = p.to_dict()["lr_loso"]
    assert d["ratio"] == pytest.approx(max(refits) / min(refits), rel=1e-9) and d["ratio"] > 1
    assert d["octaves"] == pytest.approx(math.log2(d["ratio"])) and d["n_seeds"] == 3
    assert "lr leave-one-seed-out: ×" in p.report()
    back = ScalingLawFit.from_dict(json.loads(json.dumps(f.to_dict())))
    assert back.project(2.0**25).to_dict()["lr_loso"]["ratio"] == pytest.approx(d["ratio"], rel=1e-9)
    one = ScalingLawFit(n_boot=0).fit(sweep(seeds=1, noise=0.0)).project(2.0**25).to_dict()
    assert one["lr_loso"] is None
