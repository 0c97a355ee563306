"""The card as torchtitan (0.3.0) config sections and parameter groups."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from mutransfer.export._common import _floor, _groups, _steps, check_fields


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
