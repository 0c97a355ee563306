"""Resolution of a sweep spec into trial configs: spec + grid point -> TrainConfig
overrides (:func:`resolve_config`) -> :class:`mutransfer.training.config.TrainConfig`
(:func:`to_train_config`, cached per process), and the check of every grid point before
any study exists (:func:`check_trials`).

:mod:`mutransfer.training.config` is imported inside the functions that build a TrainConfig: it
imports torch, and resolving overrides (the study's parent, the synthetic runner) must not.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from collections.abc import Mapping
from typing import Any

from sweeps.spec_base import SweepSpec, default_seq_len, model_fields

_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def resolve_config(spec: SweepSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """TrainConfig overrides of one trial: the model (:func:`sweeps.spec_base.model_fields`: a
    preset, or the user's model as ``source``) + spec.base + the trial's parameters.

    The pseudo-field ``tokens`` becomes ``steps = round(tokens / (batch_size * seq_len))``.
    """
    cfg: dict[str, Any] = {**model_fields(spec), **dict(spec.base), **dict(params)}
    tokens = cfg.pop("tokens", None)
    if tokens is not None:
        bs = cfg.get("batch_size") or _default_batch_size()
        seq = cfg.get("seq_len") or default_seq_len(spec)
        steps = round(int(tokens) / (int(bs) * int(seq)))
        if steps < 1:
            raise ValueError(f"token budget {tokens} is below one step of {bs} x {seq} tokens")
        cfg["steps"] = steps
    return cfg


def train_config(spec: SweepSpec, point: Mapping[str, Any]) -> Any:
    """The :class:`mutransfer.training.config.TrainConfig` of a grid point (adaptive dimensions such
    as a searched lr take their lower bound, else the base value)."""
    params = {**{k: lo for k, (lo, _) in spec.search().items()}, **dict(point)}
    cfg = resolve_config(spec, params)
    cfg.pop("wsd_branches", None)  # the runner's pseudo-field (one row per branch), not the trainer's
    return to_train_config(cfg)


def to_train_config(config: Mapping[str, Any]) -> Any:
    """``TrainConfig.from_flat(config)``, resolved once per process for equal configs.

    One fused trial's config is needed by the claim (its fusion key, K), by its
    provenance attrs and by the runner; TrainConfig is frozen, so all of them share one
    resolution. Keys are sorted (the order of overrides does not matter) and hold each
    value's type (``1`` and ``True`` are equal and hash alike but are not the same
    override); a config with unhashable values is not cached."""
    items = tuple(sorted((k, type(v), v) for k, v in config.items()))
    try:
        hash(items)
    except TypeError:
        from mutransfer.training.config import TrainConfig  # lazy: torch (see the module docstring)

        return TrainConfig.from_flat(config)
    return _to_train_config(items)


@functools.lru_cache(maxsize=1024)
def _to_train_config(items: tuple[tuple[str, type, Any], ...]) -> Any:
    from mutransfer.training.config import TrainConfig  # lazy: torch (see the module docstring)

    return TrainConfig.from_flat({k: v for k, _, v in items})


def check_trials(spec: SweepSpec) -> int:
    """Resolve the whole trial config of every grid point (and both ends of a searched
    range) and validate it as the trainer will, before any study exists; returns the
    number of points. The first bad point -> ValueError naming it and its bad value."""
    dims = {n for n, _ in spec.grid_dims()} | set(spec.search())
    if not dims:
        raise ValueError("empty grid: the sweep has no dimension (give grid: {field: [values]})")
    both = sorted(dims & set(spec.base) - {"base_width", "base_depth"})
    if "tokens" in dims and "steps" in spec.base:  # a token budget sets the steps
        both.append("steps (from tokens)")
    if both:
        raise ValueError(f"{', '.join(both)} is set in base and is also a sweep dimension; "
                         "set it in one place")
    device = spec.base.get("device")
    if device is not None and not (isinstance(device, str) and _DEVICE.fullmatch(device)):
        raise ValueError(f"device must be auto, cpu, cuda[:N] or mps, got {device!r}")
    ends = [dict(zip(spec.search(), combo)) for combo in itertools.product(*spec.search().values())]
    points = spec.points()
    for point in points:
        for end in ends or [{}]:
            try:
                train_config(spec, {**point, **end})
            except ValueError as exc:
                where = ", ".join(f"{k}={v}" for k, v in {**point, **end}.items()) or "the base config"
                raise ValueError(f"trial {where}: {exc}") from None
    return len(points)




def _default_batch_size() -> int:
    """TrainConfig's default batch size: its section dataclass's field default."""
    from mutransfer.training.config import ALIASES, SECTIONS  # lazy: torch (see the module docstring)

    sec, name = ALIASES["batch_size"]
    return next(int(f.default) for f in dataclasses.fields(SECTIONS[sec]) if f.name == name)  # type: ignore[arg-type]
