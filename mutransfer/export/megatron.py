"""The card as Megatron-LM (megatron-core >= 0.17) config sections."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from mutransfer.export._common import _floor, _groups, _steps, check_fields

# Field names read from megatron-core 0.19.2's source (transformer_config.py,
# optimizer/optimizer_config.py, training/config/training_config.py): used to check an
# export when megatron-core (Python >= 3.12 for the μP releases) is not installed.
MEGATRON_VERIFIED = "megatron-core 0.19.2 source"
MEGATRON_FIELDS: dict[str, frozenset[str]] = {
    "transformer_config": frozenset({
        "hidden_size", "num_layers", "num_attention_heads", "kv_channels", "use_mup",
        "mup_base_hidden_size", "mup_base_head_dim", "mup_embedding_mult", "mup_output_mult",
        "mup_attn_scale_power", "softmax_scale"}),
    "optimizer_config": frozenset({"optimizer", "lr", "min_lr", "decoupled_lr", "decoupled_min_lr",
                                   "weight_decay", "adam_beta1", "adam_beta2", "adam_eps"}),
    "scheduler_config": frozenset({"lr_decay_style", "lr_wsd_decay_style", "lr_decay_iters",
                                   "lr_wsd_decay_iters", "lr_warmup_iters"}),
    "training_config": frozenset({"global_batch_size", "train_iters"}),
}


def export_megatron(card: Mapping[str, Any]) -> dict[str, Any]:
    pz, opt, s, batch = card["parametrization"], card["optimizer"], card["schedule"], card["batch"]
    if pz.get("kind") != "mup" or pz.get("rules", "adam") != "adam":
        raise ValueError(f"Megatron's μP covers kind 'mup' with Adam rules; the card has kind "
                         f"{pz.get('kind')!r} with {pz.get('rules')!r} rules")
    if opt.get("wd_mode", "coupled") != "coupled":
        raise ValueError("Megatron's AdamW decay is lr x wd (wd_mode 'coupled'); the card's is "
                         f"{opt.get('wd_mode')!r}")
    groups = _groups(card)
    width, base = int(pz["width"]), int(pz["base_width"])
    m = width / base
    lr = float(opt["lr"])
    mults = pz.get("multipliers", {})
    # Megatron's rule, read from get_mup_config_overrides: hidden LR / m; embedding and
    # output at decoupled_lr. The card must say the same, parameter by parameter.
    for g in groups:
        want = lr / m if g["role"] == "hidden" else lr
        if not math.isclose(float(g["lr"]), want, rel_tol=1e-12):
            raise ValueError(f"parameter {g['name']} ({g['role']}) has lr {g['lr']}, which Megatron's μP "
                             f"(hidden lr/m, decoupled_lr elsewhere) cannot give ({want})")
    scales = sorted(set(card["forward_multipliers"].get("attention", {}).values()))
    if len(scales) > 1:
        raise ValueError(f"the card has {len(scales)} attention scales; Megatron has one softmax_scale")
    total, warmup, decay = _steps(card)
    kind, floor = s.get("kind"), _floor(s)
    style = {"wsd": "WSD", "cosine": "cosine", "linear": "linear", "constant": "constant",
             "inverse_sqrt": "inverse-square-root"}.get(kind)
    if style is None:
        raise ValueError(f"schedule {kind!r} has no Megatron lr_decay_style")
    sched: dict[str, Any] = {"lr_decay_style": style, "lr_warmup_iters": warmup, "lr_decay_iters": total}
    if kind == "wsd":
        shapes = {"linear": "linear", "cosine": "cosine", "1-sqrt": "minus_sqrt"}
        shape = shapes.get(s.get("decay_shape", "1-sqrt"))
        if shape is None:
            raise ValueError(f"Megatron has no WSD decay style for shape {s.get('decay_shape')!r}")
        sched.update(lr_wsd_decay_style=shape, lr_wsd_decay_iters=decay)
    tcfg: dict[str, Any] = {"use_mup": True, "mup_base_hidden_size": base,
                            "mup_embedding_mult": float(mults.get("input", 1.0)),
                            "mup_output_mult": float(mults.get("output", 1.0)) / m, "hidden_size": width}
    if card["target"].get("depth"):
        tcfg["num_layers"] = int(card["target"]["depth"])
    if scales:
        tcfg["softmax_scale"] = float(scales[0])
    betas = list(opt.get("betas", (0.9, 0.95)))
    ocfg = {"optimizer": "adam", "lr": lr, "min_lr": lr * floor, "decoupled_lr": lr,
            "decoupled_min_lr": lr * floor, "weight_decay": float(opt.get("weight_decay", 0.0)),
            "adam_beta1": float(betas[0]), "adam_beta2": float(betas[1]),
            "adam_eps": float(opt.get("eps", 1e-8))}
    out = {"engine": "megatron", "transformer_config": tcfg, "optimizer_config": ocfg,
           "scheduler_config": sched,
           "training_config": {"global_batch_size": int(batch["sequences"]), "train_iters": total},
           "notes": [f"Megatron's μP also divides Adam eps of hidden and output matrices by the width "
                     f"multiplier {m:g}; the card keeps eps {ocfg['adam_eps']:g} (differs only when "
                     "gradients are near eps)",
                     "the card's init is not exported: Megatron's μP init is init_method_std/sqrt(m) for "
                     "hidden matrices; set init_method_std to the card's base-width std"]}
    out["verified_against"] = _check_megatron(out)
    return out


def _check_megatron(export: Mapping[str, Any]) -> str:
    try:
        import importlib.metadata as md

        from megatron.core.optimizer import OptimizerConfig
        from megatron.core.transformer import TransformerConfig
        from megatron.training.config.training_config import SchedulerConfig, TrainingConfig
    except ImportError:
        for section, names in MEGATRON_FIELDS.items():
            check_fields("megatron", section, export[section], names, MEGATRON_VERIFIED)
        return f"names checked against {MEGATRON_VERIFIED} (megatron-core not importable here)"
    version = f"megatron-core {md.version('megatron-core')}"
    for section, cls in (("transformer_config", TransformerConfig), ("optimizer_config", OptimizerConfig),
                         ("scheduler_config", SchedulerConfig), ("training_config", TrainingConfig)):
        check_fields("megatron", section, export[section], {f.name for f in dataclasses.fields(cls)}, version)
    return version
