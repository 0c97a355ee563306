"""The scaling rules as data: the table Parametrization reads is the table printed."""

from __future__ import annotations

import math

import pytest

from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.mlp import MLP, MLPConfig
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.parametrize.rules import (
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


def _readout_mult(pz: Parametrization) -> float:
    hooks = [h for h in pz.forward_multipliers()["hooks"] if h["module"] == "lm_head"]
    return hooks[0]["scale"] if hooks else 1.0


def test_fan_in_readout_init_is_sps_effective_init_with_mups_readout_lr() -> None:
    """Oracle: with readout_init="fan_in" the effective readout (stored weight × μP's 1/m_in
    forward multiplier) has SP's init std, torch's fan_in^-1/2; every LR multiplier and
    every other init stays plain μP's, and at the base width it is plain μP exactly."""
    gpt = lambda w: GPT(GPTConfig(width=w, depth=2, head_dim=16, seq_len=16, vocab_size=64))  # noqa: E731
    for width in (32, 128, 512):
        plain = Parametrization(gpt, width=width, base_width=32)
        pz = Parametrization(gpt, width=width, base_width=32, readout_init="fan_in")
        sp = Parametrization(gpt, width=width, base_width=32, kind="sp").build(seed=0)
        model = pz.build(seed=0)
        effective = float(model.lm_head.weight.detach().std()) * _readout_mult(pz)
        assert _readout_mult(pz) == _readout_mult(plain) == pytest.approx(32 / width)
        assert effective == pytest.approx(width**-0.5, rel=0.05)
        assert effective == pytest.approx(float(sp.lm_head.weight.detach().std()), rel=0.05)
        assert pz.specs["lm_head.weight"].init == ("keep" if width == 32 else f"scale:{width / 32:g}")
        for name, s in pz.specs.items():
            assert s.lr_mult == plain.specs[name].lr_mult, name
            if name != "lm_head.weight":
                assert s.init == plain.specs[name].init, name
        if width == 32:
            assert pz.specs == plain.specs
    # init="normal": the stored std is init_std x sqrt(m_in)
    pz = Parametrization(gpt, width=128, base_width=32, readout_init="fan_in", init="normal", init_std=0.02)
    assert pz.specs["lm_head.weight"].init_std == pytest.approx(0.02 * 2.0)


def test_fan_in_readout_init_corrects_a_constant_std_model_init() -> None:
    """A model whose own init has one std at every width (Hugging Face's law, e = 0) gets
    the same μP readout: stored std ∝ sqrt(m_in) (constant readout_init: constant)."""
    import torch

    def const_init(w: int) -> GPT:
        model = GPT(GPTConfig(width=w, depth=1, head_dim=16, seq_len=16, vocab_size=64))
        with torch.no_grad():
            for mod in model.modules():
                if isinstance(mod, torch.nn.Linear):
                    mod.weight.normal_(0.0, 0.02)
        return model

    for readout_init, law in (("constant", 0.0), ("fan_in", 0.5)):
        pz = Parametrization(const_init, width=256, base_width=32, readout_init=readout_init)
        assert pz.init_exponents["lm_head.weight"] == 0.0
        std = float(pz.build(seed=0).lm_head.weight.detach().std())
        assert std == pytest.approx(0.02 * 8.0**law, rel=0.05), readout_init


def test_readout_init_table_row_and_one_clear_error() -> None:
    from mutransfer.parametrize.rules import READOUT_INIT
    from mutransfer.training.config import TrainConfig

    line = next(ln for ln in rules_table().splitlines() if ln.startswith("# readout_init"))
    assert "fan_in: init std m_in^1/2 (effective m_in^-1/2)" in line
    assert "constant: init std 1 (effective m_in^-1)" in line and "zero: init std 0" in line
    assert set(READOUT_INIT) == {"constant", "zero", "fan_in"}
    builder = lambda w: MLP(MLP_CFG.replace(width=w))  # noqa: E731
    with pytest.raises(ValueError, match="readout_init must be one of constant, fan_in, zero, got 'fanin'"):
        Parametrization(builder, width=64, base_width=32, readout_init="fanin")
    with pytest.raises(ValueError, match="readout_init must be one of constant, zero, fan_in, got 'fanin'"):
        TrainConfig.from_flat({"readout_init": "fanin"})
    assert TrainConfig.from_flat({"readout_init": "fan_in"}).parametrization.readout_init == "fan_in"


def test_one_readout_default_everywhere() -> None:
    """fan_in is the readout every path takes unless told: the rules' constant, the
    Parametrization, the TrainConfig (so the trainer, sweeps and transfer's card), the
    coordinate check; the rules table says so."""
    import inspect

    from mutransfer.checks.coord_check import coord_check
    from mutransfer.parametrize.rules import DEFAULT_READOUT_INIT, READOUT_INIT_RANGE
    from mutransfer.training.config import TrainConfig

    assert DEFAULT_READOUT_INIT == "fan_in" and READOUT_INIT_RANGE == (0.0, 0.5)
    builder = lambda w: MLP(MLP_CFG.replace(width=w))  # noqa: E731
    assert Parametrization(builder, width=64, base_width=32).readout_init == "fan_in"
    assert TrainConfig.from_flat({}).parametrization.readout_init == "fan_in"
    assert inspect.signature(coord_check).parameters["readout_init"].default == "fan_in"
    line = next(ln for ln in rules_table().splitlines() if ln.startswith("# readout_init"))
    assert "default fan_in" in line and "the audit accepts an output init std from 1 to m_in^1/2" in line
