"""Benchmark: does the card's 90% LR interval hold the measured optimum where it was not fitted?

Two kinds of held-out targets, both from runs already committed (nothing is trained; about
a minute on 2 cores):

- **Held-out cells of a real scaling sweep** (the card-regret proxy's: llama-small w32 d2,
  context 16, 4 budgets × 6 batches × ~9 LRs × 3 seeds, ``results/card_regret_cpu_cache``):
  each budget in turn, then the smallest and the largest batch, is left out; the LR law is
  fitted on the rest and its interval at each left-out cell is set against that cell's
  measured optimum (from the fit on every row). Leaving out the largest budget is the
  card's own situation (extrapolation in D); the smallest and middle budgets and the end
  batches test the law's form in B and D.
- **The card-regret target** (w256 d8 on 8× the tokens, ``results/card_regret.json``): at
  each target batch scanned there, the card's LR interval (:func:`mutransfer.card.make.make_card`
  on the whole proxy sweep, the batch fixed to that batch) against the optimum the direct
  scan measured.

Each target is judged twice on the same fits: with the band the fit gives now (bootstrap of
the coefficients plus the law's misfit, :func:`analysis.scaling_fit.lr_misfit`) and with the
bootstrap alone (what the card gave before), so the two columns differ only in the band.
Reported: coverage (fraction of targets inside), the median interval width (hi / lo) and the
median error of the law's point (octaves). The bar: coverage >= 80% with the misfit band.

    python -m benchmarks.interval_coverage        # writes results/interval_coverage.json
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "interval_coverage.json"
CACHE = HERE / "results" / "card_regret_cpu_cache"
CARD_REGRET = HERE / "results" / "card_regret.json"
TARGET_COVERAGE = 0.8
N_BOOT = 1000


def unavailable() -> str | None:
    """Why this benchmark cannot run here (None: it can)."""
    if not (CACHE / "scaling" / "optuna.journal").exists() or not CARD_REGRET.exists():
        return "the card-regret cache (results/card_regret_cpu_cache) or record is missing"
    return None


def sweep_rows() -> Any:
    """The card-regret proxy's scaling sweep as the fit's rows (read from a copy of the
    committed journal: opening a journal may write to it)."""
    import optuna

    from sweeps.holdout import fit_rows
    from sweeps.results import results_table
    from sweeps.spec import load_spec

    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "scaling"
        shutil.copytree(CACHE / "scaling", dst)
        spec = load_spec(dst / "sweep.yaml")
        storage = optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(dst / "optuna.journal")))
        name = optuna.get_all_study_summaries(storage)[0].study_name
        table = results_table(optuna.load_study(study_name=name, storage=storage))
    return fit_rows(table, spec)


def _without_misfit(fit: Any) -> Any:
    """The same fit with its band from the bootstrap alone (the card's band before)."""
    import copy

    import numpy as np

    bare = copy.copy(fit)
    bare.lr_misfit_ = {"sd_log": 0.0, "dof": 0, "cov_log": np.zeros((3, 3))}
    return bare


def _judge(target: dict[str, Any], measured: float, bands: dict[str, tuple[float, float, float]]
           ) -> dict[str, Any]:
    row = dict(target, measured=measured)
    for name, (point, lo, hi) in bands.items():
        row[name] = {"lo": lo, "hi": hi, "inside": bool(lo <= measured <= hi), "width": hi / lo,
                     "error_octaves": math.log2(point / measured)}
    return row


def heldout_cells(rows: Any) -> list[dict[str, Any]]:
    """Every non-edge cell of each left-out budget and end batch, judged by both bands."""
    from analysis.scaling_fit import ScalingLawFit

    cells = ScalingLawFit(n_boot=N_BOOT).fit(rows).cells_
    budgets = sorted(rows["tokens"].unique())
    batches = sorted(rows["batch_tokens"].unique())
    splits = [("tokens", d) for d in budgets] + [("batch_tokens", batches[0]), ("batch_tokens", batches[-1])]
    out = []
    for col, value in splits:
        fit = ScalingLawFit(n_boot=N_BOOT).fit(rows[rows[col] != value])
        fits = {"misfit": fit, "bootstrap_only": _without_misfit(fit)}
        for c in cells[cells[col] == value].itertuples():
            if c.edge:  # an optimum at the grid's edge is only a bound: nothing to cover
                continue
            b_law = fit.lr_batch(c.batch_tokens, c.tokens)
            bands = {k: tuple(float(v[0]) for v in f.lr_interval(b_law, c.tokens)) for k, f in fits.items()}
            out.append(_judge({"kind": f"held-out {'budget' if col == 'tokens' else 'batch'}",
                               "left_out": {col: float(value)}, "batch_tokens": float(c.batch_tokens),
                               "tokens": float(c.tokens)}, float(c.lr_opt), bands))
    return out


def card_targets(rows: Any) -> list[dict[str, Any]]:
    """The card's LR interval at each batch the card-regret benchmark scanned at its target."""
    from analysis.scaling_fit import ScalingLawFit
    from benchmarks.card_regret import SIZES, card_request
    from mutransfer.card.make import make_card
    from mutransfer.card.proxy import optimum_from_scaling

    record = json.loads(CARD_REGRET.read_text())
    sz = SIZES[record["setup"]["size"]]
    fit = ScalingLawFit(n_boot=N_BOOT).fit(rows)
    out = []
    for per in record["per_batch"]:
        if per.get("at_edge"):
            continue
        bands = {}
        for name, f in (("misfit", fit), ("bootstrap_only", _without_misfit(fit))):
            doc = f.to_dict()
            if name == "bootstrap_only":
                doc["lr"].pop("misfit", None)
            req = card_request(sz, doc, optimum_from_scaling(doc))
            req = dataclasses.replace(req, run=dataclasses.replace(req.run, batch_sequences=int(per["batch_size"])))
            iv = make_card(req).card["trust"]["intervals"]["lr"]
            bands[name] = (float(iv["value"]), float(iv["lo"]), float(iv["hi"]))
        out.append(_judge({"kind": "card-regret target (w256 d8, 8x tokens)",
                           "batch_sequences": int(per["batch_size"]),
                           "tokens": float(record["setup"]["target"]["tokens"])
                           if isinstance(record["setup"].get("target"), dict) else None},
                          float(per["lr_opt"]), bands))
    return out


def summarize(targets: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np

    out: dict[str, Any] = {"n_targets": len(targets)}
    for band in ("misfit", "bootstrap_only"):
        inside = [t[band]["inside"] for t in targets]
        out[band] = {"coverage": float(np.mean(inside)), "n_inside": int(sum(inside)),
                     "median_width": float(np.median([t[band]["width"] for t in targets])),
                     "median_abs_error_octaves": float(np.median([abs(t[band]["error_octaves"])
                                                                  for t in targets]))}
    kinds: dict[str, list[bool]] = {}
    for t in targets:
        kinds.setdefault(t["kind"] + (f" {t['left_out']}" if "left_out" in t else ""), []).append(
            t["misfit"]["inside"])
    out["by_split"] = {k: f"{sum(v)}/{len(v)}" for k, v in kinds.items()}
    return out


def run() -> dict[str, Any]:
    from benchmarks._proxy import record_header

    t0 = time.perf_counter()
    rows = sweep_rows()
    targets = heldout_cells(rows) + card_targets(rows)
    summary = summarize(targets)
    rec = record_header("interval_coverage")
    rec.update({
        "setup": {"sweep": "results/card_regret_cpu_cache (llama-small w32 d2, context 16, 4 budgets x "
                           "6 batches, 3 seeds)", "level": 0.9, "n_boot": N_BOOT,
                  "bar": f"coverage >= {TARGET_COVERAGE:.0%} with the misfit band"},
        "figures": {"coverage_misfit": summary["misfit"]["coverage"],
                    "coverage_bootstrap_only": summary["bootstrap_only"]["coverage"],
                    "median_width_misfit": summary["misfit"]["median_width"],
                    "median_width_bootstrap_only": summary["bootstrap_only"]["median_width"],
                    "median_abs_error_octaves": summary["misfit"]["median_abs_error_octaves"],
                    "n_targets": summary["n_targets"], "wall_s": time.perf_counter() - t0},
        "summary": summary,
        "targets": targets,
        "passed": summary["misfit"]["coverage"] >= TARGET_COVERAGE,
    })
    return rec


def main(argv: list[str] | None = None) -> None:
    import argparse

    from mutransfer._io import atomic_write_text

    # parse first: --help (or a bad flag) answers at once and writes nothing
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS, help="where to write the record (JSON)")
    args = ap.parse_args(argv)
    if (why := unavailable()) is not None:
        raise SystemExit(f"interval_coverage: {why}")
    rec = run()
    atomic_write_text(args.out, json.dumps(rec, indent=1) + "\n")
    print(json.dumps(rec["summary"], indent=1))


if __name__ == "__main__":
    main()
