"""Export a transfer card to the config of a training engine, in the engine's own field
names: Hugging Face ``transformers``, torchtitan and Megatron.

Every field name written here was read from the engine's source; at export time the
names are checked against the installed package when it is importable (an engine field
the installed version lacks is an error), otherwise against the names recorded below from
the version the exporter was written for (``verified_against`` in the export says which).

- **hf** (transformers >= 5): ``training_arguments`` is a dict ``TrainingArguments(**d)``
  accepts (LR schedule mapped to HF's own scheduler names); :func:`hf_param_groups`
  builds the ``optimizer_grouped_parameters`` with each parameter's absolute LR, weight
  decay and eps from the card. The card's init and forward multipliers are put on the
  model with :func:`mutransfer.card.apply` (hooks survive ``Trainer``).
- **torchtitan** (0.3.0): nested config sections ``optimizer`` (one ``ParamGroupConfig``
  per distinct (lr, weight decay, eps), its regex naming the parameters),
  ``lr_scheduler`` and ``training``, in the field names of ``OptimizersContainer.Config``,
  ``ParamGroupConfig``, ``LRSchedulersContainer.Config`` and ``TrainingConfig``.
  :func:`torchtitan_param_groups` turns them into ``ParamGroupConfig`` objects.
- **megatron** (megatron-core >= 0.17, μP fields): ``transformer_config`` (``use_mup``,
  ``mup_base_hidden_size``, ``mup_base_head_dim``, ``mup_embedding_mult``,
  ``mup_output_mult``, ``softmax_scale``), ``optimizer_config`` (``lr``, ``min_lr``,
  ``decoupled_lr`` ...), ``scheduler_config`` and ``training_config`` (Megatron-LM's
  ``megatron.training.config``). Megatron's own μP divides the LR *and* Adam eps of every
  non-embedding matrix, the output layer included, by the width multiplier
  (``megatron.core.optimizer.get_mup_config_overrides``); TP-V keeps the readout's Adam LR
  and puts 1/m in its forward. ``decoupled_lr`` (an absolute LR for the embedding and
  output layer that μP leaves alone) set to the card's base LR reproduces the card's LRs;
  the eps difference is listed in ``notes``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch.nn as nn

ENGINES: tuple[str, ...] = ("hf", "torchtitan", "megatron")

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


def _floor(schedule: Mapping[str, Any]) -> float:
    return float(schedule.get("min_lr_ratio", schedule.get("floor", 0.0)) or 0.0)


def _steps(card: Mapping[str, Any]) -> tuple[int, int, int]:
    """(total, warmup, decay) steps of the card's schedule."""
    s = card["schedule"]
    total = int(s.get("total_steps") or 0)
    if total < 1:
        raise ValueError(f"the card's schedule has no total_steps ({s.get('total_steps')!r})")
    warmup = int(s.get("warmup_steps") or 0)
    kind = s.get("kind")
    frac = float(s.get("decay_fraction", 1.0 if kind in ("cosine", "linear") else 0.2))
    decay = total - warmup if kind in ("cosine", "linear") else round(frac * total)
    return total, warmup, decay


def _groups(card: Mapping[str, Any]) -> list[dict[str, Any]]:
    groups = list(card["param_groups"])
    bad = [g["name"] for g in groups if g.get("optimizer", "adamw") not in ("adamw", "adam")]
    if bad:
        raise ValueError(f"parameter {bad[0]} uses optimizer {groups[0].get('optimizer')!r}; the "
                         f"engine exports cover AdamW cards only")
    return groups


def check_model(model: nn.Module, card: Mapping[str, Any]) -> None:
    """The card's parameters are the model's, name by name and shape by shape."""
    params = {n: list(p.shape) for n, p in model.named_parameters()}
    card_shapes = {g["name"]: list(g["shape"]) for g in card["param_groups"]}
    extra = sorted(set(params) - set(card_shapes))
    missing = sorted(set(card_shapes) - set(params))
    if extra or missing:
        raise ValueError(f"the card does not match the model: the model has {extra[:3]} that the card "
                         f"lacks, the card has {missing[:3]} that the model lacks")
    for name, shape in params.items():
        if shape != card_shapes[name]:
            raise ValueError(f"the card does not match the model: parameter {name} has shape {shape}, "
                             f"the card says {card_shapes[name]}")


def check_fields(engine: str, section: str, emitted: Mapping[str, Any], available: set[str] | frozenset[str],
                 version: str) -> None:
    """An emitted field the installed engine lacks is an error naming it."""
    missing = sorted(set(emitted) - set(available))
    if missing:
        raise ValueError(f"{engine} {section} field(s) {missing} are not in the installed {version}")


# ---- Hugging Face ------------------------------------------------------------------------


def _hf_schedule(card: Mapping[str, Any]) -> dict[str, Any]:
    s = card["schedule"]
    kind, floor = s.get("kind"), _floor(s)
    total, warmup, decay = _steps(card)
    out: dict[str, Any] = {"max_steps": total, "warmup_steps": warmup}
    if kind == "wsd":
        shape = s.get("decay_shape", "1-sqrt")
        if shape not in ("linear", "cosine", "1-sqrt"):
            raise ValueError(f"HF's warmup_stable_decay has no decay shape {shape!r} "
                             "(linear, cosine, 1-sqrt)")
        out.update(lr_scheduler_type="warmup_stable_decay",
                   lr_scheduler_kwargs={"num_decay_steps": decay, "decay_type": shape, "min_lr_ratio": floor})
    elif kind == "cosine":
        out.update(lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"min_lr_rate": floor})
    elif kind in ("linear", "constant", "inverse_sqrt") and floor == 0.0:
        out["lr_scheduler_type"] = {"linear": "linear", "constant": "constant_with_warmup",
                                    "inverse_sqrt": "inverse_sqrt"}[kind]
    else:
        raise ValueError(f"schedule {kind!r} with floor {floor} has no HF scheduler")
    return out


def export_hf(card: Mapping[str, Any]) -> dict[str, Any]:
    import transformers

    groups = _groups(card)
    opt, batch = card["optimizer"], card["batch"]
    dp = int(batch.get("dp_size") or 1)
    seqs = int(batch["sequences"])
    if seqs % dp:
        raise ValueError(f"batch of {seqs} sequences does not split over dp_size {dp}")
    betas = list(opt.get("betas", (0.9, 0.95)))
    args = {"learning_rate": float(opt["lr"]), "weight_decay": float(opt.get("weight_decay", 0.0)),
            "adam_beta1": float(betas[0]), "adam_beta2": float(betas[1]),
            "adam_epsilon": float(opt.get("eps", 1e-8)), "optim": "adamw_torch",
            "per_device_train_batch_size": seqs // dp, "gradient_accumulation_steps": 1,
            **_hf_schedule(card)}
    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    version = f"transformers {transformers.__version__}"
    check_fields("hf", "TrainingArguments", args, fields, version)
    return {"engine": "hf", "verified_against": version, "training_arguments": args,
            "param_groups": [{k: g[k] for k in ("name", "lr", "weight_decay", "eps") if k in g}
                             for g in groups],
            "notes": ["pass hf_param_groups(model, card) as the optimizer's groups "
                      "(Trainer(optimizers=(torch.optim.AdamW(groups), None))): TrainingArguments "
                      "holds one LR, the card one per parameter",
                      "apply the card's init and forward multipliers first: mutransfer.card.apply"]}


def hf_param_groups(model: nn.Module, card: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``optimizer_grouped_parameters`` for ``model``: one group per distinct (lr, weight
    decay, eps) of the card, each parameter in the group the card puts it in."""
    check_model(model, card)
    by_name = {g["name"]: g for g in _groups(card)}
    out: dict[tuple[float, float, float], dict[str, Any]] = {}
    for name, p in model.named_parameters():
        g = by_name[name]
        eps = g.get("eps", card["optimizer"].get("eps", 1e-8))
        key = (float(g["lr"]), float(g["weight_decay"]), float(eps))
        grp = out.setdefault(key, {"params": [], "names": [], "lr": key[0], "weight_decay": key[1],
                                   "eps": key[2]})
        grp["params"].append(p)
        grp["names"].append(name)
    return list(out.values())


# ---- torchtitan ----------------------------------------------------------------------------


def _pattern(names: Sequence[str]) -> str:
    return "^(?:" + "|".join(re.escape(n) for n in names) + ")$"


def export_torchtitan(card: Mapping[str, Any]) -> dict[str, Any]:
    groups = _groups(card)
    opt, s, batch = card["optimizer"], card["schedule"], card["batch"]
    betas = [float(b) for b in opt.get("betas", (0.9, 0.95))]
    by_key: dict[tuple[float, float, float], list[str]] = {}
    for g in groups:
        key = (float(g["lr"]), float(g["weight_decay"]), float(g.get("eps", opt.get("eps", 1e-8))))
        by_key.setdefault(key, []).append(g["name"])
    param_groups = [{"pattern": _pattern(names), "optimizer_name": "AdamW",
                     "optimizer_kwargs": {"lr": lr, "betas": betas, "eps": eps, "weight_decay": wd}}
                    for (lr, wd, eps), names in by_key.items()]
    total, warmup, decay = _steps(card)
    kind = s.get("kind")
    if kind == "wsd":
        shape = {"linear": "linear", "1-sqrt": "sqrt", "cosine": "cosine"}.get(s.get("decay_shape", "1-sqrt"))
        if shape is None:
            raise ValueError(f"torchtitan has no decay type for shape {s.get('decay_shape')!r}")
        sched = {"decay_ratio": decay / total, "decay_type": shape}
    elif kind in ("cosine", "linear"):
        sched = {"decay_ratio": None, "decay_type": kind}
    else:
        raise ValueError(f"schedule {kind!r} has no torchtitan lr_scheduler")
    sched.update(warmup_steps=warmup, total_steps=total, min_lr_factor=_floor(s))
    dp = int(batch.get("dp_size") or 1)
    seq_len = int(batch.get("seq_len") or card["target"].get("seq_len") or 0)
    training = {"steps": total, "global_batch_size": int(batch["sequences"]),
                "local_batch_size": int(batch["sequences"]) // dp}
    if seq_len:
        training["seq_len"] = seq_len
    out = {"engine": "torchtitan", "optimizer": {"param_groups": param_groups},
           "lr_scheduler": sched, "training": training}
    out["verified_against"] = _check_torchtitan(out)
    return out


def _check_torchtitan(export: Mapping[str, Any]) -> str:
    try:
        import importlib.metadata as md

        from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer
        from torchtitan.components.optimizer.optimizer import OptimizersContainer, ParamGroupConfig
        from torchtitan.config.configs import TrainingConfig
    except ImportError:
        return "not checked: torchtitan is not installed (names read from torchtitan 0.3.0 source)"
    version = f"torchtitan {md.version('torchtitan')}"
    for section, cls in (("optimizer", OptimizersContainer.Config),
                         ("lr_scheduler", LRSchedulersContainer.Config), ("training", TrainingConfig)):
        names = {f.name for f in dataclasses.fields(cls)}
        check_fields("torchtitan", section, export[section], names, version)
    pg = {f.name for f in dataclasses.fields(ParamGroupConfig)}
    for g in export["optimizer"]["param_groups"]:
        check_fields("torchtitan", "ParamGroupConfig", g, pg, version)
    return version


def torchtitan_param_groups(export: Mapping[str, Any]) -> list[Any]:
    """The export's ``optimizer.param_groups`` as torchtitan ``ParamGroupConfig`` objects,
    for ``OptimizersContainer.Config(param_groups=...)``."""
    from torchtitan.components.optimizer.optimizer import ParamGroupConfig

    return [ParamGroupConfig(**g) for g in export["optimizer"]["param_groups"]]


# ---- Megatron --------------------------------------------------------------------------------


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


def export_card(card: Mapping[str, Any], engine: str, model: nn.Module | None = None) -> dict[str, Any]:
    """The card as ``engine``'s config (see the module docstring). With ``model``, the
    card must describe it (names and shapes)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    if model is not None:
        check_model(model, card)
    fn = {"hf": export_hf, "torchtitan": export_torchtitan, "megatron": export_megatron}[engine]
    return fn(card)


__all__ = ["ENGINES", "check_model", "export_card", "hf_param_groups", "torchtitan_param_groups"]
