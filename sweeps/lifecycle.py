"""A study as a sweep worker holds it, on Optuna's public API only.

Optuna keeps a study's storage private, so :class:`SweepStudy` (an ``optuna.Study``
opened by :func:`sweeps.worker.open_study`) also keeps where it lives
(:class:`sweeps.storage.Storage`), the Optuna storage it was opened on, with the study's
id, and adds the few storage-level steps the workers need, each on
``optuna.storages.BaseStorage``'s public methods:

* :meth:`SweepStudy.claim`: take WAITING trials. The WAITING -> RUNNING transition of
  ``BaseStorage.set_trial_state_values`` is atomic in every storage: when two workers race
  for a trial exactly one gets it, the other skips it. Unlike ``study.ask`` it never
  creates a new, unplanned trial when nothing waits.
* :meth:`SweepStudy.fail`: the RUNNING -> FAIL transition (the recovery sweeper).
* :meth:`SweepStudy.set_trial_attr` / :meth:`SweepStudy.heartbeat` on a trial by number;
  :class:`Heartbeat` beats for a running group from a thread.

:func:`run_group` is a trial's life after the claim: owned, started (parameters and
provenance recorded), run (alone, or fused with others), told.
"""

from __future__ import annotations

import inspect
import math
import os
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import optuna

from mutransfer.provenance import git_revision
from sweeps import attrs
from sweeps.objective import full_config, json_row, suggest_params, told
from sweeps.provenance import hostname, package_versions, process_start_ticks
from sweeps.resolve import resolve_config
from sweeps.runners import FusedRunner, Report, Runner, train_runner
from sweeps.spec_base import SweepSpec

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from sweeps.storage import Storage


class SweepStudy(optuna.Study):
    """An ``optuna.Study`` that also holds where it lives (``location``, a
    :class:`sweeps.storage.Storage`), the Optuna storage this process opened there
    (``storage``) and its id (``study_id``)."""

    def __init__(self, study_name: str, location: Storage,
                 sampler: optuna.samplers.BaseSampler | None = None,
                 pruner: optuna.pruners.BasePruner | None = None) -> None:
        storage = location.open()
        super().__init__(study_name=study_name, storage=storage, sampler=sampler, pruner=pruner)
        self.location = location
        self.storage = storage
        self.study_id = storage.get_study_id_from_name(study_name)
        self._ids_by_number: dict[int, int] = {}

    def trial_id(self, number: int) -> int:
        """The storage's id of trial ``number`` (cached: it never changes)."""
        tid = self._ids_by_number.get(number)
        if tid is None:
            tid = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)
            self._ids_by_number[number] = tid
        return tid

    def claim(self, n: int = 1, accept: Callable[[FrozenTrial], bool] | None = None
              ) -> list[optuna.Trial]:
        """Take up to ``n`` WAITING trials, oldest first, that ``accept`` (default: any);
        they are RUNNING and this process's when returned. [] when none is left."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        got: list[optuna.Trial] = []
        if n < 1:
            return got
        for frozen in self.storage.get_all_trials(self.study_id, deepcopy=False,
                                                  states=(TrialState.WAITING,)):
            if accept is not None and not accept(frozen):
                continue
            tid = self.trial_id(frozen.number)
            try:
                if not self.storage.set_trial_state_values(tid, state=TrialState.RUNNING):
                    continue  # another worker took it first
            except (UpdateFinishedTrialError, KeyError):
                continue  # finished (or gone) since the listing
            got.append(optuna.Trial(self, tid))
            if len(got) >= n:
                break
        return got

    def fail(self, number: int) -> bool:
        """Move trial ``number`` from RUNNING to FAIL; False when another worker (or its
        owner) finished it first: exactly one caller wins."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        try:
            return bool(self.storage.set_trial_state_values(self.trial_id(number), state=TrialState.FAIL))
        except (UpdateFinishedTrialError, KeyError):
            return False

    def set_trial_attr(self, number: int, key: str, value: Any) -> None:
        """A user attr of trial ``number`` (raises UpdateFinishedTrialError once it is finished)."""
        self.storage.set_trial_user_attr(self.trial_id(number), key, value)

    def heartbeat(self, number: int) -> None:
        """One heartbeat of a held trial: the RDB's own, or a timestamp attr in a journal."""
        if self.location.journal:
            self.set_trial_attr(number, attrs.HEARTBEAT, time.time())
        else:
            self.storage.record_heartbeat(self.trial_id(number))


class Heartbeat:
    """Context manager: a daemon thread that keeps running trials' heartbeats fresh.

    ``trials`` are trial numbers, one or several (a fused group: one thread beats for all
    its members). A trial that can no longer be beaten (finished elsewhere, e.g. failed by
    another worker's stale sweep) is dropped; the others keep beating.
    """

    def __init__(self, study: SweepStudy, trials: int | Sequence[int], interval: float) -> None:
        self.study = study
        self.numbers = [trials] if isinstance(trials, int) else list(trials)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sweeps-heartbeat", daemon=True)

    def beat(self) -> None:
        """Beat every trial still held; raises if none could be beaten."""
        alive = []
        error: Exception | None = None
        for number in self.numbers:
            try:
                self.study.heartbeat(number)
                alive.append(number)
            except Exception as exc:  # finished elsewhere: stop beating this one only
                error = exc
        self.numbers = alive
        if not alive and error is not None:
            raise error

    def _loop(self) -> None:
        while self.numbers and not self._stop.wait(self.interval):
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


# ---- one run: claimed -> started -> run -> told ---------------------------------------------

def run_group(
    study: SweepStudy,
    trials: Sequence[optuna.Trial],
    spec: SweepSpec,
    runner: Runner,
    *,
    fused_runner: FusedRunner | None = None,
    heartbeat_interval: float,
    sampler_seed: int,
    progress: bool = False,
) -> list[str]:
    """Run claimed ``trials`` as one call and tell each its own result; returns one of
    :data:`sweeps.objective.OUTCOMES` per trial, in order.

    An unfused trial is a group of one, run by ``runner``; a larger group is run by
    ``fused_runner`` as one batched model. Every member gets the same user attrs and row
    as an unfused trial (plus ``fused_with``, the numbers of the group's trials); a diverged
    member is told a finite worst case, a pruned member PRUNED, a failed one FAIL with its
    error. A member another worker declared dead (its trial finished elsewhere) is pruned
    out of the run at its next report and counted "lost"; the others go on. One heartbeat
    thread beats for all members until the last is told, so a SIGKILL leaves every untold
    member RUNNING for the stale-trial sweep to re-queue.
    """
    from optuna.exceptions import UpdateFinishedTrialError

    if len(trials) > 1 and fused_runner is None:
        raise ValueError(f"a group of {len(trials)} trials needs a fused runner")
    outcomes: list[str | None] = [None] * len(trials)
    claimed = []
    for i, t in enumerate(trials):
        try:
            _own(t)
            claimed.append(i)
        except UpdateFinishedTrialError:
            outcomes[i] = "lost"
    if not claimed:
        return [o or "lost" for o in outcomes]
    full = _is_train_runner(runner)
    try:
        with Heartbeat(study, [trials[i].number for i in claimed], heartbeat_interval):
            live: list[int] = []
            configs: list[dict[str, Any]] = []
            for i in claimed:
                try:
                    configs.append(_start(trials[i], spec, sampler_seed=sampler_seed, full=full))
                    if len(trials) > 1:  # the one attr an unfused trial lacks
                        trials[i].set_user_attr(attrs.FUSED_WITH, [trials[j].number for j in claimed])
                    live.append(i)
                except UpdateFinishedTrialError:
                    outcomes[i] = "lost"
                except Exception as exc:
                    outcomes[i] = _fail_trial(study, trials[i], exc, traceback.format_exc())
            lost: set[int] = set()

            def reporter(i: int) -> Report:
                def report(step: int, value: float) -> bool:
                    if not math.isfinite(value):
                        return False
                    try:
                        trials[i].report(float(value), int(step))
                        return bool(trials[i].should_prune())
                    except UpdateFinishedTrialError:  # failed elsewhere: drop it from the run
                        lost.add(i)
                        return True

                # what a tracked run is named by and carries (mutransfer.training.tracking)
                report.point = dict(trials[i].user_attrs.get(attrs.POINT, {}))  # type: ignore[attr-defined]
                report.trial = trials[i].number  # type: ignore[attr-defined]
                return report

            results: list[dict[str, Any] | Exception] = []
            tb = ""
            if live:
                try:
                    if len(trials) == 1:
                        kwargs = {"progress": True} if progress and _takes_progress(runner) else {}
                        results = [runner(dict(configs[0]), reporter(live[0]), **kwargs)]
                    else:
                        assert fused_runner is not None
                        results = list(fused_runner([dict(c) for c in configs],
                                                    [reporter(i) for i in live]))
                    if len(results) != len(live):
                        raise RuntimeError(f"fused runner returned {len(results)} results for "
                                           f"{len(live)} trials")
                except Exception as exc:  # the whole call failed: fail every member
                    results, tb = [exc] * len(live), traceback.format_exc()
            for i, config, res in zip(live, configs, results):
                if i in lost:
                    outcomes[i] = "lost"
                elif isinstance(res, Exception):
                    member_tb = tb or "".join(traceback.format_exception(type(res), res, res.__traceback__))
                    outcomes[i] = _fail_trial(study, trials[i], res, member_tb)
                else:
                    try:
                        row = json_row(res, "the runner's row")
                    except ValueError as exc:
                        outcomes[i] = _fail_trial(study, trials[i], exc, traceback.format_exc())
                    else:
                        outcomes[i] = _finish(study, trials[i], config, row)
    except UpdateFinishedTrialError:  # every member was finished elsewhere before the start
        pass
    return [o or "lost" for o in outcomes]


def _own(trial: optuna.Trial) -> None:
    """Record this process as the trial's owner (the journal's dead-worker check reads it)."""
    pid = os.getpid()
    for k, v in ((attrs.HOST, hostname()), (attrs.PID, pid), (attrs.PID_START, process_start_ticks(pid))):
        trial.set_user_attr(k, v)


def _start(trial: optuna.Trial, spec: SweepSpec, *, sampler_seed: int, full: bool) -> dict[str, Any]:
    """Record the trial's parameters and provenance; returns its resolved config."""
    point = dict(trial.user_attrs.get(attrs.POINT, {}))
    params = suggest_params(trial, spec, point)
    config = resolve_config(spec, params)
    for k, v in (
        (attrs.SAMPLER_SEED, sampler_seed),
        (attrs.TRIAL_SEED, config.get("seed")),
        (attrs.VERSIONS, package_versions()),
        (attrs.GIT_REVISION, git_revision()),
        (attrs.CONFIG, full_config(config) if full else json_row(config, "the trial's config")),
    ):
        trial.set_user_attr(k, v)
    return config


def _fail_trial(study: SweepStudy, trial: optuna.Trial, exc: BaseException, tb: str) -> str:
    """Tell FAIL with the error recorded; returns "failed" (or "lost" if already finished)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    try:
        trial.set_user_attr(attrs.ERROR, f"{type(exc).__name__}: {exc}")
        trial.set_user_attr(attrs.TRACEBACK, tb[-4000:])
        study.tell(trial, state=TrialState.FAIL)
    except UpdateFinishedTrialError:
        return "lost"
    return "failed"


def _finish(study: SweepStudy, trial: optuna.Trial, config: Mapping[str, Any], row: dict[str, Any]) -> str:
    """Store the row and tell the study (:func:`sweeps.objective.told`); returns the outcome."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    outcome, value = told(config, row)
    row["diverged"] = outcome == "diverged"
    state = TrialState.PRUNED if outcome == "pruned" else TrialState.COMPLETE
    try:
        trial.set_user_attr(attrs.ROW, row)
        trial.set_user_attr(attrs.DIVERGED, row["diverged"])
        if row.get("compile_fallback"):
            trial.set_user_attr(attrs.COMPILE_FALLBACK, row["compile_fallback"])
        if outcome == "diverged":
            trial.set_user_attr(attrs.TOLD_VALUE, value)
        frozen = study.tell(trial, value, state=state, skip_if_finished=True)
    except UpdateFinishedTrialError:
        return "lost"
    return outcome if frozen.state == state and frozen.datetime_complete is not None else "lost"


def _takes_progress(runner: Runner) -> bool:
    try:
        return "progress" in inspect.signature(runner).parameters
    except (TypeError, ValueError):
        return False


def _is_train_runner(runner: Runner) -> bool:
    return runner is train_runner
