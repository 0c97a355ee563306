"""The results table (docs/architecture.md "Results table") and the study status.

One row per trial, tidy: ``study, trial, state, diverged`` then the trainer's row
(``parametrization, width, depth, n_params, ..., loss, train_loss, gns, wall_s``) and every
searched hyperparameter by its name. A trial that trained WSD branches (the ``scaling``
sweep) gives one row per branch, each with its own ``tokens``, ``steps``, ``loss``,
``gns`` and ``diverged`` and its ``wsd_fraction``. By default the table holds the finished trials
(COMPLETE and PRUNED; diverged trials keep their row with ``diverged=True``); failed trials
of crashed workers were retried, and appear only with ``include_failed=True``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mutransfer._io import atomic_path
from mutransfer.training.train_result import ROW_KEYS
from sweeps import attrs
from sweeps.attrs import STUDY_ATTR
from sweeps.progress import study_counts
from sweeps.worker import SweepSettings

if TYPE_CHECKING:
    import optuna
    import pandas as pd

#: The table's leading columns, in docs/architecture.md's order: the trial's own, then the
#: trainer's row keys (:data:`mutransfer.training.train_result.ROW_KEYS`, ``arch`` first) as it
#: writes them; every other column follows, sorted.
RESULT_COLUMNS: tuple[str, ...] = ("study", "trial", "state", "diverged",
                                   *(k for k in ROW_KEYS if k != "diverged"))
_INTERNAL = {"pruned", "branches"}


def trial_rows(study: optuna.Study, include_failed: bool = False) -> list[dict[str, Any]]:
    from optuna.trial import TrialState

    states = (TrialState.COMPLETE, TrialState.PRUNED)
    if include_failed:
        states = (*states, TrialState.FAIL, TrialState.RUNNING, TrialState.WAITING)
    rows = []
    for t in study.get_trials(deepcopy=False, states=states):
        row: dict[str, Any] = {"study": study.study_name, "trial": t.number, "state": t.state.name,
                               "diverged": bool(t.user_attrs.get(attrs.DIVERGED, False))}
        trained = dict(t.user_attrs.get(attrs.ROW) or {})
        for k, v in trained.items():
            if k not in row and k not in _INTERNAL:
                row[k] = v
        for k, v in t.params.items():
            row.setdefault(k, v)
        for k, v in (t.user_attrs.get(attrs.POINT) or {}).items():
            row.setdefault(k, v)
        if "loss" not in row:
            row["loss"] = t.value if t.value is not None and not row["diverged"] else math.nan
        row["value"] = t.value
        branches = trained.get("branches")
        if isinstance(branches, list) and branches:
            rows += [_branch_row(row, b) for b in branches if isinstance(b, dict)]
        else:
            rows.append(row)
    return rows


def _branch_row(trial_row: dict[str, Any], branch: dict[str, Any]) -> dict[str, Any]:
    """One WSD branch's row: the trial's columns, overridden by the branch's own."""
    row = dict(trial_row)
    row.update({k: v for k, v in branch.items() if k not in _INTERNAL})
    loss = branch.get("loss")
    finite = isinstance(loss, (int, float)) and math.isfinite(loss)
    row["diverged"] = bool(branch.get("diverged")) or not finite
    return row


def results_table(study: optuna.Study, include_failed: bool = False) -> pd.DataFrame:
    import pandas as pd

    rows = trial_rows(study, include_failed)
    df = pd.DataFrame(rows)
    cols = list(RESULT_COLUMNS) + sorted(c for c in df.columns if c not in RESULT_COLUMNS)
    df = df.reindex(columns=cols)
    if len(df):
        df["diverged"] = df["diverged"].astype(bool)
    return df


def write_table(df: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """CSV (``.csv``, ``.csv.gz``) or Parquet (``.parquet``, needs pyarrow), written atomically."""
    p = Path(path)
    name = p.name.lower()
    if name.endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ValueError(f"writing {str(p)!r} needs pyarrow; pip install pyarrow, or use .csv") from None
        with atomic_path(p) as tmp:
            df.to_parquet(tmp, index=False)
    elif name.endswith((".csv", ".csv.gz")):
        with atomic_path(p) as tmp:
            df.to_csv(tmp, index=False, compression="gzip" if name.endswith(".gz") else None)
    else:
        raise ValueError(f"output {str(p)!r} must end in .csv, .csv.gz or .parquet")
    return p


def best_per_group(study: optuna.Study, group_keys: list[str]) -> list[dict[str, Any]]:
    """The lowest-loss finished, non-diverged trial of each group (e.g. per width x param)."""
    from optuna.trial import TrialState

    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get(attrs.DIVERGED) or t.value is None or not math.isfinite(t.value):
            continue
        params = {**(t.user_attrs.get(attrs.POINT) or {}), **t.params}
        key = tuple(params.get(k) for k in group_keys)
        if key not in best or t.value < best[key]["loss"]:
            best[key] = {**{k: params.get(k) for k in group_keys}, "trial": t.number,
                         "lr": params.get("lr"), "loss": t.value}
    return [best[k] for k in sorted(best, key=lambda k: tuple(str(x) for x in k))]


#: Fields of a trial's config that say where it ran or wrote, not what it was: left out
#: of :func:`best_config`, so the file configures a run anywhere.
_WHERE_FIELDS = ("out_dir", "resume", "device", "threads", "data_cache")


def best_config(study: optuna.Study) -> dict[str, Any]:
    """The full training config of the study's lowest-loss finished, non-diverged trial
    (its stored ``config`` attribute: preset, base and searched values, TrainConfig
    defaults filled), without where-it-ran fields, plus ``loss`` and ``trial`` of that
    trial. No such trial -> ValueError."""
    from optuna.trial import TrialState

    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if not t.user_attrs.get(attrs.DIVERGED) and t.value is not None and math.isfinite(t.value)]
    if not done:
        raise ValueError(f"study {study.study_name!r} has no finished, non-diverged trial")
    best = min(done, key=lambda t: t.value)
    stored = dict(best.user_attrs.get(attrs.CONFIG) or {})
    config = {k: v for k, v in stored.items() if k not in _WHERE_FIELDS}
    if not config:
        raise ValueError(f"trial {best.number} of study {study.study_name!r} has no stored config")
    return {"config": config, "loss": float(best.value), "trial": best.number}


def status(study: optuna.Study) -> dict[str, Any]:
    """Counts by state and the best trial per group, as a JSON-able dict."""
    attr = study.user_attrs.get(STUDY_ATTR)
    keys: list[str] = []
    total = None
    if attr is not None:
        settings = SweepSettings.from_attr(attr)
        keys = settings.spec.group_keys()
        total = len(settings.spec.points()) * settings.spec.trials_per_point()
        # and the points added past the grid's edges (sweeps.extend)
        total += len({t.user_attrs.get(attrs.POINT_KEY) for t in study.get_trials(deepcopy=False)
                      if attrs.EXTENDED_AXIS in t.user_attrs})
    counts = study_counts(study)
    return {"study": study.study_name, "total": total, "counts": counts.to_dict(),
            "group_keys": keys, "best": best_per_group(study, keys)}


def format_status(st: dict[str, Any]) -> str:
    c = st["counts"]
    lines = [f"study {st['study']}: {c['done']}/{st['total'] if st['total'] is not None else '?'} done "
             f"(complete {c['complete']}, diverged {c['diverged']}, pruned {c['pruned']}, "
             f"failed {c['failed']}, running {c['running']}, waiting {c['waiting']})"]
    if st["best"]:
        keys = st["group_keys"]
        lines.append("best per group:")
        for b in st["best"]:
            group = " ".join(f"{k}={b[k]}" for k in keys) or "(all)"
            lr = b["lr"]
            lr_s = f"{lr:.3g} (2^{math.log2(lr):.2f})" if isinstance(lr, (int, float)) and lr > 0 else str(lr)
            lines.append(f"  {group}: lr={lr_s} loss={b['loss']:.4f} (trial {b['trial']})")
    return "\n".join(lines)
