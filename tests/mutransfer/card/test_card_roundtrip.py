"""Round trip: a card written for the proxy itself (target width == proxy width
== base width) reproduces the proxy's own param groups and its forward pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

from mutransfer.card.apply import apply_card
from mutransfer.card.build import build_card, load_card, save_card
from mutransfer.models.gpt import GPT
from mutransfer.models.mlp import MLP
from mutransfer.models.presets import get_preset
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.parametrize.specs import Multipliers
from mutransfer_cli import main


def per_parameter(groups: list[dict[str, Any]]) -> dict[str, tuple[float, float, float, str]]:
    """name -> (lr, weight_decay, eps, optimizer), from grouped or per-parameter groups."""
    out = {}
    for g in groups:
        for name in g["names"]:
            out[name] = (g["lr"], g["weight_decay"], g["eps"], g["optimizer"])
    return out


def assert_same_forward(a: nn.Module, b: nn.Module, x: torch.Tensor) -> None:
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert na == nb and torch.equal(pa, pb), na
    a.eval()
    b.eval()
    with torch.no_grad():
        ya, yb = a(x), b(x)
    ya = ya[0] if isinstance(ya, tuple) else ya
    yb = yb[0] if isinstance(yb, tuple) else yb
    assert torch.equal(ya, yb)


CASES = {
    # name: (parametrization kind, model, extra Parametrization kwargs)
    "mup-gpt": ("mup", "gpt", {"multipliers": Multipliers(output=2.0, attention=0.5)}),
    "completep-gpt": ("completep", "gpt", {"depth": 2, "base_depth": 2}),
    "muon-gpt": ("muon", "gpt", {}),
    "mup-mlp": ("mup", "mlp", {}),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("wd_mode", ["coupled", "independent"])
def test_card_for_the_proxy_reproduces_its_groups_and_forward(case: str, wd_mode: str,
                                                              tmp_path: Path) -> None:
    kind, model, kw = CASES[case]
    if model == "gpt":
        cfg = get_preset("gpt-tiny")
        if "depth" in kw:
            def builder(w: int, d: int) -> nn.Module:
                return GPT(cfg.replace(width=w, depth=d))
        else:
            def builder(w: int) -> nn.Module:  # type: ignore[misc]
                return GPT(cfg.replace(width=w))
        x = torch.randint(0, cfg.vocab_size, (2, 16))
    else:
        cfg = get_preset("mlp-tiny")

        def builder(w: int) -> nn.Module:  # type: ignore[misc]
            return MLP(cfg.replace(width=w))
        x = torch.randn(4, cfg.in_features)
    width = cfg.width
    pz = Parametrization(builder, width=width, base_width=width, kind=kind, **kw)
    lr, wd, eps = 3e-3, 0.1, 1e-8
    card = build_card(pz, lr=lr, optimizer={"weight_decay": wd, "wd_mode": wd_mode, "eps": eps},
                      schedule={"kind": "constant"}, batch={"sequences": 8},
                      target={"width": width, "depth": kw.get("depth")})
    card = load_card(save_card(card, tmp_path / "card.yaml"))

    proxy = pz.build(seed=7)
    expected = per_parameter(pz.param_groups(proxy, lr, weight_decay=wd, wd_mode=wd_mode, eps=eps))
    torch.manual_seed(7)
    fresh = builder(width, kw["depth"]) if "depth" in kw else builder(width)
    got = per_parameter(apply_card(fresh, card).param_groups)
    assert got.keys() == expected.keys() == dict(proxy.named_parameters()).keys()
    for name, (glr, gwd, geps, gopt) in got.items():
        elr, ewd, eeps, eopt = expected[name]
        assert glr == pytest.approx(elr, rel=1e-12), name
        assert gwd == pytest.approx(ewd, rel=1e-12), name
        assert geps == pytest.approx(eeps, rel=1e-12), name
        assert gopt == eopt, name
    assert_same_forward(fresh, proxy, x)


def test_cli_card_for_the_proxy_round_trips(tmp_path: Path) -> None:
    """`mutransfer transfer` at the proxy's own width: its card rebuilds the proxy exactly."""
    out = tmp_path / "card.yaml"
    cfg = get_preset("gpt-tiny")
    assert main(["transfer", "--lr", "0.004", "--preset", "gpt-tiny", "--base-width", str(cfg.width),
                 "--target-width", str(cfg.width), "--tokens", "1e6", "--batch-size", "8",
                 "--weight-decay", "0.1", "--out", str(out)]) == 0
    card = load_card(out)
    assert card["target"]["width"] == card["parametrization"]["base_width"] == cfg.width

    def builder(w: int) -> nn.Module:
        return GPT(cfg.replace(width=w, seq_len=cfg.seq_len))

    pz = Parametrization(builder, width=cfg.width, base_width=cfg.width, kind="mup")
    proxy = pz.build(seed=3)
    expected = per_parameter(pz.param_groups(proxy, 0.004, weight_decay=0.1))
    torch.manual_seed(3)
    fresh = builder(cfg.width)
    got = per_parameter(apply_card(fresh, card).param_groups)
    assert got.keys() == expected.keys()
    for name in got:
        assert got[name][:3] == pytest.approx(expected[name][:3], rel=1e-12), name
    assert_same_forward(fresh, proxy, torch.randint(0, cfg.vocab_size, (2, 32)))
