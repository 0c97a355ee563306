"""The parametrization's vocabulary: roles, kinds, rule sets and weight-decay modes, the
tunable forward :class:`Multipliers`, one :class:`Rule` of the ordered role table and the
:class:`ParamSpec` of one parameter (what :class:`mutransfer.parametrize.parametrization.Parametrization`
does to it)."""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch.nn as nn

Role = Literal["input", "hidden", "output", "vector", "scalar"]


ROLES: tuple[str, ...] = ("input", "hidden", "output", "vector", "scalar")


Kind = Literal["sp", "mup", "completep", "muon"]


KINDS: tuple[str, ...] = typing.get_args(Kind)


OPTIMIZERS: tuple[str, ...] = ("adam", "sgd")


WD_MODES: tuple[str, ...] = ("coupled", "independent")


Builder = Callable[..., nn.Module]


@dataclass(frozen=True)
class Multipliers:
    """Tunable forward multipliers: first-class hyperparameters a sweep can search."""

    input: float = 1.0
    """Scales the output of input-role modules (embeddings)."""
    output: float = 1.0
    """Scales the readout's input; μP further divides by m_in (TP-V's alpha_output)."""
    attention: float = 1.0
    """Scales the attention logits: attention/d_head (μP) or attention/sqrt(d_head) (SP)."""
    residual: float = 1.0
    """Scales every residual branch (CompleteP multiplies in m_L^-alpha on top)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"multiplier {f.name} must be a positive finite number, got {v!r}")


@dataclass(frozen=True)
class Rule:
    """One row of the ordered role table: the first rule whose regex matches (re.search)
    a parameter name gives its role."""

    pattern: str
    role: str
    source: str = "user"

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"rule {self.pattern!r} has unknown role {self.role!r}; use one of {ROLES}")
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"rule pattern {self.pattern!r} is not a valid regex: {exc}") from None


@dataclass(frozen=True)
class ParamSpec:
    """What the parametrization does to one parameter (a row of ``describe()``)."""

    name: str
    shape: tuple[int, ...]
    role: str
    rule: str
    """The rule that gave the role (a user regex, or ``inferred:<why>``)."""
    width_dims: tuple[int, ...]
    """Indices of the dimensions that scale with width."""
    fan_in_mult: float
    fan_out_mult: float
    init: str
    """``keep`` (the model's own init), ``scale:<f>`` (multiply by f), ``normal:<std>``
    or ``zeros``."""
    init_std: float | None
    """The std after init when it is known analytically, else None (see describe())."""
    lr_mult: float
    wd: bool
    """Whether weight decay applies."""
    eps_mult: float
    optimizer: str
    """``adamw``, ``sgd`` or ``muon``: which optimizer updates this parameter."""
    in_residual_branch: bool


__all__ = ["KINDS", "OPTIMIZERS", "ROLES", "WD_MODES", "Builder", "Kind", "Multipliers", "ParamSpec", "Role",
           "Rule"]
