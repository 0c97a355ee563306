"""Fused sweep trials: a worker takes up to K waiting trials that can train as one batched
model (:mod:`mutransfer.fused`, HFTA) and runs them together.

Which trials fuse is decided by :func:`mutransfer.fused.fusion_key` of each trial's
resolved config (preset + spec base + grid point): equal keys share the model shape, batch
size, step count, sequence length and everything else listed in
:data:`mutransfer.fused.NON_FUSIBLE_FIELDS`; the learning rate, seed, weight decay and
multipliers may differ. A trial that cannot run fused at all
(:func:`mutransfer.fused.unsupported_reason`: rollback spike policy, checkpointing,
compile, DDP) is popped alone and runs through the unfused path.

``fuse`` values: ``None`` (not given: the study's setting, else unfused), ``1`` (unfused),
an integer K >= 2 (groups of up to K), or ``"auto"`` (K from
:func:`mutransfer.fused.choose_k`: 16 on CPU, from free memory on CUDA).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from sweeps.recovery import ATTR_POINT, ATTR_POINT_KEY
from sweeps.spec import SweepSpec

if TYPE_CHECKING:
    import optuna

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


def train_config(spec: SweepSpec, point: Mapping[str, Any]) -> Any:
    """The :class:`mutransfer.train.TrainConfig` of a grid point (adaptive dimensions such
    as a searched lr take the base value: they are fusible, so they never change the key)."""
    from mutransfer.train import TrainConfig
    from sweeps.objective import resolve_config

    return TrainConfig.from_overrides(None, resolve_config(spec, point))


def point_fusion_key(spec: SweepSpec, point: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The fusion key of a grid point, or None when it must run alone (cannot run fused,
    or its config does not even resolve: the unfused path then records the error)."""
    from mutransfer.fused import fusion_key, unsupported_reason

    try:
        cfg = train_config(spec, point)
        if unsupported_reason(cfg) is not None:
            return None
        return fusion_key(cfg)
    except Exception:
        return None


def group_size(fuse: Fuse, spec: SweepSpec, point: Mapping[str, Any]) -> int:
    """K for a group led by ``point``: the integer setting, or ``choose_k`` for ``"auto"``."""
    if fuse is None:
        return 1
    if fuse == AUTO:
        from mutransfer.fused import choose_k

        try:
            return choose_k(train_config(spec, point))
        except Exception:
            return 1
    return int(fuse)


def pop_group(study: optuna.Study, spec: SweepSpec, fuse: Fuse,
              limit: int | None = None) -> list[optuna.Trial]:
    """Atomically take the oldest WAITING trial and up to K-1 more WAITING trials with the
    same fusion key (oldest first), all now RUNNING and owned by this worker; [] when
    nothing waits. ``limit`` caps the group (a worker's ``max_trials``).

    Each extra member is claimed with the storage's own WAITING -> RUNNING transition, the
    same atomic step as :func:`sweeps.worker.pop_waiting`: when two workers race for a
    trial exactly one gets it, the other skips it.
    """
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    from sweeps.worker import pop_waiting

    lead = pop_waiting(study)
    if lead is None:
        return []
    lead_point = dict(lead.user_attrs.get(ATTR_POINT, {}))
    k = group_size(fuse, spec, lead_point)
    if limit is not None:
        k = min(k, limit)
    key = point_fusion_key(spec, lead_point) if k > 1 else None
    if key is None:
        return [lead]
    group = [lead]
    keys: dict[Any, tuple[Any, ...] | None] = {lead.user_attrs.get(ATTR_POINT_KEY): key}
    storage = study._storage
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if len(group) >= k:
            break
        pk = t.user_attrs.get(ATTR_POINT_KEY)
        if pk not in keys or pk is None:
            keys[pk] = point_fusion_key(spec, dict(t.user_attrs.get(ATTR_POINT, {})))
        if keys[pk] != key:
            continue
        try:
            claimed = storage.set_trial_state_values(t._trial_id, state=TrialState.RUNNING)
        except (UpdateFinishedTrialError, KeyError):
            continue  # finished (or gone) since the listing
        if claimed:
            group.append(optuna.Trial(study, t._trial_id))
    return group
