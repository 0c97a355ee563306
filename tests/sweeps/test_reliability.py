"""Secrets, input validation, torn journals, registered runners, orphaned workers, and the
sweeps package's use of Optuna (public API only, no import cycle)."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mutransfer_cli
from sweeps.spec_kinds import LRSweep
from mutransfer.redact import mask_url
from sweeps.storage import Storage, read_storage_file
from sweeps.study import prepare, run_sweep
from sweeps.worker import open_study

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-Pw"


def sweep(*argv: str) -> int:
    return mutransfer_cli.main(["sweep", *argv])


# ---- 1. the storage password -------------------------------------------------------------

@pytest.mark.parametrize("url", [
    f"postgresql://user:{SECRET}@db.example:5432/sweeps",
    f"postgresql://:{SECRET}@db/sweeps",                       # empty user name
    f"postgresql://user:{SECRET}@x@db/sweeps",                 # raw '@' in the password
    f"postgresql://user:{SECRET}/x@db/sweeps",                 # raw '/' in the password
    f"postgresql+psycopg://user@db/sweeps?password={SECRET}&sslmode=require",
    f"mysql://user:{SECRET}@db/sweeps?charset=utf8",
    f"postgresql:/user:{SECRET}@db/sweeps",                    # malformed: one slash
    f"user:{SECRET}@db/sweeps",                                # no scheme at all
])
def test_mask_url_hides_the_password_in_every_form(url) -> None:
    masked = mask_url(url)
    assert SECRET not in masked and "***" in masked
    assert "db" in masked  # the host stays readable


@pytest.mark.parametrize("bad", [
    f"postgresql:/user:{SECRET}@db/sweeps",
    f"postgresql:user:{SECRET}@db/sweeps",
    f"user:{SECRET}@db/sweeps",
    f"postgresql://user:{SECRET}@x@db/sweeps",  # SQLAlchemy would take 'x@db' as the host
])
def test_malformed_urls_are_refused_not_taken_as_a_local_journal(bad, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="malformed storage URL") as exc:
        Storage.resolve(bad)
    assert SECRET not in str(exc.value)
    assert sweep("lr", "--widths", "32", "--storage", bad, "--prepare-only") == 2
    assert list(tmp_path.iterdir()) == []  # no folder named after the password


def test_the_join_hint_never_prints_a_password() -> None:
    hint = Storage.resolve(f"postgresql://u:{SECRET}@db/s").join_command("lr")
    assert SECRET not in hint and "MUTRANSFER_STORAGE" in hint and "--storage" not in hint
    assert Storage.resolve("journal:/x/optuna.journal").join_command("lr").endswith(
        "--storage /x/optuna.journal --study lr")


def test_storage_file_must_be_private(tmp_path) -> None:
    f = tmp_path / "url"
    f.write_text(f"postgresql://u:{SECRET}@db/s\n")
    f.chmod(0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        read_storage_file(f)
    f.chmod(0o600)
    assert read_storage_file(f) == f"postgresql://u:{SECRET}@db/s"


_PARENT = """
import sys, time
from sweeps import spawn_workers
procs = spawn_workers(sys.argv[1], "lr", 2, extra_env={"MUTRANSFER_SYNTHETIC_SLEEP": "30"})
print(" ".join(str(p.pid) for p in procs), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    from mutransfer.provenance import pid_alive

    return pid_alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_get_the_url_off_argv_and_die_with_their_parent(tmp_path) -> None:
    url = Storage.resolve(None, tmp_path).url
    prepare(LRSweep(widths=(32,), parametrizations=("mup",), lrs=(1e-3, 2e-3)), url, runner="synthetic")
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, url], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    try:
        assert len(pids) == 2
        for pid in pids:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
            assert str(tmp_path) not in argv and "--storage" not in argv
            assert f"MUTRANSFER_STORAGE={url}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.time() + 20
        while any(_alive(p) for p in pids) and time.time() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "a worker outlived its SIGKILLed parent"
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


# ---- 3. sweep input is validated before any study exists ---------------------------------

@pytest.mark.parametrize(("argv", "needle"), [
    (["lr", "--widths", "32", "--steps", "0"], "steps"),
    (["lr", "--widths", "32", "--batch-size", "0"], "--batch-size"),
    (["lr", "--widths", "32", "--seeds", "-1"], "seed"),
    (["lr", "--widths", "32", "--depths", "0"], "depth"),
    (["lr", "--widths", "32", "--set", "width=0"], "width"),
    (["lr", "--widths", "32", "--set", "head_dim=0"], "head_dim"),
    (["lr", "--widths", "32", "--device", "tpu"], "tpu"),
    (["batch", "--widths", "32", "--batch-sizes", "8", "--tokens", "100"], "token budget 100"),
    (["lr", "--widths", "32", "--trials", "0"], "trials"),
    (["lr", "--widths", "32", "--runner", "os:system"], "not registered"),
])
def test_bad_trial_configs_exit_2_before_the_study_is_created(tmp_path, capsys, argv, needle) -> None:
    out = tmp_path / "o"
    assert sweep(*argv, "--out", str(out), "--workers", "1", "--quiet") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    # one error line (argparse's own flag checks put their usage line before it)
    assert needle in lines[-1] and (len(lines) == 1 or lines[0].startswith("usage:"))
    assert not out.exists()


@pytest.mark.parametrize(("spec", "needle"), [
    ({"kind": "lr", "widths": [32], "base": {"steps": -5}}, "steps"),
    ({"kind": "run", "grid": {}}, "empty grid"),
    ({"kind": "lr", "widths": [32], "sampler_seed": "x"}, "sampler_seed"),
    ({"kind": "lr", "widths": [32], "base": {"lr": 0.1}}, "set in base and is also a sweep dimension"),
    ({"kind": "batch", "widths": [32], "tokens": [65536], "base": {"steps": 9}}, "steps (from tokens)"),
])
def test_bad_specs_exit_2_before_the_study_is_created(tmp_path, capsys, spec, needle) -> None:
    kind = spec["kind"]
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec))
    out = tmp_path / "o"
    assert sweep(kind, str(path), "--out", str(out), "--prepare-only") == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


def test_a_study_poisoned_by_an_older_version_fails_with_one_line(tmp_path, capsys) -> None:
    """A study created before sampler_seed was checked holds "x": status and worker say so."""
    import optuna

    url = Storage.resolve(None, tmp_path).url
    prepare(LRSweep(widths=(32,), parametrizations=("mup",), lrs=(1e-3,)), url, runner="synthetic")
    study, _ = open_study(url, "lr")
    attr = dict(study.user_attrs["mutransfer_sweep"])
    attr["spec"] = {**attr["spec"], "sampler_seed": "x"}
    study.set_user_attr("mutransfer_sweep", attr)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for verb in ("status", "worker"):
        assert sweep(verb, "--storage", str(tmp_path)) == 2
        err = capsys.readouterr().err
        assert "sampler_seed" in err and len(err.strip().splitlines()) == 1


def test_a_tampered_study_cannot_make_workers_import_anything(tmp_path) -> None:
    from sweeps.worker import work

    url = Storage.resolve(None, tmp_path).url
    prepare(LRSweep(widths=(32,), parametrizations=("mup",), lrs=(1e-3,)), url, runner="synthetic")
    study, _ = open_study(url, "lr")
    study.set_user_attr("mutransfer_sweep", {**study.user_attrs["mutransfer_sweep"],
                                             "runner": "os:system"})
    with pytest.raises(ValueError, match="'os:system' is not registered"):
        work(url, "lr")


# ---- 6. a torn journal --------------------------------------------------------------------

def test_a_torn_last_line_is_cut_not_made_permanent(tmp_path, capsys) -> None:
    """A writer SIGKILLed mid-append leaves a line without its newline; the next write cuts
    it (under the journal's lock) instead of gluing a record onto it."""
    spec = LRSweep(widths=(32,), parametrizations=("mup",), lrs=(1e-3, 2e-3))
    run_sweep(spec, out=tmp_path, runner="synthetic")
    journal = tmp_path / "optuna.journal"
    good = journal.read_bytes()
    journal.write_bytes(good + b'{"op_code":5,"worker_id":"dead","trial_')
    res = run_sweep(LRSweep(widths=(32,), parametrizations=("mup",), lrs=(1e-3, 2e-3, 4e-3)),
                    out=tmp_path, runner="synthetic")
    assert res.complete and res.counts.complete == 3
    lines = journal.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])
    assert sweep("status", "--storage", str(tmp_path)) == 0


def test_a_damaged_or_foreign_journal_is_named_with_its_line(tmp_path, capsys) -> None:
    run_sweep(LRSweep(widths=(32,), parametrizations=("mup",), lrs=(1e-3,)), out=tmp_path,
              runner="synthetic")
    journal = tmp_path / "optuna.journal"
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join([lines[0], lines[1][:20] + lines[2], *lines[3:]]))
    assert sweep("status", "--storage", str(journal)) == 2
    err = capsys.readouterr().err
    assert str(journal) in err and "at line 2" in err and len(err.strip().splitlines()) == 1
    csv = tmp_path / "results.csv"
    csv.write_text("a,b\n1,2\n")
    assert sweep("status", "--storage", str(csv)) == 2
    assert "not a readable Optuna journal" in capsys.readouterr().err


# ---- Optuna's public API only, and no import cycle ------------------------------

#: Optuna internals the code once used (``study._storage``, ...) and any ``optuna._x`` module
_PRIVATE = re.compile(r"_pop_waiting_trial_id|\._storage\b|\._trial_id\b|_thread_local|\._study_id\b"
                      r"|\boptuna(\.\w+)*\._[a-z]|\._backend\b|_CachedStorage")


def test_no_optuna_private_api_in_the_packages() -> None:
    hits = []
    for pkg in ("sweeps", "mutransfer", "analysis", "benchmarks"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if _PRIVATE.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert hits == []


def _imports(path: Path) -> set[str]:
    """sweeps modules ``path`` imports, lazily or not (type-checking-only imports aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            for n in ast.walk(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sweeps":
            out |= ({a.name for a in node.names} if node.module == "sweeps"
                    else {node.module.split(".")[1]})
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("sweeps.")}
    return out - {path.stem}


def test_sweeps_modules_import_each_other_without_a_cycle() -> None:
    graph = {p.stem: _imports(p) for p in (ROOT / "sweeps").glob("*.py") if p.stem != "__init__"}
    assert "worker" not in graph["fusion"]
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, "import cycle: " + " -> ".join((*path, node))
        if node in done:
            return
        for dep in graph.get(node, ()):
            visit(dep, (*path, node))
        done.add(node)

    for module in graph:
        visit(module, ())


def test_trial_attribute_names_live_in_one_module() -> None:
    """Every user attr a sweep writes is spelled once, in sweeps/attrs.py."""
    import sweeps.attrs as attrs

    names = {v for k, v in vars(attrs).items() if k.isupper() and isinstance(v, str)}
    for path in (ROOT / "sweeps").glob("*.py"):
        if path.name == "attrs.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                continue
            reads = node.func.attr == "get" and ast.unparse(node.func.value).endswith("user_attrs")
            if reads or node.func.attr in ("set_user_attr", "set_trial_attr"):
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    assert arg.value not in names, f"{path.name}:{node.lineno} spells {arg.value!r}"


PG_URL = os.environ.get("MUTRANSFER_TEST_POSTGRES_URL")


@pytest.mark.skipif(not PG_URL, reason="MUTRANSFER_TEST_POSTGRES_URL is unset; "
                    "start a server with: eval \"$(bash .ci/postgres.sh)\"")
def test_postgres_prepare_only_and_worker_never_show_the_password(capsys, monkeypatch) -> None:
    """The CI server trusts local connections, so a made-up password connects too."""
    import uuid

    import optuna

    assert PG_URL is not None
    url = PG_URL.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")
    assert SECRET in url
    name = f"secret-{uuid.uuid4().hex[:8]}"
    try:
        monkeypatch.setenv("MUTRANSFER_STORAGE", url)  # never on the command line
        assert sweep("lr", "--widths", "32", "-p", "mup", "--lrs", "0.001,0.002", "--study", name,
                     "--prepare-only", "--runner", "synthetic") == 0
        err = capsys.readouterr().err
        assert SECRET not in err and "MUTRANSFER_STORAGE='postgresql://postgres:***@" in err
        assert sweep("worker", "--study", name) == 0
        assert sweep("status", "--study", name, "--json") == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["counts"]["complete"] == 2 and SECRET not in out + err
    finally:
        try:
            optuna.delete_study(study_name=name, storage=PG_URL)
        except Exception:
            pass


@pytest.mark.parametrize("kind", ["scaling", "multipliers"])
def test_a_builder_of_a_one_width_sweep_is_probed_before_the_study_exists(kind, tmp_path, capsys) -> None:
    out = tmp_path / "o"
    assert sweep(kind, "--model", "json:dumps", "--out", str(out), "--prepare-only", "--quiet") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model builder 'json:dumps' raised TypeError at width=" in err[0], err
    assert not out.exists()


def test_a_database_without_its_driver_is_one_line(tmp_path, capsys) -> None:
    import importlib.util

    if importlib.util.find_spec("MySQLdb") is not None:
        pytest.skip("the MySQL driver is installed here")
    url = "mysql://u:s3cretpw@127.0.0.1:1/db"
    assert sweep("lr", "--widths", "32", "--lrs", "0.01", "--storage", url, "--prepare-only", "--quiet") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing driver (MySQLdb)" in err[0] and "s3cretpw" not in err[0], err


def test_an_empty_spec_file_is_named(tmp_path, capsys) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("")
    assert sweep("run", str(path), "--out", str(tmp_path / "o"), "--prepare-only") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"spec file '{path}' is empty" in err[0], err
    assert not (tmp_path / "o").exists()
