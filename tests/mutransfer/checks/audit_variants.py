"""Entry points for ``mutransfer audit`` tests: one correct μP setup per style and one
deliberately broken variant per rule. Each ``fn(width)`` returns ``(model, optimizer)``,
so each is usable as ``--entry tests.mutransfer.checks.audit_variants:fn`` from the repo root.
"""

from __future__ import annotations

from typing import Any

import mup
import torch
import torch.nn as nn

from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.mlp import MLP, MLPConfig
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.training.optim import build_optimizer

BASE = 32
LR = 1e-2
CFG = GPTConfig(width=BASE, depth=2, head_dim=16, seq_len=16, vocab_size=64)
MLP_CFG = MLPConfig(in_features=12, width=BASE, depth=2, out_features=5)


def _gpt(width: int, **changes: Any) -> GPT:
    return GPT(CFG.replace(width=width, **changes))


def _ours(width: int, readout_init: str | None = None, **changes: Any) -> tuple[nn.Module, Parametrization]:
    """Our μP; ``readout_init`` None: the default (fan_in)."""
    kw = {} if readout_init is None else {"readout_init": readout_init}
    pz = Parametrization(lambda w: _gpt(w, **changes), width=width, base_width=BASE, **kw)
    return pz.build(), pz


# ---- correct ------------------------------------------------------------------------------


def ours(width: int) -> tuple[nn.Module, Any]:
    """Our Parametrization + build_optimizer (AdamW): μP by construction."""
    model, pz = _ours(width)
    return model, build_optimizer(pz.param_groups(model, LR))


def ours_constant_readout(width: int) -> tuple[nn.Module, Any]:
    """Our μP with mup's readout by name (``readout_init="constant"``): μP too."""
    model, pz = _ours(width, readout_init="constant")
    return model, build_optimizer(pz.param_groups(model, LR))


def ours_fixed_heads(width: int) -> tuple[nn.Module, Any]:
    """Two heads, so the head dim grows with width: the softmax scale must go as 1/d."""
    model, pz = _ours(width, n_head=2)
    return model, build_optimizer(pz.param_groups(model, LR))


def ours_wd_coupled(width: int) -> tuple[nn.Module, Any]:
    """Our coupled (torch AdamW) decay: the coefficient scales as 1/lr_mult."""
    model, pz = _ours(width)
    return model, build_optimizer(pz.param_groups(model, LR, weight_decay=0.1))


def ours_wd_independent(width: int) -> tuple[nn.Module, Any]:
    model, pz = _ours(width)
    return model, build_optimizer(pz.param_groups(model, LR, weight_decay=1e-3, wd_mode="independent"))


def ours_sgd(width: int) -> tuple[nn.Module, Any]:
    pz = Parametrization(lambda w: MLP(MLP_CFG.replace(width=w)), width=width, base_width=BASE,
                         optimizer="sgd")
    model = pz.build()
    return model, build_optimizer(pz.param_groups(model, 0.1), "sgd")


def ours_muon(width: int) -> tuple[nn.Module, Any]:
    pz = Parametrization(_gpt, width=width, base_width=BASE, kind="muon")
    model = pz.build()
    return model, build_optimizer(pz.param_groups(model, LR), "muon")


def table3_form(width: int) -> tuple[nn.Module, Any]:
    """TP-V Table 3's own readout: no forward multiplier, init std ∝ 1/m and Adam LR ∝ 1/m.
    The same μP as the MuReadout form (abc-symmetry), so it must pass. Built from mup's
    constant readout (named: the default readout is fan_in)."""
    model, pz = _ours(width, readout_init="constant")
    model.lm_head._forward_pre_hooks.clear()
    m = width / BASE
    with torch.no_grad():
        model.lm_head.weight.div_(m)
    groups = pz.param_groups(model, LR)
    for g in groups:
        if g["role"] == "output":
            g["lr"] = LR / m
    return model, torch.optim.AdamW(groups)


def _mup_gpt(width: int) -> nn.Module:
    model = _gpt(width)
    model.lm_head = mup.MuReadout(width, CFG.vocab_size, bias=False)
    return model


def mup_mureadout(width: int) -> tuple[nn.Module, Any]:
    """mup's own recipe: MuReadout head, set_base_shapes, MuAdam."""
    model = _mup_gpt(width)
    mup.set_base_shapes(model, _mup_gpt(BASE), delta=_mup_gpt(2 * BASE))
    return model, mup.MuAdam(model.parameters(), lr=LR)


def mup_mlp_model(width: int) -> nn.Module:
    """A model alone (for ``audit(builder, optimizer_builder)``): mup's MLP recipe."""
    def make(w: int) -> nn.Module:
        model = MLP(MLP_CFG.replace(width=w))
        model.fc_out = mup.MuReadout(w, MLP_CFG.out_features, bias=True)
        return model
    model = make(width)
    mup.set_base_shapes(model, make(BASE), delta=make(2 * BASE))
    return model


# ---- broken, one rule each ------------------------------------------------------------------


def hidden_lr_not_scaled(width: int) -> tuple[nn.Module, Any]:
    """Every group gets the base LR: hidden matrices miss their 1/m."""
    model, pz = _ours(width)
    groups = pz.param_groups(model, LR)
    for g in groups:
        g["lr"], g["lr_mult"] = LR, 1.0
    return model, torch.optim.AdamW(groups)


def readout_multiplier_missing(width: int) -> tuple[nn.Module, Any]:
    """μP init and LRs, but the readout's 1/m forward multiplier was never applied."""
    model, pz = _ours(width)
    model.lm_head._forward_pre_hooks.clear()
    return model, build_optimizer(pz.param_groups(model, LR))


def readout_init_too_large(width: int) -> tuple[nn.Module, Any]:
    """The readout's stored init ∝ m (sqrt(m) past fan_in's): with the 1/m multiplier its
    effective std is constant, so the initial logits grow as sqrt(m)."""
    model, pz = _ours(width)
    with torch.no_grad():
        model.lm_head.weight.mul_((width / BASE) ** 0.5)
    return model, build_optimizer(pz.param_groups(model, LR))


def attention_sqrt_d(width: int) -> tuple[nn.Module, Any]:
    """Head dim grows with width but the softmax keeps SP's 1/sqrt(d)."""
    model, pz = _ours(width, n_head=2)
    for block in model.blocks:
        block.attn.softmax_scale = block.attn.head_dim**-0.5
    return model, build_optimizer(pz.param_groups(model, LR))


def hf_constant_init(width: int) -> tuple[nn.Module, Any]:
    """HF-style init: every matrix N(0, 0.02) at every width (hidden should be ∝ 1/sqrt(m))."""
    model, pz = _ours(width)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, 0.02)
    return model, build_optimizer(pz.param_groups(model, LR))


def embedding_lr_like_hidden(width: int) -> tuple[nn.Module, Any]:
    """The embedding's LR divided by the width multiplier, as if it were a hidden matrix."""
    model, pz = _ours(width)
    groups = pz.param_groups(model, LR)
    for g in groups:
        if g["role"] == "input":
            g["lr"] = LR * BASE / width
    return model, torch.optim.AdamW(groups)


def wd_coupled(width: int) -> tuple[nn.Module, Any]:
    """One decay coefficient at every width while the hidden LR falls as 1/m: the hidden
    matrices' decay timescale grows with width (mup's MuAdamW scales the coefficient by m)."""
    model, pz = _ours(width)
    groups = pz.param_groups(model, LR)
    for g in groups:
        if g["role"] in ("input", "hidden", "output"):
            g["weight_decay"] = 0.1
    return model, build_optimizer(groups)


def tied_scaled_twice(width: int) -> tuple[nn.Module, Any]:
    """Tied embeddings where the readout's 1/m is applied to the shared matrix at both
    of its uses: the embedding's output is scaled down too."""
    model, pz = _ours(width, tie_embeddings=True)
    scale = BASE / width
    model.wte.register_forward_hook(lambda _m, _a, out: out * scale)
    return model, build_optimizer(pz.param_groups(model, LR))


# ---- depth: CompleteP ---------------------------------------------------------------------


def completep(width: int, depth: int) -> tuple[nn.Module, Any]:
    """Our CompleteP (alpha = 1, base depth 2)."""
    pz = Parametrization(lambda w, d: _gpt(w, depth=d), width=width, base_width=BASE, depth=depth,
                         base_depth=2, kind="completep")
    model = pz.build()
    return model, build_optimizer(pz.param_groups(model, LR))


def completep_lr_not_depth_scaled(width: int, depth: int) -> tuple[nn.Module, Any]:
    """CompleteP's branch multiplier, but μP's width-only LRs (alpha = 0.5 needs m_L^-1/2)."""
    pz = Parametrization(lambda w, d: _gpt(w, depth=d), width=width, base_width=BASE, depth=depth,
                         base_depth=2, kind="completep", depth_alpha=0.5)
    model = pz.build()
    plain = Parametrization(lambda w, d: _gpt(w, depth=d), width=width, base_width=BASE, depth=depth)
    return model, build_optimizer(plain.param_groups(model, LR))


def mup_only(width: int, depth: int) -> tuple[nn.Module, Any]:
    """μP in width, nothing in depth: no residual multiplier."""
    pz = Parametrization(lambda w, d: _gpt(w, depth=d), width=width, base_width=BASE, depth=depth)
    model = pz.build()
    return model, build_optimizer(pz.param_groups(model, LR))


# ---- bad input --------------------------------------------------------------------------------


def returns_model_only(width: int) -> nn.Module:
    return _gpt(width)


def returns_wrong_optimizer(width: int) -> tuple[nn.Module, Any]:
    return _gpt(width), {"lr": LR}


CORRECT = ("ours", "ours_constant_readout", "ours_fixed_heads", "ours_wd_coupled", "ours_wd_independent", "ours_sgd", "ours_muon",
           "mup_mureadout", "table3_form")
BROKEN = {
    # variant: (first failing parameter or module, broken rule, wd claim)
    "hidden_lr_not_scaled": ("blocks.0.attn.c_q.weight", "lr", None),
    "readout_multiplier_missing": ("lm_head.weight", "mult", None),
    "readout_init_too_large": ("lm_head.weight", "init", None),
    "attention_sqrt_d": ("blocks.0.attn", "attention", None),
    "hf_constant_init": ("blocks.0.attn.c_q.weight", "init", None),
    "embedding_lr_like_hidden": ("wte.weight", "lr", None),
    "wd_coupled": ("blocks.0.attn.c_q.weight", "wd", None),
    "tied_scaled_twice": ("wte.weight", "mult", None),
}
