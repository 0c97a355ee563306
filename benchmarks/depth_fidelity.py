"""Depth fidelity: does the optimal LR stay put across depths under CompleteP, and move under μP?

Trains the demo's GPT at one fixed width over a depth ladder (default 2, 4, 8, 16 blocks,
base depth 2) under μP (width rules only), CompleteP α=1 and CompleteP α=0.5 (Dey et al.
2025, "Don't be lazy: CompleteP enables compute-efficient deep transformers", Table 1),
scans the LR around the optimum per (parametrization, depth) and reads the drift of the
optimum across depth in octaves with its bootstrap interval (``analysis.OptimumFit``).
Target: CompleteP drift <= 0.5 octave, μP's larger.

    python -m benchmarks.depth_fidelity [--steps N] [--seeds 0,1] [--out DIR]

Writes ``results/depth_fidelity.json`` and ``results/depth_fidelity.png``. Finished trials
are kept in ``OUT/trials.jsonl`` (default ``runs/depth_fidelity``), so a re-run resumes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from benchmarks._proxy import TrialLog, bracket_scan, finite_or_none, int_list, log, record_header, seed_list

HERE = Path(__file__).parent
# (label, parametrization, depth_alpha)
PARAMETRIZATIONS: tuple[tuple[str, str, float], ...] = (
    ("mup", "mup", 1.0), ("completep_a1", "completep", 1.0), ("completep_a0.5", "completep", 0.5))


def run(depths: tuple[int, ...] = (2, 4, 8, 16), width: int = 32, steps: int = 100,
        seeds: tuple[int, ...] = (0,), batch_size: int = 16, seq_len: int = 64,
        out: str | os.PathLike[str] | None = None, threads: int = 1) -> dict[str, Any]:
    import pandas as pd

    from analysis.optimum import OptimumFit
    from analysis.plots import plot_lr_curves, plot_optimum_vs_width
    from mutransfer._io import atomic_write_text
    from mutransfer.training.config import TrainConfig
    from mutransfer.training.train import train

    t0 = time.perf_counter()
    out = Path(out or Path("runs") / "depth_fidelity")
    trials = TrialLog(out / "trials.jsonl")
    base_depth = min(depths)
    base = {"preset": "gpt-small", "width": width, "base_width": width, "base_depth": base_depth,
            "steps": steps, "batch_size": batch_size, "seq_len": seq_len, "eval_every": steps,
            "eval_sequences": 8 * batch_size, "warmup_steps": max(1, steps // 10), "schedule": "cosine",
            "lr_floor": 0.1, "threads": threads, "device": "cpu"}

    def make_run(label: str, kind: str, alpha: float, depth: int):  # noqa: ANN202
        def run_at(t: float) -> list[float]:
            losses = []
            for seed in seeds:
                point = {"param": label, "depth": depth, "log2_lr": t, "seed": seed}
                row = trials.get(point)
                # At the base depth (and width) CompleteP's multipliers are all 1: it is the
                # μP run, float for float, so that run is shared rather than repeated.
                twin = trials.get({**point, "param": "mup"}) if depth == base_depth else None
                if row is None and twin is not None:
                    row = trials.add(point, {k: twin[k] for k in ("lr", "loss", "diverged", "wall_s")}
                                     | {"shared_with": "mup"})
                if row is None:
                    res = train(TrainConfig.from_flat(dict(**base, depth=depth, parametrization=kind,
                                                           depth_alpha=alpha, lr=2.0**t, seed=seed)))
                    row = trials.add(point, {"lr": 2.0**t, "loss": res.loss, "diverged": res.diverged,
                                             "wall_s": res.wall_s})
                    log(f"  {label} depth {depth} lr 2^{t:g} seed {seed}: loss {res.loss:.4f}"
                        f"{' (diverged)' if res.diverged else ''} in {res.wall_s:.0f} s")
                losses.append(row["loss"])
            return losses
        return run_at

    for label, kind, alpha in PARAMETRIZATIONS:
        for depth in depths:
            # A guess centred on the base optimum (about 2^-5 for this proxy; for μP one
            # octave lower per 4x depth), then widened until the minimum is interior.
            c = -5.0 - (round(math.log(depth / base_depth, 4)) if kind == "mup" else 0)
            bracket_scan(make_run(label, kind, alpha, depth), [c - 1, c, c + 1],
                         lo=-14.0, hi=0.0)

    rows = [r for r in trials.rows.values() if r["depth"] in depths and r["seed"] in seeds
            and r["param"] in {p[0] for p in PARAMETRIZATIONS}]
    table = pd.DataFrame(rows)
    fit = OptimumFit(x="lr", y="loss", group_by=("param", "depth"), n_boot=1000).fit(table)
    figures: dict[str, Any] = {}
    for label, _, _ in PARAMETRIZATIONS:
        d = fit.drift("depth", where={"param": label})
        res = fit.results_[fit.results_["param"] == label]
        figures[label] = {
            "drift_octaves": d.octaves, "drift_ci": [finite_or_none(c) for c in d.ci],
            "slope": d.slope, "slope_ci": [finite_or_none(c) for c in d.slope_ci] if d.slope_ci else None,
            "any_at_edge": d.any_at_edge,
            "log2_lr_opt": {str(int(r["depth"])): float(r["log2_x_opt"]) for _, r in res.iterrows()},
            "best_loss": {str(int(r["depth"])): float(r["loss_opt"]) for _, r in res.iterrows()},
        }
    figures["drift_octaves_mup"] = figures["mup"]["drift_octaves"]
    figures["drift_octaves_completep_a1"] = figures["completep_a1"]["drift_octaves"]
    figures["drift_octaves_completep_a0.5"] = figures["completep_a0.5"]["drift_octaves"]
    figures["wall_s"] = time.perf_counter() - t0

    png = plot_optimum_vs_width(fit, HERE / "results" / "depth_fidelity.png", across="depth", by="param")
    for label, _, _ in PARAMETRIZATIONS:
        plot_lr_curves(fit, out / f"lr_curves_{label}.png", where={"param": label})
    cp = [figures[p]["drift_octaves"] for p in ("completep_a1", "completep_a0.5")]
    record = {
        **record_header("depth_fidelity"),
        "setup": {"preset": "gpt-small", "width": width, "depths": list(depths), "base_depth": base_depth,
                  "steps": steps, "batch_size": batch_size, "seq_len": seq_len, "seeds": list(seeds),
                  "schedule": "cosine, 10% warmup, floor 0.1", "lr_grid": "log2 steps of 1, widened "
                  "until the minimum is interior", "n_trials": len(table),
                  "n_diverged": int(table["diverged"].sum())},
        "figures": figures,
        "figure": str(png.relative_to(HERE)),
        "targets": {"drift_octaves_completep_max": 0.5, "drift_octaves_mup_gt_completep": True},
        "passed": bool(max(cp) <= 0.5 and figures["mup"]["drift_octaves"] > max(cp)),
    }
    atomic_write_text(HERE / "results" / "depth_fidelity.json", json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depths", type=int_list, default=(2, 4, 8, 16),
                        help="depth ladder (default 2,4,8,16)")
    parser.add_argument("--width", type=int, default=32, help="fixed width (default 32)")
    parser.add_argument("--steps", type=int, default=100, help="steps per trial (default 100)")
    parser.add_argument("--seeds", type=seed_list, default=(0,), help="seeds (default 0)")
    parser.add_argument("--out", default=None, help="trial log dir (default runs/depth_fidelity)")
    a = parser.parse_args()
    print(json.dumps(run(a.depths, a.width, a.steps, a.seeds, out=a.out)["figures"], indent=2))
