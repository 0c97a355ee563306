"""The scaling rules as data: the table Parametrization reads is the table printed."""

from __future__ import annotations

import math

import pytest

from mutransfer.models import GPT, MLP, GPTConfig, MLPConfig
from mutransfer.parametrization import Parametrization
from mutransfer.rules import (
    COMPLETEP,
    WIDTH_RULES,
    Power,
    invariant_exponents,
    role_rule,
    rules_table,
)

MLP_CFG = MLPConfig(in_features=12, width=32, depth=2, out_features=5)


def test_table_is_tp5_table3_in_mureadout_form() -> None:
    mup = WIDTH_RULES["mup"]
    # Known answers (TP-V Table 3 via the abc-symmetry, mup's MuAdam/MuSGD/MuReadout).
    assert mup["hidden"].lr_adam == Power(fan_in=-1.0)
    assert mup["hidden"].lr_sgd == Power(fan_in=-1.0, fan_out=1.0)
    assert mup["hidden"].init_std == Power(fan_in=-0.5)
    assert mup["output"].multiplier == Power(fan_in=-1.0)
    assert mup["input"].lr_sgd == Power(fan_out=1.0) and mup["output"].lr_sgd == Power(fan_in=1.0)
    # Table 3's own output row (init var 1/fan_in^2, Adam LR 1/fan_in, no multiplier) has
    # the same invariants as the MuReadout row: the symmetry the audit relies on.
    ours = invariant_exponents(-1.0, 0.0, 0.0, "adam")
    table3 = invariant_exponents(0.0, -1.0, -1.0, "adam")
    assert ours == table3 == {"init": -1.0, "lr": -1.0}
    assert invariant_exponents(-1.0, 0.0, 1.0, "sgd") == invariant_exponents(0.0, -1.0, -1.0, "sgd")


def test_parametrization_numbers_come_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Change the table and the Parametrization follows: there is no second copy."""
    builder = lambda w: MLP(MLP_CFG.replace(width=w))  # noqa: E731
    pz = Parametrization(builder, width=128, base_width=32)
    assert pz.specs["hidden.0.weight"].lr_mult == pytest.approx(1 / 4)
    hidden = WIDTH_RULES["mup"]["hidden"]
    monkeypatch.setitem(WIDTH_RULES["mup"], "hidden",
                        hidden.__class__(init_std=hidden.init_std, lr_adam=Power(fan_in=-0.5),
                                         lr_sgd=hidden.lr_sgd))
    pz = Parametrization(builder, width=128, base_width=32)
    assert pz.specs["hidden.0.weight"].lr_mult == pytest.approx(1 / 2)
    assert role_rule("completep", "hidden").lr_adam == Power(fan_in=-0.5)


def test_printed_table_lists_every_rule_the_code_uses() -> None:
    text = rules_table()
    for kind, rows in WIDTH_RULES.items():
        for role, r in rows.items():
            line = next(ln for ln in text.splitlines() if ln.split()[:2] == [kind, role])
            assert str(r.lr_adam) in line and str(r.lr_sgd) in line and str(r.multiplier) in line
    hidden = next(ln for ln in text.splitlines() if ln.startswith("mup    hidden"))
    assert hidden.split() == ["mup", "hidden", "m_in^-1/2", "m_in^-1", "m_in^-1", "m_out", "1"]
    assert "d_head^-1" in text and "alpha" in text and "torch.optim.Muon" in text


def test_attention_and_completep_modifiers_as_data() -> None:
    fixed_heads = lambda w: GPT(GPTConfig(width=w, depth=2, n_head=2, seq_len=16, vocab_size=64))  # noqa: E731
    pz = Parametrization(fixed_heads, width=128, base_width=32)
    assert pz.attention_scale(64, 16) == pytest.approx(math.sqrt(16) / 64)
    sp = Parametrization(fixed_heads, width=128, base_width=32, kind="sp")
    assert sp.attention_scale(64, 16) == pytest.approx(64**-0.5)
    assert COMPLETEP.lr.exponent(0.5) == -0.5 and COMPLETEP.residual_multiplier.exponent(1.0) == -1.0
