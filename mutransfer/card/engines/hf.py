"""The card as Hugging Face ``transformers`` TrainingArguments and optimizer groups.

Step indexing: the card's schedule gives optimizer step ``t`` (0-based) the factor
``schedule(t)``, warmup ``(t + 1) / W`` included; HF's lambdas give ``lambda(t) = t / W``.
The export starts HF's scheduler one step in (``last_epoch=0`` in ``lr_scheduler_kwargs``;
:func:`hf_param_groups` sets each group's ``initial_lr``, which torch needs for that), so
HF's LR at every optimizer step is the card's. Every kind maps onto HF's
``warmup_stable_decay`` (or ``inverse_sqrt``) with ``max_steps`` = the card's total steps:
stable phase to the card's decay start, decay over the card's remaining steps."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import torch.nn as nn

from mutransfer.card.engines._common import (
    Drops,
    _groups,
    _lr_floor,
    check_fields,
    check_model,
    decay_note,
    split_batch,
)
from mutransfer.card.schema import schedule_config
from mutransfer.card.target import PRECISION
from mutransfer.training.schedules import Schedule

_HF_DECAY = {"linear": "linear", "cosine": "cosine", "1-sqrt": "1-sqrt"}


def _hf_schedule(card: Mapping[str, Any], drops: Drops) -> dict[str, Any]:
    s = card["schedule"]
    cfg = schedule_config(s)
    sched = Schedule(cfg)
    kind, lr_floor = cfg.kind, _lr_floor(s)
    total, warmup = int(s["total_steps"]), cfg.warmup_steps
    out: dict[str, Any] = {"max_steps": total, "warmup_steps": warmup}
    if lr_floor > 0 and warmup > 0:
        # HF's WSD warmup rises from its min_lr_ratio (the card's lr_floor), the card's from 0.
        drops.cannot("schedule.lr_floor", f"HF's warmup starts at min_lr_ratio ({lr_floor:g}), the "
                     "card's at 0: with a warmup no HF scheduler gives the card's lr_floor")
        lr_floor = 0.0
    if kind == "inverse_sqrt":
        if warmup < 1:
            drops.cannot("schedule.warmup_steps", "HF's inverse_sqrt needs a warmup to match the card's "
                         "sqrt(W / (t + 1))")
        out.update(lr_scheduler_type="inverse_sqrt",
                   lr_scheduler_kwargs={"timescale": max(warmup, 1), "last_epoch": 0})
        return out
    if kind == "constant":
        if warmup > 0:
            drops.cannot("schedule.kind", "HF has no constant-with-warmup scheduler that can start one "
                         "step in (constant_with_warmup takes no last_epoch)")
        out.update(lr_scheduler_type="warmup_stable_decay",
                   lr_scheduler_kwargs={"num_decay_steps": 0, "min_lr_ratio": 1.0, "last_epoch": 0})
        return out
    shape = cfg.decay_shape if kind == "wsd" else kind
    if shape not in _HF_DECAY:
        drops.cannot("schedule.decay_shape", f"HF's warmup_stable_decay has no decay shape {shape!r} "
                     f"({', '.join(_HF_DECAY)}); linear is used instead")
        shape = "linear"
    start = sched.decay_start
    last = total - 1
    if start is None or start > last:
        drops.cannot("schedule.decay_fraction", "no decay step inside the run")
        start = last
    out.update(lr_scheduler_type="warmup_stable_decay",
               lr_scheduler_kwargs={"num_decay_steps": last - start, "decay_type": _HF_DECAY[shape],
                                    "min_lr_ratio": lr_floor, "last_epoch": 0})
    return out


def export_hf(card: Mapping[str, Any], *, dp_size: int | None = None, micro_batch: int | None = None,
              drop: Iterable[str] = ()) -> dict[str, Any]:
    """``training_arguments`` for ``TrainingArguments(**d)`` (per-device micro-batch,
    gradient accumulation to the card's global batch, the card's schedule step for step)
    and the per-parameter groups. A card field HF cannot carry is a ValueError naming it,
    unless ``drop`` names it (then ``dropped`` lists it and a warning says so)."""
    import transformers


    dtype = card["target"].get("dtype") or "float32"
    drops = Drops("hf", drop)
    groups = _groups(card)
    opt = card["optimizer"]
    split = split_batch(card, dp_size, micro_batch)
    betas = list(opt["betas"])
    args = {"learning_rate": float(opt["lr"]), "weight_decay": float(opt["weight_decay"]),
            "adam_beta1": float(betas[0]), "adam_beta2": float(betas[1]),
            "adam_epsilon": float(opt["eps"]), "optim": "adamw_torch",
            "per_device_train_batch_size": split.micro_batch,
            "gradient_accumulation_steps": split.grad_accum, **_hf_schedule(card, drops)}
    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    version = f"transformers {transformers.__version__}"
    check_fields("hf", "TrainingArguments", args, fields, version)
    drops.check_used()
    return {"engine": "hf", "verified_against": version, "training_arguments": args,
            "batch": split._asdict(), "dropped": drops.dropped,
            "param_groups": [{k: g[k] for k in ("name", "lr", "weight_decay", "eps") if k in g}
                             for g in groups],
            "dtype": dtype,
            "notes": [f"launch on {split.dp_size} data-parallel rank(s): {split.dp_size} × "
                      f"{split.micro_batch} × {split.grad_accum} accumulation steps = {split.sequences} "
                      "sequences per optimizer step",
                      "TrainingArguments(output_dir=..., **export['training_arguments']): the "
                      "training_arguments section, not the whole export (its other keys are no "
                      "TrainingArguments field)",
                      "the optimizer: `from mutransfer import hf_param_groups; "
                      "torch.optim.AdamW(hf_param_groups(model, card))`, passed as "
                      "Trainer(optimizers=(optimizer, None)): TrainingArguments holds one LR, the card "
                      "one per parameter; the groups carry initial_lr, which the scheduler's last_epoch=0 "
                      "needs",
                      "the model first: `from mutransfer import apply_card, build_target_model, load_card; "
                      "model = build_target_model(card); "
                      "apply_card(model, card)` (the card's init, forward multipliers and attention scales; "
                      "they stay on the model under Trainer)",
                      decay_note(((g["name"], g["lr"], g["weight_decay"]) for g in groups),
                                 f"training_arguments.weight_decay {float(opt['weight_decay']):.4g} is the "
                                 "card's base λ; hf_param_groups gives each parameter its own"),
                      f"weights {dtype}: {PRECISION[dtype]}"
                      + (" (add bf16=True to the TrainingArguments on a bf16-capable device)"
                         if dtype == "float32" else "")],
            "usage": USAGE}


#: Python that trains the card's model with HF's Trainer from the card and this export
#: (CARD, EXPORT: their paths, filled in by ``mutransfer export``; ``train_dataset``: yours).
USAGE = """CARD = "card.yaml"
EXPORT = "hf.json"
import json

import torch
from transformers import Trainer, TrainingArguments

from mutransfer import apply_card, build_target_model, hf_param_groups, load_card

card = load_card(CARD)
export = json.load(open(EXPORT))
model = build_target_model(card)  # the card's target.dtype (float32 master weights by default)
apply_card(model, card)  # the card's init, forward multipliers and attention scales
optimizer = torch.optim.AdamW(hf_param_groups(model, card))  # one LR per parameter, the card's
args = TrainingArguments(output_dir="out", **export["training_arguments"])
trainer = Trainer(model=model, args=args, train_dataset=train_dataset, optimizers=(optimizer, None))
"""


def hf_param_groups(model: nn.Module, card: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``optimizer_grouped_parameters`` for ``model``: one group per distinct (lr, weight
    decay, eps) of the card, each parameter in the group the card puts it in; each group's
    ``initial_lr`` is its peak LR (the exported scheduler starts one step in)."""
    check_model(model, card)
    by_name = {g["name"]: g for g in _groups(card)}
    out: dict[tuple[float, float, float], dict[str, Any]] = {}
    for name, p in model.named_parameters():
        g = by_name[name]
        eps = g["eps"]
        key = (float(g["lr"]), float(g["weight_decay"]), float(eps))
        grp = out.setdefault(key, {"params": [], "names": [], "lr": key[0], "initial_lr": key[0],
                                   "weight_decay": key[1], "eps": key[2]})
        grp["params"].append(p)
        grp["names"].append(name)
    return list(out.values())
