"""One held-out set for every run: the eval loss of the same weights does not depend on the
batch size, the seed, fusion or data parallelism (mutransfer.training.data.TokenDataset.eval_offsets,
Trainer.evaluate, FusedGroup.evaluate)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, TokenDataset, load_dataset
from mutransfer.training.fused import FusedGroup
from mutransfer.training.trainer import Trainer

BASE = dict(preset="gpt-tiny", width=32, depth=1, head_dim=16, seq_len=32, steps=4, lr=1e-2,
            eval_every=0, eval_sequences=24, threads=1, data_max_bytes=300_000, device="cpu",
            parametrization="mup")


@pytest.fixture(scope="module")
def data() -> TokenDataset:
    return load_dataset(DataConfig(max_bytes=300_000))


def trainer(data: TokenDataset, **kw: object) -> Trainer:
    return Trainer(TrainConfig.from_flat({**BASE, **kw}), data=data)


def test_same_weights_same_eval_loss_at_every_batch_size(data: TokenDataset) -> None:
    """The bug this pins: eval batch b was drawn as ``get_batch("val", b, batch_size, ...)``,
    so each batch size scored its own sample of the val split."""
    ref = trainer(data, batch_size=1)
    state = ref.raw_model.state_dict()
    losses = {}
    for b, accum in ((1, 1), (2, 1), (8, 1), (16, 2), (128, 1)):
        t = trainer(data, batch_size=b, grad_accum=accum)
        t.raw_model.load_state_dict(state)
        losses[b] = t.evaluate()
    # Batches whose micro-batch fits one 2048-token chunk are scored in the same chunks:
    # bit for bit. Batch 128 chunks by 128 rows instead: float rounding only.
    assert losses[1] == losses[2] == losses[8] == losses[16], losses
    assert losses[128] == pytest.approx(losses[1], rel=1e-6)
    # The old per-batch sets on the same weights: a different sample per batch size.
    old = {}
    for b in (1, 8):
        x, y = data.get_batch("val", 0, b, 32, 0)
        with torch.no_grad():
            logits = ref._logits(x, ref.raw_model)
        old[b] = float(F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1)))
    assert old[1] != pytest.approx(old[8], rel=1e-3)


def test_eval_loss_is_the_mean_ce_of_the_fixed_set(data: TokenDataset) -> None:
    """Known answer: the eval loss is the per-sequence mean CE over the windows at
    ``eval_offsets``, averaged over sequences, whatever the chunking."""
    t = trainer(data, batch_size=4, seed=3)
    starts = data.eval_offsets(24, 32)
    val = data.tokens("val")
    block = torch.from_numpy(np.asarray(val[starts[:, None] + np.arange(33)], dtype=np.int64))
    with torch.no_grad():
        logits = t._logits(block[:, :-1], t.raw_model)
    ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), block[:, 1:].reshape(-1), reduction="none")
    expected = float(ce.view(24, 32).mean(1).double().mean())
    assert t.evaluate() == pytest.approx(expected, rel=1e-6)


def test_eval_set_depends_on_nothing_a_run_varies(data: TokenDataset) -> None:
    a = data.eval_offsets(64, 32)
    assert np.array_equal(a, data.eval_offsets(64, 32))
    assert np.array_equal(a[:16], data.eval_offsets(16, 32))  # a smaller set is its prefix
    n = data.n_tokens("val")
    assert a.min() >= 0 and a.max() <= n - 33
    # Chunks in set order, any chunk size; ranks split the set without overlap or gap.
    for rows in (1, 5, 64, 100):
        xs = [x for x, _ in data.eval_batches(64, 32, rows)]
        assert max(len(x) for x in xs) <= rows
        assert torch.equal(torch.cat(xs), torch.cat([x for x, _ in data.eval_batches(64, 32, 64)]))
    whole = torch.cat([x for x, _ in data.eval_batches(10, 32, 4)])
    shards = [torch.cat([x for x, _ in data.eval_batches(10, 32, 4, rank=r, world_size=3)])
              for r in range(3)]
    assert [len(s) for s in shards] == [4, 3, 3] and torch.equal(torch.cat(shards), whole)
    with pytest.raises(ValueError, match="rows must be a positive integer, got 0"):
        data.eval_batches(10, 32, 0)


def test_fused_members_score_the_same_set(data: TokenDataset) -> None:
    cfgs = [TrainConfig.from_flat({**BASE, "batch_size": 4, "seed": s}) for s in (0, 1)]
    fused = FusedGroup(cfgs, data=data).evaluate()
    unfused = [Trainer(c, data=data).evaluate() for c in cfgs]
    assert fused == pytest.approx(unfused, rel=1e-6)
    assert fused[0] != pytest.approx(fused[1], rel=1e-4)  # two inits, two losses


def test_eval_sequences_is_checked() -> None:
    with pytest.raises(ValueError, match="eval_sequences"):
        TrainConfig.from_flat({**BASE, "batch_size": 4, "eval_sequences": 0})
