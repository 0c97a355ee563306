"""The parametrization layer: roles, rules, μP/CompleteP/Muon numbers, and the mup oracle."""

from __future__ import annotations

import copy
import math

import mup
import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.mlp import MLP, MLPConfig
from mutransfer.parametrize.base_shapes import load_base_shapes
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.parametrize.specs import Multipliers
from mutransfer.training.optim import build_optimizer, set_lr

GPT_CFG = GPTConfig(width=32, depth=2, head_dim=16, seq_len=16, vocab_size=64)
MLP_CFG = MLPConfig(in_features=12, width=32, depth=2, out_features=5)


def gpt_builder(tie: bool = False):
    return lambda w: GPT(GPT_CFG.replace(width=w, tie_embeddings=tie))


def mlp_builder(width: int) -> nn.Module:
    return MLP(MLP_CFG.replace(width=width))


# ---- mup-style twins of our models: the same modules with a MuReadout head ----------


def mup_mlp(width: int) -> nn.Module:
    model = MLP(MLP_CFG.replace(width=width))
    model.fc_out = mup.MuReadout(width, MLP_CFG.out_features, bias=True)
    return model


def mup_gpt(width: int, tie: bool = False) -> nn.Module:
    model = GPT(GPT_CFG.replace(width=width, tie_embeddings=tie))
    if tie:
        model.lm_head = mup.MuSharedReadout(model.wte.weight, bias=False)
    else:
        model.lm_head = mup.MuReadout(width, GPT_CFG.vocab_size, bias=False)
        nn.init.normal_(model.lm_head.weight, std=width**-0.5)  # our GPT's readout law
    return model


def with_mup_shapes(make, width: int, base: int, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = make(width)
    mup.set_base_shapes(model, make(base), delta=make(base * 2))
    return model


def effective_lrs(groups: list[dict]) -> dict[int, float]:
    return {id(p): g["lr"] for g in groups for p in g["params"]}


def names_by_id(model: nn.Module) -> dict[int, str]:
    return {id(p): n for n, p in model.named_parameters()}


# ---- oracle: same effective LR as mup.set_base_shapes + MuAdamW / MuSGD ------------


@pytest.mark.parametrize("case", ["mlp", "gpt", "gpt-tied"])
@pytest.mark.parametrize("rule", ["adam", "sgd"])
def test_effective_lr_matches_mup(case: str, rule: str) -> None:
    width, base, lr = 128, 32, 0.01
    tie = case == "gpt-tied"
    mup_make = mup_mlp if case == "mlp" else (lambda w: mup_gpt(w, tie))
    ours_make = mlp_builder if case == "mlp" else gpt_builder(tie)

    ref = with_mup_shapes(mup_make, width, base)
    mu_opt = (mup.MuAdamW if rule == "adam" else mup.MuSGD)(ref.parameters(), lr=lr)
    ref_lr = {names_by_id(ref)[i]: v for i, v in effective_lrs(mu_opt.param_groups).items()}

    pz = Parametrization(ours_make, width=width, base_width=base, kind="mup", optimizer=rule)
    model = pz.build(seed=0)
    ours = {names_by_id(model)[i]: v for i, v in effective_lrs(pz.param_groups(model, lr)).items()}

    assert set(ours) == set(ref_lr)
    for name in ours:
        assert ours[name] == pytest.approx(ref_lr[name], rel=1e-12), name
    # The μP rule is not vacuous: hidden weights do get a different LR from vectors.
    assert len(set(ours.values())) >= 2


def test_independent_weight_decay_equals_mup_adamw_decay() -> None:
    """mup's MuAdamW multiplies the hidden WD by width_mult so lr·wd is width-free; that
    is our `independent` mode with wd_indep = lr × wd (vectors aside: we never decay them)."""
    width, base, lr, wd = 128, 32, 3e-3, 0.1
    ref = with_mup_shapes(mup_mlp, width, base)
    mu_opt = mup.MuAdamW(ref.parameters(), lr=lr, weight_decay=wd)
    names = names_by_id(ref)
    ref_decay = {names[id(p)]: g["lr"] * g["weight_decay"] for g in mu_opt.param_groups for p in g["params"]}
    pz = Parametrization(mlp_builder, width=width, base_width=base)
    model = pz.build(seed=0)
    groups = pz.param_groups(model, lr, weight_decay=lr * wd, wd_mode="independent")
    ours = {names_by_id(model)[id(p)]: g["lr"] * g["weight_decay"] for g in groups for p in g["params"]}
    for name, spec in pz.specs.items():
        if spec.wd:
            assert ours[name] == pytest.approx(ref_decay[name], rel=1e-12), name
        else:
            assert ours[name] == 0.0 and ref_decay[name] > 0  # documented difference


@pytest.mark.parametrize("case", ["mlp", "gpt", "gpt-tied"])
@pytest.mark.parametrize("rule", ["adam", "sgd"])
@pytest.mark.parametrize("ratio", [1, 4])
def test_coupled_weight_decay_equals_mups(case: str, rule: str, ratio: int) -> None:
    """Coupled decay (torch's lr × weight_decay per step): MuAdamW multiplies a matrix's
    weight_decay by the factor it divides its LR by (MuSGD the reverse), so lr·wd is
    width-free. Ours gives every decayed parameter the same lr·wd (vectors: no decay)."""
    base, lr, wd = 32, 3e-3, 0.1
    width = base * ratio
    tie = case == "gpt-tied"
    mup_make = mup_mlp if case == "mlp" else (lambda w: mup_gpt(w, tie))
    ours_make = mlp_builder if case == "mlp" else gpt_builder(tie)
    ref = with_mup_shapes(mup_make, width, base)
    mu_opt = (mup.MuAdamW if rule == "adam" else mup.MuSGD)(ref.parameters(), lr=lr, weight_decay=wd)
    names = names_by_id(ref)
    ref_decay = {names[id(p)]: g["lr"] * g["weight_decay"] for g in mu_opt.param_groups for p in g["params"]}
    pz = Parametrization(ours_make, width=width, base_width=base, optimizer=rule)
    model = pz.build(seed=0)
    groups = pz.param_groups(model, lr, weight_decay=wd, wd_mode="coupled")
    ours = {names_by_id(model)[id(p)]: g["lr"] * g["weight_decay"] for g in groups for p in g["params"]}
    assert set(ours) == set(ref_decay)
    for name, spec in pz.specs.items():
        if spec.wd:
            assert ours[name] == pytest.approx(ref_decay[name], rel=1e-12), name
        else:
            assert ours[name] == 0.0 and ref_decay[name] > 0  # documented difference
    # Not vacuous at ratio 4: the hidden matrices' stored weight decay is 4x the base value.
    hidden = {g["weight_decay"] for g in groups if g["role"] == "hidden"}
    assert hidden == ({wd * ratio} if rule == "adam" else {wd})  # SGD's hidden LR is m_out/m_in = 1


def _gpt_depth(w: int, d: int) -> nn.Module:
    return GPT(GPT_CFG.replace(width=w, depth=d))


@settings(max_examples=6, deadline=None)
@given(kind=st.sampled_from(["sp", "mup", "completep", "muon"]), rule=st.sampled_from(["adam", "sgd"]),
       mults=st.dictionaries(st.sampled_from(["input", "hidden", "output", "vector"]),
                             st.floats(0.125, 8.0), max_size=3),
       wd=st.floats(1e-4, 0.3))
def test_coupled_decay_timescale_is_the_base_widths_at_every_width(
        kind: str, rule: str, mults: dict[str, float], wd: float) -> None:
    """The property behind the rule: for every coupled-decay group, lr_g·λ_g = lr·λ·r(role)
    at every width (and depth), identical to the base shape's; built from specs alone."""
    if kind == "muon":
        rule = "adam"
    lr = 2e-3
    at_base: dict[str, float] = {}
    for width, depth in ((32, 2), (64, 2), (128, 4)):
        pz = Parametrization(_gpt_depth, width=width, base_width=32, depth=depth, base_depth=2,
                             kind=kind, optimizer=rule)
        got = pz.optimizer_settings(lr, weight_decay=wd, wd_mode="coupled", role_lr_mults=mults)
        assert set(got) == set(pz.specs)
        for name, v in got.items():
            spec = pz.specs[name]
            want = lr * wd * mults.get(spec.role, 1.0) if spec.wd else 0.0
            assert v["lr"] * v["weight_decay"] == pytest.approx(want, rel=1e-12), (width, name)
            assert v["lr_mult"] == pytest.approx(spec.lr_mult * mults.get(spec.role, 1.0), rel=1e-12)
            at_base.setdefault(name, v["lr"] * v["weight_decay"])
            assert v["lr"] * v["weight_decay"] == pytest.approx(at_base[name], rel=1e-12), (width, name)


def test_param_groups_work_on_a_meta_model_and_match_the_settings() -> None:
    pz = Parametrization(gpt_builder(), width=128, base_width=32)
    with torch.device("meta"):
        model = GPT(GPT_CFG.replace(width=128))
    groups = pz.param_groups(model, 1e-2, weight_decay=0.1, role_lr_mults={"output": 0.5})
    settings = pz.optimizer_settings(1e-2, weight_decay=0.1, role_lr_mults={"output": 0.5})
    for g in groups:
        for name in g["names"]:
            assert {k: g[k] for k in settings[name]} == settings[name], name
    assert settings["blocks.0.attn.c_q.weight"]["weight_decay"] == pytest.approx(0.4)  # λ × m, m = 4
    assert settings["lm_head.weight"]["lr"] == pytest.approx(5e-3)
    assert settings["lm_head.weight"]["weight_decay"] == pytest.approx(0.1)  # not divided by the role mult
    with pytest.raises(ValueError, match="unknown role 'head'"):
        pz.optimizer_settings(1e-2, role_lr_mults={"head": 2.0})
    with pytest.raises(ValueError, match="output=0"):
        pz.optimizer_settings(1e-2, role_lr_mults={"output": 0})


# ---- oracle: same init std as mup (statistically) -----------------------------------


@pytest.mark.parametrize("case", ["mlp", "gpt"])
def test_init_std_matches_mup(case: str) -> None:
    width, base = 256, 32
    mup_make = mup_mlp if case == "mlp" else mup_gpt
    ours_make = mlp_builder if case == "mlp" else gpt_builder()
    ref = dict(with_mup_shapes(mup_make, width, base, seed=1).named_parameters())
    # mup's MuReadout is the constant readout: named, since the default is fan_in
    model = Parametrization(ours_make, width=width, base_width=base, readout_init="constant").build(seed=2)
    for name, p in model.named_parameters():
        if p.numel() < 64 or float(ref[name].detach().std()) == 0.0:
            continue
        ratio = float(p.detach().std()) / float(ref[name].detach().std())
        # Different RNG draws (and normal vs uniform laws): equal std to sampling error.
        assert ratio == pytest.approx(1.0, abs=4.0 / math.sqrt(p.numel()) + 0.02), name


def test_readout_init_default_is_fan_in_constant_is_mups_and_zero_is_an_option() -> None:
    """The default readout's effective std (stored std × the 1/m forward multiplier) is
    SP's, width^-1/2; mup's constant readout, named, keeps the stored std constant."""
    stds = []
    for width in (32, 128, 512):
        m = width / 32
        model = Parametrization(gpt_builder(), width=width, base_width=32).build(seed=0)
        const = Parametrization(gpt_builder(), width=width, base_width=32, readout_init="constant").build(seed=0)
        stds.append(float(const.lm_head.weight.std()))
        sp = Parametrization(gpt_builder(), width=width, base_width=32, kind="sp").build(seed=0)
        assert float(sp.lm_head.weight.std()) == pytest.approx(width**-0.5, rel=0.1)
        assert float(model.lm_head.weight.std()) / m == pytest.approx(width**-0.5, rel=0.1)
    assert max(stds) / min(stds) == pytest.approx(1.0, abs=0.05)
    assert stds[0] == pytest.approx(32**-0.5, rel=0.05)
    zero = Parametrization(gpt_builder(), width=128, base_width=32, readout_init="zero").build(seed=0)
    assert float(zero.lm_head.weight.abs().max()) == 0.0


def test_tied_embeddings_keep_constant_init_unlike_mup() -> None:
    """mup's MuSharedReadout rescales the *shared* matrix by sqrt(width_mult) in
    set_base_shapes, so the input embedding grows with width — wrong for the input role,
    whose init must be width-independent. We keep it, and still scale the readout."""
    width, base = 512, 32
    ref = with_mup_shapes(lambda w: mup_gpt(w, tie=True), width, base)
    model = Parametrization(gpt_builder(tie=True), width=width, base_width=base).build(seed=0)
    assert model.lm_head.weight is model.wte.weight
    assert float(ref.wte.weight.std()) == pytest.approx(math.sqrt(width / base), rel=0.05)
    assert float(model.wte.weight.std()) == pytest.approx(1.0, rel=0.05)
    assert model._mutransfer_hooks == ("pre:lm_head:0.0625",)  # readout × 1/width_mult


# ---- interop: MuReadout models and .bsh files --------------------------------------


def test_model_written_with_mureadout_gives_mups_outputs() -> None:
    width, base = 128, 32
    ref = with_mup_shapes(mup_mlp, width, base, seed=0)
    pz = Parametrization(mup_mlp, width=width, base_width=base)
    model = pz.build(seed=5)
    assert type(model.fc_out) is nn.Linear  # swapped: no tensor attributes needed
    assert pz.specs["fc_out.weight"].role == "output"
    model.load_state_dict(ref.state_dict())
    x = torch.randn(7, MLP_CFG.in_features)
    torch.testing.assert_close(model(x), ref(x))


def test_base_shapes_file_gives_same_rules(tmp_path) -> None:
    path = tmp_path / "base.bsh"
    mup.make_base_shapes(mlp_builder(32), mlp_builder(64), savefile=str(path))
    bsh = load_base_shapes(path)
    assert bsh["hidden.0.weight"] == [32, 32] and bsh["fc_out.bias"] == [None]
    from_file = Parametrization(mlp_builder, width=256, base_width=32, base_shapes=path)
    inferred = Parametrization(mlp_builder, width=256, base_width=32)
    assert from_file.specs == inferred.specs


# ---- roles, rules, coverage ----------------------------------------------------------


def test_every_parameter_gets_exactly_one_role() -> None:
    pz = Parametrization(gpt_builder(), width=64, base_width=32)
    model = pz.build(seed=0)
    assert set(pz.specs) == {n for n, _ in model.named_parameters()}
    roles = {n: s.role for n, s in pz.specs.items()}
    assert roles["wte.weight"] == "input"
    assert roles["lm_head.weight"] == "output"
    assert roles["blocks.0.attn.c_q.weight"] == "hidden"
    assert roles["blocks.1.ln_2.weight"] == "vector"
    rows = pz.describe(model)
    assert [r["name"] for r in rows] == list(pz.specs)
    table = pz.table(model)
    assert all(n in table for n in pz.specs)


def test_user_rules_win_in_order_and_uncovered_parameter_is_an_error() -> None:
    rules = [(r"lm_head", "hidden"), (r"lm_head|wte", "vector")]
    pz = Parametrization(gpt_builder(), width=64, base_width=32, rules=rules)
    assert pz.specs["lm_head.weight"].role == "hidden"  # first match wins
    assert pz.specs["wte.weight"].role == "vector"
    assert pz.rules_table()[0].pattern == "lm_head"
    with pytest.raises(ValueError, match=r"parameter wte\.weight is matched by no rule"):
        Parametrization(gpt_builder(), width=64, base_width=32, rules=[(r"blocks", "hidden")],
                        infer_roles=False)


def test_bad_inputs_raise_one_clear_error() -> None:
    with pytest.raises(ValueError, match="do not change with width"):
        Parametrization(lambda w: nn.Linear(8, 8), width=64, base_width=32)
    with pytest.raises(ValueError, match="base width 128 is larger than the width 64"):
        Parametrization(gpt_builder(), width=64, base_width=128)
    with pytest.raises(ValueError, match="unknown parametrization 'ntk'"):
        Parametrization(gpt_builder(), width=64, base_width=32, kind="ntk")
    with pytest.raises(ValueError, match="width 40 is not divisible"):
        GPT_CFG.replace(width=40, head_dim=16)
    with pytest.raises(ValueError, match="multiplier output"):
        Multipliers(output=-1.0)
    with pytest.raises(ValueError, match="learning rate"):
        pz = Parametrization(gpt_builder(), width=64, base_width=32)
        pz.param_groups(pz.build(), float("nan"))


@settings(max_examples=15, deadline=None)
@given(base_exp=st.integers(4, 6), up=st.integers(0, 3))
def test_mup_adam_hidden_lr_times_fan_in_is_width_free(base_exp: int, up: int) -> None:
    base = 2**base_exp
    pz = Parametrization(mlp_builder, width=base * 2**up, base_width=base)
    s = pz.specs["hidden.0.weight"]
    assert s.lr_mult * s.shape[1] == pytest.approx(base)
    assert pz.specs["fc_in.weight"].lr_mult == 1.0 and pz.specs["fc_out.weight"].lr_mult == 1.0
    # the readout's stored std: the default (fan_in) m^1/2 on torch's m^-1/2, mup's constant m^0
    assert pz.specs["fc_out.weight"].init == ("keep" if up == 0 else f"scale:{2**up:.6g}")
    const = Parametrization(mlp_builder, width=base * 2**up, base_width=base, readout_init="constant")
    assert const.specs["fc_out.weight"].init == ("keep" if up == 0 else f"scale:{math.sqrt(2**up):.6g}")


# ---- depth (CompleteP) and Muon ------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_completep_rules(alpha: float) -> None:
    builder = lambda w, d: GPT(GPT_CFG.replace(width=w, depth=d))  # noqa: E731
    pz = Parametrization(builder, width=64, base_width=32, depth=8, base_depth=2,
                         kind="completep", depth_alpha=alpha)
    m_l, m_n = 4.0, 2.0
    hidden, gain = pz.specs["blocks.3.mlp.c_fc.weight"], pz.specs["blocks.3.ln_1.weight"]
    assert hidden.lr_mult == pytest.approx(m_l ** (alpha - 1) / m_n)
    assert hidden.eps_mult == pytest.approx(m_l**-alpha / m_n)
    assert gain.lr_mult == pytest.approx(m_l ** (alpha - 1)) and gain.eps_mult == pytest.approx(m_l**-alpha)
    assert pz.specs["wte.weight"].lr_mult == 1.0 and not pz.specs["wte.weight"].in_residual_branch
    model = pz.build(seed=0)
    assert f"post:blocks.7.mlp:{m_l**-alpha:g}" in model._mutransfer_hooks
    # The hook really scales the branch: compare with the unhooked module.
    x = torch.randn(2, 5, 64)
    block = model.blocks[7]
    raw = block.mlp.c_proj(torch.nn.functional.gelu(block.mlp.c_fc(x)))
    torch.testing.assert_close(block.mlp(x), raw * m_l**-alpha)
    with pytest.raises(ValueError, match="depth_alpha must be 0.5 or 1"):
        Parametrization(builder, width=64, base_width=32, depth=8, base_depth=2, kind="completep",
                        depth_alpha=0.7)


def test_muon_puts_hidden_matrices_on_torch_muon() -> None:
    pz = Parametrization(gpt_builder(), width=64, base_width=32, kind="muon")
    model = pz.build(seed=0)
    groups = pz.param_groups(model, 0.02)
    opt = build_optimizer(groups, "muon")
    kinds = {type(o).__name__: o for o in opt}
    assert set(kinds) == {"Muon", "AdamW"}
    muon_params = {id(p) for g in kinds["Muon"].param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        assert (id(p) in muon_params) == (pz.specs[name].role == "hidden"), name
    assert all(g["lr"] == 0.02 for g in kinds["Muon"].param_groups)  # spectral scaling is Muon's

    # Oracle: one step of ours equals torch.optim.Muon(adjust_lr_fn="original") directly.
    ref = copy.deepcopy(model)
    x = torch.randint(0, 64, (2, 16))
    for m in (model, ref):
        m(x, x)[1].backward()
    opt.step()
    hidden_ref = [p for n, p in ref.named_parameters() if pz.specs[n].role == "hidden"]
    torch.optim.Muon(hidden_ref, lr=0.02, weight_decay=0.0, adjust_lr_fn="original").step()
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        if pz.specs[n].role == "hidden":
            torch.testing.assert_close(p, q)


# ---- composition with schedulers, and survival of copies --------------------------


def test_effective_lr_is_base_times_schedule_times_multiplier() -> None:
    pz = Parametrization(gpt_builder(), width=128, base_width=32)
    model = pz.build(seed=0)
    groups = pz.param_groups(model, 1e-2)
    opt = torch.optim.AdamW(groups)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5 ** step)
    for _ in range(3):
        opt.step()
        sched.step()
    for g in opt.param_groups:
        mult = pz.specs[g["names"][0]].lr_mult
        assert g["lr"] == pytest.approx(1e-2 * 0.5**3 * mult)
    ours = build_optimizer(pz.param_groups(model, 1e-2))
    set_lr(ours, 0.25)
    assert {g["lr"] for g in ours.param_groups} == {1e-2 * 0.25, 1e-2 * 0.25 / 4}


def test_deepcopy_and_state_dict_round_trip_keep_the_parametrization() -> None:
    pz = Parametrization(gpt_builder(), width=128, base_width=32,
                         multipliers=Multipliers(input=2.0, output=3.0, attention=0.5))
    model = pz.build(seed=0)
    assert model.blocks[0].attn.softmax_scale == pytest.approx(0.5 / 4)  # head dim 16 at any width
    x = torch.randint(0, 64, (2, 16))
    out = model(x)[0]
    torch.testing.assert_close(copy.deepcopy(model)(x)[0], out)
    fresh = pz.build(seed=123)
    assert not torch.equal(fresh(x)[0], out)
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(fresh(x)[0], out)
    assert not any(hasattr(p, "infshape") for p in model.parameters())  # nothing on tensors
    with pytest.raises(ValueError, match="already parametrized"):
        pz.apply(model)


def test_multipliers_change_the_forward_as_documented() -> None:
    base = Parametrization(gpt_builder(), width=64, base_width=32).build(seed=0)
    scaled = Parametrization(gpt_builder(), width=64, base_width=32,
                             multipliers=Multipliers(output=3.0)).build(seed=0)
    x = torch.randint(0, 64, (2, 16))
    torch.testing.assert_close(scaled(x)[0], 3.0 * base(x)[0])
    sp = Parametrization(gpt_builder(), width=64, base_width=32, kind="sp").build(seed=0)
    assert sp.blocks[0].attn.softmax_scale == pytest.approx(16**-0.5)
    # Fixed head dim (heads grow): μP's scale is SP's, anchored at the base head dim.
    assert base.blocks[0].attn.softmax_scale == pytest.approx(16**-0.5)
    # Fixed head count (head dim grows 16 -> 64): 1/d_head, equal to SP at the base.
    fixed_heads = lambda w: GPT(GPT_CFG.replace(width=w, n_head=2))  # noqa: E731
    for width, d in ((32, 16), (128, 64)):
        mu = Parametrization(fixed_heads, width=width, base_width=32).build(seed=0)
        assert mu.blocks[0].attn.softmax_scale == pytest.approx(16**0.5 / d)


def test_torch_compile_training_step_matches_eager() -> None:
    pz = Parametrization(gpt_builder(), width=64, base_width=32)
    eager = pz.build(seed=0)
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, )
    x = torch.randint(0, 64, (2, 16))
    losses = []
    for m, fwd in ((eager, eager), (compiled_model, compiled)):
        opt = build_optimizer(pz.param_groups(m, 1e-2))
        step = []
        for _ in range(2):
            loss = fwd(x, x)[1]
            loss.backward()
            opt.step()
            opt.zero_grad()
            step.append(float(loss))
        losses.append(step)
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    assert losses[0][1] < losses[0][0]
