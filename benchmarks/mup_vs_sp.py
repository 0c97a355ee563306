"""μP vs SP at the widest proxy: where μP's 3% best-loss gap comes from, and a fix.

**Superseded** (:data:`benchmarks.tuned_multipliers.SUPERSEDED`, written into its records):
this is mup's ``constant`` readout on the old demo proxy (gpt-small, 150 steps of 16×64,
2 seeds), not the default. Its records
(``results/mup_vs_sp.json``, ``mup_vs_sp_ablation.json``: μP/SP 1.030 at width 256) found
the readout init behind the gap, and ``fan_in`` became the default; μP-vs-SP on the default
readout and the demo's proxy is :mod:`benchmarks.readout_ladder` (``readout_ladder.json``).
Re-running this module on the default was not done: its ablation alone is ~70 LR-scan runs
at width 256 (22 CPU-s each at 250 steps of 8×64 with 1 thread, ~60 s wall on the shared
2-core machine under load), ~26 CPU-min and over an hour of wall time, and the ladder already
holds its transfer mode's arms.

On the old demo proxy (gpt-small, 150 steps; ``DEMO`` in
``benchmarks/tuned_multipliers.py``) μP transfers its LR but its best loss at width 256 is
~3% above SP's. At its optimum μP's hidden-matrix LR equals SP's (2^-5.6 / 8 ≈ 2^-8.6), so
the gap comes from what μP does differently from SP elsewhere. Two modes:

``ablate``: at one width (256), μP with ONE of its differences from SP turned into SP's,
each arm an LR scan bracketing its optimum × seeds, best loss ÷ SP's with a seed-bootstrap
interval (``best_loss_ratio``). m = width / base width:

- ``input_lr_sp``: embedding LR × 1/m (SP's embedding LR relative to the hidden LR);
- ``input_lr_umup``: embedding LR × 1/sqrt(m) (u-μP, Blake et al. 2024);
- ``vector_lr_sp``: norm-gain LR × 1/m;
- ``readout_sp``: readout with SP's effective init std and Adam LR (forward multiplier
  sqrt(m) on top of μP's 1/m, LR × 1/sqrt(m): by the abc-symmetry the readout of SP);
- ``readout_zero``: zero-initialized readout;
- ``readout_fan_in``: only the readout's init made SP's (``readout_init="fan_in"``: the
  effective std ∝ m^-1/2 instead of μP's m^-1); ``readout_sp`` also changes the raw
  gradient's scale, which the global-norm gradient clipping sees;
- ``all_sp``: the three SP ingredients together (SP itself, re-expressed: a sanity check).

(The attention scale needs no arm: the head dim is fixed at 32, so μP's 1/d_head anchored
at the base equals SP's 1/sqrt(d_head) at every width.)

``transfer``: widths 32-256, SP, μP and the fixed μP (``--fix``, default
``readout_fan_in``: ``readout_init="fan_in"``) side by side: LR drift in octaves and best
loss ÷ SP's at the widest width.

    python -m benchmarks.mup_vs_sp [ablate|transfer] [--jobs 2] [--out runs/mup_vs_sp]

Writes ``results/mup_vs_sp_ablation.json`` or ``results/mup_vs_sp.json``. Finished trials
are kept in ``--out``/trials.jsonl and reused by both modes; ``--import-csv RESULTS.csv``
first adds the SP/μP rows of a 150-step demo sweep whose every hyperparameter matches
(the committed results reused 74 such trials of a ``mutransfer demo`` run; two of them,
re-run here, matched to the last bit).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent

Overrides = Callable[[float], dict[str, Any]]
"""Width multiplier m -> TrainConfig overrides of an arm."""

_C = {"readout_init": "constant"}
"""Plain μP here is mup's constant readout, named: the ablations are defined against it (the
default is fan_in since, which is the ``readout_fan_in`` arm), so no figure changes meaning."""

ABLATIONS: dict[str, Overrides] = {
    "sp": lambda m: {"parametrization": "sp"},
    "mup": lambda m: {"parametrization": "mup", **_C},
    "input_lr_sp": lambda m: {"parametrization": "mup", **_C, "lr_mult_input": 1.0 / m},
    "input_lr_umup": lambda m: {"parametrization": "mup", **_C, "lr_mult_input": m**-0.5},
    "vector_lr_sp": lambda m: {"parametrization": "mup", **_C, "lr_mult_vector": 1.0 / m},
    "readout_sp": lambda m: {"parametrization": "mup", **_C, "output_mult": m**0.5, "lr_mult_output": m**-0.5},
    "readout_zero": lambda m: {"parametrization": "mup", "readout_init": "zero"},
    "readout_fan_in": lambda m: {"parametrization": "mup", "readout_init": "fan_in"},
    "all_sp": lambda m: {"parametrization": "mup", **_C, "lr_mult_input": 1.0 / m, "lr_mult_vector": 1.0 / m,
                         "output_mult": m**0.5, "lr_mult_output": m**-0.5},
}
"""Ablation arms: μP with one difference from SP made SP's (see the module docstring)."""


def _guess(arm: str, m: float) -> float:
    """A starting log2 LR for the scan (the demo's measured optima; the scan widens)."""
    return -5.5 - math.log2(m) if arm == "sp" else -5.5


class MissingTrial(LookupError):
    """A scan replayed from the log (``train_missing=False``) needs a trial it lacks."""


def _scan_arm(arm: str, over: dict[str, Any], width: int, seeds: tuple[int, ...], out: str,
              demo: dict[str, Any], step: float, same_as: dict[str, Any] | None = None,
              train_missing: bool = True, centre: float | None = None) -> list[dict[str, Any]]:
    """LR scan of one arm at one width (one process; trials appended to out/trials.jsonl);
    returns the trial rows it visited.
    ``same_as``: other overrides that train the identical run at this width (the same
    per-parameter LRs to the last bit); a finished trial under them is reused.
    ``train_missing=False`` replays the scan from the log, writing nothing, and raises
    :class:`MissingTrial` where it would train. ``centre``: the scan's starting log2 LR (an
    optimum measured before, e.g. at a shorter horizon) instead of :func:`_guess`'s."""
    from benchmarks._proxy import TrialLog, bracket_scan, log
    from mutransfer.training.config import TrainConfig
    from mutransfer.training.train import train

    trials = TrialLog(Path(out) / "trials.jsonl")
    m = width / demo["base_width"]
    guess = _guess(arm, m) if centre is None else centre
    c = round(guess / step) * step  # the guess on the scan's grid (step 1: the integer)

    visited: list[dict[str, Any]] = []

    def run_at(t: float) -> list[float]:
        losses = []
        for seed in seeds:
            point = {"arm": arm, "width": width, "log2_lr": t, "seed": seed,
                     "overrides": json.dumps(over, sort_keys=True)}
            row = trials.get(point)
            twin = None if same_as is None else next(
                (r for r in trials.rows.values() if r["width"] == width and r["log2_lr"] == t
                 and r["seed"] == seed and r["overrides"] == json.dumps(same_as, sort_keys=True)), None)
            if row is None and twin is not None:
                reused = {k: twin[k] for k in ("lr", "loss", "diverged", "wall_s")} | {"same_as": twin["key"]}
                row = (trials.add(point, reused) if train_missing
                       else {"key": trials.key(point), **point, **reused})
            if row is None and not train_missing:
                raise MissingTrial(f"{arm} w{width} lr 2^{t:g} seed {seed}")
            if row is None:
                t0 = time.perf_counter()
                r = train(TrainConfig.from_flat({**demo, **over, "width": width, "lr": 2.0**t, "seed": seed}))
                row = trials.add(point, {"lr": 2.0**t, "loss": r.loss, "diverged": r.diverged,
                                         "wall_s": time.perf_counter() - t0})
                log(f"  {arm} w{width} lr 2^{t:g} seed {seed}: {r.loss:.4f}"
                    f"{' (diverged)' if r.diverged else ''} [{row['wall_s']:.0f} s]")
            losses.append(row["loss"])
            visited.append(row)
        return losses

    bracket_scan(run_at, [c - step, float(c), c + step], lo=-16.0, hi=0.0, step=step)
    return visited


Work = tuple[str, dict[str, Any], int, tuple[int, ...], "dict[str, Any] | None"]
"""(arm, overrides, width, seeds, same_as) of one LR scan."""


def scan(work: list[Work], out: Path, jobs: int = 1, step: float = 1.0,
         demo: dict[str, Any] | None = None, train_missing: bool = True,
         centres: dict[tuple[str, int], float] | None = None) -> Any:
    """Run every LR scan in ``work``; return the trials table (pandas) of exactly the points
    the scans visited (so every arm's optimum is fitted on its own scan's grid, whatever
    else the trial log holds). ``train_missing=False`` only replays the scans from the
    log: a scan that would need training is left out, and its first missing trial is
    listed in ``table.attrs["incomplete"]``. ``centres``: (arm, width) -> the starting log2
    LR of that scan (absent: :func:`_guess`'s)."""
    import pandas as pd

    from benchmarks.tuned_multipliers import DEMO

    demo = dict(demo or DEMO)
    out.mkdir(parents=True, exist_ok=True)
    incomplete: list[str] = []
    if jobs > 1 and train_missing:
        with ProcessPoolExecutor(jobs) as pool:
            futs = [pool.submit(_scan_arm, a, o, w, sd, str(out), demo, step, same, train_missing,
                                (centres or {}).get((a, w))) for a, o, w, sd, same in work]
            done = [f.result() for f in futs]
    else:
        done = []
        for a, o, w, sd, same in work:
            try:
                done.append(_scan_arm(a, o, w, sd, str(out), demo, step, same, train_missing,
                                      (centres or {}).get((a, w))))
            except MissingTrial as exc:
                incomplete.append(str(exc))
    table = pd.DataFrame([r for rows in done for r in rows])
    table.attrs["incomplete"] = incomplete
    return table


def import_results(csv: str | os.PathLike[str], out: Path, demo: dict[str, Any] | None = None,
                   arms: dict[str, tuple[str, dict[str, Any]]] | None = None) -> int:
    """Add the SP and μP rows of an earlier results table (``mutransfer demo``'s
    ``results.csv``) to ``out``/trials.jsonl, keeping only rows whose every hyperparameter
    column equals this benchmark's config at that (parametrization, width, lr, seed): the
    same trainer on the same data repeats them bit for bit on CPU. Returns rows added.
    ``demo``: the proxy's TrainConfig fields (default :data:`DEMO` of tuned_multipliers);
    ``arms``: parametrization -> (arm, overrides) the rows are filed under (default: sp
    and mup as :data:`ABLATIONS` has them)."""
    import dataclasses

    import pandas as pd

    from benchmarks._proxy import TrialLog, log
    from benchmarks.tuned_multipliers import DEMO
    from mutransfer.training.config import ALIASES, TrainConfig

    demo = dict(demo or DEMO)
    arms = arms or {p: (p, ABLATIONS[p](1.0)) for p in ("sp", "mup")}
    table = pd.read_csv(csv)
    trials = TrialLog(out / "trials.jsonl")
    names = set(ALIASES) - {"device", "threads"}
    added = skipped = 0
    for _, r in table.iterrows():
        p, t = str(r["parametrization"]), math.log2(float(r["lr"]))
        if p not in arms or r.get("state", "COMPLETE") != "COMPLETE" or t != round(t * 2) / 2:
            skipped += 1
            continue
        arm, over = arms[p]
        cfg = TrainConfig.from_flat({**demo, **over, "width": int(r["width"]), "lr": float(r["lr"]),
                                     "seed": int(r["seed"])})
        model = dataclasses.asdict(cfg.model_config())  # None model fields: the preset's value
        want = {k: model.get(k) if v is None else v for k, v in cfg.to_flat().items()}
        # SP has no readout init law: its rows' readout_init (the default when they ran) is moot
        moot = {"readout_init"} if over.get("parametrization") == "sp" else set()
        same = all(str(want[c]) == str(r[c]) or (isinstance(want[c], float) and float(r[c]) == want[c])
                   for c in table.columns if c in names - moot and not pd.isna(r[c]))
        point = {"arm": arm, "width": int(r["width"]), "log2_lr": t, "seed": int(r["seed"]),
                 "overrides": json.dumps(over, sort_keys=True)}
        if not same or trials.get(point) is not None:
            skipped += 1
            continue
        trials.add(point, {"lr": float(r["lr"]), "loss": float(r["loss"]), "diverged": bool(r["diverged"]),
                           "wall_s": float(r["wall_s"]), "imported_from": str(csv)})
        added += 1
    log(f"imported {added} trials from {csv} ({skipped} skipped: other setup, or already there)")
    return added


def _n_imported(table: Any) -> int:
    """Trials taken from an earlier results table (``--import-csv``), not run here."""
    return int(table["imported_from"].notna().sum()) if "imported_from" in table else 0


def ablate(width: int = 256, seeds: tuple[int, ...] = (0, 1), arms: tuple[str, ...] | None = None,
           out: str | os.PathLike[str] | None = None, jobs: int = 1, step: float = 1.0) -> dict[str, Any]:
    """The ablation at one width: per arm the best loss ÷ SP's [95% seed bootstrap] and the
    optimal log2 LR. Writes ``results/mup_vs_sp_ablation.json``."""
    from analysis.optimum import OptimumFit
    from benchmarks._proxy import log, record_header
    from benchmarks.tuned_multipliers import DEMO, SUPERSEDED, best_loss_ratio
    from mutransfer._io import atomic_write_text

    names = tuple(arms or ABLATIONS)
    bad = sorted(set(names) - set(ABLATIONS))
    if bad:
        raise ValueError(f"unknown arm(s) {bad}; choose from {', '.join(ABLATIONS)}")
    names = tuple(dict.fromkeys(("sp", *names)))  # SP is the denominator
    t0 = time.perf_counter()
    log(f"ablation at width {width}: {', '.join(names)} x seeds {list(seeds)}")
    m = width / DEMO["base_width"]
    work: list[Work] = [(a, ABLATIONS[a](m), width, seeds, None) for a in names]
    table = scan(work, Path(out or Path("runs") / "mup_vs_sp"), jobs, step)
    res = OptimumFit(x="lr", y="loss", group_by=("arm",), n_boot=0).fit(table).results_.set_index("arm")
    per_arm = {}
    for a in names:
        r = best_loss_ratio(table, a, "sp") if a != "sp" else {"ratio": 1.0, "ci": [1.0, 1.0]}
        per_arm[a] = {"best_loss_over_sp": r["ratio"], "ci": r["ci"],
                      "best_loss": float(res.loc[a, "loss_opt"]),
                      "log2_lr_opt": float(res.loc[a, "log2_x_opt"]),
                      "at_edge": bool(res.loc[a, "at_edge"]),
                      "overrides": ABLATIONS[a](m),
                      "n_trials": int((table["arm"] == a).sum()),
                      "train_s": float(table.loc[table["arm"] == a, "wall_s"].sum())}
    figures = {f"ratio_{a}_over_sp": v["best_loss_over_sp"] for a, v in per_arm.items() if a != "sp"}
    figures |= {"arms": per_arm, "wall_s": time.perf_counter() - t0,
                "train_s": float(table["wall_s"].sum())}
    record = {**record_header("mup_vs_sp_ablation"), "superseded": SUPERSEDED,
              "setup": {**DEMO, "width": width, "seeds": list(seeds), "lr_grid_step_octaves": step,
                        "lr_grid": "3 points around a guess, widened until the minimum is interior",
                        "n_trials": len(table), "n_diverged": int(table["diverged"].sum()),
                        "n_imported": _n_imported(table)},
              "figures": figures}
    atomic_write_text(HERE / "results" / "mup_vs_sp_ablation.json", json.dumps(record, indent=2) + "\n")
    return record


FIXES: dict[str, Overrides] = {
    "readout_fan_in": lambda m: {"parametrization": "mup", "readout_init": "fan_in"},
}
"""Candidate fixes for ``transfer``: width-independent TrainConfig overrides."""
SAME_AT_ONE_WIDTH: dict[str, Overrides] = {
    # at the base width the fan-in readout init is μP's own (a scale of m = 1)
    "readout_fan_in": lambda m: ABLATIONS["readout_fan_in" if m != 1 else "mup"](m),
}
"""The overrides that train a fix's identical run at one width (reused, not re-run)."""


def transfer(fix: str = "readout_fan_in", widths: tuple[int, ...] = (32, 64, 128, 256),
             seeds: tuple[int, ...] = (0, 1), out: str | os.PathLike[str] | None = None, jobs: int = 1,
             step: float = 1.0) -> dict[str, Any]:
    """SP, μP and the fixed μP (:data:`FIXES`) over the width ladder, in one run:
    the drift of each one's optimal LR (octaves, bootstrap interval) and its best loss ÷
    SP's at the widest width [seed bootstrap]. SP's drift uses seed 0 below the widest
    width (it moves by whole octaves; the demo does the same). Writes
    ``results/mup_vs_sp.json``."""
    from analysis.optimum import OptimumFit
    from benchmarks._proxy import finite_or_none, log, record_header
    from benchmarks.tuned_multipliers import DEMO, SUPERSEDED, best_loss_ratio
    from mutransfer._io import atomic_write_text

    if fix not in FIXES:
        raise ValueError(f"unknown fix {fix!r}; choose from {', '.join(FIXES)}")
    t0 = time.perf_counter()
    wide = max(widths)
    work: list[Work] = []
    for w in sorted(widths, reverse=True):
        m = w / DEMO["base_width"]
        work += [("sp", ABLATIONS["sp"](m), w, seeds if w == wide else seeds[:1], None),
                 ("mup", ABLATIONS["mup"](m), w, seeds, None),
                 (f"mup_{fix}", FIXES[fix](m), w, seeds, SAME_AT_ONE_WIDTH[fix](m))]
    fix_overrides, fix = FIXES[fix](2.0), f"mup_{fix}"
    log(f"transfer: sp, mup, {fix} at widths {sorted(widths)} x seeds {list(seeds)}")
    table = scan(work, Path(out or Path("runs") / "mup_vs_sp"), jobs, step)
    fit = OptimumFit(x="lr", y="loss", group_by=("arm", "width"), n_boot=500).fit(table)
    res = fit.results_
    arms = ("sp", "mup", fix)
    drift = {a: fit.drift("width", where={"arm": a}) for a in arms}
    widest = table[table["width"] == wide]
    ratios = {a: best_loss_ratio(widest, a, "sp") for a in ("mup", fix)}
    per_width = {str(w): {a: {"log2_lr_opt": float(r["log2_x_opt"]), "best_loss": float(r["loss_opt"]),
                              "at_edge": bool(r["at_edge"])}
                          for a in arms for _, r in res[(res["arm"] == a) & (res["width"] == w)].iterrows()}
                 for w in sorted(widths)}
    figures = {
        **{f"drift_octaves_{a}": d.octaves for a, d in drift.items()},
        **{f"drift_ci_{a}": [finite_or_none(c) for c in d.ci] for a, d in drift.items()},
        f"ratio_best_loss_{fix}_over_sp_widest": ratios[fix]["ratio"],
        f"ratio_best_loss_{fix}_over_sp_widest_ci": ratios[fix]["ci"],
        "ratio_best_loss_mup_over_sp_widest": ratios["mup"]["ratio"],
        "ratio_best_loss_mup_over_sp_widest_ci": ratios["mup"]["ci"],
        "per_width": per_width,
        "wall_s": time.perf_counter() - t0,
        "train_s": float(table["wall_s"].sum()),
    }
    record = {**record_header("mup_vs_sp"), "superseded": SUPERSEDED,
              "setup": {**DEMO, "widths": sorted(widths), "seeds": list(seeds),
                        "sp_seeds_below_widest": list(seeds[:1]), "fix": {fix: fix_overrides},
                        "lr_grid_step_octaves": step, "n_trials": len(table),
                        "n_diverged": int(table["diverged"].sum()),
                        "n_reused": int(table["same_as"].notna().sum()) if "same_as" in table else 0,
                        "n_imported": _n_imported(table)},
              "figures": figures,
              "targets": {"drift_octaves_max": 0.5, "ratio_best_loss_over_sp_widest_max": 1.01},
              "passed": bool(drift[fix].octaves <= 0.5 and ratios[fix]["ratio"] <= 1.01)}
    atomic_write_text(HERE / "results" / "mup_vs_sp.json", json.dumps(record, indent=2) + "\n")
    return record


def run(jobs: int = 2) -> dict[str, Any]:
    """The whole benchmark (``python -m benchmarks mup_vs_sp``): the ablation, then the
    width ladder with the fix (sharing the finished trials); returns the ladder's record."""
    ablate(jobs=jobs)
    return transfer(jobs=jobs)


def _ints(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x.strip())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("ablate", "transfer"), help="ablation at one width, or the "
                        "width ladder with the fix")
    parser.add_argument("--width", type=int, default=256, help="ablate: the width (default 256)")
    parser.add_argument("--arms", default=None, help=f"ablate: arms, of {','.join(ABLATIONS)} (default all)")
    parser.add_argument("--widths", type=_ints, default=(32, 64, 128, 256),
                        help="transfer: widths (default 32,64,128,256)")
    parser.add_argument("--fix", default="readout_fan_in",
                        help=f"transfer: the fixed muP, of {','.join(FIXES)} (default readout_fan_in)")
    parser.add_argument("--seeds", type=_ints, default=(0, 1), help="seeds (default 0,1)")
    parser.add_argument("--jobs", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--step", type=float, default=1.0, help="LR grid step in octaves (default 1)")
    parser.add_argument("--out", default=None, help="work dir (default runs/mup_vs_sp)")
    parser.add_argument("--import-csv", default=None, help="first add the matching SP/muP rows of "
                        "this results.csv (a 150-step demo's) as finished trials")
    a = parser.parse_args()
    if a.import_csv:
        import_results(a.import_csv, Path(a.out or Path("runs") / "mup_vs_sp"))
    if a.mode == "ablate":
        arms = tuple(x for x in a.arms.split(",") if x) if a.arms else None
        rec = ablate(a.width, a.seeds, arms, a.out, a.jobs, a.step)
    else:
        rec = transfer(a.fix, a.widths, a.seeds, a.out, a.jobs, a.step)
    print(json.dumps(rec["figures"], indent=2))
