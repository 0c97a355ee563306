"""Benchmark: the 4500-start Huber loss-law fit and a 1000-resample bootstrap.

DESIGN.md targets: the grid fit in < 10 s and a bootstrap of 1000 in < 60 s on 2 CPU
cores. Synthetic data: 245 runs (the size of the Chinchilla approach-3 data set as
reconstructed by Besiroglu et al. 2024) from Hoffmann et al.'s published law
(E=1.69, A=406.4, B=410.7, α=0.34, β=0.28) with 1 % log-normal noise.

Run: ``python -m benchmarks.fit_speed`` (prints JSON, writes
``benchmarks/results/fit_speed.json`` atomically).
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

import numpy as np

TRUTH = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
N_RUNS = 245
N_BOOT = 1000
RESULTS = Path(__file__).resolve().parent / "results" / "fit_speed.json"


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 10 ** rng.uniform(7, 10, N_RUNS)
    d = n * 10 ** rng.uniform(0.5, 3.0, N_RUNS)
    loss = TRUTH["E"] + TRUTH["A"] / n ** TRUTH["alpha"] + TRUTH["B"] / d ** TRUTH["beta"]
    return n, d, loss * np.exp(rng.normal(0.0, 0.01, N_RUNS))


def _time(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run() -> dict[str, Any]:
    """Time the fits and return the benchmark record (also written to RESULTS)."""
    import pandas
    import scipy

    from analysis import ChinchillaFit

    n, d, loss = _data()
    jobs = min(2, os.cpu_count() or 1)
    figures: dict[str, Any] = {}
    t_grid1, fit1 = _time(lambda: ChinchillaFit(n_boot=0, n_jobs=1).fit(n, d, loss))
    t_grid, fit = _time(lambda: ChinchillaFit(n_boot=0, n_jobs=jobs).fit(n, d, loss))
    t_full, full = _time(lambda: ChinchillaFit(n_boot=N_BOOT, n_jobs=jobs).fit(n, d, loss))
    figures["grid_fit_s_1_thread"] = round(t_grid1, 3)
    figures[f"grid_fit_s_{jobs}_threads"] = round(t_grid, 3)
    figures["bootstrap_1000_s"] = round(full.timings_["bootstrap_s"], 3)
    figures["grid_plus_bootstrap_s"] = round(t_full, 3)
    figures["speedup_threads"] = round(t_grid1 / t_grid, 3)
    record = {
        "benchmark": "fit_speed",
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpu_count": os.cpu_count(), "threads_used": jobs},
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"python": sys.version.split()[0], "numpy": np.__version__,
                     "scipy": scipy.__version__, "pandas": pandas.__version__},
        "setup": {"n_runs": N_RUNS, "n_starts": fit.n_starts_, "n_boot": N_BOOT,
                  "huber_delta": fit.delta, "noise": "1% log-normal"},
        "figures": figures,
        "targets": {"grid_fit_s": 10.0, "bootstrap_1000_s": 60.0},
        "passed": bool(t_grid < 10.0 and full.timings_["bootstrap_s"] < 60.0),
        "fitted": {k: round(v, 4) for k, v in fit1.params_.items()},
        "bootstrap_ci_alpha": [round(v, 4) for v in full.ci_["alpha"]],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".fit_speed.", suffix=".tmp", dir=RESULTS.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, RESULTS)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return record


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
