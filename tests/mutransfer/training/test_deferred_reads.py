"""The loop reads its numbers on the host in batches (:meth:`Trainer.deferred`): results,
histories, spikes, GNS and divergence are exactly those of the loop that read every step."""

from __future__ import annotations

import math

import pytest

from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, TokenDataset, load_dataset
from mutransfer.training.fused import train_fused
from mutransfer.training.train import train
from mutransfer.training.trainer import SYNC_EVERY, Trainer

TINY = dict(preset="gpt-tiny", width=32, depth=1, head_dim=16, seq_len=32, batch_size=8, steps=23,
            lr=1e-2, eval_every=0, eval_sequences=16, threads=1, data_max_bytes=300_000,
            max_logit_every=3, grad_accum=2, spike_window=4, spike_threshold=0.5)


@pytest.fixture(scope="module")
def data() -> TokenDataset:
    return load_dataset(DataConfig(max_bytes=300_000))


def cfg(**kw: object) -> TrainConfig:
    return TrainConfig.from_flat({**TINY, **kw})


def _same(a: object, b: object) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _eager(monkeypatch: pytest.MonkeyPatch, fn):  # the loop that reads every step
    with monkeypatch.context() as m:
        m.setattr(Trainer, "deferred", lambda self: False)
        return fn()


@pytest.mark.parametrize("lr", [1e-2, 3e3])  # 3e3 diverges a few steps in, between two reads
def test_deferred_reads_give_the_every_step_results(data, monkeypatch, lr) -> None:
    c = cfg(lr=lr)
    assert Trainer(c, data=data).deferred() and c.run.steps % SYNC_EVERY  # the end is not a read step
    lazy = train(c, data=data)
    eager = _eager(monkeypatch, lambda: train(c, data=data))
    assert lazy.diverged == eager.diverged == (lr > 1)
    for key in ("steps_done", "tokens", "loss", "train_loss", "spikes", "gns", "evals"):
        assert _same(getattr(lazy, key), getattr(eager, key)), key
    assert len(lazy.history) == len(eager.history)
    for h, g in zip(lazy.history, eager.history):
        assert {k: v for k, v in h.items() if k != "wall_s"} == {k: v for k, v in g.items() if k != "wall_s"}
    if lr < 1:  # the logged columns are all there, spikes flagged by the deferred bookkeeping too
        assert lazy.spikes and all(h["grad_norm"] is not None and h["gns"] is not None for h in lazy.history)
        assert [h["max_attn_logit"] is not None for h in lazy.history] == [s % 3 == 0 for s in range(23)]
    else:
        assert lazy.steps_done < SYNC_EVERY and lazy.history[-1]["step"] == lazy.steps_done + 1


def test_fused_deferred_reads_give_the_every_step_results(data, monkeypatch) -> None:
    cfgs = [cfg(lr=1e-2), cfg(lr=3e3), cfg(lr=3e-3, seed=1)]
    lazy = train_fused(cfgs, k=3, data=data)
    eager = _eager(monkeypatch, lambda: train_fused(cfgs, k=3, data=data))
    assert [r.diverged for r in lazy] == [False, True, False]
    for a, b in zip(lazy, eager):
        assert (a.steps_done, a.tokens, a.loss, a.spikes) == (b.steps_done, b.tokens, b.loss, b.spikes)
        assert [{k: v for k, v in h.items() if k != "wall_s"} for h in a.history] == \
            [{k: v for k, v in h.items() if k != "wall_s"} for h in b.history]


def test_a_direct_train_step_reads_its_own_numbers(data) -> None:
    t = Trainer(cfg(), data=data)
    rec = t.train_step()
    assert isinstance(rec["loss"], float) and isinstance(rec["grad_norm"], float) and not t._pending
    rec = t.train_step(defer=True)
    assert rec["loss"] is None and len(t._pending) == 1
    t.flush()
    assert isinstance(rec["loss"], float) and t.history[-1] is rec
