"""``--fuse auto`` sized from the real model: the member estimate at the data's vocabulary
and dtype, K that fits the card by that estimate, and an out-of-memory group retried at
half its size with every trial completing."""

from __future__ import annotations

import pytest
import torch

from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, load_dataset
from mutransfer.training.fused import FusedGroup, train_fused
from mutransfer.training.fusion import MAX_K, choose_k, member_bytes

GiB = 1 << 30


def gpt40m(**kw: object) -> TrainConfig:
    return TrainConfig.from_flat({"preset": "gpt-40m", "batch_size": 16, "dtype": "bf16", **kw})


def test_member_bytes_counts_the_real_vocabulary_and_dtype() -> None:
    c = gpt40m()
    tokens = 16 * 512
    # the logits term is linear in the vocabulary: 16 bytes per token and entry in bf16
    grow = member_bytes(c, 50_304) - member_bytes(c, 256)
    n_grow = 2 * 512 * (50_304 - 256)  # embedding and readout rows, 16 bytes a parameter
    assert grow == tokens * 16 * (50_304 - 256) + 16 * n_grow
    assert 8.6e9 < member_bytes(c, 50_304) < 11e9  # the old formula's 8.6 GB, plus the bf16 copies
    assert member_bytes(c, 50_304, "fp32") > member_bytes(c, 50_304, "bf16")


@pytest.mark.parametrize("free_gib", [79.0, 40.0, 3.0])
def test_auto_k_at_vocab_50304_fits_the_card(monkeypatch, free_gib: float) -> None:
    free = int(free_gib * GiB)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (free, 80 * GiB))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    c = gpt40m()
    k = choose_k(c, "cuda", vocab_size=50_304)
    need = member_bytes(c, 50_304, "bf16")
    assert 1 <= k <= MAX_K
    assert k == 1 or k * need <= 0.6 * free  # fits the headroom by the project's own formula
    assert (k + 1) * need > 0.6 * free or k == MAX_K  # and is the largest that does
    if free_gib > 10:  # the byte vocabulary's K would not fit
        assert choose_k(c, "cuda", vocab_size=256) > k


def test_an_out_of_memory_group_is_retried_at_half_k(monkeypatch) -> None:
    data = load_dataset(DataConfig(source="stdlib", max_bytes=300_000))
    cfgs = [TrainConfig.from_flat(dict(preset="gpt-tiny", width=32, depth=1, head_dim=16, seq_len=16,
                                       batch_size=4, steps=6, eval_every=3, eval_sequences=8, threads=1,
                                       data_max_bytes=300_000, device="cpu", lr=1e-3 * 2 ** i))
            for i in range(4)]
    real_run = FusedGroup.run

    def run(self: FusedGroup):
        if len(self.members) > 1:  # a card that holds one member only
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return real_run(self)

    monkeypatch.setattr(FusedGroup, "run", run)
    events: list[dict] = []
    with pytest.warns(RuntimeWarning, match="ran out of memory"):
        got = train_fused(cfgs, k=4, data=data, events=events)
    assert [(e["k"], e["retry_k"]) for e in events] == [(4, 2), (2, 1)]
    assert [r.steps_done for r in got] == [6] * 4 and not any(r.diverged for r in got)
    monkeypatch.setattr(FusedGroup, "run", real_run)
    ref = train_fused(cfgs, k=1, data=data)
    assert [r.loss for r in got] == [r.loss for r in ref]  # the retried trials are the trials
    assert [r.lr for r in got] == [c.optim.lr for c in cfgs]
