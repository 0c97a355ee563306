"""A results table made ready for a fit: read, filtered, checked; and the fit's JSON values.

:func:`load_table` is what every fit and plot of the ``mutransfer`` command runs before it
fits (and what a script can run to get the same checks): read the table, keep the
``where`` rows, leave out trials that did not complete, and refuse values a fit would
silently turn into NaN, each problem one ``ValueError`` naming the column and row. The
small helpers below turn fitted numbers into plain JSON values (a non-finite number is
``None``, never NaN) and write strict JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from ._io import plain
from .results import check_single_valued, read_results

__all__ = [
    "dumps",
    "group_dict",
    "group_label",
    "groups",
    "in_group",
    "load_table",
    "num",
    "pair",
    "parse_where",
]

T = TypeVar("T")


def num(v: Any) -> float | None:
    """A plain float, or None for a non-finite value (an open interval side)."""
    f = float(v)
    return f if math.isfinite(f) else None


def pair(lo: Any, hi: Any) -> list[float | None]:
    """An interval as JSON: ``[lo, hi]``, an open side ``None``."""
    return [num(lo), num(hi)]


def dumps(obj: Any) -> str:
    """Strict JSON: a NaN or infinity anywhere is a bug, so it raises instead of writing."""
    return json.dumps(obj, indent=2, allow_nan=False) + "\n"


def group_dict(cols: Sequence[str], key: Hashable) -> dict[str, Any] | None:
    """A group's key as ``{column: value}`` (``None`` when there are no group columns)."""
    if not cols:
        return None
    vals = key if isinstance(key, tuple) else (key,)
    return {c: plain(v, nonfinite_to_none=True) for c, v in zip(cols, vals, strict=True)}


def group_label(cols: Sequence[str], key: Hashable) -> str:
    """``"width=64, parametrization=mup"`` (``"all"`` with no group columns)."""
    vals = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{c}={v}" for c, v in zip(cols, vals, strict=True)) or "all"


def parse_where(text: str) -> tuple[str, str]:
    """``"parametrization=mup"`` -> ``("parametrization", "mup")``."""
    col, sep, val = text.partition("=")
    if not sep or not col.strip():
        raise ValueError(f"--where {text!r} must look like COL=VALUE")
    return col.strip(), val.strip()


def _matches(series: pd.Series, value: str) -> Any:
    if pd.api.types.is_bool_dtype(series):
        return series == (value.lower() in ("1", "true", "yes"))
    if pd.api.types.is_numeric_dtype(series):
        try:
            return series == float(value)
        except ValueError:
            raise ValueError(f"--where value {value!r} is not a number, but column "
                             f"{series.name!r} is numeric") from None
    return series.astype(str) == value


def groups(df: pd.DataFrame, cols: Sequence[str]) -> list[tuple[Hashable, pd.DataFrame]]:
    """``(key, rows)`` per group of ``cols``, sorted; one group ``((), df)`` without columns."""
    if not cols:
        return [((), df)]
    out = []
    for key, g in df.groupby(list(cols), sort=True, dropna=False):
        out.append((key[0] if isinstance(key, tuple) and len(key) == 1 else key, g))
    return out


def in_group(cols: Sequence[str], key: Hashable, fn: Callable[[], T]) -> T:
    """``fn()``, its ValueError prefixed with the group it is about."""
    try:
        return fn()
    except ValueError as err:
        if not cols or str(err).startswith("group "):
            raise
        raise ValueError(f"group {group_label(cols, key)}: {err}") from err


def load_table(results: str, value_cols: Sequence[str], group_cols: Sequence[str] = (), *,
               where: Iterable[str] = (), diverged: str | None = "diverged", state: str | None = "state",
               dropna: bool = False, inf_ok: Sequence[str] = (), keep_diverged: bool = False,
               ) -> tuple[pd.DataFrame, dict[str, int]]:
    """Read, filter and check the results table; returns ``(rows to fit, counts)``.

    ``where`` holds ``COL=VALUE`` filters. Rows whose ``state`` is set and not ``COMPLETE``
    (pruned or failed trials of a sweep's results) are left out first and counted. Then checks,
    each a one-line ValueError: missing columns (named), rows of different tokenizers or
    models after ``where`` unless grouped by that column (:func:`check_single_valued`),
    non-numeric or non-finite values in ``value_cols`` (rows marked ``diverged`` excepted;
    ``dropna`` drops them instead), ``where`` matching nothing, a group whose every row
    diverged. Columns in ``inf_ok`` may hold ``+inf`` (e.g. steps never reaching the
    target); such rows are dropped and counted. With ``keep_diverged`` the diverged rows
    stay in (for :class:`analysis.OptimumFit`, which counts them itself). ``diverged`` and
    ``state`` name columns; ``None`` ignores them.
    """
    filters = [parse_where(w) for w in where]
    needed = list(dict.fromkeys([*value_cols, *group_cols, *(c for c, _ in filters)]))
    df = read_results(results, required=needed)
    for col, val in filters:
        df = df[_matches(df[col], val)]
        if df.empty:
            raise ValueError(f"no rows of {results} match --where {col}={val}")
    # A column fitted group by group (--group model) is not mixed: each fit sees one value.
    check_single_valued(df, columns=[c for c in ("tokenizer", "arch") if c not in group_cols],
                        where=f"results table {results}")
    if len(df) == 0:
        raise ValueError(f"{results} has no rows")
    n_not_complete = 0
    if state is not None and state in df.columns:
        done = df[state].isna() | (df[state].astype(str).str.upper() == "COMPLETE")
        n_not_complete = int((~done).sum())
        df = df[done.to_numpy()]
        if df.empty:
            raise ValueError(f"none of the {n_not_complete} rows of {results} has "
                             f"{state}=COMPLETE (pass --state none to fit them anyway)")
    if diverged is not None and diverged in df.columns:
        div = df[diverged].fillna(False).astype(bool).to_numpy()
    else:
        div = np.zeros(len(df), dtype=bool)
    keep, n_dropped = _keep_finite(df, value_cols, div, inf_ok, dropna)
    if group_cols:
        flags = pd.Series(div, index=df.index)
        for key, g in groups(df, group_cols):
            if flags.loc[g.index].all():
                raise ValueError(f"group {group_label(group_cols, key)}: all {len(g)} rows diverged, "
                                 "so nothing can be fitted")
    elif div.all():
        raise ValueError(f"all {len(df)} rows of {results} diverged, so nothing can be fitted")
    if not keep.any():
        raise ValueError(f"no usable rows left in {results} after dropping "
                         f"{int(div.sum())} diverged and {n_dropped} incomplete row(s)")
    rows = df[keep | div] if keep_diverged else df[keep]
    counts = {"n_rows": int(len(df)), "n_diverged": int(div.sum()), "n_dropped": n_dropped,
              "n_not_complete": n_not_complete}
    return rows, counts


def _keep_finite(df: pd.DataFrame, value_cols: Sequence[str], div: np.ndarray, inf_ok: Sequence[str],
                 dropna: bool) -> tuple[np.ndarray, int]:
    """The rows (not diverged) whose every value column is a finite number, and how many
    were dropped; text in a value column, or a missing value without ``dropna``, is an error."""
    keep = ~div
    n_dropped = 0
    for col in value_cols:
        raw = df[col]
        vals = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
        text = raw.notna().to_numpy() & np.isnan(vals) & ~div
        if text.any():
            i = int(np.flatnonzero(text)[0])
            raise ValueError(f"column {col!r} has a non-numeric value {raw.iloc[i]!r} "
                             f"(data row {i + 1})")
        allowed = np.isposinf(vals) if col in inf_ok else np.zeros(len(vals), dtype=bool)
        bad = ~np.isfinite(vals) & ~div & ~allowed
        if bad.any() and not dropna:
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"column {col!r} has {int(bad.sum())} missing or non-finite value(s) in rows not "
                f"marked diverged (first: {float(vals[i])!r} in data row {i + 1}); fix them, mark those "
                "runs diverged, or pass --dropna to drop them")
        drop = (bad | allowed) & keep
        n_dropped += int(drop.sum())
        keep &= ~drop
    return keep, n_dropped
