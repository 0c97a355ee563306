"""The card's LR interval against optima it was not fitted on (benchmarks/interval_coverage.py),
on the committed card-regret sweep, its target scan and the readout ladders: real runs,
nothing trained."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks import interval_coverage as ic


@pytest.mark.skipif(ic.unavailable() is not None, reason=str(ic.unavailable()))
def test_misfit_band_covers_held_out_optima_the_bootstrap_missed() -> None:
    rec = ic.run()
    s = rec["summary"]
    assert s["n_targets"] >= 40
    assert s["misfit"]["coverage"] >= ic.TARGET_COVERAGE and rec["passed"]
    assert s["bootstrap_only"]["coverage"] < s["misfit"]["coverage"]
    # no wider than it must be: under 2x at the median on this sweep
    assert s["misfit"]["median_width"] < 2.0
    # both bands judged on the same fits: the law's point is the same
    assert s["misfit"]["median_abs_error_octaves"] == s["bootstrap_only"]["median_abs_error_octaves"]
    card = [t for t in rec["targets"] if t["kind"].startswith("card-regret")]
    assert len(card) == 4 and all(t["misfit"]["inside"] for t in card)
    # this sweep's optimum LR rises up to its largest batch at every budget: no peak, so the
    # data keep the power law and the card is the one before the form choice
    assert rec["setup"]["past_peak_batches"] == {}
    assert all(t["form"] == "power" for t in rec["targets"] if "form" in t)
    assert s["power_form"]["covered"] == s["misfit"]["covered"]
    # every ladder's widest width, at each horizon recorded, is a target of its own family
    ladder = [t for t in rec["targets"] if t["family"].startswith("readout ladder")]
    assert {t["steps"] for t in ladder} >= {250, 500, 1000}
    assert all(t["width"] > t["from_width"] and t["sd_octaves"] > 0 for t in ladder)
    assert set(s["by_family"]) == {t["family"] for t in rec["targets"]}


def test_batches_past_the_peak_are_found_per_budget() -> None:
    """Known answer: at budget 1 the LR peaks at batch 64 (128 and 256 lie past it); at
    budget 2 it rises to the end (none past it); an edge cell is not a peak."""
    cells = pd.DataFrame({
        "tokens": [1.0] * 4 + [2.0] * 4,
        "batch_tokens": [32.0, 64.0, 128.0, 256.0] * 2,
        "lr_opt": [1.0, 3.0, 2.0, 1.5, 1.0, 2.0, 3.0, 9.0],
        "edge": ["", "", "", "", "", "", "", "high"],
    })
    assert ic.past_peak(cells) == {128.0: [1.0], 256.0: [1.0]}
