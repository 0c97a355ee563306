"""The objective of a sweep trial: what is told to the sampler, and the search space.

The value told is the final held-out loss. A diverged trial (the trainer's ``diverged``
flag, or a non-finite loss from any runner) is told a finite worst-case value,
``max(ln(vocab), finite loss)``, and gets the user attr ``diverged=True``: TPE and GP treat
NaN as missing and keep sampling the divergent region. The grid point is recorded as the
trial's parameters under distributions that stay stable while a resumed study grows
(:func:`dim_distribution`). Running a trial (claim -> start -> run -> tell) is
:mod:`sweeps.lifecycle`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mutransfer._io import plain
from mutransfer.training.config import INT_FIELDS as TRAIN_INT_FIELDS
from sweeps.resolve import to_train_config
from sweeps.spec_base import PARAMETRIZATIONS, SweepSpec, preset_attr

if TYPE_CHECKING:
    import optuna

OUTCOMES = ("complete", "diverged", "pruned", "failed", "lost")


def full_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every TrainConfig field of ``config`` (defaults filled) when the trainer imports;
    for a model given as ``source`` the default ``preset`` is left out, as the trial's
    overrides leave it (:func:`sweeps.spec_base.model_fields`): it is not the model."""
    try:
        flat = to_train_config(config).to_flat()
    except Exception:
        return json_row(config, "the trial's config")
    if flat.get("source") is not None and "preset" not in config:
        flat.pop("preset", None)
    return json_row(flat, "the trial's config")


def told(config: Mapping[str, Any], row: Mapping[str, Any]) -> tuple[str, float | None]:
    """(outcome, value to tell) of a finished run's row: ``"complete"`` and its loss,
    ``"diverged"`` and the finite worst case, or ``"pruned"`` and None."""
    loss = row.get("loss")
    loss = float(loss) if isinstance(loss, (int, float)) else float("nan")
    if bool(row.get("diverged")) or not math.isfinite(loss):
        return "diverged", worst_case_loss(config, loss if math.isfinite(loss) else None)
    if row.get("pruned"):
        return "pruned", None
    return "complete", loss


def worst_case_loss(config: Mapping[str, Any], loss: float | None = None) -> float:
    """ln(vocab) of the preset, or the (finite) reported loss if larger."""
    vocab = preset_attr(str(config.get("preset", "gpt-tiny")), "vocab_size", 256)
    worst = math.log(vocab if isinstance(vocab, int) and vocab > 1 else 256)
    if loss is not None and math.isfinite(loss):
        worst = max(worst, float(loss))
    return worst


def json_row(row: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``row`` as a trial attribute holds it: :func:`mutransfer._io.plain` (string keys,
    lists, numpy/torch scalars as Python scalars; NaN stays, :func:`told` reads it). A
    value JSON cannot hold (a path, a set, an object) -> ValueError naming its field and
    type, so the trial fails saying so; it is never stored as its ``str()``."""
    out = plain(row)
    bad = []
    for key, value in out.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            bad.append(f"{key} ({type(value).__name__})")
    if bad:
        raise ValueError(f"{what} holds value(s) JSON cannot store: {', '.join(bad)}; give numbers, "
                         "strings, booleans, lists or mappings")
    return out


#: The trainer's integer fields (from TrainConfig's type hints) and the sweeps' token budget.
INT_FIELDS = TRAIN_INT_FIELDS | {"tokens"}


def dim_distribution(name: str, values: Sequence[Any]) -> optuna.distributions.BaseDistribution:
    """The Optuna distribution a grid dimension is recorded under.

    Optuna demands one distribution class per parameter (and identical choices for a
    categorical) across a study, while a resumed study may grow its grid. So numbers get
    ranges (int fields an IntDistribution, lr a log FloatDistribution, other numbers a
    FloatDistribution), ``parametrization`` always the full choice set, booleans
    [False, True], and other values a categorical of the spec's values (fixed per study).
    """
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    vals = list(values)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)
    if name == "parametrization":
        return CategoricalDistribution(list(PARAMETRIZATIONS) + sorted(set(vals) - set(PARAMETRIZATIONS)))
    if vals and all(isinstance(v, bool) for v in vals):
        return CategoricalDistribution([False, True])
    if numeric and name in INT_FIELDS and all(float(v).is_integer() for v in vals):
        return IntDistribution(int(min(vals)), int(max(vals)))
    if numeric and vals:
        lo, hi = float(min(vals)), float(max(vals))
        return FloatDistribution(lo, hi, log=name == "lr" and lo > 0)
    return CategoricalDistribution(_categorical(vals))


def suggest_params(trial: optuna.Trial, spec: SweepSpec, point: Mapping[str, Any]) -> dict[str, Any]:
    """Record the grid point as the trial's parameters and sample the adaptive dimensions."""
    from optuna.distributions import FloatDistribution, IntDistribution

    dims = dict(spec.grid_dims())
    out: dict[str, Any] = {}
    for name, value in point.items():
        values = list(dims.get(name, ()))
        if value not in values:
            values.append(value)
        dist = dim_distribution(name, values)
        if isinstance(dist, IntDistribution):
            out[name] = trial.suggest_int(name, dist.low, dist.high)
        elif isinstance(dist, FloatDistribution):
            out[name] = trial.suggest_float(name, dist.low, dist.high, log=dist.log)
        else:
            out[name] = trial.suggest_categorical(name, list(dist.choices))
    for name, (lo, hi) in spec.search().items():
        out[name] = trial.suggest_float(name, lo, hi, log=True)
    return out


def _categorical(choices: list[Any]) -> list[Any]:
    ok = (type(None), bool, int, float, str)
    return [c if isinstance(c, ok) else str(c) for c in choices]
