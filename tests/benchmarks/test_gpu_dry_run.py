"""The prepared device probe runs every part on CPU at a tiny size (``python -m benchmarks
gpu --dry-run``): this is how CI checks the GPU paths without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.gpu import BUDGET_S, DEMO_S, PART_S, storage_status
from sweeps.spec_kinds import LRSweep
from sweeps.study import run_sweep

ROOT = Path(__file__).resolve().parents[2]


def test_the_parts_worst_cases_fit_the_budget() -> None:
    assert sum(PART_S.values()) + DEMO_S <= BUDGET_S


def test_status_sums_every_study_of_a_storage(tmp_path: Path) -> None:
    """A demo's storage holds several studies: `sweep status` without --study refuses it."""
    syn = "sweeps.runners:synthetic_runner"
    a = LRSweep(widths=(32, 64), parametrizations=("mup",), lrs=(2.0**-10, 2.0**-7))
    b = LRSweep(widths=(32,), parametrizations=("sp",), lrs=(2.0**-10, 2.0**-7, 2.0**-4))
    run_sweep(a, out=tmp_path, runner=syn, study_name="one")
    run_sweep(b, out=tmp_path, runner=syn, study_name="two")
    st = storage_status(tmp_path)
    assert sorted(st["studies"]) == ["one", "two"]
    assert st["counts"]["complete"] == 4 + 3 and st["total"] == 7 and st["counts"]["failed"] == 0
    assert "error" in storage_status(tmp_path / "nothing-here")
    assert not (tmp_path / "nothing-here").exists()  # reading it created nothing


def test_dry_run_runs_every_part_on_cpu_in_under_a_minute(tmp_path: Path) -> None:
    out = tmp_path / "probe"
    repo_record = ROOT / "benchmarks" / "results" / "gpu.json"
    before = repo_record.stat().st_mtime_ns if repo_record.exists() else None
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "benchmarks", "gpu", "--dry-run", "--out", str(out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr[-2000:]
    rec = json.loads((out / "gpu.json").read_text())
    fig = rec["figures"]
    assert rec["dry_run"] and rec["errors"] == [] and rec["skipped"] == []
    assert set(fig) >= {"counts", "mfu", "fused", "fuse_auto", "sweep_smoke", "demo"}
    assert fig["counts"]["host_syncs_plain"] == 0 and fig["counts"]["host_syncs_logging"] == 1
    assert {"b2_eager", "b2_compiled", "b4_eager", "b4_compiled"} <= set(fig["mfu"])
    # both batches stayed compiled (the device run reports a fallback's reason here)
    assert fig["mfu"]["b2_compiled"]["compile_fallback"] is None
    assert fig["mfu"]["b4_compiled"]["compile_fallback"] is None
    assert fig["fuse_auto"]["passed"] and fig["sweep_smoke"]["passed"]
    # cut after 12 s, the demo is still in its coordinate check (its sweeps start at ~40 s
    # on a loaded 2-core machine): the part ran and read what was there, creating nothing;
    # reading a demo's several studies is test_status_sums_every_study_of_a_storage
    demo = fig["demo"]
    assert demo["exit_code"] in (0, 124) and demo["cut_after_s"] == 12.0
    assert demo["status_error"] is None or demo["status_error"].startswith("no sweep storage")
    assert (repo_record.stat().st_mtime_ns if repo_record.exists() else None) == before
    assert fig["wall_s"] < 60, fig["wall_s"]  # every part, as the probe times itself
    assert wall < 120, wall  # with the interpreter's start and imports
