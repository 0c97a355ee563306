"""``mutransfer --help`` comes from the verbs' own text and stays quick."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import mutransfer_cli

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "optuna", "scipy", "pandas", "matplotlib")


def _top_help() -> tuple[str, list[str]]:
    """The top-level help text, and which heavy packages printing it imported (a fresh
    interpreter, so nothing another test imported counts)."""
    code = ("import sys\nfrom mutransfer_cli import main\nmain(['--help'])\n"
            f"print('LOADED', *[m for m in {HEAVY!r} if m in sys.modules])")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    text, _, loaded = res.stdout.rpartition("LOADED")
    return text, loaded.split()


def test_every_verb_is_listed_with_its_modules_help_and_nothing_heavy_loads() -> None:
    text, loaded = _top_help()
    flat = " ".join(text.split())  # argparse wraps long lines
    for verb, (module, _) in mutransfer_cli.VERBS.items():
        help_ = importlib.import_module(module).HELP
        assert f"{verb} {help_}" in flat, f"{verb}: {help_!r} is not in --help"
    assert loaded == []


def test_the_table_of_verbs_holds_each_modules_help() -> None:
    for verb, (module, help_) in mutransfer_cli.VERBS.items():
        assert mutransfer_cli.MODULES[verb] == module
        assert help_ == importlib.import_module(module).HELP, verb
