"""``mutransfer sweep launch --slurm``: the job script is printed (``--dry-run``), names no
secret, and its workers, run locally as the array's tasks would run (bash, one
``SLURM_ARRAY_TASK_ID`` each) against PostgreSQL, train every grid point exactly once even
when one task is SIGKILLed mid-trial.

The PostgreSQL test needs a server: ``eval "$(bash .ci/postgres.sh)"`` exports
MUTRANSFER_TEST_POSTGRES_URL (CI does this); without it the test is skipped.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sweeps.spec_kinds import LRSweep
from sweeps.study import prepare
from sweeps.worker import open_study

ROOT = Path(__file__).resolve().parents[2]
SYN = "sweeps.runners:synthetic_runner"
PG_URL = os.environ.get("MUTRANSFER_TEST_POSTGRES_URL")
SECRET = "pw-never-in-the-script"


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    base.pop("MUTRANSFER_STORAGE", None)
    return subprocess.run([sys.executable, "-m", "mutransfer_cli", *argv], capture_output=True, text=True,
                          env={**base, **(env or {})}, timeout=180)


def _spec() -> LRSweep:
    return LRSweep(widths=(32, 64, 128), parametrizations=("mup",), lrs=(2.0**-9, 2.0**-7, 2.0**-5))


def test_dry_run_prints_an_array_of_workers_and_nothing_is_submitted_without_sbatch(tmp_path) -> None:
    journal = tmp_path / "optuna.journal"
    prepare(_spec(), f"journal:{journal}", study_name="lr", runner=SYN)
    p = _cli("sweep", "launch", "--slurm", "--storage", str(journal), "--workers", "8", "--time", "01:00:00",
             "--max-parallel", "4", "--sbatch-arg=--constraint=a100", "--out", str(tmp_path), "--dry-run")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "#!/bin/bash"
    for want in ("#SBATCH --array=0-7%4", "#SBATCH --gres=gpu:1", "#SBATCH --time=01:00:00",
                 "#SBATCH --constraint=a100"):
        assert want in lines
    worker = [x for x in lines if x.startswith("exec ")]
    assert len(worker) == 1 and "sweep worker" in worker[0] and f"--storage journal:{journal}" in worker[0]
    assert '--worker-index "${SLURM_ARRAY_TASK_ID:-0}"' in worker[0] and "--study lr" in worker[0]
    # the dry run writes no script, but makes the log folder SLURM opens before a task starts
    assert sorted(p.name for p in (tmp_path / "slurm").rglob("*")) == ["logs"]
    import shutil

    shutil.rmtree(tmp_path / "slurm")
    # a real launch needs sbatch: one line, exit 2, nothing written
    p = _cli("sweep", "launch", "--slurm", "--storage", str(journal), "--workers", "2",
             "--out", str(tmp_path), env={"PATH": "/nonexistent"})
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "sbatch" in p.stderr
    assert not (tmp_path / "slurm").exists()
    # no launcher, an unknown study: one line each
    assert _cli("sweep", "launch", "--storage", str(journal), "--workers", "2", "--dry-run").returncode == 2
    p = _cli("sweep", "launch", "--slurm", "--storage", str(journal), "--study", "nope", "--workers", "2",
             "--dry-run")
    assert p.returncode == 2 and "nope" in p.stderr


def test_a_password_on_the_command_line_never_reaches_the_script() -> None:
    p = _cli("sweep", "launch", "--slurm", "--storage", f"postgresql://u:{SECRET}@127.0.0.1:1/db",
             "--workers", "2", "--dry-run")
    assert p.returncode == 2 and "--storage-file" in p.stderr
    assert SECRET not in p.stdout + p.stderr


@pytest.mark.slow
@pytest.mark.skipif(not PG_URL, reason="MUTRANSFER_TEST_POSTGRES_URL is unset; "
                    "start a server with: eval \"$(bash .ci/postgres.sh)\"")
def test_slurm_script_workers_against_postgres_train_every_point_once_after_a_kill(
        tmp_path, survived_a_kill) -> None:
    import importlib.util

    import optuna
    from optuna.trial import TrialState

    assert PG_URL is not None
    if not any(importlib.util.find_spec(m) for m in ("psycopg", "psycopg2")):
        pytest.skip("no PostgreSQL driver: pip install 'psycopg[binary]'")
    # the test server trusts local connections, so any password gets in: one that must
    # never appear in the script or in a worker's argv
    scheme, rest = PG_URL.split("://", 1)
    user, host = rest.split("@", 1)
    url = f"{scheme}://{user.split(':', 1)[0]}:{SECRET}@{host}"
    secret_file = tmp_path / "storage.url"
    secret_file.write_text(url + "\n")
    secret_file.chmod(0o600)
    name = f"slurm-{uuid.uuid4().hex[:8]}"
    spec, workers = _spec(), 3
    try:
        plan = prepare(spec, url, study_name=name, runner=SYN, heartbeat_interval=1, grace_period=3,
                       workers=workers)
        assert plan.enqueued == 9
        p = _cli("sweep", "launch", "--slurm", "--storage-file", str(secret_file), "--study", name,
                 "--workers", str(workers), "--gpus-per-worker", "0", "--out", str(tmp_path), "--dry-run")
        assert p.returncode == 0, p.stderr
        assert SECRET not in p.stdout and "--storage-file" in p.stdout and "#SBATCH --array=0-2" in p.stdout
        script = tmp_path / "job.sbatch"
        script.write_text(p.stdout)
        env = {k: v for k, v in os.environ.items()
               if k not in ("MUTRANSFER_STORAGE", "MUTRANSFER_PARENT_PID")}
        env["MUTRANSFER_SYNTHETIC_SLEEP"] = "1.2"  # per trial, so the kill lands mid-trial
        env["MUTRANSFER_PROGRESS_INTERVAL"] = "0.5"
        logs = [tmp_path / f"task-{k}.log" for k in range(workers)]
        handles = [log.open("w") for log in logs]
        # each array task as SLURM runs it: the script under bash, its own task id (the
        # script execs the worker, so the task's pid is the worker's)
        procs = [subprocess.Popen(["bash", str(script)], env={**env, "SLURM_ARRAY_TASK_ID": str(k),
                                                              "SLURM_CPUS_PER_TASK": "1"},
                                  stdout=subprocess.DEVNULL, stderr=handles[k])
                 for k in range(workers)]
        for h in handles:  # the children hold their own copies
            h.close()
        victim = procs[0]
        study, _ = open_study(url, name)
        try:
            victim_trial = None
            deadline = time.time() + 120
            while victim_trial is None and time.time() < deadline:
                for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                    if t.user_attrs.get("pid") == victim.pid and "config" in t.user_attrs:
                        victim_trial = t.number
                time.sleep(0.05)
            assert victim_trial is not None, "the victim never started a trial"
            for proc in procs:  # no secret in any worker's argv (ps shows it to every user)
                cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace")
                assert SECRET not in cmdline and "sweep\0worker" in cmdline
            time.sleep(0.3)
            os.kill(victim.pid, signal.SIGKILL)
            assert victim.wait(timeout=10) == -signal.SIGKILL
            codes = [proc.wait(timeout=180) for proc in procs[1:]]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        trials, _, retry = survived_a_kill(study, spec, victim_trial, codes, workers)
        # each task's log (SLURM's --output) shows the study's progress while it runs
        for k in range(1, workers):
            assert re.search(rf"^worker {k}: study {name}: \d/9 trials, .*ETA", logs[k].read_text(), re.M)
        # the array's tasks, and only they, trained the grid
        pids = {t.user_attrs.get("pid") for t in trials if t.state == TrialState.COMPLETE}
        assert pids <= {proc.pid for proc in procs} and retry.user_attrs["pid"] != victim.pid
    finally:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            optuna.delete_study(study_name=name, storage=url)
        except Exception:
            pass
