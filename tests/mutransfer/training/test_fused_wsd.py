"""Fused WSD branching (mutransfer.training.fused_wsd): every member's branches equal its unfused
``train_wsd_branches`` run, bit for bit on CPU, divergence in the trunk and in a cooldown
and pruning included."""

from __future__ import annotations

import math

import pytest

from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, load_dataset
from mutransfer.training.fused_wsd import train_fused_wsd_branches
from mutransfer.training.train import train_wsd_branches
from mutransfer.training.train_result import TrainResult
from mutransfer.training.trainer import Trainer

FRACTIONS = [0.25, 1.0, 0.5]  # not sorted: results come back in this order
# Row keys that measure the machine, not the run.
TIMING = {"wall_s", "tokens_per_s"}


@pytest.fixture(scope="module")
def data():
    return load_dataset(DataConfig(source="stdlib", max_bytes=300_000))


def tiny(**kw) -> TrainConfig:
    base = dict(preset="gpt-tiny", width=32, depth=2, head_dim=16, seq_len=16, batch_size=4, steps=16,
                eval_every=4, eval_sequences=8, threads=1, data_max_bytes=300_000, base_width=16,
                device="cpu", parametrization="mup", schedule="wsd", warmup_steps=2, decay_fraction=0.25)
    base.update(kw)
    return TrainConfig.from_flat(base)


def assert_identical(ref: TrainResult, got: TrainResult) -> None:
    """The same run: every history record, every evaluation and the row, exactly."""
    assert got.config == ref.config
    strip = [{k: v for k, v in h.items() if k != "wall_s"} for h in got.history]
    want = [{k: v for k, v in h.items() if k != "wall_s"} for h in ref.history]
    assert len(strip) == len(want)
    for a, b in zip(strip, want):
        assert a.keys() == b.keys()
        for k in a:  # NaN == NaN for a diverged step's loss
            assert a[k] == b[k] or (isinstance(a[k], float) and math.isnan(a[k]) and math.isnan(b[k])), k
    assert got.evals == ref.evals
    ra, rb = ref.to_row(), got.to_row()
    assert ra.keys() == rb.keys()
    for k in ra.keys() - TIMING:
        assert rb[k] == ra[k] or (isinstance(ra[k], float) and math.isnan(ra[k]) and math.isnan(rb[k])), k


def _check(cfgs: list[TrainConfig], data, fractions=FRACTIONS, **kw) -> list[list[TrainResult]]:
    fused = train_fused_wsd_branches(cfgs, fractions, data=data, **kw)
    assert len(fused) == len(cfgs)
    for cfg, got in zip(cfgs, fused):
        ref = train_wsd_branches(cfg, fractions, data=data)
        for r, g in zip(ref, got):
            assert_identical(r, g)
    return fused


def test_members_at_other_lrs_and_seeds_equal_their_unfused_branches(data) -> None:
    cfgs = [tiny(lr=1e-3), tiny(lr=1e-2), tiny(lr=3e-2), tiny(lr=1e-2, seed=1, weight_decay=0.1)]
    fused = _check(cfgs, data)
    for branches in fused:  # real runs: each branch ends on its own budget, none diverged
        assert [r.steps for r in branches] == [4, 16, 8]
        assert [r.tokens for r in branches] == [r.steps * 4 * 16 for r in branches]
        assert not any(r.diverged or r.pruned for r in branches)
    assert len({r.loss for b in fused for r in b}) == 12


def test_divergence_in_the_trunk_and_in_a_cooldown(data, monkeypatch) -> None:
    """lr 1e3 diverges in the trunk: all its branches report it. A cooldown lowers the LR,
    so a real run hardly ever diverges there and not in its trunk: the member at lr 3e-2
    is made to diverge at step 6 of its 0.5 branch's cooldown (8 steps, decay from 6) by
    :meth:`Trainer.decide`, which the fused and the unfused loop both ask; the unfused
    trunk then carries on from its snapshot, and so must the fused member."""
    real = Trainer.decide

    def decide(self: Trainer, rec, loss_v, g_small):
        if self.cfg.optim.lr == 3e-2 and self.cfg.run.steps == 8 and self.step == 7:
            self.diverged = True
            return "diverged"
        return real(self, rec, loss_v, g_small)

    monkeypatch.setattr(Trainer, "decide", decide)
    cfgs = [tiny(lr=1e-2), tiny(lr=1e3), tiny(lr=3e-2)]
    fused = _check(cfgs, data)
    assert all(r.diverged for r in fused[1]) and fused[1][0].steps_done < 4
    assert not any(r.diverged for r in fused[0])
    assert [r.diverged for r in fused[2]] == [False, False, True]  # FRACTIONS: 0.25, 1.0, 0.5
    assert fused[2][2].steps_done == 7 and fused[2][1].steps_done == 16


def test_a_pruned_cooldown_comes_back_to_the_trunk(data) -> None:
    """A callback that prunes one member's shortest branch: the unfused trunk resumes after
    the branch, so the fused member must rejoin the stack for the longer ones."""
    def prune(member: int, step: int, metrics: dict) -> bool:
        return member == 1 and step == 4

    cfgs = [tiny(lr=1e-2), tiny(lr=3e-2)]
    fused = train_fused_wsd_branches(cfgs, FRACTIONS, data=data, callback=prune)
    ref = train_wsd_branches(cfgs[1], FRACTIONS, data=data, callback=lambda step, m: step == 4)
    assert [r.pruned for r in fused[1]] == [r.pruned for r in ref] == [True, False, False]
    for r, g in zip(ref, fused[1]):
        assert_identical(r, g)
    for r, g in zip(train_wsd_branches(cfgs[0], FRACTIONS, data=data), fused[0]):
        assert_identical(r, g)


def test_members_with_other_warmups_train_their_own_trunks(data) -> None:
    # default warmup: 10% of each branch (2 trunks); decay fractions other than the group's
    cfgs = [tiny(lr=1e-2, warmup_steps=None), tiny(lr=1e-2, decay_fraction=0.5), tiny(lr=3e-2)]
    fused = _check(cfgs, data, fractions=[0.5, 1.0])
    # each member kept its own plan: warmup 10% of each branch (1, 2), cooldown 50%, the group's
    plans = [[(r.config.schedule.warmup_steps, r.config.schedule.decay_fraction, r.steps) for r in m]
             for m in fused]
    assert plans == [[(1, 0.25, 8), (2, 0.25, 16)], [(2, 0.5, 8), (2, 0.5, 16)],
                     [(2, 0.25, 8), (2, 0.25, 16)]]


def test_bad_input_raises_naming_the_value(data) -> None:
    with pytest.raises(ValueError, match="fractions must be in"):
        train_fused_wsd_branches([tiny()], [0.5, 1.5], data=data)
    with pytest.raises(ValueError, match="'batch_size'"):
        train_fused_wsd_branches([tiny(), tiny(batch_size=8)], [1.0], data=data)


def test_out_dir_files_equal_the_unfused_ones(data, tmp_path) -> None:
    """Each member writes its stable checkpoints and branch metrics as the unfused run does;
    a checkpoint holds the member's own weights, not the stacked tensors they are views of."""
    import torch

    from mutransfer.training.checkpoint import load_checkpoint

    cfgs = [tiny(lr=lr, steps=8, out_dir=str(tmp_path / "fused" / str(i)))
            for i, lr in enumerate([1e-2, 3e-2])]
    train_fused_wsd_branches(cfgs, [0.5, 1.0], data=data)
    for i, cfg in enumerate(cfgs):
        plain = tmp_path / "plain" / str(i)
        train_wsd_branches(cfg.replace(out_dir=str(plain)), [0.5, 1.0], data=data)
        fused = tmp_path / "fused" / str(i)
        names = sorted(p.name for p in plain.iterdir())
        assert names == ["metrics_branch_4.jsonl", "metrics_branch_8.jsonl",
                         "wsd_stable_3.pt", "wsd_stable_6.pt"]
        assert sorted(p.name for p in fused.iterdir()) == names
        for name in names[2:]:
            a, b = load_checkpoint(fused / name), load_checkpoint(plain / name)
            assert a["step"] == b["step"] and a["tokens"] == b["tokens"]
            assert [h["loss"] for h in a["history"]] == [h["loss"] for h in b["history"]]
            for k, t in a["model"].items():
                assert torch.equal(t, b["model"][k]), k
                assert t.untyped_storage().nbytes() == t.numel() * t.element_size(), k
