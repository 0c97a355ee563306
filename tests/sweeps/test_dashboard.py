"""The dashboard the README points to: ``optuna-dashboard`` (the ``[track]`` extra) serves a
sweep's journal on 127.0.0.1, and its page and study list come back over HTTP."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from sweeps.spec_kinds import LRSweep
from sweeps.study import run_sweep


def _dashboard() -> str:
    exe = Path(sys.executable).with_name("optuna-dashboard")
    found = str(exe) if exe.exists() else shutil.which("optuna-dashboard")
    if found is None:
        pytest.skip("optuna-dashboard is not installed: pip install 'mutransfer[track]'")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - 127.0.0.1 only
        return r.status, r.read().decode("utf-8", errors="replace")


def test_optuna_dashboard_serves_a_sweep_study(tmp_path) -> None:
    exe = _dashboard()
    spec = LRSweep(widths=(32, 64), parametrizations=("mup",), lrs=(2.0**-9, 2.0**-7, 2.0**-5))
    res = run_sweep(spec, out=tmp_path, runner="sweeps.runners:synthetic_runner", workers=1, quiet=True)
    assert res.complete
    port = _free_port()
    proc = subprocess.Popen([exe, "--host", "127.0.0.1", "--port", str(port), "--quiet",
                             str(tmp_path / "optuna.journal")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, page = time.time() + 60, None
        while page is None and time.time() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr else ""
                pytest.fail(f"optuna-dashboard exited {proc.returncode}: {err}")
            try:
                page = _get(f"http://127.0.0.1:{port}/dashboard")
            except OSError:
                time.sleep(0.3)
        assert page is not None, "the dashboard never answered within 60 s"
        status, html = page
        assert status == 200 and "<html" in html.lower()
        status, body = _get(f"http://127.0.0.1:{port}/api/studies")
        studies = json.loads(body)["study_summaries"]
        assert status == 200 and [s["study_name"] for s in studies] == [res.plan.study_name]
        sid = studies[0]["study_id"]
        status, body = _get(f"http://127.0.0.1:{port}/api/studies/{sid}")
        trials = json.loads(body)["trials"]
        assert status == 200 and len(trials) == len(spec.points())  # every trial of the sweep
        assert {t["state"] for t in trials} == {"Complete"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
