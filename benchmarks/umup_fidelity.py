"""u-μP as a peer: does its default LR transfer across width, and how good is its best loss?

Graphcore's ``unit_scaling`` package (u-μP: Blake et al. 2024, "u-μP: The
Unit-Scaled Maximal Update Parametrization") claims near-optimal defaults: every
multiplier at 1 and one LR (η = 2^1.5 with its Adam, see ``DEFAULT_LOG2_LR``) that
transfers across width. This benchmark trains the demo's proxy (the shape of
``gpt-small``: depth 2, head dim 32, context 64, byte vocab; 150 steps, batch 16, cosine with
15 warmup steps and floor 0.1; the same training and held-out batches) built from the
package's layers and trained with its optimizer (``benchmarks._umup``), and measures in one
run, side by side:

1. u-μP's LR scan at widths 32, 64, 128, 256 (2 seeds): the drift of the optimum in
   octaves (``analysis.OptimumFit``), and per width the loss at the default LR over the
   best loss and the default's distance from the optimum in octaves;
2. at width 256, the best loss of u-μP, of the toolkit's μP and of SP (the toolkit's
   trainer, ``mutransfer.training.train``, over an LR scan each), as ratios with a seed-bootstrap
   interval (``tuned_multipliers.best_loss_ratio``; 2 seeds make it coarse);
3. an ablation at width 256, ``umup_embconst``: u-μP with μP's width-independent Adam LR
   for the embedding table instead of its η·width^-1/2 (``_umup.umup_optimizer``), to see
   how much of the gap to μP that one rule accounts for.

μP's and SP's drift on the same proxy are those of ``results/transfer_fidelity.json``,
copied into the record when present. u-μP is a benchmark only, not a dependency:

    pip install --no-deps unit-scaling==0.3.5 einops tabulate docstring-parser  # keeps torch
    python -m benchmarks.umup_fidelity [--widths 32,64,128,256] [--seeds 0,1] [--workers 2]

Writes ``results/umup_fidelity.json``. Finished runs are kept in ``OUT/trials.jsonl``
(default ``runs/umup_fidelity``), so a re-run resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._proxy import TrialLog, bracket_scan, finite_or_none, int_list, log, record_header, seed_list

HERE = Path(__file__).parent
#: u-μP's default LR (log2) as we read Blake et al. 2024: η = 2^1.5 with every α at 1.
#: (Not re-checked against the paper's text here; the package's own demo notebook, 5000
#: steps on WikiText bytes, finds its optimum near 2^0.)
DEFAULT_LOG2_LR = 1.5
# Starting grids (log2 LR), widened by bracket_scan while the minimum sits on an edge.
# u-μP's is centred on its default; μP's and SP's (3 points: a width-256 run costs minutes
# on a shared 2-core machine) bracket their width-256 optima in transfer_fidelity.json
# (2^-5.6 and 2^-8.7).
START = {"umup": [-0.5, 0.5, 1.5, 2.5, 3.5], "mup": [-7.0, -6.0, -5.0], "sp": [-10.0, -9.0, -8.0],
         "umup_embconst": [-0.5, 0.5, 1.5]}
BOUNDS = {"umup": (-6.0, 8.0), "mup": (-14.0, 0.0), "sp": (-16.0, 0.0), "umup_embconst": (-6.0, 8.0)}
ARMS_WIDEST = ("umup", "mup", "sp", "umup_embconst")


def unavailable() -> str | None:
    """Why this benchmark cannot run here (one line), or None when ``unit_scaling`` imports."""
    try:
        import unit_scaling  # noqa: F401
    except ImportError as exc:
        return (f"benchmarks umup_fidelity: the unit_scaling package is not installed ({exc}); "
                "pip install --no-deps unit-scaling==0.3.5 einops tabulate docstring-parser; nothing was run")
    return None


def _demo(steps: int | None) -> dict[str, Any]:
    from benchmarks.tuned_multipliers import DEMO

    if steps is None:
        return dict(DEMO)
    return {**DEMO, "steps": steps, "eval_every": steps, "warmup_steps": max(1, steps // 10)}


def scan(arm: str, width: int, seeds: tuple[int, ...], out: str, steps: int | None) -> str:
    """Run (or resume) one arm's LR scan at one width; finished runs go to the trial log.
    Module-level so a worker process can run it."""

    demo = _demo(steps)
    trials = TrialLog(Path(out) / "trials.jsonl")

    def run_at(t: float) -> list[float]:
        losses = []
        for seed in seeds:
            point = {"arm": arm, "width": width, "log2_lr": t, "seed": seed, "steps": demo["steps"]}
            row = trials.get(point)
            if row is None:
                if arm in ("umup", "umup_embconst"):
                    from benchmarks._umup import train_umup

                    r = train_umup(demo, width, 2.0**t, seed, embedding_lr_constant=arm == "umup_embconst")
                else:
                    from benchmarks._umup import _dataset
                    from mutransfer.training.config import TrainConfig
                    from mutransfer.training.train import train

                    res = train(TrainConfig.from_flat({**demo, "parametrization": arm, "width": width,
                                                         "lr": 2.0**t, "seed": seed}),
                                data=_dataset())
                    r = {"loss": res.loss, "diverged": res.diverged, "wall_s": res.wall_s}
                row = trials.add(point, {"lr": 2.0**t, "loss": r["loss"], "diverged": r["diverged"],
                                         "wall_s": r["wall_s"]})
                log(f"  {arm} width {width} lr 2^{t:g} seed {seed}: {r['loss']:.4f}"
                    f"{' (diverged)' if r['diverged'] else ''} in {r['wall_s']:.0f} s")
            losses.append(row["loss"])
        return losses

    lo, hi = BOUNDS[arm]
    bracket_scan(run_at, START[arm], lo=lo, hi=hi)
    return f"{arm}@{width}"


def _reference_drift() -> dict[str, Any] | None:
    """μP's and SP's drift on the same proxy, from the transfer-fidelity record."""
    path = HERE / "results" / "transfer_fidelity.json"
    if not path.exists():
        return None
    rec = json.loads(path.read_text())
    f = rec.get("figures", {})
    return {"source": "results/transfer_fidelity.json", "date": rec.get("date"),
            "drift_octaves_mup": f.get("drift_octaves_mup"), "drift_ci_mup": f.get("drift_ci_mup"),
            "drift_octaves_sp": f.get("drift_octaves_sp"), "drift_ci_sp": f.get("drift_ci_sp")}


def run(widths: tuple[int, ...] = (32, 64, 128, 256), seeds: tuple[int, ...] = (0, 1),
        out: str | os.PathLike[str] | None = None, workers: int = 2,
        steps: int | None = None) -> dict[str, Any]:
    """Scan, fit and write ``results/umup_fidelity.json``; ``steps`` shortens every run
    (smoke tests only)."""
    why = unavailable()
    if why:
        raise RuntimeError(why)
    if len(widths) < 2 or min(widths) < 1:
        raise ValueError(f"widths needs at least two positive widths, got {list(widths)}")
    if not seeds:
        raise ValueError("seeds is empty")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    import pandas as pd

    from analysis.optimum import OptimumFit
    from benchmarks.tuned_multipliers import best_loss_ratio
    from mutransfer._io import atomic_write_text

    t0 = time.perf_counter()
    out = Path(out or Path("runs") / "umup_fidelity")
    widest = max(widths)
    demo = _demo(steps)
    n_before = len(TrialLog(out / "trials.jsonl").rows)
    # Most expensive first, so the two workers finish close together.
    jobs = [(a, widest) for a in ARMS_WIDEST] + [("umup", w) for w in sorted(widths, reverse=True)
                                                if w != widest]
    log(f"u-μP at widths {list(widths)}; μP, SP and the ablation at {widest}; seeds {list(seeds)}; "
        f"{workers} worker(s)")
    if workers == 1:
        for arm, w in jobs:
            scan(arm, w, seeds, str(out), steps)
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        # spawn: a fresh interpreter per worker, no forked torch thread pools.
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
            for f in [pool.submit(scan, arm, w, seeds, str(out), steps) for arm, w in jobs]:
                log(f"  done: {f.result()}")

    logged = TrialLog(out / "trials.jsonl").rows.values()
    rows = [r for r in logged
            if r["arm"] in START and r["seed"] in seeds and r["steps"] == demo["steps"]
            and ((r["arm"] == "umup" and r["width"] in widths) or r["width"] == widest)]
    table = pd.DataFrame(rows)
    # Only LRs that every seed finished: the seed bootstrap resamples whole seeds.
    complete = table.groupby(["arm", "width", "log2_lr"])["seed"].transform("nunique") == len(seeds)
    table = table[complete].reset_index(drop=True)
    fit = OptimumFit(x="lr", y="loss", group_by=("arm", "width"), n_boot=1000).fit(table)
    res = fit.results_.set_index(["arm", "width"])
    drift = fit.drift("width", where={"arm": "umup"})

    umup = table[table["arm"] == "umup"]
    per_width: dict[str, Any] = {}
    for w in sorted(widths):
        at = umup[(umup["width"] == w) & (umup["log2_lr"] == DEFAULT_LOG2_LR)]
        loss_default = float(at["loss"].mean())
        best, t_opt = float(res.loc[("umup", w), "loss_opt"]), float(res.loc[("umup", w), "log2_x_opt"])
        per_width[str(w)] = {
            "log2_lr_opt": t_opt, "lr_opt_at_edge": bool(res.loc[("umup", w), "at_edge"]),
            "best_loss": best, "loss_at_default_lr": loss_default,
            "ratio_default_over_best_loss": loss_default / best,
            "octaves_default_from_opt": DEFAULT_LOG2_LR - t_opt,
            "any_default_diverged": bool(at["diverged"].any()),
        }
    w256 = table[table["width"] == widest]
    ratios = {f"{a}_over_{b}": best_loss_ratio(w256, a, b) for a, b in
              (("umup", "mup"), ("umup", "sp"), ("mup", "sp"), ("umup_embconst", "mup"))}
    ablation = w256[(w256["arm"] == "umup_embconst") & (w256["log2_lr"] == DEFAULT_LOG2_LR)]
    figures: dict[str, Any] = {
        "drift_octaves_umup": drift.octaves,
        "drift_ci_umup": [finite_or_none(c) for c in drift.ci],
        "slope_umup": drift.slope,
        "ratio_default_over_best_loss_umup_max": max(p["ratio_default_over_best_loss"]
                                                     for p in per_width.values()),
        "ratio_default_over_best_loss_umup_widest": per_width[str(widest)]["ratio_default_over_best_loss"],
        "ratio_best_loss_umup_over_mup_widest": ratios["umup_over_mup"]["ratio"],
        "ratio_best_loss_umup_over_mup_widest_ci": ratios["umup_over_mup"]["ci"],
        "ratio_best_loss_umup_over_sp_widest": ratios["umup_over_sp"]["ratio"],
        "ratio_best_loss_umup_over_sp_widest_ci": ratios["umup_over_sp"]["ci"],
        "ratio_best_loss_mup_over_sp_widest": ratios["mup_over_sp"]["ratio"],
        "ratio_best_loss_mup_over_sp_widest_ci": ratios["mup_over_sp"]["ci"],
        "ratio_best_loss_umup_embconst_over_mup_widest": ratios["umup_embconst_over_mup"]["ratio"],
        "ratio_best_loss_umup_embconst_over_mup_widest_ci": ratios["umup_embconst_over_mup"]["ci"],
        "ratio_default_over_best_loss_umup_embconst_widest":
            float(ablation["loss"].mean()) / float(res.loc[("umup_embconst", widest), "loss_opt"]),
        "umup_per_width": per_width,
        "best_loss_widest": {a: float(res.loc[(a, widest), "loss_opt"]) for a in ARMS_WIDEST},
        "log2_lr_opt_widest": {a: float(res.loc[(a, widest), "log2_x_opt"]) for a in ARMS_WIDEST},
        "lr_opt_at_edge_widest": {a: bool(res.loc[(a, widest), "at_edge"]) for a in ARMS_WIDEST},
        "any_at_edge_umup": drift.any_at_edge,
        "reference_drift_same_proxy": _reference_drift(),
        "wall_s": time.perf_counter() - t0,
        "trials_wall_s_total": float(table["wall_s"].sum()),
    }
    import unit_scaling

    header = record_header("umup_fidelity")
    header["versions"]["unit_scaling"] = unit_scaling.__version__
    record = {
        **header,
        "setup": {**{k: v for k, v in demo.items() if k not in ("base_width", "eval_every", "device")},
                  "widths": list(widths), "seeds": list(seeds), "widest": widest,
                  "umup_default_log2_lr": DEFAULT_LOG2_LR, "start_grids_log2_lr": START,
                  "lr_grid": "log2 steps of 1, widened until the minimum is interior",
                  "umup": "benchmarks._umup.UmupGPT (unit_scaling layers, RoPE, 4x GELU MLP, norms "
                          "without gains) + unit_scaling.optim.AdamW, betas (0.9, 0.95), eps 1e-8, "
                          "no weight decay, no gradient clipping",
                  "mup_sp": "mutransfer.training.train, base width 32, TrainConfig defaults (grad clip 1.0)",
                  "umup_embconst": "ablation: u-μP with the embedding's LR η (μP's) instead of "
                                   "η·width^-1/2",
                  "n_trials": len(table), "n_diverged": int(table["diverged"].sum()),
                  "n_trials_run_now": len(logged) - n_before,
                  "workers": workers},
        "figures": figures,
        "targets": {"drift_octaves_umup_max": 0.5, "ratio_default_over_best_loss_umup_max": 1.01},
        "passed": bool(drift.octaves <= 0.5 and figures["ratio_default_over_best_loss_umup_max"] <= 1.01),
    }
    atomic_write_text(HERE / "results" / "umup_fidelity.json", json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--widths", type=int_list, default=(32, 64, 128, 256),
                        help="u-μP width ladder; μP and SP run at the widest (default 32,64,128,256)")
    parser.add_argument("--seeds", type=seed_list, default=(0, 1), help="seeds (default 0,1)")
    parser.add_argument("--out", default=None, help="trial log dir (default runs/umup_fidelity)")
    parser.add_argument("--workers", type=int, default=2, help="parallel processes (default 2)")
    parser.add_argument("--steps", type=int, default=None, help=argparse.SUPPRESS)  # smoke runs only
    a = parser.parse_args()
    why = unavailable()
    if why:
        print(why, file=sys.stderr)
        raise SystemExit(2)
    rec = run(tuple(a.widths), tuple(a.seeds), a.out, a.workers, a.steps)
    print(json.dumps({k: v for k, v in rec["figures"].items() if not isinstance(v, dict)}, indent=2))
