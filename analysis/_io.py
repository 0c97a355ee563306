"""Shared input checks, JSON plain values and atomic writes for the analysis package.

``analysis`` never imports ``mutransfer``, so the small atomic-write helper is repeated
here rather than shared.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path beside ``path`` and ``os.replace`` it onto ``path`` on success.

    Same directory, so the rename is atomic on POSIX; on error the temp file is removed and
    ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp makes 0600 files; give the result the mode a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically and return the path."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def as_tuple(names: str | Sequence[str] | None) -> tuple[str, ...]:
    """Normalize a column name or a sequence of names to a tuple (``None`` -> ``()``)."""
    if names is None:
        return ()
    if isinstance(names, str):
        return (names,)
    return tuple(names)


def require_columns(df: pd.DataFrame, columns: Iterable[str], what: str = "data") -> None:
    """Raise ValueError naming every column of ``columns`` that ``df`` lacks."""
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{what} must be a pandas DataFrame, got {type(df).__name__}.")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(
            f"{what} is missing required column(s) {missing}; it has {list(df.columns)}."
        )


def usable_rows(
    df: pd.DataFrame, value_columns: Iterable[str], diverged: str | None = "diverged"
) -> pd.DataFrame:
    """Rows that did not diverge and whose ``value_columns`` are all finite numbers.

    A diverged trial keeps its row in the results table (docs/architecture.md) but must never enter
    a fit; a NaN/inf loss is treated the same way even if the flag was not set.
    """
    keep = np.ones(len(df), dtype=bool)
    if diverged is not None and diverged in df.columns:
        flag = df[diverged]
        keep &= ~flag.fillna(False).astype(bool).to_numpy()
    for col in value_columns:
        vals = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        keep &= np.isfinite(vals)
    return df.loc[keep]


def finite_positive(values: Any, name: str) -> np.ndarray:
    """Return ``values`` as a float array, raising if any entry is non-finite or <= 0."""
    arr = np.asarray(values, dtype=float)
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        first = arr[bad].ravel()[0]
        raise ValueError(
            f"{name} must be finite and > 0 for a log-space fit, but contains {first!r}."
        )
    return arr


def group_label(keys: tuple[str, ...], value: Hashable) -> str:
    """Readable label of one group, e.g. ``"width=256, seed=1"``."""
    vals = value if isinstance(value, tuple) else (value,)
    return ", ".join(f"{k}={v}" for k, v in zip(keys, vals, strict=True)) or "all"


def savefig_atomic(fig: Any, path: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Save a matplotlib figure as PNG through a temp file renamed onto ``path``."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight")
    return Path(path)


def plain(obj: Any, *, nonfinite_to_none: bool = False) -> Any:
    """What JSON and YAML hold: mappings -> dicts with string keys, tuples -> lists, numpy
    scalars and 0-d arrays (anything with ``.item()``) -> Python scalars, recursively.
    ``nonfinite_to_none`` writes NaN and inf as null (JSON has neither); otherwise they
    stay, for a validator to refuse. The one such helper of the project's bottom layer."""
    if isinstance(obj, Mapping):
        return {str(k): plain(v, nonfinite_to_none=nonfinite_to_none) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v, nonfinite_to_none=nonfinite_to_none) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if nonfinite_to_none and isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def finite_or_none(v: Any) -> float | None:
    """``float(v)``, or None for None or a non-finite value (an open interval side)."""
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else None
