"""Benchmark: per-trial cost of the sweep machinery (storage round trips, bookkeeping).

Two measurements:

1. Machinery alone: a grid of trials whose runner costs ~nothing
   (``sweeps.runners:synthetic_runner``: 5 intermediate reports, one row), run in-process
   through the full path (enqueue, pop, heartbeat, params, provenance attrs, reports, row,
   tell) on a journal file and on SQLite (and PostgreSQL when
   ``MUTRANSFER_TEST_POSTGRES_URL`` is set). Seconds per trial = the overhead.
2. Against the bare trainer: the same gpt-tiny configs trained directly with
   ``mutransfer.training.train`` and through a sweep; the difference per trial.

docs/architecture.md target: overhead under 5 % of a 10-second trial (``ratio_overhead_10s_trial``).
Run: ``python -m benchmarks.sweep_overhead`` (prints JSON, writes
``benchmarks/results/sweep_overhead.json`` atomically).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "sweep_overhead.json"
N_SYNTHETIC = 48
TRAIN_LRS = (2.0**-9, 2.0**-7, 2.0**-5)
TRAIN_WIDTHS = (32, 64)
TRAIN_BASE = {"steps": 20, "batch_size": 8, "eval_every": 10, "eval_sequences": 16, "device": "cpu",
              "threads": 1}


def _machinery(storage: str | None, out: Path, name: str) -> float:
    from sweeps.spec_kinds import LRSweep
    from sweeps.study import run_sweep

    spec = LRSweep(widths=(32, 64, 128), parametrizations=("sp", "mup"),
                   lrs=tuple(2.0**k for k in range(-14, -6)), name=name)
    assert len(spec.points()) == N_SYNTHETIC
    t0 = time.perf_counter()
    res = run_sweep(spec, out=out, storage=storage, runner="sweeps.runners:synthetic_runner", workers=1)
    wall = time.perf_counter() - t0
    assert res.complete
    return wall / N_SYNTHETIC


def _trainer(out: Path) -> tuple[float, float]:
    from mutransfer.training.config import TrainConfig
    from mutransfer.training.train import train
    from sweeps.resolve import resolve_config
    from sweeps.spec_kinds import LRSweep
    from sweeps.study import run_sweep

    spec = LRSweep(widths=TRAIN_WIDTHS, parametrizations=("mup",), lrs=TRAIN_LRS, base=TRAIN_BASE)
    configs = [resolve_config(spec, p) for p in spec.points()]
    train(TrainConfig.from_overrides(None, configs[0]))  # warm-up: imports, data cache
    t0 = time.perf_counter()
    for cfg in configs:
        train(TrainConfig.from_overrides(None, cfg), callback=lambda step, m: False)
    direct = (time.perf_counter() - t0) / len(configs)
    t0 = time.perf_counter()
    res = run_sweep(spec, out=out, workers=1)
    swept = (time.perf_counter() - t0) / len(configs)
    assert res.complete
    return direct, swept


def run() -> dict[str, Any]:
    """Measure and return the benchmark record (also written to RESULTS)."""
    import optuna

    import mutransfer

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        figures["machinery_s_per_trial_journal"] = round(_machinery(None, t / "j", "bench"), 4)
        figures["machinery_s_per_trial_sqlite"] = round(
            _machinery(f"sqlite:///{t / 's.db'}", t / "s", "bench"), 4)
        pg = os.environ.get("MUTRANSFER_TEST_POSTGRES_URL")
        if pg:
            name = f"bench-{os.getpid()}"
            try:
                figures["machinery_s_per_trial_postgresql"] = round(_machinery(pg, t / "p", name), 4)
            finally:
                try:
                    optuna.delete_study(study_name=name, storage=pg)
                except Exception:
                    pass
        direct, swept = _trainer(t / "train")
    figures["trainer_direct_s_per_trial"] = round(direct, 4)
    figures["trainer_sweep_s_per_trial"] = round(swept, 4)
    figures["overhead_vs_trainer_s_per_trial"] = round(swept - direct, 4)
    overhead = figures["machinery_s_per_trial_journal"]
    figures["ratio_overhead_10s_trial"] = round(overhead / 10.0, 5)
    figures["ratio_sweep_vs_direct_trainer"] = round(swept / direct, 4)
    record = {
        "benchmark": "sweep_overhead",
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpu_count": os.cpu_count(), "device": "cpu"},
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"python": sys.version.split()[0], "optuna": optuna.__version__,
                     "mutransfer": mutransfer.__version__},
        "setup": {"synthetic_trials": N_SYNTHETIC, "train_trials": len(TRAIN_LRS) * len(TRAIN_WIDTHS),
                  "train_config": {"preset": "gpt-tiny", **TRAIN_BASE}, "workers": 1},
        "figures": figures,
        "targets": {"ratio_overhead_10s_trial": 0.05},
        "passed": bool(figures["ratio_overhead_10s_trial"] < 0.05),
    }
    from mutransfer._io import atomic_write_text

    atomic_write_text(RESULTS, json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    import argparse

    # parse first: --help (or a bad flag) answers at once and writes nothing
    argparse.ArgumentParser(description=__doc__.split("\n")[0],
                            epilog="writes benchmarks/results/sweep_overhead.json").parse_args()
    print(json.dumps(run(), indent=2))
