"""Optimizers over parametrization groups: Muon + AdamW split and its oracle, effective LR
under a schedule, QK-clip."""

from __future__ import annotations

import math

import pytest
import torch

from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.training.config import TrainConfig
from mutransfer.training.optim import build_optimizer, qk_clip, set_lr, track_max_logits
from mutransfer.training.trainer import Trainer

G = GPTConfig(width=64, depth=1, head_dim=16, seq_len=16, vocab_size=64)


def muon_model() -> tuple[GPT, Parametrization]:
    def builder(width: int) -> GPT:
        return GPT(G.replace(width=width))

    pz = Parametrization(builder, width=64, base_width=32, kind="muon")
    return pz.build(seed=0), pz  # type: ignore[return-value]


def test_muon_gets_hidden_matrices_and_adamw_the_rest() -> None:
    model, pz = muon_model()
    opt = build_optimizer(pz.param_groups(model, 1e-2), "muon")
    muon, adamw = opt.optimizers
    assert isinstance(muon, torch.optim.Muon) and isinstance(adamw, torch.optim.AdamW)
    muon_names = {n for g in muon.param_groups for n in g["names"]}
    adam_names = {n for g in adamw.param_groups for n in g["names"]}
    hidden = {n for n, s in pz.specs.items() if s.role == "hidden"}
    assert muon_names == hidden and all(pz.specs[n].shape.__len__() == 2 for n in muon_names)
    assert {"wte.weight", "lm_head.weight"} <= adam_names and not muon_names & adam_names
    assert muon_names | adam_names == {n for n, _ in model.named_parameters()}


def test_muon_step_equals_torch_muon_with_lr_times_mult() -> None:
    model, pz = muon_model()
    groups = pz.param_groups(model, 3e-2)
    opt = build_optimizer(groups, "muon")
    x = torch.randint(0, 64, (4, 16))
    _, loss = model(x, x)
    loss.backward()
    hidden = [(n, p) for g in groups if g["optimizer"] == "muon" for n, p in zip(g["names"], g["params"])]
    mults = {n: g["lr_mult"] for g in groups for n in g["names"]}
    clones = {n: p.detach().clone().requires_grad_(True) for n, p in hidden}
    for n, p in hidden:
        clones[n].grad = p.grad.clone()
    oracle = [torch.optim.Muon([clones[n]], lr=3e-2 * mults[n], momentum=0.95, weight_decay=0.0,
                               adjust_lr_fn="original") for n, _ in hidden]
    opt.step()
    for o in oracle:
        o.step()
    for n, p in hidden:
        torch.testing.assert_close(p.detach(), clones[n].detach(), rtol=0, atol=0)


@pytest.mark.parametrize("parametrization", ["mup", "muon", "sp"])
def test_effective_lr_is_base_times_schedule_times_mult(parametrization: str) -> None:
    cfg = TrainConfig.from_flat(dict(
        preset="gpt-tiny", width=64, depth=1, head_dim=16, seq_len=16, batch_size=4, steps=10,
        lr=3e-3, base_width=32, parametrization=parametrization, warmup_steps=3,
        schedule="cosine", lr_floor=0.1, eval_every=0, eval_sequences=8, threads=1,
        data_max_bytes=100_000))
    t = Trainer(cfg)
    mults = {n: t.pz.specs[n].lr_mult for n in t.pz.specs}
    for step in range(6):
        t.train_step()
        for g in t.opt.param_groups:
            for n in g["names"]:
                assert g["lr"] == pytest.approx(3e-3 * t.schedule(step) * mults[n], rel=1e-12)
        assert t.history[-1]["lr"] == pytest.approx(3e-3 * t.schedule(step))
    if parametrization != "sp":  # muP: hidden Adam LR is 1/m_in = 1/2 of base at 2x width
        assert {mults[n] for n, s in t.pz.specs.items() if s.role == "hidden" and s.optimizer == "adamw"} \
            <= {0.5}


def test_set_lr_composes_with_multipliers() -> None:
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([{"params": [p], "lr": 0.5, "base_lr": 1.0, "lr_mult": 0.5}], lr=0.5)
    set_lr(opt, 0.25)
    assert opt.param_groups[0]["lr"] == 0.125


def test_qk_clip_bounds_each_head_and_leaves_the_others() -> None:
    torch.manual_seed(0)
    model = GPT(G.replace(depth=1, pos_emb="learned"))
    attn = model.blocks[0].attn
    D, H = attn.head_dim, attn.n_head
    with torch.no_grad():  # blow up heads 0 and 2 so their logits are huge
        for h in (0, 2):
            attn.c_q.weight[h * D:(h + 1) * D] *= 30.0
            attn.c_k.weight[h * D:(h + 1) * D] *= 30.0
    x = torch.randint(0, 64, (2, 16))
    track_max_logits(model)
    model(x)
    s = attn.max_logit.clone()
    tau = 50.0
    assert s[0] > tau and s[2] > tau and s[1] < tau and s[3] < tau, s
    wq, wk = attn.c_q.weight.detach().clone(), attn.c_k.weight.detach().clone()
    assert qk_clip(model, tau) == 2
    model(x)
    after = attn.max_logit
    for h in range(H):
        rows = slice(h * D, (h + 1) * D)
        if s[h] > tau:  # logits are bilinear in W_q, W_k: scaled by exactly tau / S_max
            assert after[h] == pytest.approx(tau, rel=1e-4)
            assert torch.allclose(attn.c_q.weight[rows], wq[rows] * math.sqrt(tau / s[h]))
        else:
            assert torch.equal(attn.c_q.weight[rows], wq[rows])
            assert torch.equal(attn.c_k.weight[rows], wk[rows])
            assert after[h] == pytest.approx(float(s[h]), rel=1e-5)
    assert qk_clip(model, tau * 1.0001) == 0  # nothing left over tau (up to rounding)
    with pytest.raises(ValueError, match="tau"):
        qk_clip(model, 0.0)


def test_qk_clip_in_training_keeps_logits_bounded() -> None:
    cfg = TrainConfig.from_flat(dict(
        preset="gpt-tiny", width=32, depth=1, head_dim=16, seq_len=32, batch_size=8, steps=30,
        lr=5e-2, qk_clip=True, qk_clip_tau=2.0, schedule="constant", warmup_steps=0,
        eval_every=0, eval_sequences=8, threads=1, data_max_bytes=100_000))
    r = Trainer(cfg).run()
    clipped = sum(h.get("qk_clipped_heads", 0) for h in r.history)
    assert clipped > 0
    # The logged max is measured before each step's clip, so it is tau plus one step's
    # growth; the same run without QK-clip grows its logits an order of magnitude more.
    late = [h["max_attn_logit"] for h in r.history[10:]]
    assert max(late) < 2.0 * 2.5, late
    free = Trainer(cfg.replace(qk_clip=False, max_logit_every=1)).run()
    free_late = [h["max_attn_logit"] for h in free.history[10:] if h["max_attn_logit"] is not None]
    assert max(free_late) > 4 * max(late)


@pytest.mark.parametrize("kind", ["mup", "muon"])
def test_torch_lr_schedulers_drive_build_optimizers_result(kind: str) -> None:
    """LambdaLR and OneCycleLR accept the result (Muon + AdamW included): after k steps each
    group's LR is its own base x multiplier times the schedule, so the μP ratios between
    groups hold, and a training step still moves every parameter."""
    pz = Parametrization(lambda w: GPT(G.replace(width=w)), width=64, base_width=32, kind=kind)
    model = pz.build(seed=0)
    opt = build_optimizer(pz.param_groups(model, 1e-2), "muon" if kind == "muon" else "adamw")
    assert isinstance(opt, torch.optim.Optimizer)
    start = [g["lr"] for g in opt.param_groups]
    assert kind == "muon" or len(set(start)) > 1  # μP's multipliers differ between groups
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5**step)
    idx = torch.randint(0, G.vocab_size, (2, G.seq_len))
    before = [p.detach().clone() for p in model.parameters()]
    for _ in range(3):
        opt.zero_grad()
        _, loss = model(idx, idx)
        loss.backward()
        opt.step()
        sched.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([lr * 0.5**3 for lr in start], rel=1e-12)
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    for g, lr in zip(opt.param_groups, start):  # a fresh scheduler starts again from each group's LR
        g["lr"] = lr
        g.pop("initial_lr")
    # Muon's momentum and AdamW's betas differ in name: over both, cycle only the LR
    cycle = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=start, total_steps=10, pct_start=0.3,
                                                cycle_momentum=kind != "muon")
    first = [g["lr"] for g in opt.param_groups]
    assert first == pytest.approx([lr / 25 for lr in start], rel=1e-12)  # div_factor 25
    for _ in range(2):  # the peak is at step pct_start x total_steps - 1 = 2
        opt.step()
        cycle.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx(start, rel=1e-12)  # the peak, per group
    state = opt.state_dict()
    assert set(state) == {"optimizers"}  # the checkpoint format is unchanged
