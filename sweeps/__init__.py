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

from typing import TYPE_CHECKING

from mutransfer._lazy import lazy_exports

if TYPE_CHECKING:
    from sweeps.holdout import run_holdout
    from sweeps.lifecycle import SweepStudy, run_group
    from sweeps.objective import worst_case_loss
    from sweeps.progress import Counts, study_counts
    from sweeps.recovery import requeue, sweep_stale
    from sweeps.resolve import check_trials, resolve_config
    from sweeps.results import best_config, best_per_group, results_table, status, write_table
    from sweeps.runners import DEFAULT_RUNNER, load_runner, registered_runners, synthetic_runner, train_runner
    from sweeps.spec import load_spec, spec_from_dict
    from sweeps.spec_base import SweepSpec
    from sweeps.spec_kinds import MULTIPLIER_SEARCH_SPACE, BatchSweep, GridSweep, LRSweep, MultiplierSweep
    from sweeps.spec_scaling import ScalingSweep
    from sweeps.storage import Storage
    from sweeps.study import Plan, SweepResult, prepare, run_sweep
    from sweeps.worker import SweepSettings, open_study, spawn_workers, work

__all__ = [
    # specs
    "SweepSpec", "LRSweep", "BatchSweep", "ScalingSweep", "GridSweep", "MultiplierSweep",
    "MULTIPLIER_SEARCH_SPACE", "load_spec", "spec_from_dict",
    # resolving and running a sweep
    "check_trials", "resolve_config", "Storage", "Plan", "SweepResult", "prepare", "run_sweep",
    "SweepStudy", "run_group",
    # workers and runners
    "SweepSettings", "open_study", "spawn_workers", "work", "DEFAULT_RUNNER", "load_runner",
    "registered_runners", "synthetic_runner", "train_runner", "worst_case_loss",
    # progress and recovery
    "Counts", "study_counts", "requeue", "sweep_stale",
    # results
    "results_table", "write_table", "status", "best_config", "best_per_group", "run_holdout",
]

# Loaded on first use, so `import sweeps` stays quick; the names above are the ones
# a type checker and a reader see (tests/test_layers.py holds the two lists equal).
__getattr__, __dir__ = lazy_exports(__name__, {
    "sweeps.results": ("results_table", "write_table", "status", "best_config", "best_per_group"),
    "sweeps.holdout": ("run_holdout",),
    "sweeps.lifecycle": ("SweepStudy", "run_group"),
    "sweeps.objective": ("worst_case_loss",),
    "sweeps.progress": ("Counts", "study_counts"),
    "sweeps.recovery": ("requeue", "sweep_stale"),
    "sweeps.resolve": ("check_trials", "resolve_config"),
    "sweeps.runners": (
        "DEFAULT_RUNNER", "load_runner", "registered_runners", "synthetic_runner", "train_runner",
    ),
    "sweeps.spec": ("load_spec", "spec_from_dict"),
    "sweeps.spec_base": ("SweepSpec",),
    "sweeps.spec_kinds": ("LRSweep", "BatchSweep", "GridSweep", "MultiplierSweep", "MULTIPLIER_SEARCH_SPACE"),
    "sweeps.spec_scaling": ("ScalingSweep",),
    "sweeps.storage": ("Storage",),
    "sweeps.study": ("Plan", "SweepResult", "prepare", "run_sweep"),
    "sweeps.worker": ("SweepSettings", "open_study", "spawn_workers", "work"),
})
