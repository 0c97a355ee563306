"""Stages 4 and 5 of the demo: the scaling sweep at the base width, the η*(B, D) and B*(D)
laws, the critical batch two ways, the width check and the held-out audit."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.critical_batch import CriticalBatchFit, steps_to_target
from analysis.optimum import OptimumFit
from analysis.scaling_fit import ScalingLawFit
from analysis.scaling_plots import critical_batch_comparison, plot_critical_batch_comparison, plot_scaling
from mutransfer._io import atomic_write_text
from mutransfer_cli._demo_sizes import DemoSize, fuse_for, model_kw
from mutransfer_cli._demo_stage import Clock, log
from sweeps.extend import Bounds, run_bracketed
from sweeps.holdout import fit_rows, run_holdout
from sweeps.holdout import holdout_summary as per_axis
from sweeps.results import results_table, write_table
from sweeps.spec_scaling import ScalingSweep
from sweeps.worker import open_study


def scaling_stage(out: Path, sz: DemoSize, study: str, fit: Any, *, device: str, workers: int | None,
                   n_workers: int, quiet: bool, clock: Clock) -> dict[str, Any]:
    """Stages 4 and 5: the scaling sweep (its study named ``study``), its laws, the critical
    batch and the audit."""
    sc = sz.scaling
    width = sz.widths[0]
    centre = fit.group(("mup", width))
    # a quarter-octave grid point, so a re-run (same optimum) resumes the same study
    lr_center = 2.0 ** (round(4 * centre.log2_x_opt) / 4)
    spec = ScalingSweep(**model_kw(sz.preset), width=width, check_width=sc.check_width,
                        check_batch_sizes=sc.check_batch_sizes,
                        batch_sizes=sc.batch_sizes, tokens=sc.tokens, seeds=sc.seeds, lr_center=lr_center,
                        lr_center_batch=sz.batch_size, log2_lr_offsets=sc.log2_lr_offsets,
                        eval_sequences=sc.eval_sequences,
                        base={"seq_len": sz.seq_len, "threads": 1 if device == "cpu" else None,
                              **dict(sz.train_extra)},
                        name=study)
    n = len(spec.points())
    log(quiet, f"      {n} trials at width {width} (+ {sc.check_width}): budgets "
                f"{[f'{t:.3g}' for t in spec.budgets()]} tokens as WSD branches, batches "
                f"{list(sc.batch_sizes)} "
                f"x {sz.seq_len} tokens, {len(sc.log2_lr_offsets)} LRs around 2^{math.log2(lr_center):.2f} "
                f"(x sqrt(B/{sz.batch_size}))")
    bounds = Bounds(max_extend=sc.max_extend, batch_range=sc.batch_range)
    with clock.stage("scaling_sweep", parallel=n_workers, reports=True):
        # an optimum at its grid's edge gets more grid (batch and LR), within the bounds
        sweep, bracket = run_bracketed(spec, bounds, out=out / "scaling", workers=workers, device=device,
                                       quiet=quiet,
                                       fuse=fuse_for(sz.preset, len(sc.log2_lr_offsets), n_workers, device))
    study, _ = open_study(sweep.plan.storage, sweep.plan.study_name)
    table = results_table(study)
    batches = sorted({int(b) for b in table.loc[table["width"] == width, "batch_size"]})
    write_table(table, out / "scaling_results.csv")
    trials = table.drop_duplicates("trial")
    cost = {str(int(b)): float(g["cpu_s"].mean()) for b, g in trials.groupby("batch_size")} \
        if "cpu_s" in trials.columns else {}
    info: dict[str, Any] = {
        "width": width, "check_width": sc.check_width, "budgets": list(spec.budgets()),
        "check_batch_tokens": sorted({p["batch_size"] * sz.seq_len for p in spec.points()
                                      if p.get("width") == sc.check_width}),
        "batch_sizes": batches, "batch_tokens": [b * sz.seq_len for b in batches],
        "bracketing": bracket.to_dict() if bracket is not None else None,
        "lr_center": lr_center, "lr_center_batch": sz.batch_size,
        "log2_lr_offsets": list(sc.log2_lr_offsets), "n_trials": int(len(trials)), "n_rows": int(len(table)),
        "n_diverged": int(table["diverged"].sum()), "weight_decay": spec.base.get("weight_decay"),
        "study": spec.study_name(), "cpu_s_per_trial_by_batch": cost,
        "cpu_s_trials": float(trials["cpu_s"].sum()) if "cpu_s" in trials.columns else None,
        "images": {},
    }

    if bracket is not None:
        for line in bracket.lines():
            log(quiet, f"      {line}")
    log(quiet, "      fitting eta*(B, D) and B*(D), the critical batch two ways; the held-out audit")
    rows = fit_rows(table, spec)
    try:
        with clock.stage("scaling_fit"):
            t_fit = time.perf_counter()
            sfit = ScalingLawFit(n_boot=1000).fit(rows)
            info["fit_s"] = time.perf_counter() - t_fit
        doc = sfit.to_dict()
        doc["results"] = str(out / "scaling_results.csv")
        atomic_write_text(out / "scaling_fit.json", json.dumps(doc, indent=2) + "\n")
        info["fit_path"] = str(out / "scaling_fit.json")
        info["laws"] = {"lr": doc["lr"]["law"], "batch": doc["batch"]["law"],
                        "lr_exponents": doc["lr"]["exponents"], "lr_ci": doc["lr"]["ci"],
                        "batch_exponent": doc["batch"]["exponents"]["tokens"],
                        "batch_ci": doc["batch"]["ci"]["tokens"], "tau": doc["tau"]["value"],
                        "tau_ci": doc["tau"]["ci"], "warnings": doc.get("warnings", [])}
        info["cells"] = doc.get("cells", [])
        info["budget_optima"] = doc.get("budgets", [])
        with clock.stage("scaling_plots"):  # piped, no stage is silent for long
            info["images"]["eta*(B, D) and B*(D) with bootstrap bands"] = str(
                plot_scaling(sfit.curves_(), out / "figures" / "scaling_laws.png").relative_to(out))
    except ValueError as exc:
        info["error"] = f"scaling fit: {exc}"
        log(quiet, f"      the scaling fit failed: {exc}")
        return info
    with clock.stage("critical_batch"):
        try:
            info["critical_batch"], image = critical_batch(rows, sfit, sz.seq_len, out)
            info["images"]["critical batch: S-E fit vs measured GNS"] = image
        except ValueError as exc:
            info["critical_batch"] = {"error": str(exc)}
        info["width_check"] = width_check(table, spec)
    try:
        with clock.stage("holdout_audit"):  # its fits say nothing of their own
            audit = run_holdout(spec, table, out=out / "AUDIT.json", device=device, quiet=quiet,
                                n_seeds=sc.audit_seeds, workers=n_workers)
        info["audit"] = audit
        info["audit_path"] = str(out / "AUDIT.json")
    except ValueError as exc:
        info["error"] = f"held-out audit: {exc}"
        log(quiet, f"      the held-out audit failed: {exc}")
    return info


def critical_batch(rows: Any, sfit: Any, seq_len: int, out: Path) -> tuple[dict[str, Any], str]:
    """The critical batch two ways on the same runs, in sequences: the S–E fit on the
    steps each batch needs to reach a target loss (McCandlish et al. 2018, eq. 2.11;
    steps from the best-LR loss at every budget, interpolated), and the measured GNS
    B_simple of those best-LR runs."""
    cells = sfit.cells_.copy()
    cells["batch_size"] = cells["batch_tokens"] / seq_len
    cells["step"] = cells["tokens"] / cells["batch_tokens"]
    # the target: the worst batch's best loss at the largest budget, so every batch reaches it
    last = cells[cells["tokens"] == cells["tokens"].max()]
    target = float(last["loss_opt"].max())
    reach = steps_to_target(cells.rename(columns={"loss_opt": "loss"}), target, step="step", loss="loss",
                            group_by=("batch_size",))
    # a batch already below the target at its smallest budget has no bracketed crossing
    first = cells.sort_values("tokens").groupby("batch_size")["loss_opt"].first()
    reach = reach[reach["batch_size"].map(lambda b: first[b] > target)]
    cbs = CriticalBatchFit(batch="batch_size", n_boot=1000).fit(reach)
    ok = rows[~rows["diverged"].astype(bool)]
    best = ok.loc[ok.groupby(["batch_tokens", "tokens"])["loss"].idxmin()]
    comp = critical_batch_comparison(pd.DataFrame(best), cbs, batch="batch_size")
    path = plot_critical_batch_comparison(comp, out / "figures" / "critical_batch.png")
    doc = {"target_loss": target, "b_crit_sequences": comp.b_crit,
           # an unbounded side (an infinite bootstrap replicate) is null, not Infinity or NaN
           "b_crit_ci_sequences": ([b if math.isfinite(b) else None for b in comp.b_crit_ci]
                                   if comp.b_crit_ci else None),
           "b_simple_sequences": comp.b_simple, "b_simple_range_sequences": list(comp.b_simple_range),
           "b_crit_tokens": comp.b_crit * seq_len, "b_simple_tokens": comp.b_simple * seq_len,
           "ratio": comp.ratio, "n_batches": int(len(reach)),
           "steps_to_target": {str(float(b)): float(s)
                               for b, s in zip(reach["batch_size"], reach["steps_to_target"])}}
    return doc, str(path.relative_to(out))


def width_check(table: Any, spec: Any) -> list[dict[str, Any]]:
    """μP at the scaling level: the LR optimum per budget at the base width and the
    wider check width, at the check's batch (quadratic vertex, as the fits use)."""
    ok = table[table["batch_size"].isin(set(p["batch_size"] for p in spec.points()
                                                if p.get("width") == spec.check_width))]
    try:
        f = OptimumFit(x="lr", y="loss", group_by=("width", "tokens"), n_boot=0).fit(ok)
    except ValueError:
        return []
    out = []
    for d in spec.budgets():
        try:
            a, b = f.group((spec.width, d)), f.group((spec.check_width, d))
        except (KeyError, ValueError):
            continue
        out.append({"tokens": d, "lr_base": a.x_opt, "lr_check": b.x_opt, "ratio": b.x_opt / a.x_opt,
                    "loss_base": a.loss_opt, "loss_check": b.loss_opt})
    return out


def holdout_summary(audit: Mapping[str, Any]) -> dict[str, Any]:
    """Ours on the held-out budget (the extrapolation the card makes) at the top level,
    both axes under ``by_axis``."""
    by_axis = {k: v for k, v in per_axis(audit).items() if k != "passed"}
    top = by_axis.get("tokens", dict.fromkeys(("lr_ratio", "batch_ratio", "loss_gap", "loss_gap_se")))
    return {**top, "axis": "tokens", "by_axis": by_axis, "passed": audit.get("passed"),
            "criteria": audit.get("criteria"), "seeds": audit.get("seeds")}
