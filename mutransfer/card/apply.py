"""Applying a transfer card to a model: its init, its forward multipliers, and an
optimizer with the card's per-parameter LR, weight decay and eps under the card's
schedule (:func:`apply_card`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn as nn

from mutransfer.card.schema import schedule_config, validate_card
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.training.optim import OptimizerList, build_optimizer
from mutransfer.training.schedules import Schedule


class LambdaLRList:
    """One ``LambdaLR`` per optimizer of an :class:`OptimizerList` (Muon + AdamW), stepped
    as one scheduler."""

    def __init__(self, schedulers: list[torch.optim.lr_scheduler.LambdaLR]) -> None:
        self.schedulers = schedulers

    def step(self) -> None:
        for s in self.schedulers:
            s.step()

    def get_last_lr(self) -> list[float]:
        return [lr for s in self.schedulers for lr in s.get_last_lr()]

    @property
    def last_epoch(self) -> int:
        return self.schedulers[0].last_epoch

    def state_dict(self) -> dict[str, Any]:
        return {"schedulers": [s.state_dict() for s in self.schedulers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for s, st in zip(self.schedulers, state["schedulers"], strict=True):
            s.load_state_dict(st)


class Applied(NamedTuple):
    """What :func:`apply_card` returns: the initialized model, its optimizer, the LR scheduler
    (step it once per optimizer step) and the per-parameter param groups at the card's
    peak LR (the optimizer holds copies whose lr the scheduler moves)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer | OptimizerList
    scheduler: torch.optim.lr_scheduler.LambdaLR | LambdaLRList
    param_groups: list[dict[str, Any]]


@torch.no_grad()
def apply_init(model: nn.Module, init: Mapping[str, str]) -> None:
    """A card's init on top of the model's own, per parameter name: ``keep``, ``zeros``,
    ``scale:F`` (×F) or ``normal:S`` (a fresh N(0, S²))."""
    params = dict(model.named_parameters())
    for name, how in init.items():
        p = params[name]
        if how == "zeros":
            p.zero_()
        elif how.startswith("scale:"):
            p.mul_(float(how.split(":", 1)[1]))
        elif how.startswith("normal:"):
            p.normal_(0.0, float(how.split(":", 1)[1]))


def apply_card(model: nn.Module, card: Mapping[str, Any]) -> Applied:
    """Initialize ``model`` (the target architecture) as the card says, register its
    forward multipliers and attention scales, and build the optimizer and scheduler.

    The optimizer comes from :func:`mutransfer.training.optim.build_optimizer` with one group
    per parameter (the card's absolute lr, weight decay and eps); the scheduler is a
    ``torch.optim.lr_scheduler.LambdaLR`` of :class:`mutransfer.training.schedules.Schedule`,
    so the LR of a group at step ``s`` is ``card lr × schedule(s)``. A v1 card whose
    schedule cannot be built (a decaying kind without total steps) is refused with one
    clear error rather than given a guessed schedule.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"apply_card's model must be a torch.nn.Module (the target, built), got "
                        f"{type(model).__name__}")
    if isinstance(card, (str, Path)):
        raise TypeError(f"apply_card takes the card itself; read {str(card)!r} with load_card first")
    card = validate_card(card)
    try:
        sched_cfg = schedule_config(card["schedule"])
        schedule = Schedule(sched_cfg)
    except ValueError as exc:
        raise ValueError(f"card field schedule: {exc}") from None
    params = dict(model.named_parameters())
    groups_by_name = {g["name"]: g for g in card["param_groups"]}
    if set(params) != set(groups_by_name):
        extra = sorted(set(params) - set(groups_by_name))[:3]
        missing = sorted(set(groups_by_name) - set(params))[:3]
        raise ValueError(f"model does not match the card: unknown {extra}, missing {missing}")
    for name, p in params.items():
        if list(p.shape) != list(groups_by_name[name]["shape"]):
            raise ValueError(f"parameter {name} has shape {list(p.shape)}, the card says "
                             f"{groups_by_name[name]['shape']}")
    if getattr(model, "_mutransfer_hooks", None):
        raise ValueError("this model is already parametrized; build a fresh one")
    apply_init(model, {name: groups_by_name[name]["init"] for name in params})
    fm = card["forward_multipliers"]
    Parametrization.install_forward_multipliers(model, fm["hooks"], fm["attention"])
    opt_card = card["optimizer"]
    groups = []
    for name, p in params.items():
        g = groups_by_name[name]
        groups.append({"params": [p], "names": [name], "lr": g["lr"], "base_lr": opt_card["lr"],
                       "lr_mult": g.get("lr_mult", 1.0), "weight_decay": g["weight_decay"],
                       "eps": g["eps"], "optimizer": g["optimizer"],
                       "role": g.get("role")})
    tags = {g["optimizer"] for g in groups}
    name = "muon" if "muon" in tags else "sgd" if tags == {"sgd"} else opt_card["name"]
    # The optimizer gets copies: its LambdaLR rescales group lrs from step 0 on, while
    # ``param_groups`` keeps the card's peak values.
    opts = build_optimizer([dict(g) for g in groups], name, betas=tuple(opt_card["betas"]),
                           momentum=float(opt_card.get("momentum", 0.0)))
    lambdas = [torch.optim.lr_scheduler.LambdaLR(o, schedule) for o in opts]
    if len(lambdas) == 1:
        return Applied(model, opts.optimizers[0], lambdas[0], groups)
    return Applied(model, opts, LambdaLRList(lambdas), groups)


