"""User code is contained in every verb that runs it: a builder or entry that calls
``sys.exit``, ``os._exit``, hangs or raises is exit 2 and one line naming it and what it
did; and the child process that runs it dies with the verb (``kill -9`` of the parent)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mutransfer_cli

ROOT = Path(__file__).resolve().parents[2]

BUILDERS = '''
import os, sys, time

def exits(width, depth):
    sys.exit(0)

def exits3(width, depth):
    sys.exit(3)

def dies(width, depth):
    os._exit(0)

def hangs(width, depth):
    time.sleep(600)

def raises(width, depth):
    raise RuntimeError("boom in a builder")

def slow(width):
    time.sleep(600)

def quick(width, depth=None):
    from mutransfer.models.gpt import GPT, GPTConfig
    return GPT(GPTConfig(width=width, depth=depth or 1, head_dim=16, seq_len=64, vocab_size=256))

def exits_in_worker(width, depth=None):
    # fine when the CLI first checks it (in a child), exits in the trials of a spawned
    # worker, or of one started with EXIT_IN_TRIAL=1: a builder that fails only where the
    # trials run (another GPU, another environment)
    if ("MUTRANSFER_PARENT_PID" in os.environ or os.environ.get("EXIT_IN_TRIAL")) \
            and "MUTRANSFER_CONTAIN_PARENT" not in os.environ:
        sys.exit(0)
    from mutransfer.models.gpt import GPT, GPTConfig
    return GPT(GPTConfig(width=width, depth=depth or 2, head_dim=16, seq_len=64, vocab_size=256))
'''


@pytest.fixture()
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "ents.py").write_text(BUILDERS)
    (tmp_path / "exit_at_import.py").write_text("import sys\nsys.exit(0)\ndef f(width, depth):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


VERBS = {
    "train": ["train", "--set", "width=32", "--set", "depth=1", "--set", "steps=2", "--quiet"],
    "sweep": ["sweep", "lr", "--widths", "32,64", "--lrs", "0.01,0.02", "--workers", "1", "--quiet"],
    "coord-check": ["coord-check", "--widths", "32,64", "--quiet"],
}


@pytest.mark.parametrize(("verb", "builder", "said"), [
    ("train", "exit_at_import:f", "model builder 'exit_at_import:f': called sys.exit(0) at import"),
    ("train", "ents:exits", "model builder 'ents:exits' called sys.exit(0) at width=32, depth=1"),
    ("train", "ents:exits3", "model builder 'ents:exits3' called sys.exit(3) at width=32, depth=1"),
    ("train", "ents:dies", "model builder 'ents:dies' ended the process (exit code 0) building its model "
                           "at width=32, depth=1"),
    ("train", "ents:raises", "model builder 'ents:raises' raised RuntimeError at width=32, depth=1: boom"),
    ("train", "ents:hangs", "model builder 'ents:hangs' did not finish building its model at width=32, "
                            "depth=1 within 10 s; it was stopped"),
    ("sweep", "exit_at_import:f", "model builder 'exit_at_import:f': called sys.exit(0) at import"),
    ("sweep", "ents:exits3", "model builder 'ents:exits3' called sys.exit(3)"),
    ("sweep", "ents:dies", "model builder 'ents:dies' ended the process (exit code 0)"),
    ("coord-check", "ents:exits", "model builder 'ents:exits' called sys.exit(0)"),
    ("coord-check", "ents:dies", "model builder 'ents:dies' ended the process (exit code 0)"),
])
def test_a_builder_that_exits_hangs_or_raises_is_one_line(verb, builder, said, user_dir, monkeypatch,
                                                          capsys) -> None:
    monkeypatch.setenv("MUTRANSFER_BUILD_TIMEOUT", "10")
    out = user_dir / "out"
    rc = mutransfer_cli.main([*VERBS[verb], "--model", builder, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and said in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()  # nothing written


LATE = {
    "scaling": ["sweep", "scaling", "--width", "32", "--batch-sizes", "8,16,32", "--tokens",
                "32768,65536,131072", "--lr-center", "0.0072", "--set", "seq_len=64"],
    "batch": ["sweep", "batch", "--widths", "32", "--batch-sizes", "8,16", "--lrs", "0.01", "--steps", "2",
              "--set", "seq_len=64"],
}


@pytest.mark.parametrize("kind", sorted(LATE))
def test_a_builder_failing_in_the_workers_trials_is_one_line_and_the_workers_stop(kind, user_dir, monkeypatch,
                                                                                   capsys) -> None:
    monkeypatch.setenv("MUTRANSFER_BUILD_TIMEOUT", "60")
    out = user_dir / "out"
    rc = mutransfer_cli.main([*LATE[kind], "--model", "ents:exits_in_worker", "--workers", "2", "--quiet",
                              "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "model builder 'ents:exits_in_worker' called sys.exit(0) at width=32" in err
    # each worker stopped at its first failed trial: the rest of the grid waits for the fix
    from optuna.trial import TrialState

    from sweeps.worker import open_study

    study, _ = open_study(f"journal:{out / 'optuna.journal'}", None)
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert 1 <= states.count(TrialState.FAIL) <= 2 and states.count(TrialState.WAITING) >= len(states) - 2
    assert f"{states.count(TrialState.FAIL)} trial(s) failed on it" in err


def test_a_builder_failing_in_a_hand_started_worker_is_named_and_exit_2(user_dir, monkeypatch,
                                                                         capsys) -> None:
    out = user_dir / "out"
    assert mutransfer_cli.main([*LATE["batch"], "--model", "ents:exits_in_worker", "--out", str(out),
                                "--prepare-only"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("EXIT_IN_TRIAL", "1")
    rc = mutransfer_cli.main(["sweep", "worker", "--storage", str(out / "optuna.journal"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "worker 0: error: model builder 'ents:exits_in_worker' called sys.exit(0)" in err, err
    assert err.strip().splitlines()[0] == "failed 1"  # it stopped at its first trial


@pytest.mark.parametrize("value", ["0", "-1", "nan", "abc", "inf", "1e300"])
def test_a_bad_build_timeout_is_named_not_the_builder(value, user_dir, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MUTRANSFER_BUILD_TIMEOUT", value)
    rc = mutransfer_cli.main([*VERBS["train"], "--model", "ents:raises", "--out", str(user_dir / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"$MUTRANSFER_BUILD_TIMEOUT={value!r} must be a positive number of seconds" in err
    assert "ents:raises" not in err


def test_the_build_timeout_counts_the_users_code_not_our_imports(user_dir, monkeypatch, capsys) -> None:
    # the child's own start (python, torch: seconds on a busy machine) is not the builder's;
    # a quick builder under a short timeout passes, a hanging one is still stopped
    monkeypatch.setenv("MUTRANSFER_BUILD_TIMEOUT", "2")
    rc = mutransfer_cli.main([*VERBS["train"], "--model", "ents:quick", "--out", str(user_dir / "q")])
    assert rc == 0, capsys.readouterr().err
    capsys.readouterr()
    rc = mutransfer_cli.main([*VERBS["train"], "--model", "ents:hangs", "--out", str(user_dir / "h")])
    err = capsys.readouterr().err
    assert rc == 2 and "'ents:hangs' did not finish building its model at width=32, depth=1 within 2 s" in err


def test_the_build_timeout_is_only_set_while_a_verb_runs(user_dir, capsys) -> None:
    os.environ.pop("MUTRANSFER_BUILD_TIMEOUT", None)
    assert mutransfer_cli.main(["memory", "--params", "1e6"]) == 0
    assert "MUTRANSFER_BUILD_TIMEOUT" not in os.environ


# ---- nothing outlives its parent -------------------------------------------------------------

def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (Linux /proc)."""
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            for k in kids:
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc")
@pytest.mark.parametrize("argv", [
    ["audit", "--entry", "ents:slow", "--timeout", "60", "--widths", "32,64", "--no-coord-check"],
    ["train", "--model", "ents:hangs", "--set", "width=32", "--set", "depth=1", "--quiet"],
], ids=["audit", "train"])
def test_kill_9_of_the_verb_leaves_no_child(argv, user_dir) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MUTRANSFER_BUILD_TIMEOUT": "60"}
    parent = subprocess.Popen([sys.executable, "-m", "mutransfer_cli", *argv], cwd=user_dir, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while not descendants(parent.pid) and time.time() < deadline:
            time.sleep(0.2)
        assert descendants(parent.pid), "the verb started no child"
        time.sleep(3.0)  # the child is running the user's code by now
        kids = descendants(parent.pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.time() + 10
        while time.time() < deadline and any(alive(k) for k in kids):
            time.sleep(0.1)
        assert not [k for k in kids if alive(k)], "a child outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
