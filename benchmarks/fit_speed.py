"""Benchmark: the 4500-start Huber loss-law fit and a 1000-resample bootstrap; and
``mutransfer fit scaling`` with 1000 bootstrap resamples (target: < 10 s on 2 cores).

docs/architecture.md targets: the grid fit in < 10 s and a bootstrap of 1000 in < 60 s on 2 CPU
cores. Synthetic data: 245 runs (the size of the Chinchilla approach-3 data set as
reconstructed by Besiroglu et al. 2024) from Hoffmann et al.'s published law
(E=1.69, A=406.4, B=410.7, α=0.34, β=0.28) with 1 % log-normal noise.

Each is compared against the naive way: a Python loop of ``scipy.optimize.minimize``
(L-BFGS-B, same Huber objective with its analytic gradient, same tolerances and
iteration cap) over the same starts. The full naive loop takes long, so it runs on a
seeded random subset (``NAIVE_STARTS`` of the 4500 grid starts; ``NAIVE_BOOT``
resamples × the same ``bootstrap_starts`` starts each) and is extrapolated linearly in
the number of starts; ``speedup_*_vs_naive_scipy`` is that estimate over the measured
batched time.

The scaling fit runs on a synthetic sweep of 4 budgets × 6 batches × 9 LRs × 3 seeds
(648 runs, ``SCALING_GRID``) whose optima follow known laws; it is timed as the fit
alone and as the whole of what ``mutransfer fit scaling`` runs, through the library's API
(reading the CSV, checks, fit, atomic JSON write; interpreter start-up and argument parsing
excluded).

Run: ``python -m benchmarks.fit_speed`` (prints JSON, writes
``benchmarks/results/fit_speed.json`` atomically); ``python -m benchmarks.fit_speed
--scaling`` times only the scaling fit and writes nothing.
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
NAIVE_STARTS = 300  # of the 4500 grid starts, drawn at random (seeded)
NAIVE_BOOT = 20  # bootstrap resamples timed with the naive loop
RESULTS = Path(__file__).resolve().parent / "results" / "fit_speed.json"
SCALING_GRID = {"budgets": 4, "batches": 6, "lrs": 9, "seeds": 3}


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


def _naive_loop(starts: np.ndarray, logx: np.ndarray, logy: np.ndarray, w: np.ndarray,
                max_iter: int) -> tuple[float, np.ndarray]:
    """Seconds and end objectives of one ``scipy.optimize.minimize`` call per start."""
    from scipy.optimize import minimize

    from analysis.loss_law import HOFFMANN_DELTA, _lse_huber

    def fg(theta: np.ndarray) -> tuple[float, np.ndarray]:
        f, g = _lse_huber(theta[None, :], logx, logy, w, HOFFMANN_DELTA)
        return float(f[0]), g[0]

    t0 = time.perf_counter()
    fun = np.array([minimize(fg, x0, jac=True, method="L-BFGS-B",
                             options={"ftol": 1e-13, "gtol": 1e-9, "maxiter": max_iter}).fun
                    for x0 in starts])
    return time.perf_counter() - t0, fun


def naive_scipy(fit: Any, n: np.ndarray, d: np.ndarray, loss: np.ndarray,
                n_boot: int) -> dict[str, Any]:
    """Time the naive loop on a subset and extrapolate to the full grid and bootstrap."""
    logx, logy = np.log(np.column_stack([n, d])), np.log(loss)
    grid = fit.grid()
    pick = np.random.default_rng(0).choice(grid.shape[0], min(NAIVE_STARTS, grid.shape[0]),
                                           replace=False)
    sub = grid[np.sort(pick)]
    t_sub, fun = _naive_loop(sub, logx, logy, np.ones(loss.size), fit.max_iter)
    grid_est = t_sub * grid.shape[0] / sub.shape[0]
    # Bootstrap: per resample, the same starts the batched bootstrap uses (the full-data
    # optimum and the next-best local minima), with the resample's multiplicity weights.
    rng = np.random.default_rng(1)
    inits = np.array([fit.theta_] + list(fit.local_minima_[1:fit.bootstrap_starts]))
    t_boot = 0.0
    for _ in range(NAIVE_BOOT):
        w = np.bincount(rng.integers(0, loss.size, loss.size), minlength=loss.size).astype(float)
        dt, _ = _naive_loop(inits, logx, logy, w, fit.max_iter)
        t_boot += dt
    boot_est = t_boot * n_boot / NAIVE_BOOT
    return {"starts_timed": int(sub.shape[0]), "starts_total": int(grid.shape[0]),
            "subset_s": round(t_sub, 3), "grid_s_est": round(grid_est, 2),
            "subset_best_objective": float(np.nanmin(fun)) * fit.delta * loss.size,
            "bootstrap_resamples_timed": NAIVE_BOOT, "bootstrap_starts_each": int(inits.shape[0]),
            "bootstrap_subset_s": round(t_boot, 3), "bootstrap_s_est": round(boot_est, 2),
            "method": "scipy.optimize.minimize(L-BFGS-B) per start, same objective, gradient, "
                      "tolerances and maxiter; timed on a subset, extrapolated linearly"}


def scaling_sweep(seed: int = 0) -> Any:
    """eta* = 2^-12·B^0.5·D^-0.25 and B* = 16·D^0.5 (tokens), quadratic loss valleys, noise."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for d in 2.0 ** np.arange(20, 20 + SCALING_GRID["budgets"]):
        for b in 2.0 ** np.arange(12, 12 + SCALING_GRID["batches"]):
            t_opt = np.log2(2.0**-12 * b**0.5 * d**-0.25)
            for t in np.arange(-14.0, -14.0 + SCALING_GRID["lrs"]):
                for s in range(SCALING_GRID["seeds"]):
                    loss = (3 + 0.02 * (t - t_opt) ** 2
                            + 0.01 * (np.log2(b) - np.log2(16 * d**0.5)) ** 2
                            + rng.normal(0, 0.002))
                    rows.append(dict(lr=2.0**t, batch_tokens=b, tokens=d, loss=loss, seed=s,
                                     diverged=False, weight_decay=0.1, seq_len=128))
    return pd.DataFrame(rows)


def fit_scaling_file(csv: Path, out: Path) -> None:
    """What `mutransfer fit scaling CSV --out FIT.json` runs, through the library's public API:
    read and check the table (:func:`analysis.table.load_table`), fit with 1000 bootstrap
    resamples, write strict JSON atomically."""
    from analysis.scaling_fit import ScalingLawFit
    from analysis.table import dumps, load_table
    from mutransfer._io import atomic_write_text

    df, counts = load_table(str(csv), ["lr", "batch_tokens", "tokens", "loss"], keep_diverged=True)
    fit = ScalingLawFit(n_boot=N_BOOT, level=0.9).fit(df, lr="lr", batch="batch_tokens", tokens="tokens",
                                                       loss="loss", seed_col="seed", diverged="diverged",
                                                       weight_decay="weight_decay", seq_len="seq_len")
    doc = {**fit.to_dict(), "results": str(csv), "n_not_complete": counts["n_not_complete"],
           "n_dropped": counts["n_dropped"]}
    atomic_write_text(out, dumps(doc))


def scaling_timing() -> dict[str, Any]:
    """Seconds of ScalingLawFit (both methods) and of what `mutransfer fit scaling` runs
    (read, check, fit, write), 1000 resamples."""
    from analysis.scaling_fit import ScalingLawFit

    df = scaling_sweep()
    t_fit, fit = _time(lambda: ScalingLawFit(n_boot=N_BOOT).fit(df))
    t_band, _ = _time(lambda: ScalingLawFit(n_boot=N_BOOT, method="band").fit(df))
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "sweep.csv"
        df.to_csv(csv, index=False)
        t_cli, _ = _time(lambda: fit_scaling_file(csv, Path(tmp) / "fit.json"))
    return {"runs": len(df), "grid": dict(SCALING_GRID), "n_boot": N_BOOT,
            "fit_s": round(t_fit, 3), "fit_band_method_s": round(t_band, 3),
            "cli_fit_scaling_s": round(t_cli, 3),
            "exponents": {k: round(fit.params_[k], 4)
                          for k in ("lr_exp_batch", "lr_exp_tokens", "batch_exp_tokens")}}


def run() -> dict[str, Any]:
    """Time the fits and return the benchmark record (also written to RESULTS)."""
    import pandas
    import scipy

    from analysis.loss_law import ChinchillaFit

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
    naive = naive_scipy(fit1, n, d, loss, N_BOOT)
    figures["naive_scipy"] = naive
    figures["speedup_grid_vs_naive_scipy"] = round(naive["grid_s_est"] / t_grid, 2)
    figures["speedup_grid_vs_naive_scipy_1_thread"] = round(naive["grid_s_est"] / t_grid1, 2)
    figures["speedup_bootstrap_vs_naive_scipy"] = round(
        naive["bootstrap_s_est"] / full.timings_["bootstrap_s"], 2)
    scaling = scaling_timing()
    figures["fit_scaling_1000_s"] = scaling["cli_fit_scaling_s"]
    figures["scaling"] = scaling
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
        "targets": {"grid_fit_s": 10.0, "bootstrap_1000_s": 60.0, "fit_scaling_1000_s": 10.0},
        "passed": bool(t_grid < 10.0 and full.timings_["bootstrap_s"] < 60.0
                       and scaling["cli_fit_scaling_s"] < 10.0),
        "fitted": {k: round(v, 4) for k, v in fit1.params_.items()},
        "grid_best_objective": fit1.loss_,
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
    import argparse

    # parse first: --help (or a bad flag) answers at once and writes nothing
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="writes benchmarks/results/fit_speed.json")
    ap.add_argument("--scaling", action="store_true",
                    help="time only `fit scaling` (seconds, no naive loop) and write nothing")
    args = ap.parse_args()
    print(json.dumps(scaling_timing() if args.scaling else run(), indent=2))
