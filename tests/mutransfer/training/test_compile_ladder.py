"""A sweep worker trains a width ladder one trial after another in one process: with
``compile`` on, every trial must stay compiled (dynamo's recompile limit never hit), so
nothing that changes from step to step may be a guard (the max-logit flag was one).

Dynamo's guards and recompiles are the same whatever backend compiles the graphs: the
test uses the ``eager`` backend, so it takes seconds on a CPU instead of an inductor C++
build per graph."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, load_dataset
from mutransfer.training.trainer import Trainer


def test_a_six_width_ladder_in_one_process_stays_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    data = load_dataset(DataConfig(max_bytes=300_000))
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: real(model, backend="eager", **kw))
    torch._dynamo.reset()
    results = []
    # fail_on_recompile_limit_hit: hitting the limit raises instead of falling back to eager
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for par in ("mup", "sp"):
            for width in (16, 32, 48, 64, 80, 96):
                cfg = TrainConfig.from_flat(dict(
                    preset="gpt-tiny", width=width, depth=1, head_dim=16, seq_len=16, batch_size=2, steps=4,
                    eval_every=0, eval_sequences=4, threads=1, data_max_bytes=300_000, device="cpu",
                    compile=True, max_logit_every=2, parametrization=par, lr=1e-3))
                results.append(Trainer(cfg, data=data).run())
    assert all(r.steps_done == 4 and not r.diverged for r in results)
    # the max logit is still read on its steps only (steps 0 and 2 of 4)
    assert [h["max_attn_logit"] is not None for h in results[-1].history] == [True, False, True, False]
    torch._dynamo.reset()
