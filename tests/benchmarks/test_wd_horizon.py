"""The weight-decay horizon benchmark's reading: the optimal per-step decay at each horizon,
their paired ratio, and which rule it decides (known curves, no training)."""

from __future__ import annotations

import math

import pytest

from benchmarks.wd_horizon import RULES, decide, lambda_optima, paired_ratio

LR = {"short": 2.0**-7, "long": 2.0**-7.5}
GRID = [0.1 * 2.0**k for k in range(-3, 5)]


#: Each seed's own optimum sits this many octaves × (seed − 1.5) from the horizon's: opposite
#: ways at the two horizons, so the paired ratio varies with the seeds drawn, while the
#: seed-mean curve (the same curvature for every seed) keeps its vertex exactly at ``opt``.
JITTER = {"short": 0.1, "long": -0.1}


def _rows(opt: dict[str, float], seeds: tuple[int, ...] = (0, 1, 2, 3)) -> list[dict[str, float]]:
    """Losses exactly quadratic in log2(eta·lambda), their seed-mean vertex at ``opt[h]``,
    plus lambda = 0, which the fit leaves out."""
    rows = []
    for h, lr in LR.items():
        for s in seeds:
            for wd in [0.0, *GRID]:
                t = math.log2(lr * wd) if wd else math.log2(lr * GRID[0]) - 3
                rows.append({"horizon": h, "lr": lr, "wd": wd, "seed": s,
                             "loss": 2.0 + 0.01 * (t - math.log2(opt[h]) - JITTER[h] * (s - 1.5)) ** 2
                             + 0.003 * s})
    return rows


@pytest.mark.parametrize(("ratio", "rule"), [(0.25, "fraction"), (1.0, "per_step")])
def test_a_known_ratio_of_optima_decides_its_rule(ratio: float, rule: str) -> None:
    short = LR["short"] * 0.2  # eta·lambda* = eta · 0.2 at the short horizon: inside the grid
    rows = _rows({"short": short, "long": short * ratio})
    opt = lambda_optima(rows, [0, 1, 2, 3])
    assert opt["short"] == pytest.approx(short, rel=1e-6)
    assert opt["long"] / opt["short"] == pytest.approx(ratio, rel=1e-6)
    res = paired_ratio(rows, [0, 1, 2, 3], n_boot=40)
    assert res["ratio"] == pytest.approx(ratio, rel=1e-6) and res["n_failed"] == 0
    lo, hi = res["ci"]  # the seeds' spread: at most 0.3 octave either way (0.1 × 1.5 per horizon)
    assert ratio * 2**-0.31 <= lo < ratio < hi <= ratio * 2**0.31
    assert decide(res["ci"]) == rule


def test_an_interval_holding_both_rules_or_neither_is_inconclusive() -> None:
    assert RULES == {"per_step": 1.0, "fraction": 0.25}
    assert decide([0.2, 1.2]) == "inconclusive"  # both inside
    assert decide([0.4, 0.6]) == "inconclusive"  # neither
    assert decide([0.1, 0.5]) == "fraction" and decide([0.6, 1.5]) == "per_step"


def test_an_optimum_on_the_grids_edge_is_no_value() -> None:
    """An optimum past the largest lambda scanned is a bound: NaN, and the ratio's replicates
    that meet it are counted as failed, not read as a number."""
    rows = _rows({"short": LR["short"] * 0.2, "long": LR["long"] * 100.0})
    assert math.isnan(lambda_optima(rows, [0, 1, 2, 3])["long"])
    res = paired_ratio(rows, [0, 1, 2, 3], n_boot=10)
    assert res["n_failed"] == 10 and math.isnan(res["ratio"]) and decide(res["ci"]) == "inconclusive"
