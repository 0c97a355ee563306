"""The coordinate check's verdict judges a width trend, not one step: on synthetic
coordinates (3 widths, 3 seeds, steps 0-5, known laws) a transient spike at one step no
longer decides it, a trend at every trained step still fails, and the seeds' spread keeps
a noisy excursion from counting as a trend."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mutransfer.checks.coord_check import CoordCheckResult, fit_slopes

WIDTHS = (64, 128, 256)
TOL = 0.37


def coords(law, seeds: int = 3, noise: float = 0.0) -> pd.DataFrame:
    """l1 of module ``m`` at each (width, seed, step) = law(width, step) x seed noise."""
    rng = np.random.default_rng(0)
    rows = [{"width": w, "depth": 0, "seed": s, "module": "m", "step": t,
             "l1": law(w, t) * float(np.exp(rng.normal(0, noise))), "loss": 1.0}
            for w in WIDTHS for s in range(seeds) for t in range(6)]
    return pd.DataFrame(rows)


def result(data: pd.DataFrame) -> CoordCheckResult:
    return CoordCheckResult("mup", data, fit_slopes(data), TOL)


def test_one_steps_spike_is_a_transient_not_the_verdict() -> None:
    # width-stable, but at step 4 the widest model's activations jump 8x (slope ~ +1.2 there)
    r = result(coords(lambda w, t: 8.0 if (t == 4 and w == 256) else 1.0))
    s = r.slopes.set_index("step")["slope"]
    assert s[4] > 1.0 and (s.drop(4).abs() < 1e-9).all()
    assert r.passed  # the old verdict (any row past tol) failed this
    assert list(r.transients()["step"]) == [4] and r.violations().empty
    j = r.to_json_dict()
    assert j["passed"] and j["transients"][0]["step"] == 4 and "2+ steps" in j["verdict_rule"]
    # the same spike at two steps is a trend over those steps: it fails
    two = result(coords(lambda w, t: 8.0 if (t in (3, 4) and w == 256) else 1.0))
    assert not two.passed and sorted(two.violations()["step"]) == [3, 4]


def test_a_width_trend_at_every_trained_step_fails() -> None:
    # SP-like: stable at init, then growing like width^(0.4 t) (0.4 at step 1 ... 2.0 at step 5)
    r = result(coords(lambda w, t: w ** (0.4 * t), noise=0.05))
    assert not r.passed and set(r.violations()["step"]) == {1, 2, 3, 4, 5}
    # vanishing like width^-1 after init fails too
    assert not result(coords(lambda w, t: w ** (-1.0 if t else 0.0))).passed
    # a check of one trained step (steps 0, 1) fails on that step alone
    one = result(coords(lambda w, t: w ** (0.4 * t)).query("step <= 1"))
    assert list(one.violations()["step"]) == [1]
    # growth that shows only at the last step (SP at a 3-step check) fails: no later step can
    # show it passing, so it is not taken for a transient
    late = result(coords(lambda w, t: w ** 0.7 if t == 5 else 1.0))
    assert not late.passed and list(late.violations()["step"]) == [5]


def test_the_seeds_spread_is_not_a_trend() -> None:
    # a slope of 0.45 (past tol 0.37) at steps 2 and 3, the seed-mean l1 exactly w^0.45; the
    # seeds scatter the widest width's l1 by x(1 + a, 1, 1 - a), which leaves the mean (and its
    # slope) as it is: with a = 0.6 the seeds' slopes disagree by about +-0.5, so 0.45 lies
    # within one standard error of the band and is no trend; with a = 0 the same slope fails
    def data(a: float) -> pd.DataFrame:
        rows = []
        for w in WIDTHS:
            for s in range(3):
                for t in range(6):
                    l1 = float(w) ** 0.45 if t in (2, 3) else 1.0
                    if w == WIDTHS[-1] and t in (2, 3):
                        l1 *= (1 + a, 1.0, 1 - a)[s]
                    rows.append({"width": w, "depth": 0, "seed": s, "module": "m", "step": t, "l1": l1,
                                 "loss": 1.0})
        return pd.DataFrame(rows)

    steady = result(data(0.0))
    assert not steady.passed and sorted(steady.violations()["step"]) == [2, 3]
    noisy = result(data(0.6))
    assert list(noisy.slopes.set_index("step")["slope"].round(6)[[2, 3]]) == [0.45, 0.45]  # the same mean
    assert noisy.passed and noisy.out_of_band().empty


def test_a_module_a_post_norm_divides_out_may_shrink_but_not_grow() -> None:
    """OLMo-2's MLP output before its post-norm shrank like width^-1.4 on released shapes
    while the norm's output, what the residual stream gets, held: a module the check is told
    a norm divides out (``normalized_modules``) may vanish; it still fails by growing, and any
    other module still fails by vanishing."""
    vanish = coords(lambda w, t: w ** (-1.0 if t else 0.0))
    assert not result(vanish).passed
    told = CoordCheckResult("mup", vanish, fit_slopes(vanish), TOL, {}, (), ("m",))
    assert told.passed and told.to_json_dict()["normalized_modules"] == ["m"]
    grow = coords(lambda w, t: w ** (0.4 * t))
    assert not CoordCheckResult("mup", grow, fit_slopes(grow), TOL, {}, (), ("m",)).passed
    other = CoordCheckResult("mup", vanish, fit_slopes(vanish), TOL, {}, (), ("n",))
    assert not other.passed
