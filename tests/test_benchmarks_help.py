"""Every benchmark script answers ``--help`` at once and writes nothing (it used to run the
whole benchmark and rewrite the committed results)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py")
                 if p.name == "__main__.py" or not p.name.startswith("_"))  # _x.py: helpers, not scripts


def _snapshot() -> dict[str, float]:
    # bytecode caches are the interpreter's, not the script's output
    return {str(p): p.stat().st_mtime_ns for p in (ROOT / "benchmarks").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_answers_at_once_and_writes_nothing(script: Path, tmp_path) -> None:
    before = _snapshot()
    cmd = ([sys.executable, "-m", "benchmarks", "--help"] if script.name == "__main__.py"
           else [sys.executable, str(script), "--help"])
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage:") and "--help" in res.stdout
    assert _snapshot() == before and list(tmp_path.iterdir()) == []
