"""Reading the results table (one row per trial, CSV or Parquet; see docs/architecture.md)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._io import require_columns

__all__ = ["PROXY_COLUMNS", "check_single_valued", "proxy_record", "read_results"]

#: Columns that say what the proxy was (the trainer's row): its architecture, tokenizer,
#: vocabulary, context, compute dtype and depth. Every fit records them (:func:`proxy_record`) and
#: ``transfer`` reads the proxy from them, never from a preset.
PROXY_COLUMNS: tuple[str, ...] = ("arch", "tokenizer", "vocab_size", "seq_len", "compute_dtype", "depth")


def _scalar(v: Any) -> Any:
    v = v.item() if hasattr(v, "item") else v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def proxy_record(df: pd.DataFrame) -> dict[str, Any]:
    """What the rows say the proxy was: each of :data:`PROXY_COLUMNS` present in ``df``
    with its one value, or the sorted list of its values when the rows hold several (a
    context ladder); absent columns and empty cells are left out."""
    out: dict[str, Any] = {}
    for col in PROXY_COLUMNS:
        if col not in df.columns:
            continue
        values = sorted({_scalar(v) for v in df[col].dropna()}, key=lambda v: (str(type(v)), v))
        if len(values) == 1:
            out[col] = values[0]
        elif values:
            out[col] = values
    return out


def _read(p: Path, reader: Any) -> pd.DataFrame:
    """``reader(p)``, with any failure (empty, binary, ragged, truncated) one ValueError
    naming the file and what is wrong with it."""
    try:
        return reader(p)
    except pd.errors.EmptyDataError:
        raise ValueError(f"results file {str(p)!r} is empty (no header row).") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"results file {str(p)!r} is not UTF-8 text (a binary file?): byte "
                         f"{exc.start} cannot be decoded.") from None
    except pd.errors.ParserError as exc:
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"results file {str(p)!r} is not a regular table: {first}") from None
    except OSError as exc:
        raise ValueError(f"cannot read results file {str(p)!r}: {exc.strerror or exc}") from None
    except Exception as exc:  # pyarrow's ArrowInvalid and friends
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"results file {str(p)!r} cannot be read: {first}") from None


#: Columns that hold a size of a run (model, batch, budget): positive wherever given.
SIZE_COLUMNS = ("width", "depth", "head_dim", "seq_len", "base_width", "base_depth", "batch_size",
                "batch_tokens", "tokens", "n_params", "steps")


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
        df = _read(p, pd.read_csv)
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
        df = _read(p, pd.read_parquet)
    else:
        raise ValueError(f"results file {p.name!r} must end in .csv or .parquet.")
    require_columns(df, list(required), f"results table {p.name!r}")
    for col in SIZE_COLUMNS:  # a group at width -64 is a typo, never a model
        if col in df.columns and df[col].dtype.kind in "iuf":
            vals = df[col].to_numpy(dtype=float)
            bad = ~np.isnan(vals) & ~(np.isfinite(vals) & (vals > 0))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(f"results file {str(p)!r}: column {col!r} holds {vals[i]:g} (data row "
                                 f"{i + 1}); a size is a positive finite number.")
    if "diverged" in df.columns and df["diverged"].dtype == object:
        mapped = df["diverged"].map(
            lambda v: {"true": True, "false": False, "1": True, "0": False}.get(
                str(v).strip().lower(), v) if isinstance(v, str) else v)
        df["diverged"] = mapped.fillna(False).astype(bool)
    return df


def check_single_valued(df: pd.DataFrame, columns: Iterable[str] = ("tokenizer", "arch"),
                        where: str = "the results table") -> None:
    """Refuse a table whose rows come from different tokenizers (or architectures, ...).

    Losses in nats/token of different tokenizers are different quantities, so fitting
    an optimum or a law across them is meaningless. For each of ``columns`` present in
    ``df``, the distinct non-missing values must be at most one; otherwise a ValueError
    names the column, ``where`` the table is, and the values. An absent column, or
    missing cells (rows written before the column existed), pass.
    """
    for col in columns:
        if col not in df.columns:
            continue
        values = sorted({str(v) for v in df[col].dropna()})
        if len(values) > 1:
            shown = ", ".join(repr(v) for v in values[:6]) + (", ..." if len(values) > 6 else "")
            raise ValueError(f"{where} mixes {len(values)} values of column {col!r} ({shown}): rows of "
                             f"different {col}s cannot be fitted together; keep one (e.g. --where "
                             f"{col}={values[0]}) or fit each apart (--group {col})")
