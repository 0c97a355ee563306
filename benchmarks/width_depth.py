"""Width and depth moved together: does the proxy's optimal LR hold at a wider and deeper target?

The card moves a (width 32, depth 2) proxy to a target of many times its width and depth
in one step, while the other benchmarks move one of them at a time (``transfer_fidelity``:
width at depth 2; ``depth_fidelity``: depth at width 32). This benchmark takes the demo's
proxy (``mutransfer demo --size small``: llama-small, base width 32, depth 2, 125 steps of
16×64 bytes, cosine with 12 warmup steps and floor 0.1) and moves it to (256, 8) and
(256, 16) under CompleteP α=1 (Dey et al. 2025, "Don't be lazy: CompleteP enables
compute-efficient deep transformers", Table 1; base depth 2) and under plain μP (width
rules only). At the proxy CompleteP's depth multipliers are all 1, so the proxy is one
scan shared by both.

Per (parametrization, target) it reports, with ``analysis.OptimumFit`` on seed-averaged
1-octave LR scans (widened until the minimum is interior, ``benchmarks._proxy.bracket_scan``):

- the optimal log2 LR and its bootstrap interval;
- the shift against the proxy's optimum, target − proxy in octaves, its interval from
  the two groups' independent bootstrap draws;
- the target's loss at the proxy's optimal LR ÷ the target's best loss (the fitted
  quadratic of the target's seed-averaged curve at the proxy's optimum, or the linear
  interpolation of the measured points where the optimum lies outside the fitted window),
  with a seed-bootstrap interval.

    python -m benchmarks.width_depth [--seeds 0,1] [--deep-seeds 0] [--import-csv RESULTS.csv]
                                     [--budget-s S] [--report-only] [--out DIR]

Writes ``results/width_depth.json`` and ``results/width_depth.png``. Finished trials are
kept in ``OUT/trials.jsonl`` (default ``runs/width_depth``), so a re-run resumes;
``--import-csv`` first adds the proxy's rows of a ``mutransfer demo --size small`` run
(its μP trials at width 32 whose every hyperparameter equals this proxy's).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
PROXY = (32, 2)
"""(width, depth) of the proxy: the demo's smallest model."""
TARGETS: tuple[tuple[int, int], ...] = ((256, 8), (256, 16))
"""(width, depth) of the targets: width ×8 with depth ×4 and ×8."""
# (label, parametrization, depth_alpha)
PARAMETRIZATIONS: tuple[tuple[str, str, float], ...] = (
    ("completep_a1", "completep", 1.0), ("mup", "mup", 1.0))
DEMO_SMALL: dict[str, Any] = {
    "preset": "llama-small", "steps": 125, "batch_size": 16, "seq_len": 64, "base_width": 32,
    "eval_every": 125, "eval_sequences": 128, "warmup_steps": 12, "schedule": "cosine", "lr_floor": 0.1,
    "threads": 1, "device": "cpu"}
"""The base TrainConfig of ``mutransfer demo --size small``'s LR sweeps (its sweep.yaml)."""


class OutOfBudget(Exception):
    """The next trial would overrun the training budget: the scan stops, trials are kept."""


def _guess(kind: str, depth: int) -> float:
    """A starting log2 LR: the proxy's optimum (about 2^-5; μP's width rules hold it at
    width 256, depth 2), for μP one octave lower per 4x depth (``depth_fidelity``)."""
    return -5.0 - (round(math.log(depth / PROXY[1], 4)) if kind == "mup" else 0)


def train_all(seeds: tuple[int, ...] = (0, 1), deep_seeds: tuple[int, ...] = (0,),
              out: str | os.PathLike[str] | None = None, budget_s: float = math.inf,
              wall_s: float = math.inf) -> dict[str, float]:
    """Run the scans, cheapest first: the proxy, (256, 8) with ``seeds``, (256, 16) with
    ``deep_seeds``, then (256, 16) with ``seeds``. Stops before a trial that would end past
    ``budget_s`` CPU seconds (core-seconds: the trainer runs on one thread) or ``wall_s``
    wall seconds in this call. Returns {phase: wall seconds}."""
    from benchmarks._proxy import TrialLog, bracket_scan, log
    from mutransfer.training.config import TrainConfig
    from mutransfer.training.train import train

    trials = TrialLog(Path(out or Path("runs") / "width_depth") / "trials.jsonl")
    t0, c0 = time.perf_counter(), time.process_time()
    last: dict[tuple[int, int], float] = {}  # (width, depth) -> seconds of its latest trial

    def make_run(label: str, kind: str, alpha: float, width: int, depth: int, sds: tuple[int, ...]):  # noqa: ANN202
        def run_at(t: float) -> list[float]:
            losses = []
            for seed in sds:
                point = {"param": label, "width": width, "depth": depth, "log2_lr": t, "seed": seed}
                row = trials.get(point)
                # The proxy is the base of both: CompleteP there is μP float for float.
                twin = trials.get({**point, "param": "mup"}) if (width, depth) == PROXY else None
                if row is None and twin is not None:
                    row = trials.add(point, {k: twin[k] for k in ("lr", "loss", "diverged", "wall_s")}
                                     | {"shared_with": "mup"})
                if row is None:
                    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
                    cost = last.get((width, depth), 0.0)
                    if cpu + cost > budget_s or wall + cost > wall_s:
                        raise OutOfBudget(f"{cpu:.0f} CPU s, {wall:.0f} s spent; next trial {label} "
                                          f"({width}, {depth}) lr 2^{t:g} seed {seed} would overrun")
                    res = train(TrainConfig.from_flat({**DEMO_SMALL, "width": width, "depth": depth,
                                                       "base_depth": PROXY[1], "parametrization": kind,
                                                       "depth_alpha": alpha, "lr": 2.0**t, "seed": seed}))
                    last[(width, depth)] = res.wall_s
                    row = trials.add(point, {"lr": 2.0**t, "loss": res.loss, "diverged": res.diverged,
                                             "wall_s": res.wall_s})
                    log(f"  {label} ({width}, {depth}) lr 2^{t:g} seed {seed}: loss {res.loss:.4f}"
                        f"{' (diverged)' if res.diverged else ''} in {res.wall_s:.0f} s "
                        f"[{time.process_time() - c0:.0f} CPU s, {time.perf_counter() - t0:.0f} s]")
                losses.append(row["loss"])
            return losses
        return run_at

    phases = [(PROXY, seeds), (TARGETS[0], seeds), (TARGETS[1], deep_seeds), (TARGETS[1], seeds)]
    done: dict[str, float] = {}
    try:
        for (width, depth), sds in phases:
            for label, kind, alpha in PARAMETRIZATIONS:
                c = _guess(kind, depth)
                bracket_scan(make_run(label, kind, alpha, width, depth, tuple(sds)), [c - 1, c, c + 1],
                             lo=-14.0, hi=0.0)
            done[f"({width}, {depth}) seeds {list(sds)}"] = time.perf_counter() - t0
    except OutOfBudget as exc:
        log(f"stopped: {exc}")
        done["stopped"] = time.perf_counter() - t0
    return done


def _loss_at(fit: Any, key: tuple[Any, ...], log2_x: float, table: Any) -> tuple[float, str]:
    """A group's loss at ``log2_x``: its fitted quadratic inside the fitted window, else the
    linear interpolation of its seed-averaged measured points (nan outside them)."""
    import numpy as np

    o = fit.group(key)
    if o.coef is not None and o.method != "argmin":
        t = np.log2(o.x[o.window[0]:o.window[1]])
        if t.min() <= log2_x <= t.max():
            return float(np.polyval(o.coef, log2_x)), "quadratic"
    curve = table.groupby("log2_lr")["loss"].mean().sort_index()
    if not curve.index.min() <= log2_x <= curve.index.max():
        return float("nan"), "outside the scan"
    return float(np.interp(log2_x, curve.index.to_numpy(float), curve.to_numpy(float))), "interpolated"


def _ratio_at_proxy(table: Any, label: str, target: tuple[int, int]) -> float:
    """Target's loss at the proxy's optimal LR ÷ the target's best loss, for one table."""
    from analysis.optimum import OptimumFit

    wd = table[["width", "depth"]].apply(tuple, axis=1)
    sub = table[(table["param"] == label) & wd.isin([PROXY, target])]
    fit = OptimumFit(x="lr", y="loss", group_by=("width", "depth"), n_boot=0).fit(sub)
    proxy_log2 = fit.group(PROXY).log2_x_opt
    at, _ = _loss_at(fit, target, proxy_log2, sub[(sub["width"] == target[0]) & (sub["depth"] == target[1])])
    return at / fit.group(target).loss_opt


def _ratio_ci(table: Any, label: str, target: tuple[int, int], n_boot: int = 200,
              seed: int = 0) -> list[float | None]:
    """95% percentile interval of :func:`_ratio_at_proxy`, resampling each group's seeds
    with replacement (as ``tuned_multipliers.best_loss_ratio``); null with one seed."""
    import numpy as np
    import pandas as pd

    from benchmarks._proxy import finite_or_none

    rng = np.random.default_rng(seed)
    groups = [table[(table["param"] == label) & (table["width"] == w) & (table["depth"] == d)]
              for w, d in (PROXY, target)]
    if any(df["seed"].nunique() < 2 for df in groups):
        return [None, None]
    draws = []
    for _ in range(n_boot):
        parts = []
        for df in groups:
            sds = sorted(df["seed"].unique())
            for j, s in enumerate(rng.choice(sds, size=len(sds), replace=True)):
                parts.append(df[df["seed"] == s].assign(seed=j))
        draws.append(_ratio_at_proxy(pd.concat(parts), label, target))
    lo, hi = np.nanpercentile(draws, [2.5, 97.5])
    return [finite_or_none(lo), finite_or_none(hi)]


def proxy_shared(table: Any) -> Any:
    """The trials table with every parametrization's proxy rows replaced by μP's: at the
    proxy CompleteP is μP float for float, so both are fitted on one and the same scan."""
    import pandas as pd

    at_proxy = (table["width"] == PROXY[0]) & (table["depth"] == PROXY[1])
    mup = table[at_proxy & (table["param"] == "mup")]
    return pd.concat([table[~at_proxy], *(mup.assign(param=label) for label, _, _ in PARAMETRIZATIONS)],
                     ignore_index=True)


def summarize(table: Any, n_boot: int = 1000, n_boot_ratio: int = 200) -> dict[str, Any]:
    """Per parametrization: the proxy's optimum, and per target its optimum, its shift
    against the proxy's (target − proxy, octaves, 95% interval from the two groups'
    independent bootstrap draws) and its loss at the proxy's optimal LR ÷ its best loss.
    ``table``: one row per trial (param, width, depth, lr, log2_lr, seed, loss, diverged)."""
    import numpy as np

    from analysis._stats import percentile_interval
    from analysis.optimum import OptimumFit
    from benchmarks._proxy import finite_or_none

    def log2_ci(ci: tuple[float, float]) -> list[float | None]:
        return [finite_or_none(math.log2(c)) if c > 0 else None for c in ci]

    n_lrs = table.groupby(["param", "width", "depth"])["log2_lr"].transform("nunique")
    short, table = table[n_lrs < 3], table[n_lrs >= 3]
    fit = OptimumFit(x="lr", y="loss", group_by=("param", "width", "depth"), n_boot=n_boot).fit(table)
    per: dict[str, Any] = {}
    for label, _, _ in PARAMETRIZATIONS:
        p = fit.group((label, *PROXY))
        per[label] = {"proxy": {"width": PROXY[0], "depth": PROXY[1], "log2_lr_opt": p.log2_x_opt,
                                "ci": log2_ci(p.ci), "best_loss": p.loss_opt, "seeds": sorted(p.seeds)}}
        for w, d in TARGETS:
            sub = table[(table["param"] == label) & (table["width"] == w) & (table["depth"] == d)]
            if sub.empty:  # too few LRs for an optimum: the seed-averaged losses that were run
                few = short[(short["param"] == label) & (short["width"] == w) & (short["depth"] == d)]
                per[label][f"{w}x{d}"] = {"measured": False, "seed_mean_loss_by_log2_lr": {
                    str(t): float(v) for t, v in few.groupby("log2_lr")["loss"].mean().items()}}
                continue
            o = fit.group((label, w, d))
            n = min(o.boot_log2.size, p.boot_log2.size)
            lo, hi = (percentile_interval(o.boot_log2[:n] - p.boot_log2[:n], fit.level) if n
                      else (np.nan, np.nan))
            at, how = _loss_at(fit, (label, w, d), p.log2_x_opt, sub)
            per[label][f"{w}x{d}"] = {
                "measured": True, "width": w, "depth": d, "seeds": sorted(o.seeds),
                "log2_lr_opt": o.log2_x_opt, "ci": log2_ci(o.ci), "at_edge": o.at_edge, "method": o.method,
                "shift_octaves": o.log2_x_opt - p.log2_x_opt,
                "shift_ci": [finite_or_none(float(lo)), finite_or_none(float(hi))],
                "best_loss": o.loss_opt, "loss_at_proxy_lr": at, "loss_at_proxy_lr_how": how,
                "loss_at_proxy_lr_over_best": at / o.loss_opt,
                "loss_at_proxy_lr_over_best_ci": _ratio_ci(table, label, (w, d), n_boot_ratio),
                "log2_lrs": sorted(float(t) for t in sub["log2_lr"].unique()),
                "n_trials": len(sub), "train_s": float(sub["wall_s"].sum()) if "wall_s" in sub else None}
    return {"per_param": per, "fit": fit, "table": table}


def report(out: str | os.PathLike[str] | None = None, wall_s: float | None = None,
           phases: dict[str, float] | None = None) -> dict[str, Any]:
    """Fit whatever trials the log holds and write ``results/width_depth.json`` and ``.png``."""
    import pandas as pd

    from analysis.plots import plot_lr_curves
    from benchmarks._proxy import TrialLog, record_header
    from mutransfer._io import atomic_write_text

    out = Path(out or Path("runs") / "width_depth")
    rows = [r for r in TrialLog(out / "trials.jsonl").rows.values()
            if (r["width"], r["depth"]) in (PROXY, *TARGETS)]
    raw = pd.DataFrame(rows)
    s = summarize(proxy_shared(raw))
    per, fit, table = s["per_param"], s["fit"], s["table"]
    figures: dict[str, Any] = {"per_param": per}
    for label, _, _ in PARAMETRIZATIONS:
        for w, d in TARGETS:
            r = per[label][f"{w}x{d}"]
            if r["measured"]:
                figures[f"drift_shift_octaves_{label}_{w}x{d}"] = r["shift_octaves"]
                figures[f"ratio_loss_at_proxy_lr_{label}_{w}x{d}"] = r["loss_at_proxy_lr_over_best"]
    ran = raw[raw["imported_from"].isna() if "imported_from" in raw else slice(None)]
    ran = ran[ran["shared_with"].isna() if "shared_with" in ran else slice(None)]
    figures["train_s"] = float(ran["wall_s"].sum())
    n_imported = int(raw["imported_from"].notna().sum()) if "imported_from" in raw else 0
    n_shared = int(raw["shared_with"].notna().sum()) if "shared_with" in raw else 0
    if wall_s is not None:
        figures["wall_s"] = wall_s
    png = _plot(table, fit, HERE / "results" / "width_depth.png")
    for label, _, _ in PARAMETRIZATIONS:
        plot_lr_curves(fit, out / f"lr_curves_{label}.png", where={"param": label})
    record = {
        **record_header("width_depth"),
        "setup": {**{k: v for k, v in DEMO_SMALL.items() if k not in ("threads", "device")},
                  "proxy": list(PROXY), "targets": [list(t) for t in TARGETS], "base_depth": PROXY[1],
                  "parametrizations": {label: {"parametrization": kind, "depth_alpha": alpha}
                                       for label, kind, alpha in PARAMETRIZATIONS},
                  "lr_grid": "log2 steps of 1 around a guess, widened until the minimum is interior",
                  "intervals": "95% bootstrap (OptimumFit, 1000 draws); ratio: 200 seed resamples",
                  "n_trials": len(raw) - n_shared, "n_run_here": len(ran), "n_imported": n_imported,
                  "n_diverged": int(raw["diverged"].sum()),
                  "phases_s": phases or {}},
        "figures": figures,
        "figure": str(png.relative_to(HERE)),
    }
    atomic_write_text(HERE / "results" / "width_depth.json", json.dumps(record, indent=2) + "\n")
    return record


def _plot(table: Any, fit: Any, path: Path) -> Path:
    """Seed-averaged loss vs log2 LR per (param, width, depth), the proxy's optimum marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PARAMETRIZATIONS), figsize=(5 * len(PARAMETRIZATIONS), 3.8), sharey=True)
    for ax, (label, _, _) in zip(axes, PARAMETRIZATIONS, strict=True):
        p = fit.group((label, *PROXY))
        for (w, d), df in table[table["param"] == label].groupby(["width", "depth"]):
            curve = df.groupby("log2_lr")["loss"].mean().sort_index()
            o = fit.group((label, w, d))
            ax.plot(curve.index, curve.to_numpy(), "o-", label=f"({w}, {d}): 2^{o.log2_x_opt:.2f}, "
                    f"{df['seed'].nunique()} seed(s)")
            ax.plot([o.log2_x_opt], [o.loss_opt], "k|", ms=12)
        ax.axvline(p.log2_x_opt, color="grey", ls="--", lw=1, label="proxy optimum")
        ax.set(title=label, xlabel="log2 LR")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("eval loss (seed mean)")
    fig.suptitle("proxy (32, 2) moved to (256, 8) and (256, 16)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def import_proxy(csv: str | os.PathLike[str], out: Path) -> int:
    """Add the μP rows at the proxy (width 32, depth 2) of a ``mutransfer demo --size small``
    ``results.csv`` to ``out``/trials.jsonl, keeping only rows whose every hyperparameter
    column equals this benchmark's proxy config (the same trainer on the same data repeats
    them bit for bit on CPU). Returns rows added."""
    import dataclasses

    import pandas as pd

    from benchmarks._proxy import TrialLog, log
    from mutransfer.training.config import ALIASES, TrainConfig

    table = pd.read_csv(csv)
    trials = TrialLog(out / "trials.jsonl")
    # at the proxy (the base width) every readout_init but zero is the same init: a demo row
    # of mup's constant readout (the default before fan_in) is this benchmark's run, bit for bit
    names = set(ALIASES) - {"device", "threads", "readout_init"}
    added = 0
    for _, r in table.iterrows():
        t = math.log2(float(r["lr"]))
        if str(r.get("readout_init", "constant")) == "zero":
            continue
        if (str(r["parametrization"]) != "mup" or (int(r["width"]), int(r["depth"])) != PROXY
                or r.get("state", "COMPLETE") != "COMPLETE" or t != round(t)):
            continue
        cfg = TrainConfig.from_flat({**DEMO_SMALL, "width": PROXY[0], "depth": PROXY[1],
                                     "parametrization": "mup", "lr": float(r["lr"]), "seed": int(r["seed"])})
        model = dataclasses.asdict(cfg.model_config())  # None model fields: the preset's value
        want = {k: model.get(k) if v is None else v for k, v in cfg.to_flat().items()}
        same = all(str(want[c]) == str(r[c]) or (isinstance(want[c], float) and float(r[c]) == want[c])
                   for c in table.columns if c in names and not pd.isna(r[c]))
        point = {"param": "mup", "width": PROXY[0], "depth": PROXY[1], "log2_lr": t, "seed": int(r["seed"])}
        if same and trials.get(point) is None:
            trials.add(point, {"lr": float(r["lr"]), "loss": float(r["loss"]),
                               "diverged": bool(r["diverged"]), "wall_s": float(r["wall_s"]),
                               "imported_from": str(csv)})
            added += 1
    log(f"imported {added} proxy trials from {csv}")
    return added


def run(seeds: tuple[int, ...] = (0, 1), deep_seeds: tuple[int, ...] = (0,),
        out: str | os.PathLike[str] | None = None, budget_s: float = math.inf,
        wall_s: float = math.inf) -> dict[str, Any]:
    """The whole benchmark (``python -m benchmarks width_depth``): train, then report."""
    t0 = time.perf_counter()
    phases = train_all(seeds, deep_seeds, out, budget_s, wall_s)
    return report(out, time.perf_counter() - t0, phases)


def _ints(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x.strip())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=_ints, default=(0, 1), help="seeds (default 0,1)")
    parser.add_argument("--deep-seeds", type=_ints, default=(0,),
                        help="seeds of the deepest target's first pass (default 0); the rest follow")
    parser.add_argument("--budget-s", type=float, default=math.inf,
                        help="CPU seconds of training after which no trial starts (default: none)")
    parser.add_argument("--wall-s", type=float, default=math.inf,
                        help="wall seconds after which no trial starts (default: none)")
    parser.add_argument("--import-csv", default=None, help="first add the proxy's rows of this results.csv")
    parser.add_argument("--report-only", action="store_true", help="fit the trials already run")
    parser.add_argument("--out", default=None, help="trial log dir (default runs/width_depth)")
    a = parser.parse_args()
    if a.import_csv:
        import_proxy(a.import_csv, Path(a.out or Path("runs") / "width_depth"))
    rec = report(a.out) if a.report_only else run(a.seeds, a.deep_seeds, a.out, a.budget_s, a.wall_s)
    print(json.dumps(rec["figures"], indent=2))
