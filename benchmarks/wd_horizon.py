"""Weight decay over the horizon: does the optimal AdamW decay hold per step, or as a
fraction of the run?

Two rules carry a tuned weight decay lambda (PyTorch AdamW's coupled ``weight_decay``,
per-step decay eta·lambda) from a proxy run to a longer one:

* ``per_step`` (rule a): eta·lambda per step held fixed, so the longer run takes the
  proxy's lambda (at the same LR) and gets proportionally more decay exposure;
* ``fraction`` (rule b): the AdamW timescale tau_iter = 1/(eta·lambda) held as a fixed
  fraction of the run's iterations (Wang & Aitchison 2024, "How to set AdamW's weight decay
  as you scale model and dataset size"; :func:`analysis.tau.tau_from`), so a run 4x longer
  takes eta·lambda 4x smaller.

On the card benchmark's CPU proxy (llama-small, width 32, depth 2, head 16, context 16,
CompleteP; WSD with 1% warmup and the last 20% decayed, 256 held-out sequences) at batch 8
sequences and two horizons 4x apart, 2^15 and 2^17 tokens (256 and 1,024 steps), on seeds
0-3 (the same seeds at both horizons, so every comparison is paired):

1. an LR scan at lambda 0.1 per horizon (half octaves, widened until its best LR is
   interior);
2. at each horizon's best grid LR a lambda scan in octaves around 0.1 (widened until
   interior), filled in half octaves beside its best, plus lambda = 0 for scale;
3. the LR check: at lambda_best/4, lambda_best and 4·lambda_best the LR one half octave
   each side of the horizon's best, and the fitted LR optimum per lambda (does lambda move
   the LR optimum?);
4. the two rules' predictions for the long run, from the short run's fitted optimum:
   (eta·lambda)_long = (eta·lambda)*_short (a) or a quarter of it (b), each trained at the
   long horizon on the same seeds.

Reported: lambda* per horizon (:class:`analysis.OptimumFit` on log lambda, its bootstrap
interval), r = (eta·lambda)*_long / (eta·lambda)*_short with a paired seed-bootstrap
interval (the same resampled seeds at both horizons; r is 1 under rule a and 1/4 under
rule b), and each rule's regret at the long horizon: its loss ÷ the best lambda's loss,
seed by seed. The decision (:func:`decide`): the rule whose r lies in the interval when the
other's does not; otherwise inconclusive.

    python -m benchmarks.wd_horizon [--out runs/wd_horizon]

Writes ``results/wd_horizon.json`` (730 CPU-s, 33 min wall on the loaded 2-core machine, one
thread); finished runs are kept in ``OUT/trials.jsonl``, so a re-run resumes.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "wd_horizon.json"
SEEDS = (0, 1, 2, 3)
SEQ, BATCH = 16, 8
HORIZONS = {"short": 2**15, "long": 2**17}
#: Where each horizon's LR scan starts (log2): the card proxy's best LR at batch 4 and 2^14
#: tokens (2^-7, results/beta2_halflife.json) moved to batch 8 by the square-root rule; the
#: longer run starts half an octave lower.
LR_START = {"short": -6.5, "long": -7.0}
REF_WD = 0.1
RULES = {"per_step": 1.0, "fraction": 0.25}
"""Each rule's predicted (eta·lambda)*_long / (eta·lambda)*_short at a 4x longer run."""
MODEL = {"preset": "llama-small", "width": 32, "depth": 2, "head_dim": 16, "seq_len": SEQ,
         "base_width": 32, "base_depth": 2, "parametrization": "completep"}


def unavailable() -> str | None:
    """Nothing is missing on any machine (about 12 CPU-minutes)."""
    return None


def _flat(tokens: int, lr: float, wd: float, seed: int) -> dict[str, Any]:
    steps = tokens // (BATCH * SEQ)
    return {**MODEL, "lr": lr, "batch_size": BATCH, "steps": steps, "seed": seed, "schedule": "wsd",
            "decay_fraction": 0.2, "warmup_steps": max(1, round(0.01 * steps)), "weight_decay": wd,
            "wd_mode": "coupled", "eval_every": 0, "eval_sequences": 256, "threads": 1, "device": "cpu"}


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def lambda_optima(rows: Sequence[dict[str, Any]], seeds: Sequence[int]) -> dict[str, float]:
    """(eta·lambda)* per horizon from rows ``{horizon, lr, wd, seed, loss}`` restricted to
    ``seeds`` (repeats allowed: a bootstrap draw), by :class:`analysis.OptimumFit` on log
    lambda over the positive lambdas (NaN where a horizon's optimum sits on its grid's edge)."""
    import pandas as pd

    from analysis.optimum import OptimumFit

    by_seed: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r["wd"] > 0:
            by_seed.setdefault(int(r["seed"]), []).append(r)
    draw = [{**r, "seed": i} for i, s in enumerate(seeds) for r in by_seed.get(int(s), [])]
    fit = OptimumFit(x="wd", y="loss", group_by=("horizon",), n_boot=0).fit(pd.DataFrame(draw))
    out = {}
    for o in fit.optima_:
        lr = {r["lr"] for r in draw if r["horizon"] == o.key}
        if len(lr) != 1:
            raise ValueError(f"the lambda scan at {o.key!r} must be at one LR, got {sorted(lr)}")
        out[str(o.key)] = math.nan if o.at_edge else lr.pop() * o.x_opt
    return out


def paired_ratio(rows: Sequence[dict[str, Any]], seeds: Sequence[int], n_boot: int = 1000,
                 level: float = 0.9, seed: int = 0) -> dict[str, Any]:
    """r = (eta·lambda)*_long / (eta·lambda)*_short and its paired seed-bootstrap interval:
    each replicate draws seeds with replacement and refits both horizons on the same draw.
    Replicates where either optimum sits on its grid's edge count as failed (recorded)."""
    import numpy as np

    seeds = list(seeds)
    full = lambda_optima(rows, seeds)
    rng = np.random.default_rng(seed)
    boot, failed = [], 0
    for _ in range(n_boot):
        opt = lambda_optima(rows, [seeds[i] for i in rng.integers(0, len(seeds), len(seeds))])
        r = opt["long"] / opt["short"]
        if math.isfinite(r):
            boot.append(r)
        else:
            failed += 1
    q = (1.0 - level) / 2.0
    ci = [float(np.quantile(boot, q)), float(np.quantile(boot, 1 - q))] if boot else [math.nan, math.nan]
    return {"ratio": full["long"] / full["short"], "ci": ci, "level": level, "n_boot": n_boot,
            "n_failed": failed, "eta_lambda_opt": full}


def decide(ci: Sequence[float], rules: dict[str, float] = RULES) -> str:
    """The rule whose predicted ratio lies in ``ci`` when no other's does; else ``inconclusive``."""
    inside = [name for name, r in rules.items() if ci[0] <= r <= ci[1]]
    return inside[0] if len(inside) == 1 else "inconclusive"


def run(out: str | Path | None = None, write: bool = True) -> dict[str, Any]:
    import pandas as pd

    from analysis.optimum import OptimumFit
    from benchmarks._proxy import TrialLog, bracket_scans, log, record_header
    from mutransfer._io import atomic_write_text
    from mutransfer.training.config import TrainConfig
    from mutransfer.training.train import train

    t0 = time.perf_counter()
    trials = TrialLog(Path(out or "runs/wd_horizon") / "trials.jsonl")

    def loss(h: str, lr: float, wd: float, seed: int) -> float:
        point = {"horizon": h, "lr": _r(lr), "wd": _r(wd), "seed": seed}
        row = trials.get(point)
        if row is None:
            c0 = time.process_time()
            res = train(TrainConfig.from_flat(_flat(HORIZONS[h], _r(lr), _r(wd), seed)))
            row = trials.add(point, {"loss": float(res.loss), "diverged": bool(res.diverged),
                                     "cpu_s": time.process_time() - c0})
            log(f"  {h} lr {lr:.4g} wd {wd:.4g} seed {seed}: {row['loss']:.4f}")
        return float(row["loss"]) if math.isfinite(row["loss"]) else math.inf

    def mean(h: str, lr: float, wd: float) -> float:
        return sum(loss(h, lr, wd, s) for s in SEEDS) / len(SEEDS)

    # 1. LR at the reference lambda
    lr_scans = bracket_scans(lambda h, t: [loss(h, 2.0**t, REF_WD, s) for s in SEEDS],  # type: ignore
                             {h: [c - 1, c - 0.5, c, c + 0.5, c + 1] for h, c in LR_START.items()},
                             lo={h: c - 4 for h, c in LR_START.items()},
                             hi={h: c + 4 for h, c in LR_START.items()}, step=0.5)
    lr_best = {h: min(sc, key=sc.__getitem__) for h, sc in lr_scans.items()}  # log2 LR
    log(f"[wd_horizon] best grid LR: {({h: 2.0**t for h, t in lr_best.items()})}")

    # 2. lambda in octaves at each horizon's LR, then half octaves beside the best
    l0 = math.log2(REF_WD)
    wd_scans = bracket_scans(lambda h, k: [loss(h, 2.0 ** lr_best[h], 2.0**k, s)  # type: ignore
                                           for s in SEEDS],
                             {h: [l0 + k for k in range(-3, 5)] for h in HORIZONS},
                             lo={h: l0 - 10 for h in HORIZONS}, hi={h: l0 + 10 for h in HORIZONS}, step=1.0)
    for h, sc in wd_scans.items():
        kb = min(sc, key=sc.__getitem__)
        for k in (kb - 0.5, kb + 0.5):
            sc[k] = mean(h, 2.0 ** lr_best[h], 2.0**k)
        sc[-math.inf] = mean(h, 2.0 ** lr_best[h], 0.0)  # lambda = 0, for scale
    rows = [{"horizon": h, "lr": _r(2.0 ** lr_best[h]), "wd": 0.0 if k == -math.inf else _r(2.0**k),
             "seed": s, "loss": loss(h, 2.0 ** lr_best[h], 0.0 if k == -math.inf else 2.0**k, s)}
            for h, sc in wd_scans.items() for k in sc for s in SEEDS]
    wd_fit = OptimumFit(x="wd", y="loss", group_by=("horizon",), n_boot=1000, level=0.9).fit(
        pd.DataFrame([r for r in rows if r["wd"] > 0]))
    ratio = paired_ratio(rows, SEEDS)
    verdict = decide(ratio["ci"])

    # 3. does lambda move the LR optimum? LR +-0.5 octave at lambda_best/4, lambda_best, 4·lambda_best
    lr_check: dict[str, Any] = {}
    for h in HORIZONS:
        kb = min((k for k in wd_scans[h] if math.isfinite(k)), key=wd_scans[h].__getitem__)
        crow = [{"wd": _r(2.0**k), "lr": _r(2.0**t), "seed": s, "loss": loss(h, 2.0**t, 2.0**k, s)}
                for k in (kb - 2, kb, kb + 2) for t in (lr_best[h] - 0.5, lr_best[h], lr_best[h] + 0.5)
                for s in SEEDS]
        cf = OptimumFit(x="lr", y="loss", group_by=("wd",), n_boot=500, level=0.9).fit(pd.DataFrame(crow))
        lr_check[h] = {f"{o.key:.6g}": {"lr_opt": o.x_opt, "lr_ci": list(o.ci), "at_edge": o.at_edge,
                                        "octaves_from_scan_lr": math.log2(o.x_opt) - lr_best[h]}
                       for o in cf.optima_}

    # 4. each rule's prediction for the long run, from the short run's fitted optimum, trained there
    lr_long = 2.0 ** lr_best["long"]
    best_long = min((k for k in wd_scans["long"] if math.isfinite(k)), key=wd_scans["long"].__getitem__)
    regret: dict[str, Any] = {}
    for name, factor in RULES.items():
        if not math.isfinite(ratio["eta_lambda_opt"]["short"]):  # the short run's optimum is a bound
            break
        wd = _r(ratio["eta_lambda_opt"]["short"] * factor / lr_long)
        per_seed = [loss("long", lr_long, wd, s) / loss("long", lr_long, 2.0**best_long, s) for s in SEEDS]
        regret[name] = {"weight_decay": wd, "per_seed": per_seed, "mean": sum(per_seed) / len(per_seed)}

    per_h: dict[str, Any] = {}
    for h in HORIZONS:
        o = wd_fit.group(h)
        per_h[h] = {"tokens": HORIZONS[h], "steps": HORIZONS[h] // (BATCH * SEQ),
                    "lr_scan": {f"{2.0**t:.6g}": v for t, v in sorted(lr_scans[h].items())},
                    "lr": 2.0 ** lr_best[h],
                    "wd_scan": {("0" if k == -math.inf else f"{2.0**k:.6g}"): v
                                for k, v in sorted(wd_scans[h].items())},
                    "wd_opt": o.x_opt, "wd_ci": list(o.ci), "at_edge": o.at_edge,
                    "eta_lambda_opt": 2.0 ** lr_best[h] * o.x_opt,
                    "tau_fraction_opt": (BATCH * SEQ) / (2.0 ** lr_best[h] * o.x_opt * HORIZONS[h]),
                    "loss_opt": o.loss_opt, "loss_wd0": wd_scans[h][-math.inf]}
    record = {
        **record_header("wd_horizon"),
        "setup": {"model": MODEL, "batch_sequences": BATCH, "horizons_tokens": HORIZONS, "seeds": list(SEEDS),
                  "reference_weight_decay": REF_WD, "rules_predicted_ratio": RULES,
                  "recipe": "wsd decay 0.2, warmup 1%, coupled AdamW decay, 256 held-out sequences, "
                            "1 thread"},
        "per_horizon": per_h, "ratio_long_over_short": ratio, "lr_check": lr_check, "regret_long": regret,
        "verdict": verdict,
        "figures": {"ratio_eta_lambda_long_over_short": ratio["ratio"],
                    "ratio_ci_lo": ratio["ci"][0], "ratio_ci_hi": ratio["ci"][1],
                    **{f"ratio_regret_{k}": v["mean"] for k, v in regret.items()}, "verdict": verdict},
        "cpu_s": sum(r["cpu_s"] for r in trials.rows.values()), "wall_s": time.perf_counter() - t0,
    }
    if write:
        atomic_write_text(RESULTS, json.dumps(record, indent=2, default=float) + "\n")
    return record


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, help="run dir (default runs/wd_horizon)")
    a = parser.parse_args()
    print(json.dumps(run(a.out)["figures"], indent=2))
