"""Benchmark: training throughput of the built-in llama-shaped GPT against HF's LlamaForCausalLM.

The built-in model is the proxy for Llama-shaped targets because it also runs fused
(K trials as one batched model), which HF's model cannot; unfused it should not be slower
than the real ``transformers.LlamaForCausalLM`` at the same shape. Target: parity within the
timing noise of a shared CPU, ``ratio_builtin_over_hf >= 0.95`` (both run the same matmuls,
the same SDPA kernel with GQA, and the same μP hooks; what differs is a few elementwise ops).
Both sides are the same network: one config (width 256, 4 blocks, 8 query heads of 32
over 4 key/value heads, SwiGLU with d_mlp = 3·width, context 128, byte vocab, untied), the
HF one built from :func:`mutransfer.models.convert.to_hf_config` (sdpa attention), both
under the same μP :class:`mutransfer.parametrize.parametrization.Parametrization` (base width 64:
hooks, 1/d_head attention, per-role param groups), holding the same weights (ours
converted), so they compute the same loss. One train step is forward, fp32 cross-entropy
on the logits, backward, global grad-norm clip and AdamW (foreach) on fp32 CPU, one thread.
Rounds are interleaved (every round times each model once) after warm-up steps; the median
round gives tokens/s and ``ratio_builtin_over_hf``.

Second figure: trials/hour of a llama-tiny LR sweep (K = 4, μP, short runs) fused
(:func:`mutransfer.training.fused.train_fused`) against sequential :func:`mutransfer.training.train.train`
(``speedup_fused_k4``), as ``fused_sweep`` does for gpt-tiny.

Run: ``python -m benchmarks.hf_vs_builtin`` (prints JSON, writes
``benchmarks/results/hf_vs_builtin.json`` atomically).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

RESULTS = Path(__file__).resolve().parent / "results" / "hf_vs_builtin.json"
WIDTH, BASE_WIDTH, DEPTH, HEAD_DIM, Q_PER_KV, SEQ, BATCH = 256, 64, 4, 32, 2, 128, 8
ROUNDS, WARMUP_STEPS = 15, 3
FUSED_K, FUSED_PROXY = 4, dict(preset="llama-tiny", width=64, seq_len=64, batch_size=8, steps=6,
                               eval_every=0, eval_sequences=8, threads=1)


def llama_config() -> Any:
    from mutransfer.models.presets import llama_small

    return llama_small().replace(width=WIDTH, depth=DEPTH, head_dim=HEAD_DIM, q_per_kv=Q_PER_KV, seq_len=SEQ)


def models() -> tuple[torch.nn.Module, torch.nn.Module, Any, Any]:
    """(ours, hf, ours' Parametrization, hf's): μP on both, the same weights."""
    from transformers import LlamaForCausalLM

    from mutransfer.models.convert import _convert, to_hf_config
    from mutransfer.models.gpt import GPT
    from mutransfer.parametrize.parametrization import Parametrization

    cfg = llama_config()
    pz = Parametrization(lambda w: GPT(cfg.replace(width=w)), width=WIDTH, base_width=BASE_WIDTH, kind="mup")
    pz_hf = Parametrization(lambda w: LlamaForCausalLM(to_hf_config(cfg.replace(width=w))),
                            width=WIDTH, base_width=BASE_WIDTH, kind="mup")
    ours = pz.build(seed=0)
    hf = pz_hf.build(seed=0)
    hf.load_state_dict(_convert(ours.state_dict(), cfg, to_hf=True))  # weights only: hooks stay
    return ours, hf.train(), pz, pz_hf


def loss_of(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy on fp32 logits, the same call for both models."""
    out = model(x) if not hasattr(model, "config") else model(input_ids=x, use_cache=False)
    logits = (out[0] if isinstance(out, tuple) else out.logits).float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _step_fn(model: torch.nn.Module, pz: Any, batches: list[tuple[torch.Tensor, torch.Tensor]]
             ) -> Callable[[int], None]:
    from mutransfer.training.optim import build_optimizer

    opt = build_optimizer(pz.param_groups(model, 1e-3), "adamw", fused=False)
    params = [p for p in model.parameters() if p.requires_grad]

    def step(i: int) -> None:
        x, y = batches[i % len(batches)]
        loss_of(model, x, y).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def throughput() -> dict[str, Any]:
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    g = torch.Generator().manual_seed(0)
    xs = [torch.randint(0, 256, (BATCH, SEQ), generator=g) for _ in range(4)]
    batches = [(x, torch.roll(x, -1, dims=1)) for x in xs]
    ours, hf, pz, pz_hf = models()
    with torch.no_grad():
        loss_diff = abs(loss_of(ours, *batches[0]).item() - loss_of(hf, *batches[0]).item())
    steps = {"builtin": _step_fn(ours, pz, batches), "hf": _step_fn(hf, pz_hf, batches)}
    for fn in steps.values():
        for i in range(WARMUP_STEPS):
            fn(i)
    times: dict[str, list[float]] = {k: [] for k in steps}
    for r in range(ROUNDS):
        for name in (list(steps) if r % 2 == 0 else list(reversed(steps))):
            t0 = time.perf_counter()
            steps[name](r)
            times[name].append(time.perf_counter() - t0)
    tps = {k: BATCH * SEQ / statistics.median(v) for k, v in times.items()}
    return {"tokens_per_s_builtin": round(tps["builtin"], 1), "tokens_per_s_hf": round(tps["hf"], 1),
            "ratio_builtin_over_hf": round(tps["builtin"] / tps["hf"], 4),
            "ratio_builtin_over_hf_min": round(min(times["hf"]) / min(times["builtin"]), 4),
            "abs_loss_diff_same_weights": loss_diff,
            "n_params": sum(p.numel() for p in ours.parameters()),
            "round_spread": {k: round(max(v) / min(v), 3) for k, v in times.items()}}


def fused_llama_tiny() -> dict[str, Any]:
    from mutransfer.training.config import TrainConfig
    from mutransfer.training.data import DataConfig, load_dataset
    from mutransfer.training.fused import train_fused
    from mutransfer.training.train import train

    base = TrainConfig.from_flat(dict(parametrization="mup", base_width=32, device="cpu",
                                      data_max_bytes=2_000_000, **FUSED_PROXY))
    cfgs = [base.replace(lr=2.0 ** (-12 + 2 * i)) for i in range(FUSED_K)]  # 2^-12 .. 2^-6
    data = load_dataset(DataConfig(max_bytes=2_000_000))
    train(cfgs[0], data=data), train_fused(cfgs, data=data)  # warm-up
    t0 = time.perf_counter()
    seq = [train(c, data=data) for c in cfgs]
    t_seq = time.perf_counter() - t0
    t0 = time.perf_counter()
    fused = train_fused(cfgs, data=data)
    t_fused = time.perf_counter() - t0
    err = max(abs(f.loss - s.loss) / abs(s.loss) for f, s in zip(fused, seq))
    return {"trials_per_hour_sequential": round(3600 * FUSED_K / t_seq, 1),
            "trials_per_hour_fused_k4": round(3600 * FUSED_K / t_fused, 1),
            "speedup_fused_k4": round(t_seq / t_fused, 3), "max_rel_err_final_loss": err}


def run() -> dict[str, Any]:
    """Measure and return the benchmark record (also written to RESULTS)."""
    import transformers

    from mutransfer._io import atomic_write_text

    record: dict[str, Any] = {
        "benchmark": "hf_vs_builtin",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "python": sys.version.split()[0], "cpu_count": os.cpu_count(), "torch_threads": 1,
                    "device": "cpu"},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "setup": {"width": WIDTH, "base_width": BASE_WIDTH, "depth": DEPTH, "head_dim": HEAD_DIM,
                  "q_per_kv": Q_PER_KV, "seq_len": SEQ, "batch_size": BATCH, "vocab_size": 256,
                  "rounds": ROUNDS, "warmup_steps": WARMUP_STEPS, "dtype": "fp32", "parametrization": "mup",
                  "step": "forward + cross-entropy + backward + clip_grad_norm(1.0) + AdamW (foreach)",
                  "fused": {"k": FUSED_K, **FUSED_PROXY}},
        "target": "parity with HF LlamaForCausalLM within timing noise: ratio_builtin_over_hf >= 0.95",
    }
    record["figures"] = {**throughput(), "fused": fused_llama_tiny()}
    record["passed"] = record["figures"]["ratio_builtin_over_hf"] >= 0.95
    atomic_write_text(RESULTS, json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    import argparse

    # parse first: --help (or a bad flag) answers at once and writes nothing
    argparse.ArgumentParser(description=__doc__.split("\n")[0],
                            epilog="writes benchmarks/results/hf_vs_builtin.json").parse_args()
    print(json.dumps(run(), indent=2))
