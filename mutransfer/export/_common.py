"""What every engine exporter shares: the card's schedule in steps, its AdamW groups, and
the checks of a model and of emitted field names against an engine."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.nn as nn


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
