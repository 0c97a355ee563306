"""Stabilizers: robust spike statistics, grad clipping, spike policies on a poisoned batch,
divergence bound."""

from __future__ import annotations

import math

import pytest
import torch

from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, TokenDataset, load_dataset
from mutransfer.training.stabilizers import (
    SpikeDetector,
    clip_grad_norm,
    divergence_bound,
    is_diverged,
    robust_stats,
)
from mutransfer.training.trainer import Trainer

POISON = 40  # the data step whose targets are replaced by random tokens


class Poisoned(TokenDataset):
    """The stdlib corpus, except that train data step POISON has random targets (a loss
    spike for any model that has learned something) and every train request is logged."""

    def __init__(self, base: TokenDataset) -> None:
        super().__init__({"train": base.tokens("train"), "val": base.tokens("val")}, base.vocab_size)
        self.calls: list[int] = []

    def get_batch(self, split, step, *args, **kwargs):  # type: ignore[override]
        x, y = super().get_batch(split, step, *args, **kwargs)
        if split == "train":
            self.calls.append(step)
            if step == POISON:
                y = torch.randint(0, self.vocab_size, y.shape, generator=torch.Generator().manual_seed(1))
        return x, y


@pytest.fixture(scope="module")
def base_data() -> TokenDataset:
    return load_dataset(DataConfig(max_bytes=300_000))


def cfg(policy: str, **kw: object) -> TrainConfig:
    base = dict(preset="gpt-tiny", width=32, depth=1, head_dim=16, seq_len=32, batch_size=8, steps=50,
                lr=1e-2, schedule="constant", warmup_steps=5, eval_every=0, eval_sequences=8, threads=1,
                spike_policy=policy, spike_window=20, spike_threshold=10.0, rollback_every=5)
    return TrainConfig.from_flat({**base, **kw})


def params(t: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in t.raw_model.parameters()]


def test_robust_stats_ignore_outliers() -> None:
    med, sigma = robust_stats([1.0, 2.0, 3.0, 4.0, 1000.0])
    assert med == 3.0 and sigma == pytest.approx(1.4826 * 1.0)
    det = SpikeDetector(window=8, threshold=5.0, min_history=4)
    for v in [2.0, 2.1, 1.9, 2.05, 1.95]:
        assert not det.is_spike(v)
        det.update(v)
    assert det.is_spike(3.0) and not det.is_spike(2.2)
    det.update(50.0)  # even an accepted outlier barely moves median/MAD
    assert det.is_spike(3.0)
    state = det.state_dict()
    det2 = SpikeDetector(window=8, threshold=5.0, min_history=4)
    det2.load_state_dict(state)
    assert det2.score(3.0) == det.score(3.0)


def test_clip_grad_norm_returns_the_norm_before_clipping() -> None:
    p = torch.nn.Parameter(torch.zeros(4))
    p.grad = torch.tensor([3.0, 4.0, 0.0, 0.0])
    assert float(clip_grad_norm([p], 1.0)) == pytest.approx(5.0)
    assert float(p.grad.norm()) == pytest.approx(1.0, rel=1e-5)
    p.grad = torch.tensor([3.0, 4.0, 0.0, 0.0])
    assert float(clip_grad_norm([p], None)) == pytest.approx(5.0) and float(p.grad.norm()) == 5.0


def test_divergence_bound() -> None:
    assert divergence_bound(3.0, 256, None) == pytest.approx(3 * math.log(256))
    assert divergence_bound(2.0, 256, 10.0) == 20.0
    assert is_diverged(float("nan"), 10.0) and is_diverged(11.0, 10.0) and not is_diverged(9.0, 10.0)


def test_log_policy_flags_the_spike_and_still_updates(base_data: TokenDataset) -> None:
    data = Poisoned(base_data)
    t = Trainer(cfg("log"), data=data)
    t.run_until(POISON)
    before = params(t)
    t.run_until(POISON + 1)
    assert t.spikes == [POISON + 1] and t.history[-1]["spike"] and "skipped" not in t.history[-1]
    assert any(not torch.equal(a, b) for a, b in zip(before, params(t)))


def test_skip_policy_drops_the_update(base_data: TokenDataset) -> None:
    data = Poisoned(base_data)
    t = Trainer(cfg("skip"), data=data)
    t.run_until(POISON)
    before, opt_state, tokens = params(t), t.opt.state_dict(), t.tokens
    t.run_until(POISON + 1)
    assert t.history[-1]["skipped"] and t.spikes == [POISON + 1]
    assert all(torch.equal(a, b) for a, b in zip(before, params(t)))
    assert t.tokens == tokens  # the dropped batch trained nothing
    after = t.opt.state_dict()["optimizers"][0]["state"]
    assert all(torch.equal(after[k]["exp_avg"], v["exp_avg"])
               for k, v in opt_state["optimizers"][0]["state"].items())
    r = t.run()
    assert not r.diverged and r.steps_done == 50 and len(r.spikes) == 1


def test_rollback_restores_a_ring_checkpoint_and_skips_the_bad_batches(base_data: TokenDataset) -> None:
    data = Poisoned(base_data)
    t = Trainer(cfg("rollback"), data=data)
    t.run_until(POISON)
    # Snapshots every 5 steps, two kept; the one for step 40 is taken as step 40 starts.
    assert [s["step"] for s in t.ring] == [30, 35]
    snap35 = [p.detach().clone() for p in t.ring[-1]["model"].values()]
    r = t.run()
    # Spike at step 41 (data step 40): back to the older ring snapshot, step 35.
    assert r.rollbacks == [(POISON + 1, 35)] and r.spikes == [POISON + 1]
    assert data.calls.count(POISON) == 1  # the poisoned batch is never trained on again
    # After the restore, step 35 trains on data step 41: batches 35..40 are skipped.
    assert data.calls[POISON + 1 :][:3] == [41, 42, 43]
    assert r.steps_done == 50 and not r.diverged and r.tokens == 50 * 8 * 32
    assert [h["step"] for h in r.history] == list(range(1, 51))  # history rewound too
    # The restored weights were the snapshot's (not the spiked ones): re-run to check.
    t2 = Trainer(cfg("rollback"), data=Poisoned(base_data))
    t2.run_until(35)
    assert all(torch.equal(a, b) for a, b in zip(snap35, [v for v in t2.raw_model.state_dict().values()]))
