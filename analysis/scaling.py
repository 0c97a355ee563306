"""Scaling laws for what μP does not fix: the optimal LR η*(B, D) and batch B*(D).

The names of the scaling fit, gathered from the modules that hold one idea each:

- :mod:`analysis.tau`: the AdamW timescale ``tau = B/(eta·lambda·D)`` and its inverse;
- :mod:`analysis.schedule`: the warmup (in tokens) and WSD decay-fraction rules;
- :mod:`analysis.scaling_fit`: fitting the laws (:class:`ScalingLawFit`);
- :mod:`analysis.scaling_projection`: what the fitted laws predict and the one projection
  to a target budget (:class:`ScalingProjection`), used by the card's run plan too;
- :mod:`analysis.scaling_doc`: FIT.json, written and read (the one reader);
- :mod:`analysis.holdout`: the held-out audit against textbook baselines.

Batches ``B`` and budgets ``D`` are in tokens throughout.
"""

from __future__ import annotations

from .holdout import AUDIT_KEYS, fill_loss_gap, holdout_audit
from .scaling_fit import METHODS, ScalingCurves, ScalingLawFit
from .scaling_projection import ScalingProjection
from .schedule import ScheduleRules
from .tau import tau_from, weight_decay_for

__all__ = [
    "AUDIT_KEYS",
    "METHODS",
    "ScalingCurves",
    "ScalingLawFit",
    "ScalingProjection",
    "ScheduleRules",
    "fill_loss_gap",
    "holdout_audit",
    "tau_from",
    "weight_decay_for",
]
