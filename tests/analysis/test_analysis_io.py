from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import analysis
from analysis.results import read_results


def test_import_is_light_and_independent() -> None:
    """`import analysis` pulls in neither torch/mutransfer nor scipy/matplotlib."""
    code = (
        "import sys, json, analysis; "
        "print(json.dumps([m for m in ('torch', 'mutransfer', 'sweeps', 'scipy', "
        "'matplotlib') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout) == []


def test_public_api_is_exported() -> None:
    for name in analysis.__all__:
        assert hasattr(analysis, name), name
    for name in ("OptimumFit", "PowerLawFit", "CriticalBatchFit", "ChinchillaFit",
                 "project", "Projection", "read_results"):
        assert name in analysis.__all__


def test_read_csv_and_coerce_diverged(tmp_path: Path) -> None:
    p = tmp_path / "runs.csv"
    p.write_text("lr,loss,width,diverged\n0.01,3.0,64,False\n0.1,nan,64,True\n")
    df = read_results(p, required=("lr", "loss", "width"))
    assert df["diverged"].tolist() == [False, True]
    assert df["diverged"].dtype == bool


def test_missing_columns_named(tmp_path: Path) -> None:
    p = tmp_path / "runs.csv"
    pd.DataFrame({"lr": [0.1], "width": [64]}).to_csv(p, index=False)
    with pytest.raises(ValueError, match=r"\['loss', 'seed'\]"):
        read_results(p, required=("lr", "loss", "seed"))


def test_bad_suffix_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        read_results(tmp_path / "nope.csv")
    p = tmp_path / "runs.txt"
    p.write_text("x")
    with pytest.raises(ValueError, match=r"\.csv or \.parquet"):
        read_results(p)


def test_parquet_without_engine_is_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("pandas")
    try:
        import pyarrow  # noqa: F401

        have = True
    except ImportError:
        try:
            import fastparquet  # noqa: F401

            have = True
        except ImportError:
            have = False
    p = tmp_path / "runs.parquet"
    if have:
        pd.DataFrame({"lr": [0.1], "loss": [3.0]}).to_parquet(p)
        assert read_results(p)["loss"].tolist() == [3.0]
    else:
        p.write_bytes(b"PAR1")
        with pytest.raises(ValueError, match="needs pyarrow"):
            read_results(p)
