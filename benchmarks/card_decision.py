"""Any card judged at the card-regret benchmark's target, as that benchmark judged its own.

The card's LR and batch are trained at the target (w256 d8 on 2^17 tokens of the embedded
corpus, the ``cpu`` size) on the decision's fresh seeds with the benchmark's fixed recipe
(weight decay, warmup and WSD decay held; only LR and batch are the card's), beside the
direct scan's top 3 configs on the same seeds (their runs come back from the committed
cache), and R = the card's loss ÷ the best of them, seed-paired, with a 90% paired
bootstrap interval (:func:`benchmarks.card_regret.paired_ratio`). The bar: the interval's
upper end <= 1.005.

    python -m benchmarks.card_decision CARD.yaml --name tune_30m --workers 2

writes ``results/card_decision_NAME.json``. The card comes from any command (e.g. ``mutransfer
tune``, whose command line the record keeps under ``--made-by``); this module only reads it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RECORD = HERE / "results" / "card_regret.json"
CACHE = HERE / "results" / "card_regret_cpu_cache" / "trials.jsonl"


def judge(card_path: str | Path, *, out: Path, workers: int = 1, made_by: str | None = None,
          max_minutes: float = 120.0) -> dict[str, Any]:
    """The card's R at the card-regret target (module docstring)."""
    from benchmarks._proxy import record_header
    from benchmarks.card_regret import SIZES, Runner, paired_ratio
    from mutransfer.card.build import load_card

    record = json.loads(RECORD.read_text())
    setup, decision = record["setup"], record["decision"]
    card = load_card(card_path)
    tgt = setup["target"]
    t, b = card.get("target") or {}, card.get("batch") or {}
    have = (t.get("width"), t.get("depth"), float(t.get("tokens") or 0), b.get("seq_len"))
    want = (tgt["width"], tgt["depth"], float(tgt["tokens"]), tgt["seq_len"])
    if have != want:
        raise ValueError(f"the card's target (width, depth, tokens, context) {have} is not the benchmark's {want}")
    sz = SIZES[setup["size"]]
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "trials.jsonl").exists():  # the committed runs: the scan's top 3 on these seeds
        shutil.copyfile(CACHE, out / "trials.jsonl")
    runner = Runner(sz, out, time.time() + 60.0 * max_minutes, workers)
    fixed = setup["held_fixed"]
    common = {"tokens": float(tgt["tokens"]), "width": tgt["width"], "depth": tgt["depth"],
              "weight_decay": fixed["weight_decay"], "warmup_tokens": fixed["warmup_tokens"],
              "decay_fraction": fixed["decay_fraction"]}
    seeds = decision["seeds"]
    lr, batch = float(f"{card['optimizer']['lr']:.6g}"), int(card["batch"]["sequences"])
    runs = [{"where": "target", "parametrization": "completep", "lr": lr, "batch": batch, "seed": s, **common}
            for s in seeds]
    points = [runner._point(**kw)[0] for kw in runs]  # the cache keys of the card's runs
    runner.prefetch(runs)
    mine = [runner.loss(**kw) for kw in runs]
    scan = {n: m for n, m in decision["members"].items() if n.startswith("scan_")}
    theirs = {n: [runner.loss(where="target", parametrization=m["parametrization"], lr=m["lr"],
                              batch=m["batch_sequences"], seed=s, cached_only=True, **common) for s in seeds]
              for n, m in scan.items()}
    ok = [i for i in range(len(seeds)) if mine[i] is not None and all(v[i] is not None for v in theirs.values())]
    if len(ok) < 2:
        raise ValueError(f"only {len(ok)} seed(s) have the card's run and the scan's cached runs")
    ratio = paired_ratio([mine[i] for i in ok], [[v[i] for i in ok] for v in theirs.values()])
    cpu_s = sum(float(r.get("cpu_s", 0.0)) for r in (runner.trials.get(p) for p in points) if r)
    return {**record_header("card_decision"),
            "card": {"path": str(card_path), "made_by": made_by, "lr": lr, "batch_sequences": batch,
                     "batch_tokens": card["batch"]["tokens"], "trust": card["trust"]["summary"],
                     "warnings": card["projected"]["warnings"], "audit_passed": card["audit"]["passed"],
                     "losses": mine},
            "scan": {n: {"lr": m["lr"], "batch_sequences": m["batch_sequences"], "losses": theirs[n]}
                     for n, m in scan.items()},
            "hand_placed_card": decision["members"]["card"], "seeds": [seeds[i] for i in ok], "ratio": ratio,
            "passed": bool(ratio["ci"][1] <= 1.005), "cpu_s_card_runs": cpu_s}


if __name__ == "__main__":
    from mutransfer._io import atomic_write_text

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("card", help="the card to judge (YAML or JSON)")
    parser.add_argument("--name", required=True, help="the record's name: results/card_decision_NAME.json")
    parser.add_argument("--made-by", default=None, help="the command that made the card (recorded)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", default=None, help="working folder (default runs/card_decision_NAME)")
    a = parser.parse_args()
    res = judge(a.card, out=Path(a.out or f"runs/card_decision_{a.name}"), workers=a.workers, made_by=a.made_by)
    path = HERE / "results" / f"card_decision_{a.name}.json"
    atomic_write_text(path, json.dumps(res, indent=2, default=float) + "\n")
    print(f"wrote {path}: R = {res['ratio']['ratio']:.4f} [{res['ratio']['ci'][0]:.4f}, {res['ratio']['ci'][1]:.4f}]"
          f" on {len(res['seeds'])} seeds; passed: {res['passed']}")
