"""Fused sweep trials: a worker takes up to K waiting trials that can train as one batched
model (:mod:`mutransfer.training.fused`, HFTA) and runs them together.

Which trials fuse is decided by :func:`mutransfer.training.fusion.fusion_key` of each trial's
resolved config (preset + spec base + grid point) and its ``wsd_branches``: equal keys share
the model shape, batch size, step count, sequence length, everything else listed in
:data:`mutransfer.training.fusion.NON_FUSIBLE_FIELDS` and the WSD branch fractions (a scaling sweep's
trials at one batch fuse, trials at other batches do not); the learning rate, seed, weight
decay and multipliers may differ. A trial that cannot run fused at all
(:func:`mutransfer.training.fusion.unsupported_reason`: rollback spike policy, checkpointing,
DDP) is popped alone and runs through the unfused path.

``fuse`` values: ``None`` (not given: the study's setting, else unfused), ``1`` (unfused),
an integer K >= 2 (groups of up to K), or ``"auto"`` (K from
:func:`mutransfer.training.fusion.choose_k`: 16 on CPU for members below 1e9 FLOPs per micro-step, else
unfused; from free memory on CUDA).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from sweeps import attrs
from sweeps.resolve import train_config
from sweeps.spec_base import SweepSpec

if TYPE_CHECKING:
    import optuna

    from sweeps.lifecycle import SweepStudy

# mutransfer.training.fused is imported inside the functions that size a group: it imports torch.

AUTO = "auto"
#: ``None`` | K >= 1 | ``"auto"`` (see the module docstring).
Fuse = int | Literal["auto"] | None


def check_fuse(value: Any) -> Fuse:
    """Normalize a ``fuse`` setting: None, an integer >= 1 (an integral string from the CLI
    too) or ``"auto"``; anything else -> ValueError naming the value."""
    if value is None:
        return None
    raw = value
    if isinstance(value, str):
        text = value.strip().lower()
        if text == AUTO:
            return AUTO
        try:
            value = int(text)
        except ValueError:
            value = None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"fuse {raw!r} must be an integer >= 1 (members per fused group) or 'auto'")
    return value


def is_fused(fuse: Fuse) -> bool:
    """Does this setting fuse at all (anything but None and 1)?"""
    return fuse is not None and fuse != 1


def check_spec_fusible(spec: SweepSpec, fuse: Fuse) -> None:
    """A fused sweep of a model that is not a built-in preset -> ValueError (one line)."""
    if is_fused(fuse) and spec.model is not None:
        raise ValueError(f"--fuse {fuse} cannot train model {spec.model!r}: fused training swaps stacked "
                         "parameters into our own GPT (exactness is only guaranteed there); use --fuse 1")


def point_fusion_key(spec: SweepSpec, point: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The fusion key of a grid point, or None when it must run alone (cannot run fused,
    or its config does not even resolve: the unfused path then records the error). Its
    ``wsd_branches`` (the runner's, not the trainer's) are part of it: trials fuse their
    WSD trunks only when they branch at the same fractions."""
    from mutransfer.training.fusion import fusion_key, unsupported_reason  # lazy: torch

    try:
        cfg = train_config(spec, point)
        if unsupported_reason(cfg) is not None:
            return None
        branches = {**spec.base, **point}.get("wsd_branches")
        wsd = None if branches is None else tuple(float(f) for f in branches)
        return (*fusion_key(cfg), ("wsd_branches", wsd))
    except Exception:
        return None


def group_size(fuse: Fuse, spec: SweepSpec, point: Mapping[str, Any]) -> int:
    """K for a group led by ``point``: the integer setting, or ``choose_k`` for ``"auto"``."""
    if fuse is None:
        return 1
    if fuse == AUTO:
        from mutransfer.training.fusion import choose_k  # lazy: torch

        try:
            return choose_k(train_config(spec, point))
        except Exception:
            return 1
    return int(fuse)


def claim_group(study: SweepStudy, spec: SweepSpec, fuse: Fuse,
                limit: int | None = None) -> list[optuna.Trial]:
    """Claim the oldest WAITING trial and up to K-1 more WAITING trials with the same
    fusion key (oldest first), all RUNNING and this worker's; [] when nothing waits.
    Unfused (``fuse`` None or 1, or a lead that cannot run fused) is a group of one.
    ``limit`` caps the group (a worker's ``max_trials``). Both steps are
    :meth:`sweeps.lifecycle.SweepStudy.claim`, atomic per trial across workers."""
    group = study.claim(1)
    if not group or not is_fused(fuse):
        return group
    lead_point = dict(group[0].user_attrs.get(attrs.POINT, {}))
    k = group_size(fuse, spec, lead_point)
    if limit is not None:
        k = min(k, limit)
    key = point_fusion_key(spec, lead_point) if k > 1 else None
    if key is None:
        return group
    keys: dict[Any, tuple[Any, ...] | None] = {group[0].user_attrs.get(attrs.POINT_KEY): key}

    def same_key(t: optuna.trial.FrozenTrial) -> bool:
        pk = t.user_attrs.get(attrs.POINT_KEY)
        if pk is None or pk not in keys:
            keys[pk] = point_fusion_key(spec, dict(t.user_attrs.get(attrs.POINT, {})))
        return keys[pk] == key

    return group + study.claim(k - 1, accept=same_key)
