"""A fused group with ``compile`` on compiles its one stacked forward (and, through
AOTAutograd, its backward): the members' numbers equal the uncompiled fused run's, the
whole group is one training graph and one eval graph (no recompile per member or per
step), and only a member leaving the stack (K changes) compiles again.

``aot_eager`` traces the forward and backward as inductor would (functionalized, through
AOTAutograd) and runs the traced graphs with eager kernels: a CPU check of what can
compile, without a C++ build per graph."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch._dynamo

import mutransfer.training.compile_watch as compile_watch
from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, load_dataset
from mutransfer.training.fused import train_fused
from mutransfer.training.fusion import check_fusible, unsupported_reason
from mutransfer.training.train_result import TrainResult


def tiny(**kw: Any) -> TrainConfig:
    base = dict(preset="gpt-tiny", width=32, depth=1, head_dim=16, seq_len=16, batch_size=4, steps=6,
                eval_every=3, eval_sequences=4, threads=1, data_max_bytes=300_000, base_width=16,
                device="cpu", parametrization="mup", max_logit_every=2)
    base.update(kw)
    return TrainConfig.from_flat(base)


@pytest.fixture
def aot_eager(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(compile_watch, "BACKEND", "aot_eager")
    monkeypatch.setattr(compile_watch, "_warned", False)
    torch._dynamo.reset()
    yield compile_watch._backend()
    torch._dynamo.reset()


def _curves(r: TrainResult) -> tuple[list[Any], list[Any], list[Any]]:
    return ([h["loss"] for h in r.history], [h.get("max_attn_logit") for h in r.history],
            [e for _, e in r.evals])


def test_a_compiled_fused_group_equals_the_uncompiled_one(aot_eager: Any) -> None:
    data = load_dataset(DataConfig(max_bytes=300_000))
    # different LRs, seeds (own batches) and multipliers ([K] scales in the graph), one
    # member diverging at step 1
    lrs = (1e-3, 4e-3, 1.6e-2, 1e3)
    mults = [{"attn_mult": 2.0}, {"output_mult": 0.5}, {}, {}]

    def group(**kw: Any) -> list[TrainConfig]:
        return [tiny(lr=lr, seed=i % 2, **mults[i], **kw) for i, lr in enumerate(lrs)]

    plain = train_fused(group(), data=data)
    graphs, calls = aot_eager.graphs, aot_eager.calls
    compiled = train_fused(group(compile=True), data=data)
    assert [r.diverged for r in compiled] == [False, False, False, True]
    for a, b in zip(plain, compiled):
        assert b.compile_fallback is None and b.steps_done == a.steps_done
        for x, y in zip(*(_curves(a), _curves(b))):
            assert [v is None for v in x] == [v is None for v in y]
            for u, v in zip(x, y):
                if isinstance(u, float) and math.isfinite(u):
                    assert v == pytest.approx(u, rel=1e-6, abs=1e-7)
    # one training graph for 4 members, one more for the 3 left after the divergence, one
    # eval graph: not one per member, not one per step (the max logit's steps included)
    assert aot_eager.graphs - graphs == 3
    assert aot_eager.calls - calls == 6 + 2  # every step and both evals ran a compiled graph


def test_compile_is_fusible_but_shared_by_the_group() -> None:
    assert unsupported_reason(tiny(compile=True)) is None
    with pytest.raises(ValueError, match="'compile'"):
        check_fusible([tiny(), tiny(compile=True)])
