"""The transfer card: the export that carries a tuned proxy to the big run.

A card is plain YAML (JSON accepted), ``schema: mutransfer.card/v1``, holding the source
proxy and its fits, the target model, the parametrization and multipliers, the
optimizer with its absolute base LR, the schedule, the batch, the per-parameter absolute
LR / init / weight decay of the target model, the forward multipliers, projected values
with intervals, and provenance. It is self-contained: :func:`apply` needs only the card
and a model of the target shape. Loading uses ``yaml.safe_load``, so nothing executes.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from mutransfer._io import atomic_write_text, read_yaml_mapping
from mutransfer.parametrization import Parametrization

SCHEMA = "mutransfer.card/v1"
REQUIRED = ("schema", "source", "target", "parametrization", "optimizer", "schedule", "batch",
            "param_groups", "forward_multipliers", "projected", "provenance")


def git_revision(cwd: str | Path | None = None) -> str | None:
    """The current git commit, or None outside a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd or Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def build_card(
    pz: Parametrization,
    *,
    lr: float,
    optimizer: Mapping[str, Any],
    schedule: Mapping[str, Any],
    batch: Mapping[str, Any],
    target: Mapping[str, Any],
    source: Mapping[str, Any] | None = None,
    projected: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Assemble a card for the model ``pz`` describes (built at the *target* width).

    ``lr`` is the absolute base LR (the proxy's optimum: under μP it is the same number
    at every width); each parameter's absolute LR is ``lr × lr_mult`` from ``pz``.
    ``optimizer`` holds name, betas, eps, weight_decay and wd_mode.
    """
    from mutransfer import __version__

    if not (isinstance(lr, (int, float)) and lr > 0 and lr == lr and lr != float("inf")):
        raise ValueError(f"base learning rate must be a positive finite number, got {lr!r}")
    wd = float(optimizer.get("weight_decay", 0.0))
    wd_mode = str(optimizer.get("wd_mode", "coupled"))
    eps = float(optimizer.get("eps", 1e-8))
    groups = []
    for s in pz.specs.values():
        decay = wd if s.wd else 0.0
        if decay and wd_mode == "independent":
            decay = decay / (lr * s.lr_mult)
        groups.append({
            "name": s.name, "shape": list(s.shape), "role": s.role, "optimizer": s.optimizer,
            "lr": lr * s.lr_mult, "lr_mult": s.lr_mult, "init": s.init, "init_std": s.init_std,
            "weight_decay": decay, "eps": eps * s.eps_mult,
        })
    card = {
        "schema": SCHEMA,
        "source": dict(source or {}),
        "target": dict(target),
        "parametrization": {
            "kind": pz.kind, "rules": pz.optimizer, "width": pz.width, "base_width": pz.base_width,
            "depth": pz.depth, "base_depth": pz.base_depth, "depth_alpha": pz.depth_alpha,
            "readout_init": pz.readout_init, "init": pz.init,
            "multipliers": dataclasses.asdict(pz.multipliers),
        },
        "optimizer": {"name": optimizer.get("name", "adamw"), "lr": float(lr),
                      "betas": list(optimizer.get("betas", (0.9, 0.95))), "eps": eps,
                      "weight_decay": wd, "wd_mode": wd_mode},
        "schedule": dict(schedule),
        "batch": dict(batch),
        "param_groups": groups,
        "forward_multipliers": pz.forward_multipliers(),
        "projected": dict(projected or {}),
        "provenance": {"package": "mutransfer", "version": __version__, "git_revision": git_revision(),
                       "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")},
    }
    return validate_card(_plain(card))


def _plain(obj: Any) -> Any:
    """Plain YAML-safe values: tuples to lists, numpy scalars to floats, no NaN."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and obj != obj:
        raise ValueError("a transfer card may not hold NaN")
    return obj


def validate_card(card: Mapping[str, Any]) -> dict[str, Any]:
    """Check the schema tag and required sections; one clear error otherwise."""
    if not isinstance(card, Mapping):
        raise ValueError(f"a transfer card must be a mapping, got {type(card).__name__}")
    if card.get("schema") != SCHEMA:
        raise ValueError(f"unsupported card schema {card.get('schema')!r}; expected {SCHEMA!r}")
    missing = [k for k in REQUIRED if k not in card]
    if missing:
        raise ValueError(f"transfer card is missing section(s): {', '.join(missing)}")
    for g in card["param_groups"]:
        for key in ("name", "shape", "lr", "init", "weight_decay"):
            if key not in g:
                raise ValueError(f"param group {g.get('name', '?')!r} lacks {key!r}")
        if not g["lr"] >= 0:
            raise ValueError(f"param group {g['name']!r} has a bad lr {g['lr']!r}")
    return dict(card)


def save_card(card: Mapping[str, Any], path: str | Path) -> Path:
    """Write YAML (or JSON for a ``.json`` path) atomically."""
    import yaml

    card = validate_card(card)
    path = Path(path)
    text = json.dumps(card, indent=2) + "\n" if path.suffix == ".json" else yaml.safe_dump(
        card, sort_keys=False)
    return atomic_write_text(path, text)


def load_card(path: str | Path) -> dict[str, Any]:
    """Read a card (YAML or JSON) with ``yaml.safe_load``: no code runs."""
    return validate_card(read_yaml_mapping(path, "transfer card"))


def apply(model: nn.Module, card: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Initialize ``model`` (the target architecture) as the card says, register its
    forward multipliers and attention scales, and return optimizer param groups (one per
    parameter, with the card's absolute lr, weight decay and eps)."""
    card = validate_card(card)
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
    with torch.no_grad():
        for name, p in params.items():
            init = groups_by_name[name]["init"]
            if init == "zeros":
                p.zero_()
            elif init.startswith("scale:"):
                p.mul_(float(init.split(":", 1)[1]))
            elif init.startswith("normal:"):
                p.normal_(0.0, float(init.split(":", 1)[1]))
    fm = card["forward_multipliers"]
    Parametrization.install_forward_multipliers(model, fm["hooks"], fm["attention"])
    out = []
    for name, p in params.items():
        g = groups_by_name[name]
        out.append({"params": [p], "names": [name], "lr": g["lr"], "base_lr": card["optimizer"]["lr"],
                    "lr_mult": g.get("lr_mult", 1.0), "weight_decay": g["weight_decay"],
                    "eps": g.get("eps", 1e-8), "optimizer": g.get("optimizer", "adamw"),
                    "role": g.get("role")})
    return out


__all__ = ["SCHEMA", "apply", "build_card", "git_revision", "load_card", "save_card", "validate_card"]
