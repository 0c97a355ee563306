"""Hugging Face architectures under μP: the coordinate check of each, SP against μP.

For every architecture of :mod:`mutransfer.models.hf_tiny` (tiny configs, random init, no
download), the coordinate check (:mod:`mutransfer.checks.coord_check`) with the README's
settings: Adam, 3 steps at lr 3e-3, one fixed batch of 4 x 32 tokens, widths 32-256,
the check's default tolerance (:func:`mutransfer.checks.coord_check.ladder_tol`: ±0.42 over 32-256).
Reported per architecture and parametrization: the largest log2 slope of activation size
against width (SP grows ~1-2; μP stays inside the band), the worst row, whether the check
passed, and the width-dependent internals μP found and compensated (Gemma's
sqrt(hidden_size) embedding scale). Target: μP passes and SP fails for every one.

    python -m benchmarks.hf_architectures [--seeds N] [--archs llama,gemma2,...]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
# The six the README names first; the others of engines.hf when --archs all.
CORE = ("llama", "qwen2", "mistral", "gemma2", "gpt2", "mixtral")
WIDTHS = (32, 64, 128, 256)
STEPS, LR = 3, 3e-3


def check_arch(arch: str, seeds: int) -> dict[str, Any]:
    """SP and μP coordinate checks of one architecture."""
    import torch

    from mutransfer.checks.coord_check import coord_check
    from mutransfer.models.hf_tiny import hf_loss, tiny_builder
    from mutransfer.parametrize.parametrization import Parametrization

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 128, (4, 33), generator=g)
    tie = arch == "gpt2"  # GPT-2 ties its readout, as the README's check does
    builder = tiny_builder(arch, tie=tie)
    out: dict[str, Any] = {"tie": tie}
    for kind in ("sp", "mup"):
        t0 = time.perf_counter()
        r = coord_check(builder, (x[:, :-1], x[:, 1:]), kind=kind, widths=WIDTHS, steps=STEPS,
                        seeds=seeds, lr=LR, loss_fn=hf_loss)
        worst = r.worst()
        out[kind] = {"max_slope": float(r.slopes["slope"].max()), "min_slope": float(r.slopes["slope"].min()),
                     "worst_module": worst["module"], "worst_slope": float(worst["slope"]),
                     "passed": r.passed, "tol": round(r.tol, 4),
                     "wall_s": round(time.perf_counter() - t0, 1)}
    pz = Parametrization(builder, width=WIDTHS[-1], base_width=WIDTHS[0])
    out["internals"] = [{"module": m.producer, "consumer": m.consumer, "exponent": round(m.exponent, 4)}
                        for m in pz.internal_multipliers]
    return out


def run(seeds: int = 1, archs: Sequence[str] = CORE) -> dict[str, Any]:
    import torch

    import mutransfer
    from mutransfer._io import atomic_write_text
    from mutransfer.checks.coord_check import ladder_tol

    t0 = time.perf_counter()
    per = {a: check_arch(a, seeds) for a in archs}
    figures: dict[str, Any] = {
        "all_mup_pass": all(v["mup"]["passed"] for v in per.values()),
        "all_sp_fail": all(not v["sp"]["passed"] for v in per.values()),
        "max_slope_sp_min": min(v["sp"]["max_slope"] for v in per.values()),
        "max_slope_mup_max": max(v["mup"]["max_slope"] for v in per.values()),
    }
    for a, v in per.items():
        figures[a] = {"slope_sp": round(v["sp"]["max_slope"], 3),
                      "slope_mup": round(v["mup"]["max_slope"], 3),
                      "mup_passed": v["mup"]["passed"], "sp_passed": v["sp"]["passed"]}
    record = {
        "benchmark": "hf_architectures",
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "device": "cpu"},
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": __import__("transformers").__version__,
                     "mutransfer": mutransfer.__version__},
        "setup": {"widths": list(WIDTHS), "steps": STEPS, "lr": LR, "seeds": seeds, "optimizer": "adamw",
                  "batch": [4, 32], "tol": round(ladder_tol(WIDTHS), 4), "archs": list(archs)},
        "figures": figures,
        "per_arch": per,
        "targets": {"mup": "passes the coordinate check", "sp": "fails it"},
        "passed": bool(figures["all_mup_pass"] and figures["all_sp_fail"]),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    atomic_write_text(HERE / "results" / "hf_architectures.json", json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    from mutransfer.models.hf_tiny import ARCHITECTURES

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=1, help="seeds per width (README: 2; 1 fits 3 min)")
    parser.add_argument("--archs", default=",".join(CORE),
                        help=f"comma-separated, or 'all' ({', '.join(ARCHITECTURES)})")
    a = parser.parse_args()
    names = list(ARCHITECTURES) if a.archs == "all" else a.archs.split(",")
    bad = [n for n in names if n not in ARCHITECTURES]
    if bad:
        parser.error(f"unknown architecture(s) {', '.join(bad)}; choose from {', '.join(ARCHITECTURES)}")
    print(json.dumps(run(a.seeds, names)["figures"], indent=2))
