"""Real processes, real storages: SIGKILL a worker mid-trial; every grid point still
completes exactly once and the study finishes.

The PostgreSQL variant needs a server: ``eval "$(bash .ci/postgres.sh)"`` exports
MUTRANSFER_TEST_POSTGRES_URL (CI does this); without it the test is skipped.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from sweeps.spec_kinds import LRSweep
from sweeps.storage import Storage
from sweeps.study import prepare
from sweeps.worker import open_study, spawn_workers

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

SYN = "sweeps.runners:synthetic_runner"
SLEEP_S = 1.2  # per trial, so the kill lands mid-trial


def _spec() -> LRSweep:
    return LRSweep(widths=(32, 64, 128), parametrizations=("mup",), lrs=(2.0**-9, 2.0**-7, 2.0**-5))


def _kill_one_mid_trial(url: str, name: str, workers: int, grace: int,
                        survived: Callable[..., tuple[list[FrozenTrial], FrozenTrial, FrozenTrial]]
                        ) -> dict[str, float]:
    import optuna
    from optuna.trial import TrialState

    spec = _spec()
    t0 = time.perf_counter()
    plan = prepare(spec, url, study_name=name, runner=SYN, heartbeat_interval=1, grace_period=grace,
                   workers=workers)
    assert plan.enqueued == 9
    procs = spawn_workers(url, name, workers, extra_env={"MUTRANSFER_SYNTHETIC_SLEEP": str(SLEEP_S)})
    victim = procs[0]
    study, _ = open_study(url, name)
    victim_trial = None
    try:
        deadline = time.time() + 60
        while victim_trial is None and time.time() < deadline:
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                if t.user_attrs.get("pid") == victim.pid and "config" in t.user_attrs:
                    victim_trial = t.number
            time.sleep(0.05)
        assert victim_trial is not None, "the victim never started a trial"
        time.sleep(0.3)  # well inside its SLEEP_S trial
        os.kill(victim.pid, signal.SIGKILL)
        t_kill = time.perf_counter()
        assert victim.wait(timeout=10) == -signal.SIGKILL
        codes = [p.wait(timeout=90) for p in procs[1:]]
        t_end = time.perf_counter()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    _, killed, retry = survived(study, spec, victim_trial, codes, workers)
    assert retry.params == killed.params
    # re-running the same command resumes: nothing left to enqueue
    assert prepare(spec, url, study_name=name, runner=SYN, heartbeat_interval=1, grace_period=grace,
                   workers=workers).enqueued == 0
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return {"total_s": t_end - t0, "after_kill_s": t_end - t_kill}


@pytest.mark.slow
def test_journal_three_workers_survive_a_sigkill(tmp_path, survived_a_kill) -> None:
    url = Storage.resolve(None, tmp_path).url
    timing = _kill_one_mid_trial(url, "kill", workers=3, grace=60, survived=survived_a_kill)
    # the dead pid is noticed at once (no waiting for the 60 s grace period)
    assert timing["after_kill_s"] < 60


PG_URL = os.environ.get("MUTRANSFER_TEST_POSTGRES_URL")


@pytest.mark.slow
@pytest.mark.skipif(not PG_URL, reason="MUTRANSFER_TEST_POSTGRES_URL is unset; "
                    "start a server with: eval \"$(bash .ci/postgres.sh)\"")
def test_postgres_workers_survive_a_sigkill_via_heartbeat(survived_a_kill) -> None:
    import optuna

    assert PG_URL is not None
    import importlib.util

    if not any(importlib.util.find_spec(m) for m in ("psycopg", "psycopg2")):
        pytest.skip("no PostgreSQL driver: pip install 'psycopg[binary]'")
    name = f"kill-{uuid.uuid4().hex[:8]}"
    try:
        timing = _kill_one_mid_trial(PG_URL, name, workers=3, grace=3, survived=survived_a_kill)
        assert timing["after_kill_s"] < 60
    finally:
        try:
            optuna.delete_study(study_name=name, storage=PG_URL)
        except Exception:
            pass
