"""Fused multi-trial training (mutransfer.training.fused): every member equals its unfused run."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mutransfer.models.gpt import GPT
from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, load_dataset
from mutransfer.training.fused import train_fused
from mutransfer.training.fusion import (
    CPU_DEFAULT_K,
    CPU_FUSE_MAX_FLOPS,
    check_fusible,
    choose_k,
    fusion_key,
    member_step_flops,
    partition,
    unsupported_reason,
)
from mutransfer.training.train import train
from mutransfer.training.train_result import TrainResult

RTOL = 1e-5
# Row keys that measure the machine, not the run.
TIMING = {"wall_s", "tokens_per_s"}


@pytest.fixture(scope="module")
def data():
    return load_dataset(DataConfig(source="stdlib", max_bytes=300_000))


def tiny(**kw) -> TrainConfig:
    base = dict(preset="gpt-tiny", width=32, depth=2, head_dim=16, seq_len=16, batch_size=8, steps=15,
                eval_every=5, eval_sequences=8, threads=1, data_max_bytes=300_000, base_width=16,
                device="cpu", parametrization="mup")
    base.update(kw)
    return TrainConfig.from_flat(base)


def assert_same(ref: TrainResult, got: TrainResult) -> None:
    """The fused result equals the unfused one: loss curve (rtol 1e-5), evals, flags, row."""
    assert got.diverged == ref.diverged and got.pruned == ref.pruned
    assert got.steps_done == ref.steps_done and got.stop_reason == ref.stop_reason
    a = [h["loss"] for h in ref.history]
    b = [h["loss"] for h in got.history]
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if math.isfinite(x):
            assert y == pytest.approx(x, rel=RTOL)
        else:
            assert not math.isfinite(y)
    for key in ("grad_norm", "gns", "max_attn_logit", "spike", "skipped", "qk_clipped_heads"):
        va = [h.get(key) for h in ref.history]
        vb = [h.get(key) for h in got.history]
        assert [v is None for v in va] == [v is None for v in vb], key
        for x, y in zip(va, vb):
            if isinstance(x, float) and math.isfinite(x):
                assert y == pytest.approx(x, rel=RTOL), key
    assert [s for s, _ in got.evals] == [s for s, _ in ref.evals]
    for (_, x), (_, y) in zip(ref.evals, got.evals):
        assert y == pytest.approx(x, rel=RTOL)
    ra, rb = ref.to_row(), got.to_row()
    assert set(ra) == set(rb)
    for k in ra:
        if k in TIMING:
            continue
        if isinstance(ra[k], float):
            assert rb[k] == pytest.approx(ra[k], rel=RTOL), k
        else:
            assert rb[k] == ra[k], k


@pytest.mark.parametrize("optimizer", ["adamw", "sgd", "muon"])
def test_members_match_unfused_runs_one_diverges(data, optimizer: str) -> None:
    par = "muon" if optimizer == "muon" else "mup"
    lrs = {"adamw": [1e-3, 1e-2, 3e-2, 1e3], "sgd": [0.05, 0.2, 0.5, 1e4],
           "muon": [1e-3, 1e-2, 3e-2, 1e3]}[optimizer]
    cfgs = [tiny(parametrization=par, optimizer=optimizer, lr=lr, seed=i % 2,
                 momentum=0.9 if optimizer == "sgd" else 0.0) for i, lr in enumerate(lrs)]
    fused = train_fused(cfgs, data=data)
    refs = [train(c, data=data) for c in cfgs]
    assert [r.diverged for r in refs] == [False, False, False, True]
    for r, f in zip(refs, fused):
        assert_same(r, f)
    # The survivors trained the whole way; the diverged one stopped where train() did.
    assert fused[-1].steps_done < 15 and all(f.steps_done == 15 for f in fused[:3])


def test_per_member_hyperparameters_and_multipliers(data) -> None:
    """Everything fusible differs per member: μP forward multipliers (input, output,
    residual; attention scale through attn_mult), base width (init, LR multipliers),
    weight decay and its mode, betas, eps, warmup, schedule, grad clip."""
    cfgs = [
        tiny(lr=1e-2, input_mult=2.0, output_mult=0.5, weight_decay=0.1, seed=3),
        tiny(lr=3e-3, attn_mult=2.0, residual_mult=0.7, beta1=0.8, beta2=0.99, eps=1e-6, base_width=32,
             grad_clip=0.5, schedule="wsd", warmup_steps=2),
        tiny(lr=2e-2, weight_decay=0.05, wd_mode="independent", grad_clip=None, schedule="constant",
             readout_init="zero"),
    ]
    check_fusible(cfgs)
    fused = train_fused(cfgs, data=data)
    for c, f in zip(cfgs, fused):
        assert_same(train(c, data=data), f)


def test_architecture_switches_accumulation_qk_clip_and_skips(data) -> None:
    """Tied embeddings, z-loss, soft-cap, QK-norm off/on, grad accumulation (GNS per
    member), QK-clip with a low tau, and the ``skip`` spike policy (members skip at
    different steps)."""
    common = dict(tie_embeddings=True, z_loss=1e-4, logit_softcap=30.0, grad_accum=2, qk_clip=True,
                  max_logit_every=1, spike_policy="skip", spike_window=4, spike_threshold=0.3)
    cfgs = [tiny(lr=lr, seed=s, qk_clip_tau=tau, **common)
            for lr, s, tau in ((1e-2, 0, 1.0), (4e-2, 1, 50.0), (2e-2, 0, 1.05))]
    fused = train_fused(cfgs, data=data)
    refs = [train(c, data=data) for c in cfgs]
    assert any(h.get("qk_clipped_heads") for r in refs for h in r.history)
    assert any(h.get("skipped") for r in refs for h in r.history)
    assert any(h.get("gns") is not None for r in refs for h in r.history)
    for r, f in zip(refs, fused):
        assert_same(r, f)
    qk = [tiny(lr=1e-2, qk_norm=True, seed=s) for s in (0, 1)]
    for c, f in zip(qk, train_fused(qk, data=data)):
        assert_same(train(c, data=data), f)


def test_llama_members_match_unfused_runs(data) -> None:
    """llama-tiny (SwiGLU, 4 query heads over 2 key/value heads) fused at K=3 under μP: the
    gate matrix and the narrower k/v stack like any linear, GQA's QK-clip acts per member,
    one member diverges."""
    common = dict(preset="llama-tiny", width=64, base_width=32, qk_clip=True, qk_clip_tau=2.0,
                  max_logit_every=1)
    cfgs = [tiny(lr=lr, seed=s, **common) for lr, s in ((1e-2, 0), (3e-2, 1), (1e3, 0))]
    fused = train_fused(cfgs, data=data)
    refs = [train(c, data=data) for c in cfgs]
    assert [r.diverged for r in refs] == [False, False, True]
    assert any(h.get("qk_clipped_heads") for r in refs for h in r.history)
    for r, f in zip(refs, fused):
        assert_same(r, f)


def test_callback_prunes_one_member_only(data) -> None:
    cfgs = [tiny(lr=lr) for lr in (1e-3, 1e-2, 3e-2)]
    seen: list[tuple[int, int]] = []

    def fused_cb(member: int, step: int, metrics: dict) -> bool:
        seen.append((member, step))
        assert {"step", "val_loss", "train_loss", "tokens", "lr", "wall_s"} <= set(metrics)
        return member == 1 and step >= 5

    fused = train_fused(cfgs, data=data, callback=fused_cb)
    assert (1, 10) not in seen and (0, 15) in seen and (2, 15) in seen
    refs = [train(c, data=data, callback=(lambda s, m, i=i: i == 1 and s >= 5)) for i, c in enumerate(cfgs)]
    assert refs[1].pruned and fused[1].pruned and fused[1].steps_done == 5
    for r, f in zip(refs, fused):
        assert_same(r, f)
    # The per-config form of the callback (the unfused signature) works the same way.
    again = train_fused(cfgs, data=data, callback=[None, lambda s, m: s >= 5, None])
    assert [f.pruned for f in again] == [False, True, False]


def test_groups_of_k_keep_order(data) -> None:
    cfgs = [tiny(lr=lr, steps=6, eval_every=3) for lr in (1e-3, 3e-3, 1e-2)]
    fused = train_fused(cfgs, k=2, data=data)
    for c, f in zip(cfgs, fused):
        assert f.lr == c.optim.lr
        assert_same(train(c, data=data), f)


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"'width'.*32.*64"):
        train_fused([tiny(), tiny(width=64)])
    with pytest.raises(ValueError, match="'steps'"):
        check_fusible([tiny(), tiny(steps=20)])
    with pytest.raises(ValueError, match="'batch_size'"):
        check_fusible([tiny(), tiny(batch_size=4)])
    with pytest.raises(ValueError, match="'optimizer'"):
        check_fusible([tiny(), tiny(optimizer="sgd")])
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="k"):
            train_fused([tiny()], k=bad)
    with pytest.raises(ValueError, match="rollback"):
        train_fused([tiny(spike_policy="rollback")])
    with pytest.raises(ValueError, match="at least one"):
        train_fused([])
    # width=None on a width-64 preset is the same shape as width=64: fusible.
    check_fusible([tiny(width=None, base_width=None), tiny(width=64, base_width=None)])


def test_partition_and_k_choice() -> None:
    cfgs = [tiny(lr=1e-3), tiny(width=64, lr=1e-3), tiny(lr=1e-2), tiny(lr=3e-2),
            tiny(spike_policy="rollback"), tiny(width=64, lr=1e-2)]
    assert fusion_key(cfgs[0]) == fusion_key(cfgs[2]) != fusion_key(cfgs[1])
    assert unsupported_reason(cfgs[4]) is not None and unsupported_reason(cfgs[0]) is None
    assert partition(cfgs, k=2) == [[0, 2], [3], [1, 5], [4]]
    assert partition(cfgs) == [[0, 2, 3], [1, 5], [4]]
    assert choose_k(tiny(), "cpu") == CPU_DEFAULT_K
    # on CPU a member whose micro-step costs >= CPU_FUSE_MAX_FLOPS trains unfused; the cost
    # is the model's 6N + 6LTC FLOPs per token times one micro-batch's tokens
    big = tiny(width=512, depth=4, head_dim=64, seq_len=128, batch_size=32, grad_accum=2)
    with torch.device("meta"):
        per_token = GPT(big.model_config(vocab_size=256)).flops_per_token()
    assert member_step_flops(big) == per_token * 16 * 128 >= CPU_FUSE_MAX_FLOPS
    assert member_step_flops(tiny()) < CPU_FUSE_MAX_FLOPS
    assert choose_k(big, "cpu") == 1
    with pytest.raises(ValueError):
        partition(cfgs, k=0)


def test_member_models_hold_their_final_weights(data) -> None:
    """Every member's own model ends up with its own weights (no aliasing left)."""
    from mutransfer.training.fused import FusedGroup

    cfgs = [tiny(lr=1e-2, steps=3, eval_every=0), tiny(lr=2e-2, steps=3, eval_every=0, seed=1)]
    group = FusedGroup(cfgs, data=data)
    group.run()
    w = [dict(m.trainer.raw_model.named_parameters())["wte.weight"] for m in group.members]
    assert w[0].data_ptr() != w[1].data_ptr()
    assert not torch.equal(w[0], w[1])
    assert dataclasses.replace(cfgs[0]) == cfgs[0]
