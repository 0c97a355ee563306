"""Fits reproduce what the authors of two published scaling studies found.

Expected values are from shared/data/README.md (copied with attribution to tests/data/).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.critical_batch import fit_critical_batch
from analysis.powerlaw import PowerLawFit

PORIAN_EXPONENTS = {
    "rw|base|long|kaplan|kaplan|train": 0.8338,
    "rw|base|long|kaplan|standard|val": 0.7009,
    "rw|base|short|kaplan|standard|val": 0.6035,
    "rw|base|short|chinchilla|standard|val": 0.5714,
    "rw|tuned|short|const|standard|val": 0.4970,
}

ZHANG = {  # model: (S_min, E_min, B_crit, CBS)
    "85M": (1293.8, 2.834e6, 2190.6, 745.3),
    "151M": (1752.4, 5.677e6, 3239.8, 955.2),
    "302M": (2095.3, 1.138e7, 5432.6, 1393.7),
    "604M": (2459.9, 1.945e7, 7906.6, 1888.5),
    "1.2B": (3897.3, 4.338e7, 11131.1, 2533.4),
}


def test_porian2024_isoflop_exponents(data_dir: Path) -> None:
    df = pd.read_csv(data_dir / "porian2024_isoflop_optima.csv").dropna(subset=["n_star"])
    assert set(df["config"]) == set(PORIAN_EXPONENTS)
    for config, g in df.groupby("config"):
        fit = PowerLawFit("flops", "n_star", n_boot=100).fit(g)
        assert fit.params_["b"] == pytest.approx(PORIAN_EXPONENTS[config], abs=6e-5), config
        assert round(fit.params_["b"], 3) == round(PORIAN_EXPONENTS[config], 3)
        lo, hi = fit.ci_["b"]
        assert lo < PORIAN_EXPONENTS[config] < hi


@pytest.fixture(scope="module")
def zhang(data_dir: Path) -> pd.DataFrame:
    z = pd.read_csv(data_dir / "zhang2024_cbs_steps_to_target.csv")
    res = fit_critical_batch(z, group_by=("model", "n_params_nominal"),
                             batch="batch_size_seqs", n_boot=100)
    return res.table.set_index("model")


def test_zhang2024_critical_batch_per_model(zhang: pd.DataFrame) -> None:
    for model, (s_min, e_min, b_crit, cbs) in ZHANG.items():
        row = zhang.loc[model]
        assert row["S_min"] == pytest.approx(s_min, rel=5e-3), model
        assert row["E_min"] == pytest.approx(e_min, rel=5e-3), model
        assert row["B_crit"] == pytest.approx(b_crit, rel=5e-3), model
        assert row["CBS"] == pytest.approx(cbs, rel=5e-3), model
        assert row["CBS_lo"] <= row["CBS"] <= row["CBS_hi"]


def test_zhang2024_cbs_power_law_in_model_size(zhang: pd.DataFrame) -> None:
    table = zhang.assign(N=zhang["n_params_nominal"] / 1e6)
    fit = PowerLawFit("N", "CBS", n_boot=100).fit(table)
    assert fit.params_["a"] == pytest.approx(93.197, abs=5e-4)
    assert fit.params_["b"] == pytest.approx(0.4683, abs=5e-5)
