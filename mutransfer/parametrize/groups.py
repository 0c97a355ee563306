"""The one group builder: the rules of a parametrization (its :class:`ParamSpec` per
parameter) turned into per-parameter optimizer numbers, absolute LR, LR multiplier,
weight decay and eps (:func:`optimizer_settings`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mutransfer.parametrize.specs import ROLES, WD_MODES, ParamSpec


def optimizer_settings(
    specs: Mapping[str, ParamSpec],
    lr: float,
    *,
    weight_decay: float = 0.0,
    wd_mode: str = "coupled",
    eps: float = 1e-8,
    role_lr_mults: Mapping[str, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per parameter (by name, from ``specs``; no model needed, so a card built on
    the meta device or from specs alone holds the same numbers): ``role``,
    ``optimizer``, ``lr`` (absolute), ``base_lr``, ``lr_mult``, ``weight_decay`` (the
    value the torch optimizer reads) and ``eps``. The one place that turns the rules
    into optimizer numbers: :meth:`Parametrization.optimizer_settings` calls it, and
    :meth:`~Parametrization.param_groups` (the trainer's groups), the transfer card and,
    through the card, the engine exports all read that method.

    LR: ``lr_g = lr × lr_mult``, ``lr_mult = f × r``, where ``f`` is the
    parametrization's width/depth factor (``specs[name].lr_mult``: μP m_in^-1 for
    hidden matrices under Adam, CompleteP's m_L^(alpha-1) in blocks; 1 at the base
    shape) and ``r = role_lr_mults[role]`` is the per-role multiplier tuned at the
    proxy (TP-V §F's learning-rate multipliers; the same at proxy and target).

    Weight decay keeps the proxy's decay timescale per group, tau_iter = 1/(lr_g λ_g)
    (Wang & Aitchison 2024, "How to set AdamW's weight decay as you scale model and
    dataset size": the EMA timescale is what transfers):

    - ``coupled`` (torch AdamW/SGD, per-step decay lr_t × λ_g): λ_g = λ / f, so
      lr_g × λ_g = lr × λ × r at every width and depth, the same as at the base shape.
      This is ``mup``'s MuAdamW (weight_decay × width_mult on matrix-like parameters,
      whose LR it divides by width_mult) and MuSGD (weight_decay divided by the factor
      its LR is multiplied by); Yang et al. 2022 (TP-V) via ``mup.optim``. Not divided
      by ``r``: a tuned role multiplier moves the proxy's timescale too, and the
      target keeps that one.
    - ``independent`` (decay λ × schedule(t) per step, not scaled by the LR;
      Loshchilov & Hutter 2019, Wortsman et al. 2023): stored as λ / (lr × lr_mult),
      which torch multiplies back by lr_t, so it is width-invariant as it is.
      MuAdamW equals it with λ = lr × its weight_decay.

    SGD's per-step decay is also lr × weight_decay (the decay term joins the gradient,
    momentum included), so the same rule holds. Muon's hidden matrices have f = 1 (its
    shape scaling is inside ``torch.optim.Muon``). Vector-like and scalar parameters
    get no decay.
    """
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"learning rate must be a positive finite number, got {lr!r}")
    if weight_decay < 0 or not math.isfinite(weight_decay):
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    if wd_mode not in WD_MODES:
        raise ValueError(f"unknown weight-decay mode {wd_mode!r}; choose from {WD_MODES}")
    mults = dict(role_lr_mults or {})
    for role, r in mults.items():
        if role not in ROLES:
            raise ValueError(f"role LR multiplier for unknown role {role!r}; use one of {ROLES}")
        if not (isinstance(r, (int, float)) and not isinstance(r, bool) and 0 < r < math.inf):
            raise ValueError(f"role LR multiplier {role}={r!r} must be a positive finite number")
    out: dict[str, dict[str, Any]] = {}
    for name, s in specs.items():
        r = float(mults.get(s.role, 1.0))
        mult = s.lr_mult * r
        decay = weight_decay if s.wd else 0.0
        if decay and wd_mode == "coupled":
            decay = decay / s.lr_mult
        elif decay:
            decay = decay / (lr * mult)
        out[name] = {"role": s.role, "optimizer": s.optimizer, "lr": lr * mult, "base_lr": lr,
                     "lr_mult": mult, "weight_decay": decay, "eps": eps * s.eps_mult}
    return out


__all__ = ["optimizer_settings"]
