"""beta2 by token half-life: does keeping Adam's second-moment half-life fixed in tokens
change the loss or the best batch?

The card-regret cpu proxy (llama-small, width 32, depth 2, head 16, context 16,
CompleteP) on its largest budget, 2^14 tokens, at batches of 1, 4 and 32 sequences, each
with its own LR scan (half octaves around the square-root rule from the proxy's optimum,
widened until its best LR is interior), 3 seeds, two arms on the same seeds and grids:

* ``fixed``: beta2 = 0.95 at every batch (the trainer's default);
* ``halflife``: beta2 = 0.5^(B_tokens / t½) with t½ = 864.9 tokens, the half-life of
  beta2 0.95 at the proxy's best batch of 4 sequences (64 tokens), i.e. the rule
  ``beta2_halflife_tokens`` applies (Marek et al. 2025, "Small batch size training for
  language models"): beta2 0.987 at batch 1 and 0.663 at batch 32.

At batch 4 the arms are the same run, so their losses must agree bit for bit (a check
of the rule, recorded). Reported per batch and arm: the seed-mean loss at each LR, the
fitted optimum (:class:`analysis.OptimumFit`), and halflife ÷ fixed at each arm's own best
grid LR, per seed; and the best batch under each arm.

    python -m benchmarks.beta2_halflife [--out runs/beta2_halflife]

Writes ``results/beta2_halflife.json``; finished runs are kept in ``OUT/trials.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "beta2_halflife.json"
SEEDS = (0, 1, 2)
BATCHES = (1, 4, 32)
SEQ = 16
TOKENS = 2**14
REF_BATCH, REF_BETA2, REF_LR = 4, 0.95, 2.0**-7  # the proxy's best cell at 2^14 tokens
HALFLIFE = REF_BATCH * SEQ * math.log(0.5) / math.log(REF_BETA2)
MODEL = {"preset": "llama-small", "width": 32, "depth": 2, "head_dim": 16, "seq_len": SEQ,
         "base_width": 32, "base_depth": 2, "parametrization": "completep"}


def _flat(arm: str, batch: int, lr: float, seed: int) -> dict[str, Any]:
    steps = TOKENS // (batch * SEQ)
    flat = {**MODEL, "lr": lr, "batch_size": batch, "steps": steps, "seed": seed, "schedule": "wsd",
            "decay_fraction": 0.2, "warmup_steps": max(1, round(0.01 * steps)), "weight_decay": 0.1,
            "wd_mode": "coupled", "eval_every": 0, "eval_sequences": 256, "threads": 1, "device": "cpu"}
    if arm == "halflife":
        flat["beta2_halflife_tokens"] = HALFLIFE
    return flat


def run(out: str | Path | None = None, write: bool = True) -> dict[str, Any]:
    import pandas as pd

    from analysis.optimum import OptimumFit
    from benchmarks._proxy import TrialLog, bracket_scans, log, record_header
    from mutransfer._io import atomic_write_text
    from mutransfer.training.config import TrainConfig
    from mutransfer.training.train import train

    t0 = time.perf_counter()
    trials = TrialLog(Path(out or "runs/beta2_halflife") / "trials.jsonl")

    def loss(arm: str, batch: int, t: float, seed: int) -> float:
        lr = float(f"{2.0**t:.6g}")
        point = {"arm": arm, "batch": batch, "lr": lr, "seed": seed}
        row = trials.get(point)
        if row is None:
            c0 = time.process_time()
            res = train(TrainConfig.from_flat(_flat(arm, batch, lr, seed)))
            row = trials.add(point, {"loss": float(res.loss), "diverged": bool(res.diverged),
                                     "cpu_s": time.process_time() - c0})
            log(f"  {arm} batch {batch} lr {lr:.4g} seed {seed}: {row['loss']:.4f}")
        return float(row["loss"]) if math.isfinite(row["loss"]) else math.inf

    keys = [(arm, b) for arm in ("fixed", "halflife") for b in BATCHES]
    centre = {k: round(2 * (math.log2(REF_LR) + 0.5 * math.log2(k[1] / REF_BATCH))) / 2 for k in keys}
    scans = bracket_scans(lambda k, t: [loss(k[0], k[1], t, s) for s in SEEDS],  # type: ignore[index]
                          {k: [c - 1, c - 0.5, c, c + 0.5, c + 1] for k, c in centre.items()},
                          lo={k: c - 4 for k, c in centre.items()}, hi={k: c + 4 for k, c in centre.items()},
                          step=0.5)
    rows = [{"arm": arm, "batch_size": b, "lr": float(f"{2.0**t:.6g}"), "seed": s, "loss": loss(arm, b, t, s)}
            for (arm, b), sc in scans.items() for t in sc for s in SEEDS]
    df = pd.DataFrame(rows)
    fit = OptimumFit(x="lr", y="loss", group_by=("arm", "batch_size"), n_boot=500).fit(df)
    per: dict[str, Any] = {}
    for b in BATCHES:
        cell: dict[str, Any] = {}
        best_t: dict[str, float] = {}
        for arm in ("fixed", "halflife"):
            sc = scans[(arm, b)]  # type: ignore[index]
            best_t[arm] = min(sc, key=sc.__getitem__)
            o = fit.group((arm, b))
            cell[arm] = {"beta2": REF_BETA2 if arm == "fixed" else 0.5 ** (b * SEQ / HALFLIFE),
                         "scan": {f"{2.0**t:.6g}": v for t, v in sorted(sc.items())},
                         "best_grid_lr": 2.0 ** best_t[arm], "best_grid_loss": sc[best_t[arm]],
                         "lr_opt": o.x_opt, "lr_ci": list(o.ci), "loss_opt": o.loss_opt, "at_edge": o.at_edge}
        per_seed = [loss("halflife", b, best_t["halflife"], s) / loss("fixed", b, best_t["fixed"], s)
                    for s in SEEDS]
        cell["ratio_halflife_over_fixed"] = {"per_seed": per_seed, "mean": sum(per_seed) / len(per_seed)}
        per[str(b)] = cell
    same = all(loss("fixed", REF_BATCH, t, s) == loss("halflife", REF_BATCH, t, s)
               for t in scans[("fixed", REF_BATCH)] if t in scans[("halflife", REF_BATCH)] for s in SEEDS)
    best_batch = {arm: min(BATCHES, key=lambda b, arm=arm: per[str(b)][arm]["best_grid_loss"])
                  for arm in ("fixed", "halflife")}
    record = {
        **record_header("beta2_halflife"),
        "setup": {"model": MODEL, "tokens": TOKENS, "batches": list(BATCHES), "seeds": list(SEEDS),
                  "halflife_tokens": HALFLIFE, "reference": {"batch": REF_BATCH, "beta2": REF_BETA2},
                  "recipe": "wsd decay 0.2, warmup 1%, weight decay 0.1 coupled, 256 held-out sequences"},
        "per_batch": per, "best_batch": best_batch, "reference_batch_identical": same,
        "cpu_s": sum(r["cpu_s"] for r in trials.rows.values()), "wall_s": time.perf_counter() - t0,
    }
    if write:
        atomic_write_text(RESULTS, json.dumps(record, indent=2, default=float) + "\n")
    return record


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, help="run dir (default runs/beta2_halflife)")
    a = parser.parse_args()
    rec = run(a.out)
    summary = {b: {"ratio": c["ratio_halflife_over_fixed"]["mean"],
                   **{arm: c[arm]["best_grid_loss"] for arm in ("fixed", "halflife")}}
               for b, c in rec["per_batch"].items()}
    summary |= {"best_batch": rec["best_batch"], "identical_at_ref": rec["reference_batch_identical"]}
    print(json.dumps(summary, indent=2))
