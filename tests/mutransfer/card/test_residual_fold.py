"""The fold of a residual-branch multiplier into the branch's output projection (what the
Megatron export does with CompleteP's (L/L_base)^-α): a toy branch y = x + s·W2 φ(W1 x)
trained 10 steps with torch's AdamW equals the plain branch y = x + W2' φ(W1 x) with
W2' = s·W2, its LR × s, Adam eps / s and weight decay / s (the values
:func:`mutransfer.card.engines.megatron_groups.folded` gives), to 1e-5; classic Adam with
L2 in the gradient needs λ / s²; leaving eps or the decay unfolded is measurably another
training. The torchtitan export needs no fold: it carries the multiplier itself."""

from __future__ import annotations

import pytest
import torch

from mutransfer.card.engines.megatron_groups import folded

S, LR, EPS, WD = 0.25, 3e-2, 1e-3, 0.1  # eps large enough to matter at these gradient sizes


def _run(s: float, fold: bool, *, eps2: float, lr2: float, wd2: float, l2: bool = False,
         steps: int = 10) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    d, h, n = 8, 16, 32
    w1 = torch.randn(h, d, generator=g, dtype=torch.float64) / d ** 0.5
    w2 = torch.randn(d, h, generator=g, dtype=torch.float64) / h ** 0.5
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    target = torch.randn(n, d, generator=g, dtype=torch.float64)
    w1 = w1.requires_grad_()
    w2 = (w2 * s if fold else w2).requires_grad_()
    mult = 1.0 if fold else s
    groups = [{"params": [w1], "lr": LR, "eps": EPS, "weight_decay": WD if not l2 else 0.0},
              {"params": [w2], "lr": lr2, "eps": eps2, "weight_decay": wd2 if not l2 else 0.0}]
    opt = (torch.optim.Adam if l2 else torch.optim.AdamW)(groups, betas=(0.9, 0.95))
    for _ in range(steps):
        y = x + mult * torch.nn.functional.gelu(x @ w1.T) @ w2.T
        loss = ((y - target) ** 2).mean()
        if l2:  # classic Adam: the decay is a gradient term λ·W
            loss = loss + 0.5 * (WD * (w1 ** 2).sum() + wd2 * (w2 ** 2).sum())
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        out = x + mult * torch.nn.functional.gelu(x @ w1.T) @ w2.T
    return w1.detach(), w2.detach() / (s if fold else 1.0), out


def test_a_folded_multiplier_trains_as_the_multiplier_does() -> None:
    ref_w1, ref_w2, ref_out = _run(S, fold=False, eps2=EPS, lr2=LR, wd2=WD)
    lr2, eps2, wd2 = folded({"lr": LR, "eps": EPS, "weight_decay": WD}, S, "coupled")
    assert (lr2, eps2, wd2) == pytest.approx((LR * S, EPS / S, WD / S), rel=1e-15)
    w1, w2, out = _run(S, fold=True, eps2=eps2, lr2=lr2, wd2=wd2)
    assert torch.allclose(w1, ref_w1, rtol=0, atol=1e-5) and torch.allclose(w2, ref_w2, rtol=0, atol=1e-5)
    assert torch.allclose(out, ref_out, rtol=0, atol=1e-5)
    assert (w2 - ref_w2).abs().max() < 1e-12  # exact up to float64 rounding, not merely close
    # each part of the fold matters: the same runs with eps or the decay left unfolded differ
    for wrong in ({"eps2": EPS, "lr2": lr2, "wd2": wd2}, {"eps2": eps2, "lr2": lr2, "wd2": WD},
                  {"eps2": eps2, "lr2": LR, "wd2": wd2}):
        _, w2_bad, _ = _run(S, fold=True, **wrong)
        assert (w2_bad - ref_w2).abs().max() > 1e-4, wrong


def test_adam_with_l2_in_the_gradient_folds_its_decay_by_s_squared() -> None:
    ref = _run(S, fold=False, eps2=EPS, lr2=LR, wd2=WD, l2=True)
    good = _run(S, fold=True, eps2=EPS / S, lr2=LR * S, wd2=WD / S ** 2, l2=True)
    bad = _run(S, fold=True, eps2=EPS / S, lr2=LR * S, wd2=WD / S, l2=True)
    assert all(torch.allclose(a, b, rtol=0, atol=1e-5) for a, b in zip(good, ref, strict=True))
    assert (bad[1] - ref[1]).abs().max() > 1e-4
    # decay independent of the LR keeps λ
    assert folded({"lr": LR, "eps": EPS, "weight_decay": WD}, S, "independent")[2] == WD


def test_the_torchtitan_export_carries_the_multiplier_itself() -> None:
    """torchtitan runs the card's forward hooks (its MuPConverter): the CompleteP branch
    multiplier is in the export's ``mup.hooks`` and every parameter keeps the card's own
    LR, eps and weight decay in its group (no fold, so nothing to change)."""
    from mutransfer.card.build import build_card
    from mutransfer.card.export import export_card
    from mutransfer.card.target import TargetModel
    from mutransfer.models.gpt import GPT, GPTConfig
    from mutransfer.parametrize.parametrization import Parametrization

    base = GPTConfig(width=32, depth=8, head_dim=16, seq_len=32, vocab_size=64)
    pz = Parametrization(lambda w, d: GPT(base.replace(width=w, depth=d)), width=128, base_width=32,
                         depth=8, base_depth=2, depth_alpha=1.0, kind="completep")
    card = build_card(pz, lr=3e-3, optimizer={"name": "adamw", "weight_decay": 0.1, "betas": (0.9, 0.95),
                                              "eps": 1e-8},
                      schedule={"kind": "wsd", "warmup_steps": 10, "decay_fraction": 0.2, "total_steps": 100,
                                "decay_shape": "1-sqrt", "lr_floor": 0.1},
                      batch={"sequences": 8, "tokens": 256},
                      target={"model": TargetModel("gpt", base.replace(width=128), "gpt-tiny").to_dict(),
                              "width": 128, "depth": 8})
    e = export_card(card, "torchtitan")
    hooks = {(h["module"], h["kind"]): h["scale"] for h in e["mup"]["hooks"]}
    for i in range(8):
        assert hooks[(f"blocks.{i}.attn", "post")] == hooks[(f"blocks.{i}.mlp", "post")] == 0.25
    import re

    for g in card["param_groups"]:
        mine = [pg for pg in e["optimizer"]["param_groups"] if re.fullmatch(pg["pattern"], g["name"])]
        assert len(mine) == 1, g["name"]
        kw = mine[0]["optimizer_kwargs"]
        assert (kw["lr"], kw["eps"], kw["weight_decay"]) == (g["lr"], g["eps"], g["weight_decay"]), g["name"]
