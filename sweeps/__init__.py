"""sweeps: Optuna studies over mutransfer proxies.

Specs (:class:`LRSweep`, :class:`BatchSweep`, :class:`ScalingSweep`, :class:`GridSweep`)
enumerate grid points;
:func:`run_sweep` checks every grid point's config (:func:`check_trials`), creates or
resumes the study in a journal file or an RDB and runs workers, which claim and run trials
through :class:`SweepStudy` on Optuna's public API; :func:`results_table` /
:func:`write_table` give the tidy table that ``analysis`` reads; :func:`run_holdout` checks a
scaling fit at a point it has not seen. Names load lazily:
``import sweeps`` imports neither optuna nor torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweeps.export import best_config, best_per_group, results_table, status, write_table
    from sweeps.holdout import run_holdout
    from sweeps.lifecycle import SweepStudy, run_group
    from sweeps.objective import worst_case_loss
    from sweeps.progress import Counts, study_counts
    from sweeps.recovery import requeue, sweep_stale
    from sweeps.resolve import check_trials, resolve_config
    from sweeps.runners import (
        DEFAULT_RUNNER,
        load_runner,
        registered_runners,
        synthetic_runner,
        train_runner,
    )
    from sweeps.spec import (
        MULTIPLIER_SEARCH_SPACE,
        BatchSweep,
        GridSweep,
        LRSweep,
        MultiplierSweep,
        ScalingSweep,
        SweepSpec,
        load_spec,
        spec_from_dict,
    )
    from sweeps.storage import Storage
    from sweeps.study import Plan, SweepResult, prepare, run_sweep
    from sweeps.worker import SweepSettings, open_study, spawn_workers, work

_EXPORTS: dict[str, str] = {
    "SweepSpec": "sweeps.spec", "LRSweep": "sweeps.spec", "BatchSweep": "sweeps.spec",
    "GridSweep": "sweeps.spec", "load_spec": "sweeps.spec", "spec_from_dict": "sweeps.spec",
    "Storage": "sweeps.storage",
    "DEFAULT_RUNNER": "sweeps.runners", "load_runner": "sweeps.runners",
    "train_runner": "sweeps.runners", "synthetic_runner": "sweeps.runners",
    "resolve_config": "sweeps.resolve", "worst_case_loss": "sweeps.objective",
    "requeue": "sweeps.recovery", "sweep_stale": "sweeps.recovery",
    "Counts": "sweeps.progress", "study_counts": "sweeps.progress",
    "SweepSettings": "sweeps.worker", "open_study": "sweeps.worker", "work": "sweeps.worker",
    "spawn_workers": "sweeps.worker",
    "Plan": "sweeps.study", "SweepResult": "sweeps.study", "prepare": "sweeps.study",
    "run_sweep": "sweeps.study",
    "results_table": "sweeps.export", "write_table": "sweeps.export", "status": "sweeps.export",
    "best_per_group": "sweeps.export",
    "SweepStudy": "sweeps.lifecycle", "run_group": "sweeps.lifecycle", "check_trials": "sweeps.resolve",
    "registered_runners": "sweeps.runners", "ScalingSweep": "sweeps.spec",
    "run_holdout": "sweeps.holdout", "MultiplierSweep": "sweeps.spec",
    "MULTIPLIER_SEARCH_SPACE": "sweeps.spec", "best_config": "sweeps.export",
}

__all__ = [
    "BatchSweep", "Counts", "DEFAULT_RUNNER", "GridSweep", "LRSweep", "MULTIPLIER_SEARCH_SPACE",
    "MultiplierSweep", "Plan", "ScalingSweep", "best_config",
    "SweepResult", "run_holdout",
    "SweepSettings", "SweepSpec", "SweepStudy", "best_per_group", "check_trials", "registered_runners",
    "run_group", "load_runner", "load_spec", "Storage",
    "open_study", "prepare", "requeue", "resolve_config", "results_table",
    "run_sweep", "spawn_workers", "spec_from_dict", "status", "study_counts", "sweep_stale",
    "synthetic_runner", "train_runner", "work", "worst_case_loss", "write_table",
]
assert sorted(__all__) == sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sweeps' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
