"""The coordinate check at its defaults on real Hugging Face shapes: does μP pass and SP fail?

Seven families at the released models' configs (:data:`mutransfer.models.hf_families.RELEASED`:
head_dim, GQA ratio, MLP ratio, biases, tying, soft-caps as released), each at three widths its
head rule can represent (``keep_head_dim`` where the shape allows three at most 1024, else
``keep_heads``), depth 2, on the embedded
stdlib corpus: the coordinate check with ``mutransfer coord-check``'s defaults (Adam, 5
steps, 3 seeds, one batch of 8 × 64 tokens, the ladder's default tolerance) and its default
LR for a model that is not ours (:func:`mutransfer.checks.coord_check.default_lr`: 0.1 × the init
std of its hidden matrices, 2e-3 for Hugging Face's 0.02), or ``--lr``. Target: μP passes
and SP fails on every family.

    python -m benchmarks.hf_coord_default [--lr 1e-2] [--families llama,qwen2,...] [--seeds 3]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent

#: family -> (its released config in :data:`mutransfer.models.hf_families.RELEASED`, head
#: rule, widths): Llama-3.2-1B, Qwen2.5-0.5B, GPT-2 (124M), Gemma-2-2B, Phi-3-mini, OLMo-2-1B,
#: Mistral-7B-v0.3.
FAMILIES: dict[str, tuple[str, str, tuple[int, ...]]] = {
    "llama": ("llama-3.2-1b", "keep_head_dim", (256, 512, 1024)),
    "qwen2": ("qwen2.5-0.5b", "keep_heads", (224, 448, 896)),
    "gpt2": ("gpt2", "keep_head_dim", (256, 512, 1024)),
    "gemma2": ("gemma-2-2b", "keep_heads", (144, 288, 576)),
    "phi3": ("phi-3-mini-4k", "keep_head_dim", (192, 384, 768)),
    "olmo2": ("olmo-2-1b", "keep_head_dim", (256, 512, 1024)),
    "mistral": ("mistral-7b-v0.3", "keep_heads", (256, 512, 1024)),
}
DEPTH, STEPS, BATCH, SEQ = 2, 5, 8, 64


def check_family(name: str, lr: float | None, seeds: int, folder: Path) -> dict[str, Any]:
    """SP and μP coordinate checks of one family at its widths, depth 2."""
    import torch

    from mutransfer.checks.coord_check import coord_check, default_lr
    from mutransfer.models.builder import logits_of
    from mutransfer.models.hf_families import RELEASED
    from mutransfer.models.source import build_model, parse_model
    from mutransfer.training.data import DataConfig, load_dataset

    released, rule, widths = FAMILIES[name]
    fields = RELEASED[released]
    path = folder / name / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fields))
    source = parse_model(f"hf:{path}", head_rule=rule)
    data = load_dataset(DataConfig(source="stdlib"))
    batch = data.get_batch("train", 0, BATCH, SEQ, seed=0)

    def builder(width: int) -> torch.nn.Module:
        return build_model(source, width, DEPTH, vocab_size=data.vocab_size)

    def loss_fn(model: torch.nn.Module, b: Any) -> torch.Tensor:
        logits = logits_of(model(b[0]))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), b[1].flatten())

    use_lr = lr if lr is not None else default_lr(builder(min(widths)), "adamw")
    out: dict[str, Any] = {"released": released, "head_rule": rule, "widths": list(widths), "lr": use_lr}
    for kind in ("sp", "mup"):
        t0 = time.perf_counter()
        r = coord_check(builder, batch, kind=kind, widths=widths, steps=STEPS, seeds=seeds, lr=use_lr,
                        loss_fn=loss_fn)
        worst = r.worst()
        out[kind] = {"passed": r.passed, "max_slope": round(float(r.slopes["slope"].max()), 3),
                     "min_slope": round(float(r.slopes["slope"].min()), 3), "worst_module": worst["module"],
                     "worst_slope": round(float(worst["slope"]), 3), "tol": round(r.tol, 4),
                     "wall_s": round(time.perf_counter() - t0, 1)}
        print(f"{name} {kind} lr={use_lr:.3g}: passed={r.passed} worst {worst['slope']:+.2f} at "
              f"{worst['module']} (tol {r.tol:.2f})", file=sys.stderr, flush=True)
    return out


def run(lr: float | None = None, families: list[str] | None = None, seeds: int = 3) -> dict[str, Any]:
    import torch

    import mutransfer
    from mutransfer._io import atomic_write_text

    names = families or list(FAMILIES)
    t0 = time.perf_counter()
    # another setup, another file: the 3-seed full-width record stays as it was
    tag = ("" if lr is None else f"_lr{lr:g}") + ("" if seeds == 3 else f"_{seeds}seeds")
    path = HERE / "results" / f"hf_coord_default{tag}.json"
    # families measured before under the same setup are kept: a 2-core machine runs them in parts
    earlier = json.loads(path.read_text()) if path.exists() else {}
    per: dict[str, Any] = {k: v for k, v in (earlier.get("per_family") or {}).items()
                           if (earlier.get("setup") or {}).get("seeds") == seeds and k not in names
                           and k in FAMILIES}
    with tempfile.TemporaryDirectory() as tmp:
        per.update({n: check_family(n, lr, seeds, Path(tmp)) for n in names})
    per = {n: per[n] for n in FAMILIES if n in per}
    record = {
        "benchmark": "hf_coord_default",
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "device": "cpu"},
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": __import__("transformers").__version__,
                     "mutransfer": mutransfer.__version__},
        "setup": {"depth": DEPTH, "steps": STEPS, "seeds": seeds, "batch": [BATCH, SEQ], "optimizer": "adamw",
                  "lr": lr if lr is not None else "default (coord_check.default_lr)", "data": "stdlib",
                  "torch_threads": torch.get_num_threads()},
        "per_family": per,
        "figures": {"all_mup_pass": all(v["mup"]["passed"] for v in per.values()),
                    "all_sp_fail": all(not v["sp"]["passed"] for v in per.values())},
        "wall_s": round(time.perf_counter() - t0, 1) + sum(
            v[k]["wall_s"] for n, v in per.items() if n not in names for k in ("sp", "mup")),
    }
    record["passed"] = record["figures"]["all_mup_pass"] and record["figures"]["all_sp_fail"]
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lr", type=float, default=None, help="fixed LR (default: the check's default rule)")
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated of {', '.join(FAMILIES)}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per width (the check's default 3)")
    a = parser.parse_args()
    bad = [f for f in a.families.split(",") if f not in FAMILIES]
    if bad:
        parser.error(f"unknown famil(ies) {', '.join(bad)}; choose from {', '.join(FAMILIES)}")
    rec = run(a.lr, a.families.split(","), a.seeds)
    print(json.dumps({"figures": rec["figures"], "wall_s": rec["wall_s"]}, indent=2))
