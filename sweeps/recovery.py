"""Crash recovery: heartbeats, the stale-trial sweeper, and re-enqueueing a lost trial.

* RDB storages (PostgreSQL, MySQL, SQLite): Optuna's own heartbeat. Each running trial
  records a heartbeat every ``heartbeat_interval`` seconds; any worker calls
  ``optuna.storages.fail_stale_trials`` before taking a trial, which fails trials silent
  for longer than ``grace_period`` and calls :func:`requeue` on each.
* Journal file: the journal has no heartbeat, so a worker stores ``host``, ``pid``,
  ``pid_start`` and a ``heartbeat`` timestamp as trial user attrs. :func:`sweep_stale`
  fails a RUNNING trial whose worker process is dead on this host (immediately) or whose
  heartbeat is older than the grace period (any host), then re-enqueues it.

The trial's heartbeat thread is :class:`sweeps.lifecycle.Heartbeat`.

Failing a trial is the atomic step: when two workers race, the storage lets exactly one
move it from RUNNING to FAIL (the other gets ``UpdateFinishedTrialError``), so a lost trial
is re-enqueued once. A worker that was only slow finds its trial failed and drops its result;
the grid point completes exactly once.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mutransfer.provenance import pid_alive
from sweeps import attrs
from sweeps.provenance import hostname

if TYPE_CHECKING:
    import optuna

    from sweeps.lifecycle import SweepStudy


def requeue(study: optuna.Study, trial: optuna.trial.FrozenTrial, max_retries: int = 3,
            reason: str = "stale") -> bool:
    """Enqueue a fresh WAITING trial with the same parameters as the failed ``trial``."""
    retries = int(trial.user_attrs.get(attrs.RETRIES, 0))
    if retries >= max_retries:
        return False
    point = dict(trial.user_attrs.get(attrs.POINT, {}))
    params = {**point, **trial.params}
    kept: dict[str, Any] = {
        k: trial.user_attrs[k] for k in (attrs.POINT, attrs.POINT_KEY, attrs.GROUP) if k in trial.user_attrs
    }
    kept.update({attrs.RETRIES: retries + 1, attrs.RETRY_OF: trial.number, attrs.RETRY_REASON: reason})
    study.enqueue_trial(params, user_attrs=kept)
    return True


@dataclass(frozen=True)
class RequeueCallback:
    """``heartbeat_stale_trial_callback`` for RDBStorage: re-enqueue the stale trial. A value
    (equal settings, equal callbacks), so :meth:`sweeps.storage.Storage.open` can tell
    whether the storage it holds already has it."""

    max_retries: int = 3

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        requeue(study, trial, self.max_retries, reason="heartbeat")


def sweep_stale(study: SweepStudy, *, grace_period: float, max_retries: int = 3) -> list[int]:
    """Fail and re-enqueue lost RUNNING trials; returns the numbers of the trials failed.
    How depends on where the study lives (``study.location``): see the module docstring."""
    from optuna.trial import TrialState

    failed: list[int] = []
    journal = study.location.journal
    if not journal:
        import optuna

        before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)  # calls RequeueCallback for each
        after = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
        failed = sorted(before & after)
    now = time.time()
    host = hostname()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        ua = t.user_attrs
        dead = False
        reason = ""
        if journal and ua.get(attrs.HOST) == host and attrs.PID in ua:
            if not pid_alive(int(ua[attrs.PID]), ua.get(attrs.PID_START)):
                dead, reason = True, f"worker pid {ua[attrs.PID]} died"
        if not dead:
            beat = ua.get(attrs.HEARTBEAT) if journal else None
            if beat is None and attrs.PID not in ua and t.datetime_start is not None:
                beat = t.datetime_start.timestamp()  # popped but never started (any storage)
            if beat is not None and now - float(beat) > grace_period:
                dead, reason = True, f"no heartbeat for {now - float(beat):.0f} s"
        if dead and study.fail(t.number):
            failed.append(t.number)
            requeue(study, t, max_retries, reason=reason)
    return failed
