"""Crash recovery: heartbeats, the stale-trial sweeper, and re-enqueueing a lost trial.

* RDB storages (PostgreSQL, MySQL, SQLite): Optuna's own heartbeat. Each running trial
  records a heartbeat every ``heartbeat_interval`` seconds; any worker calls
  ``optuna.storages.fail_stale_trials`` before taking a trial, which fails trials silent
  for longer than ``grace_period`` and calls :func:`requeue` on each.
* Journal file: the journal has no heartbeat, so a worker stores ``host``, ``pid``,
  ``pid_start`` and a ``heartbeat`` timestamp as trial user attrs. :func:`sweep_stale`
  fails a RUNNING trial whose worker process is dead on this host (immediately) or whose
  heartbeat is older than the grace period (any host), then re-enqueues it.

Failing a trial is the atomic step: when two workers race, the storage lets exactly one
move it from RUNNING to FAIL (the other gets ``UpdateFinishedTrialError``), so a lost trial
is re-enqueued once. A worker that was only slow finds its trial failed and drops its result;
the grid point completes exactly once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sweeps.provenance import hostname, pid_alive

if TYPE_CHECKING:
    import optuna

# trial user attrs written by the worker that runs a trial
ATTR_POINT = "point"
ATTR_POINT_KEY = "point_key"
ATTR_RETRIES = "retries"
ATTR_RETRY_OF = "retry_of"
ATTR_HOST = "host"
ATTR_PID = "pid"
ATTR_PID_START = "pid_start"
ATTR_HEARTBEAT = "heartbeat"


def requeue(study: optuna.Study, trial: optuna.trial.FrozenTrial, max_retries: int = 3,
            reason: str = "stale") -> bool:
    """Enqueue a fresh WAITING trial with the same parameters as the failed ``trial``."""
    retries = int(trial.user_attrs.get(ATTR_RETRIES, 0))
    if retries >= max_retries:
        return False
    point = dict(trial.user_attrs.get(ATTR_POINT, {}))
    params = {**point, **trial.params}
    attrs: dict[str, Any] = {
        k: trial.user_attrs[k] for k in (ATTR_POINT, ATTR_POINT_KEY, "group") if k in trial.user_attrs
    }
    attrs.update({ATTR_RETRIES: retries + 1, ATTR_RETRY_OF: trial.number, "retry_reason": reason})
    study.enqueue_trial(params, user_attrs=attrs)
    return True


class RequeueCallback:
    """``heartbeat_stale_trial_callback`` for RDBStorage: re-enqueue the stale trial."""

    def __init__(self, max_retries: int = 3) -> None:
        self.max_retries = max_retries

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        requeue(study, trial, self.max_retries, reason="heartbeat")


def _fail(study: optuna.Study, trial_id: int) -> bool:
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    try:
        return bool(study._storage.set_trial_state_values(trial_id, state=TrialState.FAIL))
    except UpdateFinishedTrialError:
        return False  # another worker got there first
    except KeyError:
        return False


def sweep_stale(study: optuna.Study, *, grace_period: float, journal: bool,
                max_retries: int = 3) -> list[int]:
    """Fail and re-enqueue lost RUNNING trials; returns the numbers of the trials failed."""
    from optuna.trial import TrialState

    failed: list[int] = []
    if not journal:
        import optuna

        before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
        import warnings

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
        if journal and ua.get(ATTR_HOST) == host and ATTR_PID in ua:
            if not pid_alive(int(ua[ATTR_PID]), ua.get(ATTR_PID_START)):
                dead, reason = True, f"worker pid {ua[ATTR_PID]} died"
        if not dead:
            beat = ua.get(ATTR_HEARTBEAT) if journal else None
            if beat is None and ATTR_PID not in ua and t.datetime_start is not None:
                beat = t.datetime_start.timestamp()  # popped but never started (any storage)
            if beat is not None and now - float(beat) > grace_period:
                dead, reason = True, f"no heartbeat for {now - float(beat):.0f} s"
        if dead and _fail(study, t._trial_id):
            failed.append(t.number)
            requeue(study, t, max_retries, reason=reason)
    return failed


class Heartbeat:
    """Context manager: a daemon thread that keeps running trials' heartbeats fresh.

    ``trial_id`` may be one id or several (a fused group: one thread beats for all its
    members). A trial that can no longer be beaten (finished elsewhere, e.g. failed by
    another worker's stale sweep) is dropped; the others keep beating.
    """

    def __init__(self, study: optuna.Study, trial_id: int | Sequence[int], interval: float,
                 journal: bool) -> None:
        self.study = study
        self.trial_ids = [trial_id] if isinstance(trial_id, int) else list(trial_id)
        self.interval = interval
        self.journal = journal
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sweeps-heartbeat", daemon=True)

    @property
    def trial_id(self) -> int:
        """The first (for a single trial: the only) trial beaten."""
        return self.trial_ids[0]

    def beat(self) -> None:
        """Beat every trial still held; raises if none could be beaten."""
        storage = self.study._storage
        alive = []
        error: Exception | None = None
        for tid in self.trial_ids:
            try:
                if self.journal:
                    storage.set_trial_user_attr(tid, ATTR_HEARTBEAT, time.time())
                else:
                    storage.record_heartbeat(tid)
                alive.append(tid)
            except Exception as exc:  # finished elsewhere: stop beating this one only
                error = exc
        self.trial_ids = alive
        if not alive and error is not None:
            raise error

    def _loop(self) -> None:
        while self.trial_ids and not self._stop.wait(self.interval):
            try:
                self.beat()
            except Exception:  # every trial finished elsewhere, storage hiccup: stop beating
                return

    def __enter__(self) -> Heartbeat:
        self.beat()
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)
