"""Readout ladder: which μP readout init transfers over 16× width and matches SP's loss?

The demo's CPU proxy (llama-small, base width 32, batches of 8×64 bytes, cosine with 10%
warmup and floor 0.1, no weight decay: :data:`DEMO`, the demo size's ladder fields) at 250
steps, the horizon the demo ran before it became ``tune`` (tune now plans the demo's steps
from its budget and the machine: 102 on 2 idle cores); ``--steps``/``--batch-size`` measure
another horizon) over
widths 32–512 (16×), four arms, each an LR scan bracketing its optimum at every width:

- ``sp``: standard parametrization;
- ``mup_constant``: μP with a constant-variance readout (``readout_init="constant"``, the
  ``mup`` package's);
- ``mup_fan_in``: μP with the readout's effective init std SP's (``readout_init="fan_in"``);
- ``mup_zero``: μP with a zero-initialized readout (``readout_init="zero"``).

Per arm: the drift of the optimal log2 LR over the ladder (octaves, max − min over the
widths, bootstrap interval, ``analysis.OptimumFit``), its trend (the power-law slope of the
optimum in width times the ladder's doublings, with the slope's interval: one width's
optimum near its grid's edge widens the max − min interval, not this one), wider-is-better
(the best loss never rises with width) and the best loss ÷ SP's at every width (95%
seed-bootstrap interval, ``best_loss_ratio``; where SP has one seed only μP's seeds are
resampled), and the same ratio as the demo estimates it
(``measured_best_loss_over_sp``: the lowest measured seed-mean loss over the seeds both
arms hold, never below the data, interval from resampling those seeds paired;
:func:`analysis.paired_best_ratio`). A μP arm is *eligible* as the default readout
when its best loss ≤ SP's at the widest width and its drift ≤ 0.25 octave.

SP uses seed 0 below the widest width and seeds 0, 1 at it (its optimum moves by whole
octaves), ``mup_zero`` seed 0 only (far above SP's loss), the other arms seeds 0, 1
everywhere; ``--equal-seeds`` drops these cuts (every arm, every seed, every width). The
scans run in the order the decision needs them (:func:`work_list`), so a run cut short
still leaves the candidate's verdict.

    python -m benchmarks.readout_ladder [--widths 32,...,512] [--import-csv RESULTS.csv]
        [--arms sp,mup_fan_in] [--equal-seeds] [--step 0.5] [--name NAME] [--jobs 2]
        [--steps N --batch-size B] [--widest-seeds 0,1]

``results/readout_ladder.json`` (2026-12-03) is the demo's proxy at the demo's horizon, SP,
the default ``fan_in`` readout and mup's ``constant`` on seeds 0, 1, 2 at every width, a
half-octave grid: ``--seeds 0,1,2 --step 0.5 --arms sp,mup_fan_in,mup_constant
--equal-seeds --jobs 2``.

``results/readout_ladder_500_steps.json`` is the same proxy at 500 steps of 8×64, widths 32
and 256, seeds 0, 1: ``--widths 32,256 --seeds 0,1 --step 0.5 --arms sp,mup_fan_in
--equal-seeds --steps 500 --name readout_ladder_500_steps``.
``results/readout_ladder_1000_steps.json`` is the same proxy at 1,000 steps of 8×64, widths
32, 128 and 256, SP and the default ``fan_in`` readout, seeds 0, 1, 2 at every width:
``--widths 32,128,256 --seeds 0,1,2 --step 0.5 --arms sp,mup_fan_in --equal-seeds --steps 1000
--name readout_ladder_1000_steps``, one process on one thread, built in three resumed passes
(widths 32 and 128; then 256 with ``--widest-seeds 0,1``; then seed 2 at 256).
``results/readout_ladder_1000_steps_constant.json`` adds mup's ``constant`` readout beside it
at widths 32 and 128 (the same trial log): ``--widths 32,128 --seeds 0,1,2 --step 0.5 --arms
sp,mup_constant --equal-seeds --steps 1000 --name readout_ladder_1000_steps_constant --out
runs/readout_ladder_1000_steps``.
``results/readout_ladder_2000_steps.json`` is the same proxy at 2,000 steps, widths 32 (seeds
0, 1) and 256 (seed 0; cut for time), SP and ``fan_in``, each scan started at the 1,000-step
optimum: ``--widths 32,256 --seeds 0,1 --widest-seeds 0 --step 0.5 --arms sp,mup_fan_in
--equal-seeds --steps 2000 --jobs 2 --centre-from results/readout_ladder_1000_steps.json
--name readout_ladder_2000_steps``.
``results/readout_ladder_demo_equal_seeds.json`` is the demo's earlier horizon (125 steps of
16×64) over widths 32–256 with SP and the fan-in readout on seeds 0, 1 and a half-octave
grid: ``--widths 32,64,128,256 --seeds 0,1 --step 0.5 --arms sp,mup_fan_in --equal-seeds
--steps 125 --batch-size 16 --name readout_ladder_demo_equal_seeds``.

Writes ``results/readout_ladder.json`` and ``results/readout_ladder.png``. Finished trials
are kept in ``--out``/trials.jsonl (default ``runs/readout_ladder``) and resumed;
``--import-csv`` first adds the SP and constant-readout μP rows of a ``mutransfer demo
--size small`` run whose every hyperparameter matches (the committed record imported such a
run's 68 trials at widths 32–256, 42 of them on its scans' grids, and trained 58).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.mup_vs_sp import Overrides, Work

HERE = Path(__file__).parent


#: The demo's small size's ladder fields (``SIZES["small"]``: the fixed ladder the demo ran
#: before ``tune`` planned it) as TrainConfig fields; a test holds the two equal (the
#: benchmarks layer does not import the CLI's).
_DEMO_SMALL: dict[str, Any] = {
    "preset": "llama-small", "base_width": 32, "steps": 250, "batch_size": 8, "seq_len": 64,
    "eval_sequences": 128}


def demo_setup(steps: int | None = None, batch_size: int | None = None) -> dict[str, Any]:
    """The demo's LR-sweep config as TrainConfig fields; ``steps``/``batch_size`` measure it
    at another horizon (warmup stays 10%)."""
    steps = steps or _DEMO_SMALL["steps"]
    return {**_DEMO_SMALL, "steps": steps, "batch_size": batch_size or _DEMO_SMALL["batch_size"],
            "eval_every": steps, "warmup_steps": max(1, steps // 10), "schedule": "cosine",
            "lr_floor": 0.1, "threads": 1, "device": "cpu"}


DEMO: dict[str, Any] = demo_setup()
ARMS: dict[str, Overrides] = {
    "sp": lambda m: {"parametrization": "sp"},
    "mup_constant": lambda m: {"parametrization": "mup", "readout_init": "constant"},
    "mup_fan_in": lambda m: {"parametrization": "mup", "readout_init": "fan_in"},
    "mup_zero": lambda m: {"parametrization": "mup", "readout_init": "zero"},
}
"""The ladder's arms (width multiplier m -> TrainConfig overrides); named readouts, so a
change of ``readout_init``'s default changes no arm."""
SAME_AT_BASE = {"mup_fan_in": ("mup_constant", "sp"), "mup_constant": ("sp",)}
"""At the base width (m = 1) the fan-in readout's std law m^-1/2 equals the constant one's
m^-1, and every μP scale is 1, so μP is SP there: the same run to the last bit (checked: a
width-32 run of SP, μP ``fan_in`` and μP ``constant`` gives one loss), reused rather than
re-trained. The first arm of the tuple that the work list scans earlier is the twin."""
ONE_SEED_BELOW_WIDEST = ("sp",)
ONE_SEED = ("mup_zero",)
"""Seed cuts of the 2-core CPU budget: SP's optimum moves by whole octaves (2 seeds at the
widest width only, as the demo does); the zero readout is far above SP's loss at every width
(1.17x at width 256 in ``mup_vs_sp``), so one seed reads it."""
TARGETS = {"ratio_best_loss_over_sp_widest_max": 1.0, "drift_octaves_max": 0.25}
"""The rule that picks the default readout: both must hold for a μP arm."""


def work_list(widths: tuple[int, ...], seeds: tuple[int, ...],
              one_seed_widest: tuple[str, ...] = (), arms: tuple[str, ...] = tuple(ARMS),
              equal_seeds: bool = False, widest_seeds: tuple[int, ...] | None = None) -> list[Work]:
    """The LR scans in the order the decision needs them, widest width first (the
    verdict's width): SP and the fan-in readout (the candidate), then the constant readout
    (its narrower widths are usually imported from the demo), then the zero readout.
    ``arms``: the arms to scan (a subset of :data:`ARMS`); ``equal_seeds``: every arm gets
    every seed at every width (no seed cuts, so each ratio to SP is seed-paired);
    ``widest_seeds``: every arm's seeds at the widest width (a cut for time that keeps the
    ratio to SP there seed-paired; the narrower widths keep ``seeds``)."""
    wide = max(widths)
    work: list[Work] = []
    scanned: list[str] = []
    for group in (("sp", "mup_fan_in"), ("mup_constant",), ("mup_zero",)):
        group = tuple(a for a in group if a in arms)
        for w in sorted(widths, reverse=True):
            m = w / DEMO["base_width"]
            for a in group:
                cut = a in ONE_SEED or (a in ONE_SEED_BELOW_WIDEST and w != wide)
                sd = seeds[:1] if (cut and not equal_seeds) or (a in one_seed_widest and w == wide) else seeds
                if widest_seeds and w == wide and a not in one_seed_widest:
                    sd = widest_seeds
                twin = next((t for t in SAME_AT_BASE.get(a, ()) if t in scanned or t in group[:group.index(a)]),
                            None)
                same = ARMS[twin](m) if twin is not None and m == 1 else None
                work.append((a, ARMS[a](m), w, sd, same))
        scanned += group
    return work


def summarize(table: Any, widths: tuple[int, ...], n_boot: int = 500) -> dict[str, Any]:
    """Per arm: drift [interval], wider-is-better, and per width the optimum, best loss and
    best loss ÷ SP's [seed bootstrap]; plus the eligible arms by :data:`TARGETS`."""
    from analysis.best_loss import paired_best_ratio
    from analysis.optimum import OptimumFit
    from benchmarks._proxy import finite_or_none
    from benchmarks.tuned_multipliers import best_loss_ratio

    fit = OptimumFit(x="lr", y="loss", group_by=("arm", "width"), n_boot=n_boot).fit(table)
    res = fit.results_
    wide = max(widths)
    arms: dict[str, Any] = {}
    for a in ARMS:
        sub = res[res["arm"] == a].sort_values("width")
        if sub.empty:
            continue
        d = fit.drift("width", where={"arm": a}) if len(sub) > 1 else None
        per_width = {}
        for _, r in sub.iterrows():
            w = int(r["width"])
            at_w = table[table["width"] == w]
            has_sp = bool((at_w["arm"] == "sp").any())
            ratio = ({"ratio": 1.0, "ci": [1.0, 1.0]} if a == "sp" else
                     best_loss_ratio(at_w, a, "sp", n_boot=n_boot) if has_sp else None)
            # the lowest measured seed-mean loss over the seeds both arms hold, resampled paired
            measured = (paired_best_ratio(at_w[at_w["arm"] == a], at_w[at_w["arm"] == "sp"], n_boot=n_boot)
                        if has_sp and a != "sp" else None)
            per_width[str(w)] = {"log2_lr_opt": float(r["log2_x_opt"]), "best_loss": float(r["loss_opt"]),
                                 "at_edge": bool(r["at_edge"]),
                                 "best_loss_over_sp": None if ratio is None else ratio["ratio"],
                                 "best_loss_over_sp_ci": None if ratio is None else ratio["ci"],
                                 "measured_best_loss_over_sp": None if measured is None else measured["ratio"],
                                 "measured_best_loss_over_sp_ci": None if measured is None else measured["ci"],
                                 "measured_paired_seeds": None if measured is None else measured["seeds"],
                                 "seeds": sorted(int(s) for s in table.loc[(table["arm"] == a)
                                                                           & (table["width"] == w), "seed"]
                                                 .unique())}
        best = [v["best_loss"] for v in per_width.values()]
        full = sorted(int(w) for w in per_width) == sorted(widths)
        # the trend: the power-law slope of the optimum over every width, times the ladder's
        # doublings; its interval is not held up by one width's optimum near a grid edge
        # as the max-min drift's is
        doublings = math.log2(max(widths) / min(widths))
        arms[a] = {
            "lr_opt_drift_octaves": None if d is None else d.octaves,
            "lr_opt_drift_ci": None if d is None else [finite_or_none(c) for c in d.ci],
            "lr_opt_trend_octaves": None if d is None or d.slope is None else d.slope * doublings,
            "lr_opt_trend_ci": (None if d is None or d.slope_ci is None
                                else [finite_or_none(c * doublings) for c in d.slope_ci]),
            "slope": None if d is None else d.slope, "any_at_edge": bool(sub["at_edge"].any()),
            "wider_is_better": bool(all(b <= a_ for a_, b in zip(best, best[1:], strict=False))),
            "complete": full, "per_width": per_width,
            "n_trials": int((table["arm"] == a).sum()),
            "train_s": float(table.loc[table["arm"] == a, "wall_s"].sum())}
    eligible = [a for a, v in arms.items()
                if a != "sp" and v["complete"] and v["lr_opt_drift_octaves"] is not None
                and (r := v["per_width"][str(wide)]["best_loss_over_sp"]) is not None
                and r <= TARGETS["ratio_best_loss_over_sp_widest_max"]
                and v["lr_opt_drift_octaves"] <= TARGETS["drift_octaves_max"]]
    return {"fit": fit, "arms": arms, "eligible": eligible}


def plot(fit: Any, arms: dict[str, Any], path: Path, demo: dict[str, Any] | None = None) -> Path:
    """Left: optimal LR against width per arm (``plot_optimum_vs_width``'s panel, drawn
    here beside the ratio); right: best loss ÷ SP's against width with its interval."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import numpy as np

    from analysis._io import savefig_atomic

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    res = fit.results_
    for i, a in enumerate(arms):
        sub = res[res["arm"] == a].sort_values("width")
        d = arms[a]
        y = sub["log2_x_opt"].to_numpy(float)
        lo = np.log2(np.where(sub["ci_lo"] > 0, sub["ci_lo"], sub["x_opt"]))
        hi = np.log2(np.where(np.isfinite(sub["ci_hi"]), sub["ci_hi"], sub["x_opt"]))
        drift = d["lr_opt_drift_octaves"]
        left.errorbar(sub["width"], y, yerr=[y - lo, hi - y], fmt="o-", color=f"C{i}", capsize=3,
                      label=a if drift is None else f"{a}: drift {drift:.2f} oct")
        if a == "sp":
            continue
        pw = [(int(w), v) for w, v in d["per_width"].items() if v["best_loss_over_sp"] is not None]
        xs = [w for w, _ in pw]
        ys = [v["best_loss_over_sp"] for _, v in pw]
        lo = [y - v["best_loss_over_sp_ci"][0] for y, (_, v) in zip(ys, pw, strict=True)]
        hi = [v["best_loss_over_sp_ci"][1] - y for y, (_, v) in zip(ys, pw, strict=True)]
        right.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", color=f"C{i}", capsize=3, label=a)
    right.axhline(1.0, color="k", lw=0.8, ls="--")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("width")
        ax.legend(fontsize=7)
    left.set_ylabel("optimal log2 LR")
    right.set_ylabel("best loss / SP's best loss")
    demo = demo or DEMO
    span = res["width"].max() / res["width"].min()
    fig.suptitle(f"{demo['preset']}, {demo['steps']} steps of batch {demo['batch_size']}: readout init over "
                 f"{span:.0f}x width", fontsize=9)
    fig.tight_layout()
    try:
        return savefig_atomic(fig, path)
    finally:
        plt.close(fig)


def run(widths: tuple[int, ...] = (32, 64, 128, 256, 512), seeds: tuple[int, ...] = (0, 1),
        out: str | os.PathLike[str] | None = None, step: float = 1.0,
        import_csv: str | os.PathLike[str] | None = None, results: Path = HERE / "results",
        train_missing: bool = True, one_seed_widest: tuple[str, ...] = (),
        arms: tuple[str, ...] = tuple(ARMS), equal_seeds: bool = False,
        name: str = "readout_ladder", setup: dict[str, Any] | None = None, jobs: int = 1,
        widest_seeds: tuple[int, ...] | None = None, centre_from: str | os.PathLike[str] | None = None
        ) -> dict[str, Any]:
    """Scan every (arm, width) (resuming ``out``), then write ``results/NAME.json``
    and ``.png``; returns the record. ``train_missing=False`` reports what the trial log
    holds: a scan it cannot finish is left out and listed under ``setup.incomplete``.
    ``one_seed_widest``: arms scanned with the first seed only at the widest width (a cut
    for time; their narrower widths keep every seed). ``widest_seeds``: every arm's seeds
    at the widest width (:func:`work_list`). ``arms``: the arms to scan (SP is
    always among them: every ratio is to it); ``equal_seeds``: no seed cuts at all.
    ``name``: the record's file name (another ladder is another record, so a figure of
    one name never holds two ladders' values). ``centre_from``: a ladder record whose
    optima (per arm and width) start the scans, e.g. a shorter horizon's, so a longer
    horizon's grid starts where its optimum is likely to be (:func:`scan_centres`)."""
    from benchmarks._proxy import log, record_header
    from benchmarks.mup_vs_sp import _n_imported, import_results, scan
    from mutransfer._io import atomic_write_text

    t0 = time.perf_counter()
    demo = dict(setup or DEMO)
    out = Path(out or Path("runs") / "readout_ladder")
    if import_csv:
        import_results(import_csv, out, demo, {"sp": ("sp", ARMS["sp"](1.0)),
                                               "mup": ("mup_constant", ARMS["mup_constant"](1.0))})
    arms = tuple(a for a in ARMS if a in set(arms) | {"sp"})
    log(f"readout ladder: {', '.join(arms)} at widths {sorted(widths)} x seeds {list(seeds)}")
    bad = sorted((set(one_seed_widest) | set(arms)) - set(ARMS))
    if bad:
        raise ValueError(f"unknown arm(s) {bad}; choose from {', '.join(ARMS)}")
    if widest_seeds is not None and not (widest_seeds and set(widest_seeds) <= set(seeds)):
        raise ValueError(f"widest seeds {list(widest_seeds)} must be some of the seeds {list(seeds)}")
    centres = scan_centres(centre_from) if centre_from else None
    table = scan(work_list(widths, seeds, one_seed_widest, arms, equal_seeds, widest_seeds), out, jobs, step,
                 demo, train_missing, centres)
    s = summarize(table, widths)
    wide = str(max(widths))
    figures: dict[str, Any] = {}
    for a, v in s["arms"].items():
        figures[f"drift_octaves_{a}"] = v["lr_opt_drift_octaves"]
        figures[f"trend_octaves_{a}"] = v["lr_opt_trend_octaves"]
        figures[f"trend_octaves_{a}_ci"] = v["lr_opt_trend_ci"]
        if a != "sp":
            figures[f"ratio_best_loss_{a}_over_sp_widest"] = v["per_width"].get(wide, {}).get(
                "best_loss_over_sp")
            # the demo's estimator: lowest measured seed mean, seed-paired interval
            figures[f"ratio_measured_best_loss_{a}_over_sp_widest"] = v["per_width"].get(wide, {}).get(
                "measured_best_loss_over_sp")
            figures[f"ratio_measured_best_loss_{a}_over_sp_widest_ci"] = v["per_width"].get(wide, {}).get(
                "measured_best_loss_over_sp_ci")
    figures |= {"arms": s["arms"], "eligible_default": s["eligible"],
                "wall_s": time.perf_counter() - t0, "train_s": float(table["wall_s"].sum())}
    png = plot(s["fit"], s["arms"], results / f"{name}.png", demo)
    cuts = not equal_seeds
    record = {**record_header(name),
              "setup": {**demo, "widths": sorted(widths), "seeds": list(seeds),
                        "seeds_below_widest": {a: list(seeds[:1]) for a in ONE_SEED_BELOW_WIDEST
                                               if cuts and a in arms},
                        "seeds_everywhere": {a: list(seeds[:1]) for a in ONE_SEED if cuts and a in arms},
                        "seeds_at_widest": {**({a: list(widest_seeds) for a in arms} if widest_seeds else {}),
                                            **{a: list(seeds[:1]) for a in one_seed_widest}},
                        "equal_seeds": equal_seeds,
                        "arms": {a: ARMS[a](2.0) for a in arms}, "lr_grid_step_octaves": step,
                        "lr_grid": "3 points around a guess, widened until the minimum is interior",
                        "lr_grid_centred_on": str(centre_from) if centre_from else None,
                        "n_trials": len(table), "n_diverged": int(table["diverged"].sum()),
                        "n_reused": int(table["same_as"].notna().sum()) if "same_as" in table else 0,
                        "n_imported": _n_imported(table), "incomplete": table.attrs["incomplete"]},
              "figures": figures, "figure": f"results/{png.name}",
              "targets": TARGETS,
              "passed": bool(s["eligible"])}
    atomic_write_text(results / f"{name}.json", json.dumps(record, indent=2) + "\n")
    return record


def scan_centres(path: str | os.PathLike[str]) -> dict[tuple[str, int], float]:
    """(arm, width) -> the fitted optimal log2 LR of a ladder record (``figures.arms``), the
    starting points of another ladder's scans."""
    from mutransfer._io import read_json

    doc = read_json(path, "ladder record")
    arms = (doc.get("figures") or {}).get("arms") if isinstance(doc, dict) else None
    if not isinstance(arms, dict) or not arms:
        raise ValueError(f"{path} is not a readout-ladder record (no figures.arms)")
    return {(a, int(w)): float(v["log2_lr_opt"]) for a, arm in arms.items()
            for w, v in (arm.get("per_width") or {}).items()}


def _ints(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x.strip())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--widths", type=_ints, default=(32, 64, 128, 256, 512),
                        help="widths, the first the base (default 32,64,128,256,512)")
    parser.add_argument("--seeds", type=_ints, default=(0, 1), help="seeds (default 0,1)")
    parser.add_argument("--step", type=float, default=1.0, help="LR grid step in octaves (default 1)")
    parser.add_argument("--out", default=None, help="work dir (default runs/readout_ladder)")
    parser.add_argument("--import-csv", default=None, help="first add the matching SP/muP rows of this "
                        "results.csv (a 'mutransfer demo --size small' run's) as finished trials")
    parser.add_argument("--one-seed-widest", default="", help="arms scanned with the first seed only at "
                        f"the widest width, to save time, of {','.join(ARMS)} (default none)")
    parser.add_argument("--widest-seeds", type=_ints, default=None,
                        help="every arm's seeds at the widest width, to save time (default --seeds)")
    parser.add_argument("--arms", default=",".join(ARMS),
                        help=f"arms to scan, of {','.join(ARMS)} (default all; sp is always scanned)")
    parser.add_argument("--equal-seeds", action="store_true",
                        help="every arm on every seed at every width (no seed cuts)")
    parser.add_argument("--name", default="readout_ladder",
                        help="record name: results/NAME.json and .png (default readout_ladder)")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default the demo's)")
    parser.add_argument("--batch-size", type=int, default=None, help="sequences per step (default the demo's)")
    parser.add_argument("--jobs", type=int, default=1, help="scans trained in parallel processes (default 1)")
    parser.add_argument("--centre-from", default=None, help="a ladder record (results/NAME.json) whose "
                        "optima start the scans (default: the demo's guesses)")
    parser.add_argument("--report-only", action="store_true", help="train nothing: report the scans "
                        "the trial log already finishes (another run may still be adding to it)")
    a = parser.parse_args()
    one = tuple(x for x in a.one_seed_widest.split(",") if x)
    chosen = tuple(x for x in a.arms.split(",") if x)
    if unknown := sorted((set(one) | set(chosen)) - set(ARMS)):
        parser.error(f"unknown arm(s) {unknown}; choose from {', '.join(ARMS)}")
    rec = run(a.widths, a.seeds, a.out, a.step, a.import_csv, train_missing=not a.report_only,
              one_seed_widest=one, arms=chosen, equal_seeds=a.equal_seeds, name=a.name,
              setup=demo_setup(a.steps, a.batch_size), jobs=a.jobs, widest_seeds=a.widest_seeds or None,
              centre_from=a.centre_from)
    print(json.dumps({k: v for k, v in rec["figures"].items() if k != "arms"}, indent=2))
