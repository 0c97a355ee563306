"""Megatron's per-parameter optimizer groups for a card: megatron-core's ``config_overrides``
(``ParamKey(name=GLOB)`` -> ``ParamGroupOverride``) giving every parameter the card's LR,
Adam eps and weight decay, with CompleteP's residual-branch multiplier folded in.

**The fold.** A residual branch with a forward multiplier ``s`` on its output,
``y = s·(W h + b)``, trains exactly as the plain branch ``y = W' h + b'`` under Adam(W) when

- ``W' = s·W`` and ``b' = s·b`` at init (same output);
- the gradient is then ``g' = g / s`` (``dL/dW' = dL/dy hᵀ``, while ``dL/dW = s·dL/dy hᵀ``),
  so Adam's moments are ``m' = m/s``, ``v' = v/s²`` and its step
  ``η'·m'/(√v' + ε') = η'/s · m/(√v + s·ε')``: with ``η' = s·η`` and ``ε' = ε/s`` it is
  ``s`` times the original step, so ``W'`` stays ``s·W`` at every step;
- weight decay: torch AdamW (the card's ``wd_mode: coupled``, Megatron's
  ``decoupled_weight_decay``) shrinks by ``η·λ`` per step, so ``λ' = λ/s`` keeps
  ``η'·λ' = η·λ``; decay independent of the LR (``wd_mode: independent``) keeps ``λ' = λ``;
  L2 in the gradient (classic Adam, ``g + λW``) needs ``λ' = λ/s²`` (``g/s + λ'·s·W``).

Every weight upstream of the branch sees the same gradient (``W'ᵀ dL/dy = s·Wᵀ dL/dy``), so
only the output projection changes (tests/mutransfer/card/test_residual_fold.py checks 10
AdamW steps to 1e-5). Megatron has the per-group LR, eps and weight-decay multiplier for
it, by parameter name; the init factor is part of ``init``, which Megatron sets itself.

Megatron names (``get_gpt_layer_local_spec`` / the TE spec) of the card's GPT and HF
Llama-family parameters: :data:`MEGATRON_NAMES`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

#: card parameter name -> Megatron GPTModel name (first match wins), for the GPT's own
#: names and HF's Llama, Mistral, Qwen2 and Phi-3 names. Megatron fuses q/k/v into
#: ``linear_qkv`` and gate/up into ``linear_fc1``, as Phi-3's ``qkv_proj`` and
#: ``gate_up_proj`` already are (the same shapes; Megatron orders the qkv rows by query
#: group, a fixed permutation of Phi-3's [q; k; v], the same model trained from scratch).
MEGATRON_NAMES: tuple[tuple[str, str], ...] = (
    (r"wte\.(weight)", r"embedding.word_embeddings.\1"),
    (r"wpe\.(weight)", r"embedding.position_embeddings.\1"),
    (r"blocks\.(\d+)\.ln_1\.(\w+)", r"decoder.layers.\1.input_layernorm.\2"),
    (r"blocks\.(\d+)\.ln_2\.(\w+)", r"decoder.layers.\1.pre_mlp_layernorm.\2"),
    (r"blocks\.(\d+)\.attn\.c_[qkv]\.(\w+)", r"decoder.layers.\1.self_attention.linear_qkv.\2"),
    (r"blocks\.(\d+)\.attn\.q_norm\.(\w+)", r"decoder.layers.\1.self_attention.q_layernorm.\2"),
    (r"blocks\.(\d+)\.attn\.k_norm\.(\w+)", r"decoder.layers.\1.self_attention.k_layernorm.\2"),
    (r"blocks\.(\d+)\.attn\.c_proj\.(\w+)", r"decoder.layers.\1.self_attention.linear_proj.\2"),
    (r"blocks\.(\d+)\.mlp\.c_(?:fc|gate)\.(\w+)", r"decoder.layers.\1.mlp.linear_fc1.\2"),
    (r"blocks\.(\d+)\.mlp\.c_proj\.(\w+)", r"decoder.layers.\1.mlp.linear_fc2.\2"),
    (r"ln_f\.(\w+)", r"decoder.final_layernorm.\1"),
    (r"lm_head\.(weight)", r"output_layer.\1"),
    (r"model\.embed_tokens\.(weight)", r"embedding.word_embeddings.\1"),
    (r"model\.layers\.(\d+)\.input_layernorm\.(\w+)", r"decoder.layers.\1.input_layernorm.\2"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.(\w+)", r"decoder.layers.\1.pre_mlp_layernorm.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.(?:[qkv]|qkv)_proj\.(\w+)",
     r"decoder.layers.\1.self_attention.linear_qkv.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj\.(\w+)", r"decoder.layers.\1.self_attention.linear_proj.\2"),
    (r"model\.layers\.(\d+)\.mlp\.(?:gate|up|gate_up)_proj\.(\w+)", r"decoder.layers.\1.mlp.linear_fc1.\2"),
    (r"model\.layers\.(\d+)\.mlp\.down_proj\.(\w+)", r"decoder.layers.\1.mlp.linear_fc2.\2"),
    (r"model\.norm\.(\w+)", r"decoder.final_layernorm.\1"),
)
_RULES = tuple((re.compile(p), r) for p, r in MEGATRON_NAMES)
#: Modules that produce a residual branch's output (the GPT's and HF's names).
BRANCH_OUTPUTS = ("c_proj", "o_proj", "down_proj")


def megatron_name(name: str) -> str | None:
    """The Megatron GPTModel name of a card parameter (None: no rule)."""
    for pat, repl in _RULES:
        m = pat.fullmatch(name)
        if m:
            return m.expand(repl)
    return None


def glob_of(megatron: str) -> str:
    """The ``ParamKey`` name glob of a Megatron name: a layer's parameter for every layer
    (``*.self_attention.linear_qkv.weight``), anything else by its full name."""
    parts = megatron.split(".")
    if parts[:2] == ["decoder", "layers"] and len(parts) > 3:
        return "*." + ".".join(parts[3:])
    return megatron


def branch_scales(card: Mapping[str, Any], groups: list[dict[str, Any]],
                  problems: list[tuple[str, str]]) -> dict[str, float]:
    """The residual multiplier each parameter takes, by card name: the product of the
    ``post`` hooks on branches (modules of neither input nor output role) over the
    branch's output projection (its weight and bias). A branch hook whose module holds no
    output projection (:data:`BRANCH_OUTPUTS`), or a ``pre`` hook on a hidden module, is a
    ``residual_multiplier`` problem: it has no place to fold into."""
    edge = {g["name"].rpartition(".")[0] for g in groups if g.get("role") in ("input", "output")}
    names = [g["name"] for g in groups]
    scales: dict[str, float] = {}
    for h in card["forward_multipliers"].get("hooks", []):
        mod, kind, s = h["module"], h["kind"], float(h["scale"])
        leaf = mod.rpartition(".")[2]
        if mod in edge or leaf in ("lm_head", "output_layer", "head") or s == 1.0:
            continue  # the embedding and readout multipliers are Megatron's own fields
        if kind != "post":
            problems.append(("residual_multiplier", f"a {kind}-hook x{s:g} on {mod}: only a branch's output "
                             "multiplier folds into its output projection"))
            continue
        targets = [n for n in names if n.rpartition(".")[0] == mod
                   or (n.startswith(mod + ".") and n.rpartition(".")[0].rpartition(".")[2] in BRANCH_OUTPUTS)]
        if not targets:
            problems.append(("residual_multiplier", f"x{s:g} on {mod}: no output projection "
                             f"({', '.join(BRANCH_OUTPUTS)}) inside it to fold the multiplier into"))
            continue
        for n in targets:
            scales[n] = scales.get(n, 1.0) * s
    return scales


def folded(group: Mapping[str, Any], s: float, wd_mode: str) -> tuple[float, float, float]:
    """(lr, eps, weight decay) of a parameter whose forward multiplier ``s`` is folded
    into it (module docstring): ``lr·s``, ``eps/s``, and ``λ/s`` for torch AdamW's decay
    (``coupled``), ``λ`` for decay independent of the LR."""
    lr, eps, wd = float(group["lr"]), float(group.get("eps", 1e-8)), float(group["weight_decay"])
    return lr * s, eps / s, (wd / s if wd_mode == "coupled" else wd)


def config_overrides(groups: list[dict[str, Any]], scales: Mapping[str, float], *, base_lr: float,
                     base_eps: float, base_wd: float, lr_floor: float, wd_mode: str,
                     problems: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """One entry per Megatron name glob, ``{"name": GLOB, "override": {max_lr, min_lr,
    eps, wd_mult}, "card_params": [...]}``, holding what differs from the base
    (``OptimizerConfig.lr``, ``adam_eps``, ``weight_decay``); the card's values of every
    parameter under one glob must agree, else a problem names the field and a parameter.
    A vector with weight decay is a ``weight_decay`` problem: Megatron's standard
    overrides give 1-D parameters and biases none."""
    by_glob: dict[str, list[tuple[str, tuple[float, float, float]]]] = {}
    for g in groups:
        mname = megatron_name(g["name"])
        if mname is None:
            problems.append((f"param_groups.{g['name']}", "has no Megatron GPTModel name (the export "
                             "maps the GPT's and HF Llama/Mistral/Qwen2/Phi-3 names)"))
            continue
        values = folded(g, scales.get(g["name"], 1.0), wd_mode)
        by_glob.setdefault(glob_of(mname), []).append((g["name"], values))
    out = []
    for glob, members in by_glob.items():
        (first, (lr, eps, wd)) = members[0]
        for field, i in (("lr", 0), ("eps", 1), ("weight_decay", 2)):
            odd = [(n, v) for n, v in members if not math.isclose(v[i], members[0][1][i], rel_tol=1e-9)]
            if odd:
                problems.append((field, f"{odd[0][0]} has {odd[0][1][i]:g}, {first} {members[0][1][i]:g}: "
                                 f"both are Megatron's {glob}, one group"))
        vector = glob.endswith(".bias") or "layernorm" in glob
        if vector and wd:
            problems.append(("weight_decay", f"{first} decays at {wd:g}: Megatron gives biases and norm "
                             "gains no weight decay"))
        override: dict[str, float] = {}
        if not math.isclose(lr, base_lr, rel_tol=1e-12):
            override.update(max_lr=lr, min_lr=lr * lr_floor)
        if not math.isclose(eps, base_eps, rel_tol=1e-12):
            override["eps"] = eps
        if not vector:
            mult = wd / base_wd if base_wd else 0.0
            if not math.isclose(mult, 1.0, rel_tol=1e-12):
                override["wd_mult"] = mult
        if override:
            out.append({"name": glob, "override": override, "card_params": [n for n, _ in members]})
    return out


__all__ = ["BRANCH_OUTPUTS", "MEGATRON_NAMES", "branch_scales", "config_overrides", "folded", "glob_of",
           "megatron_name"]
