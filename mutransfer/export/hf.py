"""The card as Hugging Face ``transformers`` TrainingArguments and optimizer groups."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch.nn as nn

from mutransfer.export._common import _floor, _groups, _steps, check_fields, check_model


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
