"""Horizon shift: how μP's optimal LR moves with the token budget (150 → 1,200 steps).

One WSD trunk per (LR, seed) gives every horizon at once: ``train_wsd_branches`` cools a
branch down from the stable trunk at each budget, which repeats the separate WSD run of
that length (docs/trainer_contract.md, "WSD branches"; Hägele et al. 2024, "Scaling Laws
and Compute-Optimal Training Beyond Fixed Training Durations"). The warmup is fixed in
steps so that all branches share one trunk. ``analysis.OptimumFit`` locates the optimum per
horizon; the slope of log2 η* against log2 steps is the shift per doubling of tokens (the
number the big-run card's projection over tokens needs), with two intervals: the
power-law fit's and one from the optima's own bootstrap draws.

    python -m benchmarks.horizon_shift [--width 64] [--horizons 150,300,600,1200] [--seeds 0]

Writes ``results/horizon_shift.json`` and ``results/horizon_shift.png``. Finished trunks are
kept in ``OUT/trials.jsonl`` (default ``runs/horizon_shift``), so a re-run resumes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._proxy import TrialLog, finite_or_none, int_list, log, record_header, seed_list

HERE = Path(__file__).parent


def run(horizons: tuple[int, ...] = (150, 300, 600, 1200), width: int = 64, base_width: int = 32,
        seeds: tuple[int, ...] = (0,), batch_size: int = 16, seq_len: int = 64, warmup_steps: int = 15,
        out: str | os.PathLike[str] | None = None, threads: int = 1) -> dict[str, Any]:
    import pandas as pd

    from analysis._stats import percentile_interval
    from analysis.optimum import OptimumFit
    from analysis.plots import plot_lr_curves, plot_optimum_vs_width
    from mutransfer._io import atomic_write_text
    from mutransfer.training.config import TrainConfig
    from mutransfer.training.train import train_wsd_branches

    t0 = time.perf_counter()
    horizons = tuple(sorted(horizons))
    total = horizons[-1]
    fractions = [h / total for h in horizons]
    out = Path(out or Path("runs") / "horizon_shift")
    trials = TrialLog(out / "trials.jsonl")
    cfg0 = TrainConfig.from_flat(dict(
        preset="gpt-small", width=width, base_width=base_width, parametrization="mup", steps=total,
        batch_size=batch_size, seq_len=seq_len, eval_every=0, eval_sequences=8 * batch_size,
        warmup_steps=warmup_steps,
        schedule="wsd", threads=threads, device="cpu"))

    def run_at(t: float) -> dict[int, float]:
        """Seed-mean loss per horizon at LR 2^t (one WSD trunk per seed)."""
        per_h: dict[int, list[float]] = {h: [] for h in horizons}
        for seed in seeds:
            point = {"width": width, "log2_lr": t, "seed": seed, "horizons": list(horizons)}
            row = trials.get(point)
            if row is None:
                t1 = time.perf_counter()
                res = train_wsd_branches(cfg0.replace(lr=2.0**t, seed=seed), fractions)
                row = trials.add(point, {"lr": 2.0**t, "loss": [r.loss for r in res],
                                         "diverged": [r.diverged for r in res],
                                         "wall_s": time.perf_counter() - t1})
                log(f"  lr 2^{t:g} seed {seed}: " + ", ".join(
                    f"{h}: {v:.4f}" for h, v in zip(horizons, row["loss"], strict=True))
                    + f" in {row['wall_s']:.0f} s")
            for h, v in zip(horizons, row["loss"], strict=True):
                per_h[h].append(v)
        return {h: sum(v) / len(v) for h, v in per_h.items()}

    # Scan a 1-octave grid around 2^-6, widened while any horizon's minimum sits on an edge.
    scanned: dict[float, dict[int, float]] = {}
    for t in (-7.0, -6.0, -5.0):
        scanned[t] = run_at(t)
    while True:
        ts = sorted(scanned)
        best = [min(ts, key=lambda x, h=h: scanned[x][h]) for h in horizons]
        if ts[0] in best and ts[0] > -14:
            scanned[ts[0] - 1] = run_at(ts[0] - 1)
        elif ts[-1] in best and ts[-1] < 0:
            scanned[ts[-1] + 1] = run_at(ts[-1] + 1)
        else:
            break

    rows = []
    for r in trials.rows.values():
        if r["width"] != width or r["seed"] not in seeds or r["horizons"] != list(horizons):
            continue
        for h, v, dv in zip(horizons, r["loss"], r["diverged"], strict=True):
            rows.append({"steps": h, "tokens": h * batch_size * seq_len, "lr": r["lr"], "seed": r["seed"],
                         "loss": v, "diverged": dv})
    table = pd.DataFrame(rows)
    fit = OptimumFit(x="lr", y="loss", group_by=("steps",), n_boot=1000).fit(table)
    d = fit.drift("steps")
    # The optima's bootstrap draws, regressed draw by draw: the slope's interval with each
    # horizon's own uncertainty (independent of the power-law fit's residuals).
    lx = np.log2(np.array(horizons, dtype=float))
    n = min(o.boot_log2.size for o in fit.optima_)
    draws = np.column_stack([o.boot_log2[:n] for o in fit.optima_])
    ok = np.isfinite(draws).all(axis=1)
    boot_slopes = np.polyfit(lx, draws[ok].T, 1)[0]
    res = fit.results_
    figures = {
        "slope_log2_lr_per_doubling_tokens": d.slope,
        "slope_ci": [finite_or_none(c) for c in d.slope_ci] if d.slope_ci else None,
        "slope_ci_bootstrap_optima": [float(c) for c in percentile_interval(boot_slopes, 0.95)],
        "drift_octaves_150_to_1200": d.octaves, "drift_ci": [finite_or_none(c) for c in d.ci],
        "any_at_edge": d.any_at_edge,
        "log2_lr_opt": {str(int(r["steps"])): float(r["log2_x_opt"]) for _, r in res.iterrows()},
        "log2_lr_opt_ci": {
            str(int(r["steps"])): [finite_or_none(math.log2(r["ci_lo"])) if r["ci_lo"] > 0 else None,
                                   finite_or_none(math.log2(r["ci_hi"]))] for _, r in res.iterrows()},
        "best_loss": {str(int(r["steps"])): float(r["loss_opt"]) for _, r in res.iterrows()},
        "wall_s": time.perf_counter() - t0,
    }
    png = plot_optimum_vs_width(fit, HERE / "results" / "horizon_shift.png", across="steps")
    plot_lr_curves(fit, out / "lr_curves.png")
    record = {
        **record_header("horizon_shift"),
        "setup": {"preset": "gpt-small", "parametrization": "mup", "width": width, "base_width": base_width,
                  "depth": 2, "horizons_steps": list(horizons), "batch_size": batch_size, "seq_len": seq_len,
                  "tokens": [h * batch_size * seq_len for h in horizons], "seeds": list(seeds),
                  "schedule": f"WSD branches of one trunk: warmup {warmup_steps} steps, cooldown 20% "
                              "(1-sqrt) of each horizon",
                  "lr_grid_log2": sorted(scanned), "n_trunks": len(scanned) * len(seeds),
                  "n_diverged": int(table["diverged"].sum())},
        "figures": figures,
        "figure": str(png.relative_to(HERE)),
    }
    atomic_write_text(HERE / "results" / "horizon_shift.json", json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--horizons", type=int_list, default=(150, 300, 600, 1200),
                        help="token budgets in steps (default 150,300,600,1200)")
    parser.add_argument("--width", type=int, default=64, help="proxy width (default 64)")
    parser.add_argument("--seeds", type=seed_list, default=(0,), help="seeds (default 0)")
    parser.add_argument("--out", default=None, help="trial log dir (default runs/horizon_shift)")
    a = parser.parse_args()
    print(json.dumps(run(a.horizons, a.width, seeds=a.seeds, out=a.out)["figures"], indent=2))
