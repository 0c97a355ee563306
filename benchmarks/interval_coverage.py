"""Benchmark: does the card's 90% LR interval hold the measured optimum where it was not fitted?

Three kinds of held-out targets, all from runs already committed (nothing is trained; about
15 s on 2 cores):

- **Held-out cells of a real scaling sweep** (the card-regret proxy's: llama-small w32 d2,
  context 16, 4 budgets × 6 batches × ~9 LRs × 3 seeds, ``results/card_regret_cpu_cache``):
  each budget in turn, then the smallest and the largest batch, is left out; the LR law is
  fitted on the rest and its interval at each left-out cell is set against that cell's
  measured optimum (from the fit on every row). Leaving out the largest budget is the
  card's own situation (extrapolation in D); the smallest and middle budgets and the end
  batches test the law's form in B and D. Where the sweep holds batches past the LR's
  peak (at some budget the optimum LR falls at a larger batch), each such batch is left
  out too and judged at the budgets where it lies past the peak (the card-regret sweep
  has none: its optimum LR rises up to its largest batch, 512 tokens, at every budget).
- **The card-regret target** (w256 d8 on 8× the tokens, ``results/card_regret.json``): at
  each target batch scanned there, the card's LR interval (:func:`mutransfer.card.make.make_card`
  on the whole proxy sweep, the batch fixed to that batch) against the optimum the direct
  scan measured.
- **The readout ladders' widest widths** (``results/readout_ladder*.json``, each horizon:
  125, 250, 500, 1000 steps; every μP arm): the card carries the μP optimum of its widest
  measured width to a wider target unchanged (``source.proxy_widths``; the target's width
  only adds a warning, :func:`mutransfer.card.trust.card_warnings`), with that optimum's
  own bootstrap interval (:func:`mutransfer.card.proxy.optimum_from_results`) and no term
  for the distance in width. Each ladder's widest width is held out and predicted so from
  the next widest. The records keep each width's optimum but not its interval, so the
  interval is rebuilt from what they keep: the per-width scatter of the optimum, from the
  95% interval of the ladder's trend (slope over widths, pairs bootstrap: sd = half-width
  / 1.96 / doublings · sqrt(Σ(x − x̄)²), x = log2 width) or, with two widths, of its drift
  (sd = half-width / 1.96 / √2); the interval is the optimum ± z_0.95 · sd (90%). This is a
  reconstruction of the card's interval, named as such in the record.

Each scaling target is judged three times on the same sweep: ``misfit``, the card now (the
LR law's form in batch chosen by the data, :mod:`analysis.lr_surge`, with its bootstrap and
misfit band); ``power_form``, the same band with the power law forced (the card before the
form choice); and ``bootstrap_only``, the power law's bootstrap alone (the card before the
misfit). The ladder targets do not involve the law: one interval in every column.
Reported per family and overall: covered / total, the median interval width (hi / lo) and
the median error of the point (octaves). The bar: coverage >= 80% with the card's band.

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
    """The same fit as the card gave it before the misfit: the power law, its band from
    the bootstrap alone."""
    import numpy as np

    bare = _power_form(fit)
    bare.lr_misfit_ = {"sd_log": 0.0, "dof": 0, "cov_log": np.zeros((3, 3))}
    return bare


def _power_form(fit: Any) -> Any:
    """The same fit with the power law forced (the card before the LR law's form was chosen)."""
    import copy

    bare = copy.copy(fit)
    bare.lr_form_ = "power"
    return bare


BANDS = ("misfit", "power_form", "bootstrap_only")


def _bands(fit: Any) -> dict[str, Any]:
    return {"misfit": fit, "power_form": _power_form(fit), "bootstrap_only": _without_misfit(fit)}


def _judge(target: dict[str, Any], measured: float, bands: dict[str, tuple[float, float, float]]
           ) -> dict[str, Any]:
    row = dict(target, measured=measured)
    for name, (point, lo, hi) in bands.items():
        row[name] = {"lo": lo, "hi": hi, "inside": bool(lo <= measured <= hi), "width": hi / lo,
                     "error_octaves": math.log2(point / measured)}
    return row


def past_peak(cells: Any) -> dict[float, list[float]]:
    """batch -> the budgets at which it lies past the measured LR optimum's peak: above the
    batch with the largest optimum LR among the budget's bracketed cells."""
    out: dict[float, list[float]] = {}
    for d, g in cells[cells["edge"] == ""].groupby("tokens"):
        g = g.sort_values("batch_tokens")
        peak = float(g["batch_tokens"].iloc[int(g["lr_opt"].to_numpy().argmax())])
        for b in g["batch_tokens"][g["batch_tokens"] > peak]:
            out.setdefault(float(b), []).append(float(d))
    return out


def heldout_cells(rows: Any) -> list[dict[str, Any]]:
    """Every non-edge cell of each left-out budget and end batch, and each batch past the
    LR's peak at the budgets where it is past it, judged by every band."""
    from analysis.scaling_fit import ScalingLawFit

    cells = ScalingLawFit(n_boot=N_BOOT).fit(rows).cells_
    budgets = sorted(rows["tokens"].unique())
    batches = sorted(rows["batch_tokens"].unique())
    splits: list[tuple[str, float, str, list[float] | None]] = (
        [("tokens", d, "held-out budget", None) for d in budgets]
        + [("batch_tokens", batches[0], "held-out batch", None), ("batch_tokens", batches[-1], "held-out batch", None)]
        + [("batch_tokens", b, "held-out batch past the LR's peak", ds) for b, ds in sorted(past_peak(cells).items())])
    out = []
    for col, value, kind, only in splits:
        fit = ScalingLawFit(n_boot=N_BOOT).fit(rows[rows[col] != value])
        fits = _bands(fit)
        for c in cells[cells[col] == value].itertuples():
            if c.edge or (only is not None and float(c.tokens) not in only):
                continue  # an optimum at the grid's edge is only a bound: nothing to cover
            bands = {k: tuple(float(v[0]) for v in f.lr_interval(f.lr_batch(c.batch_tokens, c.tokens), c.tokens))
                     for k, f in fits.items()}
            out.append(_judge({"kind": kind, "family": "scaling sweep: " + kind, "form": fit.lr_form,
                               "left_out": {col: float(value)}, "batch_tokens": float(c.batch_tokens),
                               "tokens": float(c.tokens)}, float(c.lr_opt), bands))
    return out


LADDERS = sorted(HERE.glob("results/readout_ladder*.json"))
Z90, Z95 = 1.6448536269514722, 1.959963984540054


def ladder_targets(paths: list[Path] | None = None) -> list[dict[str, Any]]:
    """Each readout ladder's widest width, μP arms: the next widest width's optimum carried
    unchanged, with its interval rebuilt from the record (see the module docstring)."""
    import numpy as np

    out = []
    for path in LADDERS if paths is None else paths:
        rec = json.loads(path.read_text())
        steps = rec["setup"]["steps"]
        for arm, a in rec["figures"]["arms"].items():
            if not arm.startswith("mup"):
                continue
            per = {int(w): v for w, v in a["per_width"].items()}
            widths = sorted(per)
            if len(widths) < 2 or per[widths[-1]]["at_edge"] or per[widths[-2]]["at_edge"]:
                continue
            x = np.log2(widths)
            doublings = float(x[-1] - x[0])
            if a.get("lr_opt_trend_ci") and len(widths) >= 3 and None not in a["lr_opt_trend_ci"]:
                lo, hi = a["lr_opt_trend_ci"]
                sd = (hi - lo) / 2 / Z95 / doublings * math.sqrt(float(((x - x.mean()) ** 2).sum()))
                how = "per-width sd from the trend's 95% interval"
            elif a.get("lr_opt_drift_ci") and None not in a["lr_opt_drift_ci"]:
                lo, hi = a["lr_opt_drift_ci"]
                sd = (hi - lo) / 2 / Z95 / math.sqrt(2.0)
                how = "per-width sd from the drift's 95% interval (two widths)"
            else:
                continue
            t = per[widths[-2]]["log2_lr_opt"]
            band = (2.0**t, 2.0 ** (t - Z90 * sd), 2.0 ** (t + Z90 * sd))
            out.append(_judge({"kind": "readout ladder's widest width", "family": "readout ladder: widest width",
                               "record": path.name, "steps": int(steps), "arm": arm,
                               "from_width": widths[-2], "width": widths[-1], "interval_from": how,
                               "sd_octaves": sd}, 2.0 ** per[widths[-1]]["log2_lr_opt"],
                              dict.fromkeys(BANDS, band)))
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
        for name, f in _bands(fit).items():
            if name == "power_form" and fit.lr_form == "power":
                bands[name] = bands["misfit"]  # the same card: no second card to make
                continue
            doc = f.to_dict()
            if name != "misfit":
                doc["lr"]["form"] = "power"
            if name == "bootstrap_only":
                doc["lr"].pop("misfit", None)
            req = card_request(sz, doc, optimum_from_scaling(doc))
            req = dataclasses.replace(req, run=dataclasses.replace(req.run, batch_sequences=int(per["batch_size"])))
            iv = make_card(req).card["trust"]["intervals"]["lr"]
            bands[name] = (float(iv["value"]), float(iv["lo"]), float(iv["hi"]))
        out.append(_judge({"kind": "card-regret target (w256 d8, 8x tokens)",
                           "family": "card-regret target (w256 d8, 8x tokens)", "form": fit.lr_form,
                           "batch_sequences": int(per["batch_size"]),
                           "tokens": float(record["setup"]["target"]["tokens"])
                           if isinstance(record["setup"].get("target"), dict) else None},
                          float(per["lr_opt"]), bands))
    return out


def summarize(targets: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np

    def stats(ts: list[dict[str, Any]], band: str) -> dict[str, Any]:
        inside = [t[band]["inside"] for t in ts]
        return {"coverage": float(np.mean(inside)) if ts else None, "n_inside": int(sum(inside)),
                "n": len(ts), "covered": f"{sum(inside)}/{len(ts)}",
                "median_width": float(np.median([t[band]["width"] for t in ts])) if ts else None,
                "median_abs_error_octaves": float(np.median([abs(t[band]["error_octaves"]) for t in ts]))
                if ts else None}

    out: dict[str, Any] = {"n_targets": len(targets)}
    for band in BANDS:
        out[band] = stats(targets, band)
    families: dict[str, list[dict[str, Any]]] = {}
    for t in targets:
        families.setdefault(t["family"], []).append(t)
    out["by_family"] = {f: {band: {k: v for k, v in stats(ts, band).items() if k in ("covered", "median_width")}
                            for band in BANDS} for f, ts in families.items()}
    kinds: dict[str, list[bool]] = {}
    for t in targets:
        kinds.setdefault(t["kind"] + (f" {t['left_out']}" if "left_out" in t else ""), []).append(
            t["misfit"]["inside"])
    out["by_split"] = {k: f"{sum(v)}/{len(v)}" for k, v in kinds.items()}
    return out


def run() -> dict[str, Any]:
    from analysis.scaling_fit import ScalingLawFit
    from benchmarks._proxy import record_header

    t0 = time.perf_counter()
    rows = sweep_rows()
    peaks = past_peak(ScalingLawFit(n_boot=0, loso=False).fit(rows).cells_)
    targets = heldout_cells(rows) + card_targets(rows) + ladder_targets()
    summary = summarize(targets)
    rec = record_header("interval_coverage")
    rec.update({
        "setup": {"sweep": "results/card_regret_cpu_cache (llama-small w32 d2, context 16, 4 budgets x "
                           "6 batches, 3 seeds)", "ladders": [p.name for p in LADDERS],
                  "past_peak_batches": {str(k): v for k, v in peaks.items()},
                  "level": 0.9, "n_boot": N_BOOT,
                  "bar": f"coverage >= {TARGET_COVERAGE:.0%} with the misfit band"},
        "figures": {"coverage_misfit": summary["misfit"]["coverage"],
                    "coverage_bootstrap_only": summary["bootstrap_only"]["coverage"],
                    "coverage_power_form": summary["power_form"]["coverage"],
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
