"""Real processes started at once: identical sweep launches join one study, and every grid
point is enqueued and trained exactly once, on a journal file, SQLite and PostgreSQL.

Each launcher process imports everything first, then runs ``mutransfer_cli.main`` at agreed
instants (one per round), so the launches of a round race inside ``prepare`` itself, not
in Python's start-up. The PostgreSQL variant needs ``eval "$(bash .ci/postgres.sh)"``
(it exports MUTRANSFER_TEST_POSTGRES_URL); without it it is skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from sweeps.spec_base import point_key
from sweeps.spec_kinds import LRSweep
from sweeps.worker import open_study

ROOT = Path(__file__).resolve().parents[2]
PG_URL = os.environ.get("MUTRANSFER_TEST_POSTGRES_URL")
WIDTHS, LRS = (32, 64, 128), (0.001, 0.002, 0.004)
GRID = [point_key(p) for p in LRSweep(widths=WIDTHS, parametrizations=("mup",), lrs=LRS).points()]

LAUNCHER = r"""
import contextlib, io, json, sys, time
import optuna, sweeps.study, sweeps.worker, sweeps.lifecycle, mutransfer_cli, mutransfer_cli.sweep
t0, step, rounds = float(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3])
out = []
for k, argv in enumerate(rounds):
    time.sleep(max(0.0, t0 + k * step - time.time()))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = mutransfer_cli.main(argv)
    out.append([rc, err.getvalue()])
print(json.dumps(out))
"""


def launch_at_once(rounds: list[list[str]], n: int, step: float, env: dict[str, str] | None = None
                   ) -> list[list[tuple[int, str]]]:
    """``n`` processes each run every argv of ``rounds``, round k at t0 + k·step (all at
    once); returns per round the (rc, stderr) of each process."""
    t0 = time.time() + 3.0  # every process has imported by then
    e = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    procs = [subprocess.Popen([sys.executable, "-c", LAUNCHER, str(t0), str(step), json.dumps(rounds)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e, cwd=ROOT)
             for _ in range(n)]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr[-2000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return [[tuple(o[k]) for o in outs] for k in range(len(rounds))]  # type: ignore[misc]


def lr_sweep(storage: str, study: str, *, prepare_only: bool) -> list[str]:
    argv = ["sweep", "lr", "--widths", ",".join(map(str, WIDTHS)), "-p", "mup",
            "--lrs", ",".join(map(str, LRS)), "--runner", "synthetic", "--storage", storage,
            "--study", study, "--max-extend", "0", "--quiet"]
    return [*argv, "--prepare-only"] if prepare_only else [*argv, "--workers", "1"]


def storages(tmp_path: Path, kind: str, rounds: int) -> list[tuple[str, str]]:
    """(storage, study) of each round: a fresh journal or SQLite file, or a fresh study name
    in the PostgreSQL database."""
    if kind == "journal":
        return [(str(tmp_path / f"r{k}" / "optuna.journal"), "race") for k in range(rounds)]
    if kind == "sqlite":
        return [(f"sqlite:///{tmp_path}/r{k}.db", "race") for k in range(rounds)]
    assert PG_URL is not None
    return [(PG_URL, f"race-{uuid.uuid4().hex[:8]}-{k}") for k in range(rounds)]


def trials_by_state(storage: str, study: str) -> dict[str, Counter[str]]:
    st, _ = open_study(storage, study)
    out: dict[str, Counter[str]] = {}
    for t in st.get_trials(deepcopy=False):
        out.setdefault(t.state.name, Counter())[t.user_attrs["point_key"]] += 1
    return out


def drop(storage: str, study: str) -> None:
    if storage.startswith("postgresql"):
        import optuna

        try:
            optuna.delete_study(study_name=study, storage=storage)
        except Exception:
            pass


KINDS = ["journal", "sqlite",
         pytest.param("postgresql", marks=pytest.mark.skipif(
             not PG_URL, reason="MUTRANSFER_TEST_POSTGRES_URL is unset; start a server with: "
                                "eval \"$(bash .ci/postgres.sh)\""))]


@pytest.mark.parametrize("kind", KINDS)
def test_prepare_only_launches_at_once_enqueue_every_point_once(kind, tmp_path) -> None:
    """3 launches at once, 3 times: one enqueues the 9 points, the others join (0 enqueued)."""
    where = storages(tmp_path, kind, 3)
    try:
        results = launch_at_once([lr_sweep(s, name, prepare_only=True) for s, name in where], n=3, step=1.5)
        for (storage, name), launches in zip(where, results):
            assert [rc for rc, _ in launches] == [0, 0, 0], launches
            enqueued = sorted(int(err.split(" enqueued now")[0].rsplit(", ", 1)[1]) for _, err in launches)
            assert enqueued == [0, 0, 9], launches
            assert trials_by_state(storage, name) == {"WAITING": Counter(dict.fromkeys(GRID, 1))}
    finally:
        for s, name in where:
            drop(s, name)


@pytest.mark.parametrize("kind", KINDS)
def test_two_identical_sweeps_at_once_train_every_point_once(kind, tmp_path) -> None:
    """Two whole sweeps (a worker each) at once, twice: both finish (rc 0), and every grid
    point has exactly one COMPLETE trial and no other."""
    where = storages(tmp_path, kind, 2)
    try:
        results = launch_at_once([lr_sweep(s, name, prepare_only=False) for s, name in where], n=2, step=3.0,
                                 env={"MUTRANSFER_SYNTHETIC_SLEEP": "0.02"})
        for (storage, name), launches in zip(where, results):
            assert [rc for rc, _ in launches] == [0, 0], launches
            assert trials_by_state(storage, name) == {"COMPLETE": Counter(dict.fromkeys(GRID, 1))}
    finally:
        for s, name in where:
            drop(s, name)
