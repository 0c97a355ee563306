"""Benchmark: what one training step of gpt-40m under bf16 autocast asks of a GPU, counted on
the CPU (no GPU needed): kernels, host syncs, matmul FLOPs and non-matmul bytes per step of
the real :class:`mutransfer.training.trainer.Trainer` (:mod:`benchmarks._counting`).

Per step of the loop (``Trainer.run_until``, so whatever the loop does after a step, e.g.
a logging step's host read, counts to that step):

- ``plain``: a step that neither logs nor measures max logits (steps 1-8 of 10);
- ``logging``: the step whose end reads the recent steps' numbers on the host (step 9);
- ``max_logit``: a step that measures the per-layer max attention logit (step 10);
- ``fused_k16``: host syncs per step of a fused group of 16 members (gpt-tiny's shape: a
  sync count does not depend on the width), on plain and logging steps.

Counted as a CUDA build dispatches (``StepCounter(cuda_like=True)``: ``F.rms_norm`` is
one fused kernel each way there, 6 + 15 on this CPU build); ``*_cpu_dispatch`` figures
count one plain step as the CPU build runs it. Kernel and sync counts do not depend on the batch; FLOPs and bytes are linear in it, so
they are counted at batch 1 and 2 and given at batch 16 as f(1) + 15·(f(2) - f(1)).

    python -m benchmarks step_counts                       # label "after"
    python -m benchmarks.step_counts --label before        # record the code as it is as "before"

Writes ``results/step_counts.json`` (one entry per label, the other labels kept) and the
before → after ratios when both are there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parent / "results" / "step_counts.json"
BATCH = 16
TARGETS = {"host_syncs_plain": 0, "kernels_plain_max": 1300, "ratio_nonmatmul_bytes_max": 0.75,
           "fused_k16_syncs_plain": 1}


def _config(preset: str, batch: int, **kw: Any) -> Any:
    from mutransfer.training.config import TrainConfig

    flat = dict(preset=preset, batch_size=batch, steps=1000, lr=1e-3, device="cpu", dtype="bf16", eval_every=0,
                max_logit_every=10, data_max_bytes=300_000)
    return TrainConfig.from_flat({**flat, **kw})


def per_step(run: Any, steps: Any, counter: Any) -> list[dict[str, Any]]:
    """Counts of each step that ``run()`` runs: ``steps`` is the object whose ``train_step``
    starts one (its calls are where the counts are cut)."""
    cuts: list[dict[str, Any]] = []
    inner = steps.train_step

    def cut(*a: Any, **k: Any) -> Any:
        cuts.append(counter.snapshot())
        return inner(*a, **k)

    steps.train_step = cut
    try:
        with counter.counting():
            run()
        cuts.append(counter.snapshot())
    finally:
        del steps.train_step
    keys = ("aten_ops", "kernels", "host_syncs", "matmul_flops", "nonmatmul_bytes")
    out = []
    for a, b in zip(cuts, cuts[1:]):
        rec = {k: b[k] - a[k] for k in keys}
        rec["sync_sites"] = {s: n - a["sync_sites"].get(s, 0) for s, n in b["sync_sites"].items()
                             if n - a["sync_sites"].get(s, 0)}
        out.append(rec)
    return out


def trainer_steps(batch: int, n: int = 10) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Counts of steps 1..n of a gpt-40m bf16 Trainer (step 0 runs first, uncounted), as
    CUDA dispatches them (``cuda_like``), and of step n+1 (a plain one) as this CPU build
    dispatches them."""
    from benchmarks._counting import StepCounter, optimizer_host_tensors
    from mutransfer.training.trainer import Trainer

    trainer = Trainer(_config("gpt-40m", batch))
    trainer.run_until(1)
    host = optimizer_host_tensors(trainer.opt)
    steps = per_step(lambda: trainer.run_until(1 + n), trainer, StepCounter(host=host, cuda_like=True))
    raw = per_step(lambda: trainer.run_until(2 + n), trainer, StepCounter(host=host))[0]
    return steps, raw


def fused_steps(k: int = 16, n: int = 10) -> list[dict[str, Any]]:
    """Counts of steps 1..n of a fused group of ``k`` gpt-tiny members at different LRs."""
    from benchmarks._counting import StepCounter
    from mutransfer.training.fused import FusedGroup

    cfgs = [_config("gpt-tiny", 4).replace(lr=1e-3 * 1.2 ** i) for i in range(k)]
    group = FusedGroup(cfgs)
    group.run_until(1)
    opts = [o for m in group.members for o in m.trainer.opt.optimizers]

    def host(t: torch.Tensor) -> bool:
        return t.dim() == 0 and any(st.get("step") is t for o in opts for st in o.state.values())

    return per_step(lambda: group.run_until(1 + n), group, StepCounter(host=host))


def _kind(step: int, every: int = 10) -> str:
    """``step`` is the 0-based index of the step in the run."""
    if step % every == 0:
        return "max_logit"
    if (step + 1) % every == 0:
        return "logging"
    return "plain"


def measure() -> dict[str, Any]:
    t0 = time.perf_counter()
    (b1, raw1), (b2, raw2) = trainer_steps(1), trainer_steps(2, n=2)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for i, rec in enumerate(b1, start=1):
        by_kind.setdefault(_kind(i), []).append(rec)
    plain1, plain2 = b1[0], b2[0]  # step 1: plain

    def at_batch(key: str) -> int:
        return int(plain1[key] + (BATCH - 1) * (plain2[key] - plain1[key]))

    fig: dict[str, Any] = {
        "kernels_plain": int(statistics.median(r["kernels"] for r in by_kind["plain"])),
        "aten_ops_plain": int(statistics.median(r["aten_ops"] for r in by_kind["plain"])),
        "host_syncs_plain": max(r["host_syncs"] for r in by_kind["plain"]),
        "host_syncs_logging": by_kind["logging"][0]["host_syncs"],
        "host_syncs_max_logit": by_kind["max_logit"][0]["host_syncs"],
        "kernels_max_logit": by_kind["max_logit"][0]["kernels"],
        f"matmul_flops_b{BATCH}": at_batch("matmul_flops"),
        f"nonmatmul_bytes_b{BATCH}": at_batch("nonmatmul_bytes"),
        "kernels_plain_cpu_dispatch": raw1["kernels"],
        f"nonmatmul_bytes_b{BATCH}_cpu_dispatch": int(raw1["nonmatmul_bytes"]
                                                      + (BATCH - 1) * (raw2["nonmatmul_bytes"] - raw1["nonmatmul_bytes"])),
        "sync_sites_plain": by_kind["plain"][0]["sync_sites"],
        "sync_sites_logging": by_kind["logging"][0]["sync_sites"],
        "sync_sites_max_logit": by_kind["max_logit"][0]["sync_sites"],
    }
    fused = fused_steps()  # syncs only: rms_norm's dispatch does not change them
    fk = {"plain": [], "logging": [], "max_logit": []}  # type: dict[str, list[int]]
    for i, rec in enumerate(fused, start=1):
        fk[_kind(i)].append(rec["host_syncs"])
    fig["fused_k16_syncs_plain"] = max(fk["plain"])
    fig["fused_k16_syncs_logging"] = max(fk["logging"])
    fig["fused_k16_syncs_max_logit"] = max(fk["max_logit"])
    fig["fused_k16_sync_sites_plain"] = fused[0]["sync_sites"]
    fig["count_wall_s"] = round(time.perf_counter() - t0, 1)
    return fig


def run(label: str = "after", out: Path = RESULTS) -> dict[str, Any]:
    """Count, store under ``label`` in ``out`` (other labels kept), return the record."""
    from benchmarks._proxy import record_header
    from mutransfer._io import atomic_write_text

    old = json.loads(out.read_text()) if out.exists() else {}
    labels = dict(old.get("labels", {}))
    labels[label] = {**record_header("step_counts"), "figures": measure()}
    record: dict[str, Any] = {
        **record_header("step_counts"),
        "setup": {"preset": "gpt-40m", "dtype": "bf16 autocast", "device": "cpu (counted, not timed)",
                  "batch_for_flops_and_bytes": BATCH, "max_logit_every": 10,
                  "fused": "16 gpt-tiny members, batch 4", "counter": "benchmarks/_counting.py"},
        "targets": TARGETS,
        "labels": labels,
    }
    figures: dict[str, Any] = {}
    if "before" in labels and "after" in labels:
        b, a = labels["before"]["figures"], labels["after"]["figures"]
        key = f"nonmatmul_bytes_b{BATCH}"
        figures = {
            "ratio_nonmatmul_bytes": round(a[key] / b[key], 4),
            "ratio_kernels_plain": round(a["kernels_plain"] / b["kernels_plain"], 4),
            "host_syncs_plain": f"{b['host_syncs_plain']} -> {a['host_syncs_plain']}",
            "kernels_plain": f"{b['kernels_plain']} -> {a['kernels_plain']}",
            "kernels_plain_cpu_dispatch": f"{b['kernels_plain_cpu_dispatch']} -> {a['kernels_plain_cpu_dispatch']}",
            "ratio_nonmatmul_bytes_cpu_dispatch": round(a[key + "_cpu_dispatch"] / b[key + "_cpu_dispatch"], 4),
            "fused_k16_syncs_plain": f"{b['fused_k16_syncs_plain']} -> {a['fused_k16_syncs_plain']}",
            "fused_k16_syncs_logging": f"{b['fused_k16_syncs_logging']} -> {a['fused_k16_syncs_logging']}",
        }
        record["passed"] = bool(a["host_syncs_plain"] <= TARGETS["host_syncs_plain"]
                                and a["kernels_plain"] <= TARGETS["kernels_plain_max"]
                                and figures["ratio_nonmatmul_bytes"] <= TARGETS["ratio_nonmatmul_bytes_max"]
                                and a["fused_k16_syncs_plain"] <= TARGETS["fused_k16_syncs_plain"])
    else:
        figures = {k: v for k, v in labels[label]["figures"].items() if not isinstance(v, dict)}
    record["figures"] = figures
    atomic_write_text(out, json.dumps(record, indent=2, default=str) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.step_counts", description=__doc__.split("\n")[0])
    p.add_argument("--label", default="after", help="name of this measurement (default: after)")
    p.add_argument("--out", type=Path, default=RESULTS, help=f"JSON to update (default: {RESULTS.name})")
    a = p.parse_args(argv)
    print(json.dumps(run(a.label, a.out)["figures"], indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
