"""Host syncs and kernels per training step, counted by the dispatch-mode counter
(benchmarks/_counting.py): no host read on a step that does not log, one per logging step
for a whole fused group."""

from __future__ import annotations

import torch

from benchmarks._counting import StepCounter, optimizer_host_tensors
from benchmarks.step_counts import _config, fused_steps, per_step
from mutransfer.models.rope import apply_rope, rope_cache
from mutransfer.training.trainer import Trainer


def test_counter_counts_scalar_reads_and_matmul_flops() -> None:
    x = torch.randn(4, 8)
    with StepCounter().counting() as c:
        y = x @ x.T
        float(y.sum())
        y.tolist()
        bool(y[0, 0] > 0)
    assert c.syncs == 3 and c.matmul_flops == 2 * 4 * 4 * 8
    assert c.sync_sites == {f"tests/benchmarks/test_step_counts.py:{n}": 1 for n in (19, 20, 21)}


def test_no_host_sync_on_a_step_that_does_not_log() -> None:
    t = Trainer(_config("gpt-tiny", 2, steps=40).replace(width=32, depth=2, head_dim=16, seq_len=32))
    t.run_until(1)
    steps = per_step(lambda: t.run_until(21), t, StepCounter(host=optimizer_host_tensors(t.opt)))
    syncs = [s["host_syncs"] for s in steps]  # steps 1..20: reads after steps 9 and 19 and at the end
    assert syncs == [0] * 8 + [1] + [0] * 9 + [1, 1], syncs
    assert all(isinstance(h["loss"], float) and h["grad_norm"] is not None for h in t.history)
    assert t.history[10]["max_attn_logit"] is not None  # measured on a step that did not read it


def test_a_fused_group_of_16_reads_once_per_logging_step() -> None:
    syncs = [s["host_syncs"] for s in fused_steps(16, n=10)]
    assert syncs == [0] * 8 + [1, 1], syncs  # before: 17 every step (one per member + one)


def test_rope_is_four_kernels_forward() -> None:
    x, cache = torch.randn(2, 4, 16, 8).bfloat16(), rope_cache(16, 8)
    apply_rope(x, cache)
    with StepCounter().counting() as c:
        apply_rope(x, cache)
    # tables: repeat_interleave(cos), neg/stack(sin) and two casts; rotation: flip, mul, mul, add
    assert c.by_op["flip"] == 1 and c.by_op["mul"] == 2 and c.by_op["add"] == 1
    assert c.kernels <= 10
