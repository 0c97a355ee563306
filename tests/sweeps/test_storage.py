"""The storage object: built once per process, opened once, never shows its password."""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter

import optuna
import pytest

import mutransfer_cli
from sweeps.storage import STORAGE_ENV, Storage

SECRET = "pw-s3cret-9"
SYN = ["--runner", "sweeps.runners:synthetic_runner"]


@pytest.fixture(autouse=True)
def _verb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(mutransfer_cli.VERBS, "sweep", ("mutransfer_cli.sweep", "sweeps"))


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the Optuna storages constructed (journal and RDB) in this process."""
    seen: Counter[str] = Counter()
    for cls in (optuna.storages.JournalStorage, optuna.storages.RDBStorage):
        def init(self, *a, _orig=cls.__init__, _name=cls.__name__, **k) -> None:  # noqa: ANN001, ANN002, ANN003
            seen[_name] += 1
            _orig(self, *a, **k)

        monkeypatch.setattr(cls, "__init__", init)
    return seen


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The user inputs resolved into a Storage in this process."""
    seen: list[str] = []
    orig = Storage.resolve.__func__  # type: ignore[attr-defined]

    def resolve(cls, storage, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        if not isinstance(storage, Storage):
            seen.append(str(storage))
        return orig(cls, storage, *a, **k)

    monkeypatch.setattr(Storage, "resolve", classmethod(resolve))
    return seen


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sweep_lr_opens_the_journal_once_in_the_parent(tmp_path, capsys, opened, resolved, workers) -> None:
    out = tmp_path / "d"
    assert mutransfer_cli.main(["sweep", "lr", "--widths", "32", "-p", "mup", "--lrs", "0.001,0.01",
                                "--out", str(out), "--workers", workers, "--quiet", "--json", *SYN]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["counts"]["complete"] == 2  # the workers did run the trials
    assert opened == Counter({"JournalStorage": 1})  # prepare, supervisor, worker, status: one
    assert resolved == ["None"]  # the user's input (no --storage: --out's journal), resolved once
    assert f"storage: journal file {out / 'optuna.journal'}" in cap.err  # printed, once
    assert cap.err.count("storage:") == 1


PG_URL = os.environ.get("MUTRANSFER_TEST_POSTGRES_URL")


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=pytest.mark.skipif(
    not PG_URL, reason="MUTRANSFER_TEST_POSTGRES_URL is unset; start a server with: "
    "eval \"$(bash .ci/postgres.sh)\""))])
def test_sweep_lr_opens_an_rdb_once_in_the_parent(tmp_path, capsys, opened, kind) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}" if kind == "sqlite" else str(PG_URL)
    study = f"lr-{uuid.uuid4().hex[:8]}"
    try:
        assert mutransfer_cli.main(["sweep", "lr", "--widths", "32", "-p", "mup", "--lrs", "0.001",
                                    "--out", str(tmp_path / "d"), "--storage", url, "--study", study,
                                    "--workers", "1", "--quiet", *SYN]) == 0
        assert opened == Counter({"RDBStorage": 1})  # opened with the heartbeat, reused for the rest
        assert f"storage: {kind} {Storage.resolve(url).masked}" in capsys.readouterr().err
    finally:
        if kind == "postgresql":
            optuna.delete_study(study_name=study, storage=url)


def test_a_worker_builds_its_storage_from_the_environment(tmp_path, monkeypatch, opened) -> None:
    from sweeps.spec_kinds import LRSweep
    from sweeps.study import prepare
    from sweeps.worker import open_study

    where = Storage.resolve(None, tmp_path)
    prepare(LRSweep(widths=(32,), parametrizations=("mup",), lrs=(1e-3, 2e-3)), where, runner="synthetic")
    env = where.worker_env()
    assert env == {STORAGE_ENV: where.url}  # all a spawned worker gets: no argv, no flag
    monkeypatch.setenv(STORAGE_ENV, env[STORAGE_ENV])
    opened.clear()
    assert mutransfer_cli.main(["sweep", "worker", "--study", "lr"]) == 0
    assert opened == Counter({"JournalStorage": 1})
    study, _ = open_study(where, "lr")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]


@pytest.mark.parametrize(("url", "kind"), [
    (f"postgresql://user:{SECRET}@db.example:5432/sweeps", "postgresql"),
    (f"postgres://user:{SECRET}@db/sweeps", "postgresql"),
    (f"postgresql+psycopg://user@db/sweeps?password={SECRET}&sslmode=require", "postgresql"),
    (f"postgresql://:{SECRET}@db/sweeps", "postgresql"),
    (f"mysql://user:{SECRET}@db/sweeps?charset=utf8", "mysql"),
    (f"postgresql://user:{SECRET}/x@db/sweeps", "postgresql"),  # raw '/' in the password
])
def test_the_masked_form_never_holds_the_password(url, kind) -> None:
    s = Storage.resolve(url)
    assert s.kind == kind and not s.journal and s.path is None
    shown = [s.masked, str(s), repr(s), f"{s}", s.describe(), s.join_command("lr")]
    assert all(SECRET not in text for text in shown), shown
    assert all("db" in text for text in shown[:5])  # the host stays readable
    assert SECRET in s.worker_env()[STORAGE_ENV]  # the worker does get the real URL
    with pytest.raises(ValueError) as exc:
        Storage.resolve(url.replace("://", ":/", 1))  # malformed: the error masks it too
    assert SECRET not in str(exc.value)


def test_kinds_and_the_journal_path(tmp_path) -> None:
    s = Storage.resolve(None, tmp_path)
    assert s.kind == "journal" and s.journal and s.path == tmp_path.resolve() / "optuna.journal"
    assert Storage.resolve(str(tmp_path)) == s == Storage.resolve(f"journal:{s.path}")
    assert Storage.resolve(s) is s  # an object passes through: resolved once
    q = Storage.resolve(f"sqlite:///{tmp_path / 'a.db'}")
    assert q.kind == "sqlite" and q.masked == q.url
    with pytest.raises(ValueError, match="supports one worker"):
        q.check_workers(2)


def test_from_user_order(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(STORAGE_ENV, f"postgresql://u:{SECRET}@db/s")
    # a run's --out with the environment set is refused (the study would hide in a local
    # journal); without --out the environment is used; an explicit --storage wins
    with pytest.raises(ValueError, match=r"\$MUTRANSFER_STORAGE is set \(postgresql://u:\*\*\*@db/s\)"):
        Storage.from_user(None, out=tmp_path)
    assert Storage.from_user(None).kind == "postgresql"
    monkeypatch.delenv(STORAGE_ENV)
    assert Storage.from_user(None, out=tmp_path).path == tmp_path.resolve() / "optuna.journal"
    monkeypatch.setenv(STORAGE_ENV, f"postgresql://u:{SECRET}@db/s")
    assert Storage.from_user("sqlite:///x.db").kind == "sqlite"
    with pytest.raises(ValueError, match="not both"):
        Storage.from_user("x", storage_file=tmp_path / "f")


# ---- a storage that cannot be written, a lock left behind --------------------------------------

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _cli_proc(argv: list[str], **kw):
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(STORAGE_ENV, None)
    return subprocess.run([sys.executable, "-m", "mutransfer_cli", *argv], capture_output=True, text=True,
                          env=env, timeout=120, **kw)


def test_a_read_only_sqlite_storage_is_one_line_and_can_still_be_read(tmp_path) -> None:
    import shutil

    setpriv = shutil.which("setpriv")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    lr = ["sweep", "lr", "--widths", "32", "--lrs", "0.01", "--steps", "2", "--storage", url]
    assert _cli_proc([*lr, "--prepare-only"]).returncode == 0
    (tmp_path / "db.sqlite").chmod(0o444)
    # root writes through a 0444 file: drop the capability that lets it (as a user has none)
    pre = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]
    if os.geteuid() != 0:
        pre = []
    elif setpriv is None:
        pytest.skip("running as root without setpriv: a 0444 file is writable")
    import subprocess
    import sys

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop(STORAGE_ENV, None)
        return subprocess.run([*pre, sys.executable, "-m", "mutransfer_cli", *argv], capture_output=True,
                              text=True, env=env, timeout=120, cwd=tmp_path)

    for argv in ([*lr, "--workers", "1"], ["sweep", "worker", "--storage", url]):
        p = run(argv)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "the storage is read-only (attempt to write a readonly database)" in p.stderr
    p = run(["sweep", "status", "--storage", url])  # reading needs no write
    assert p.returncode == 0 and "0/2 done" in p.stdout, p.stderr


def test_a_journal_lock_left_pointing_at_a_moved_folder_is_a_bounded_wait_not_a_hot_loop(tmp_path) -> None:
    import subprocess
    import sys
    import time

    from sweeps.spec_kinds import LRSweep
    from sweeps.storage import DANGLING_GRACE_S
    from sweeps.study import prepare

    old, new = tmp_path / "old", tmp_path / "new"
    spec = LRSweep(widths=(32,), parametrizations=("mup",), lrs=(2.0**-7,))
    prepare(spec, f"journal:{old / 'optuna.journal'}", study_name="lr", runner="sweeps.runners:synthetic_runner")
    # a writer killed while holding Optuna's lock (a symlink to the journal's path), then the
    # run folder renamed: the link now points at nothing
    os.symlink(str(old / "optuna.journal"), str(old / "optuna.journal.lock"))
    old.rename(new)
    assert os.path.islink(new / "optuna.journal.lock") and not os.path.exists(new / "optuna.journal.lock")
    code = ("import sys; from sweeps.spec_kinds import LRSweep; from sweeps.study import prepare; "
            f"p = prepare(LRSweep(widths=(32,), parametrizations=('mup',), lrs=(2.0**-7, 2.0**-6)), "
            f"'journal:{new / 'optuna.journal'}', study_name='lr', runner='sweeps.runners:synthetic_runner'); "
            "print(p.enqueued)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    import threading

    watchdog = threading.Timer(90, proc.kill)  # a hot loop never ends by itself
    watchdog.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        watchdog.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    out, err = proc.stdout.read(), proc.stderr.read()
    assert proc.returncode == 0, err
    assert out.strip() == "1"  # the new point was enqueued: the lock was taken over
    assert wall >= DANGLING_GRACE_S  # it waited its bound first...
    cpu = usage.ru_utime + usage.ru_stime
    # ...asleep: a hot loop burns the whole wait (Optuna's spun at 100% CPU until killed);
    # the interpreter's start and optuna's import are the rest
    assert cpu < wall - DANGLING_GRACE_S + 1.0, (cpu, wall)
    assert [x for x in err.splitlines() if "journal lock" in x and "does not exist" in x], err
