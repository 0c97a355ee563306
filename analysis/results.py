"""Reading the results table (one row per trial, CSV or Parquet; see DESIGN.md)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from ._io import require_columns

__all__ = ["RESULTS_COLUMNS", "read_results"]

#: Column names of the sweeps -> analysis results table (DESIGN.md, "Results table").
RESULTS_COLUMNS: tuple[str, ...] = (
    "study", "trial", "state", "diverged", "parametrization", "width", "depth", "n_params",
    "n_params_nonembed", "tokens", "steps", "batch_size", "seq_len", "batch_tokens", "lr",
    "seed", "loss", "train_loss", "gns", "wall_s",
)


def read_results(
    path: str | os.PathLike[str],
    required: Iterable[str] = ("lr", "loss"),
) -> pd.DataFrame:
    """Load a results table from ``.csv`` or ``.parquet`` and check its columns.

    ``required`` names the columns the caller needs (default ``lr`` and ``loss``); a
    missing one raises ValueError naming it. Parquet needs ``pyarrow`` (or
    ``fastparquet``); without one, a clear ValueError says so. A ``diverged`` column read
    from CSV as strings (``"True"``/``"False"``) is turned into booleans.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"results file {str(p)!r} does not exist.")
    suffix = p.suffix.lower()
    if suffix == ".csv":
        df = pd.read_csv(p)
    elif suffix in (".parquet", ".pq"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            try:
                import fastparquet  # noqa: F401
            except ImportError:
                raise ValueError(
                    f"reading {p.name!r} needs pyarrow (or fastparquet), which is not "
                    "installed; install it or export the table as CSV."
                ) from None
        df = pd.read_parquet(p)
    else:
        raise ValueError(f"results file {p.name!r} must end in .csv or .parquet.")
    require_columns(df, list(required), f"results table {p.name!r}")
    if "diverged" in df.columns and df["diverged"].dtype == object:
        mapped = df["diverged"].map(
            lambda v: {"true": True, "false": False, "1": True, "0": False}.get(
                str(v).strip().lower(), v) if isinstance(v, str) else v)
        df["diverged"] = mapped.fillna(False).astype(bool)
    return df
