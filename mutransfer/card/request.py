"""What a card is made from, as frozen values: the proxy's measured optimum
(:class:`ProxyPoint`) and the choices that lay out the target's run (:class:`RunChoices`).

Each default is written here once: the planner (:func:`mutransfer.card.plan.plan_run`), the
card's assembly, :func:`mutransfer.card.make.make_card` and ``mutransfer transfer``'s flags
read them from these classes.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mutransfer.parametrize.specs import WD_MODES
from mutransfer.training.schedules import DECAY_SHAPES, SCHEDULE_KINDS

__all__ = ["BATCH_RULES", "EDGE_VALUES", "ProxyPoint", "RunChoices", "check_int"]

#: Where the target's batch comes from when none is given (``RunChoices.batch_rule``).
BATCH_RULES = ("auto", "fit", "anchored", "published")
#: The fitted values a user may take although the fit flags them as at its grid's edge.
EDGE_VALUES = ("batch", "lr")


def _number(name: str, value: Any, *, low: float = 0.0, high: float = math.inf, open_low: bool = False,
            integer: bool = False) -> None:
    """One ValueError naming the field unless ``value`` is None or a finite number in range."""
    if value is None:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if integer:
        ok = ok and float(value).is_integer()
    if ok:
        ok = (value > low if open_low else value >= low) and value <= high
    if not ok:
        kind = "an integer" if integer else "a finite number"
        side = f"> {low:g}" if open_low else f">= {low:g}"
        bound = side if high == math.inf else f"{side} and <= {high:g}"
        raise ValueError(f"{name} must be {kind} {bound}, got {value!r}")


def check_int(name: str, value: Any, *, low: int = 1, none: bool = True) -> None:
    """``value`` an int >= ``low`` (or None when ``none``): TypeError for another type (a
    string, a float, a bool), ValueError for one out of range, each naming ``name``."""
    if value is None and none:
        return
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):  # numpy's ints too
        raise TypeError(f"{name} must be an integer >= {low}, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class RunChoices:
    """How the target's run is laid out: the choices ``mutransfer transfer``'s flags make.

    Every field is checked on construction (one ValueError naming it)."""

    schedule: str = "wsd"
    """The LR schedule's kind (:data:`mutransfer.training.schedules.SCHEDULE_KINDS`)."""
    decay_shape: str = "1-sqrt"
    """The WSD cooldown's shape (:data:`mutransfer.training.schedules.DECAY_SHAPES`)."""
    lr_floor: float = 0.0
    """The final LR as a fraction of the peak, in [0, 1]."""
    batch_tokens: float | None = None
    """A fixed batch in tokens (rounded to whole sequences); None: projected."""
    batch_sequences: int | None = None
    """A fixed batch in sequences; None: projected. Not with ``batch_tokens``."""
    dp_size: int | None = None
    """Data-parallel ranks: the batch is rounded to a multiple of it."""
    micro_batch: int | None = None
    """Sequences per rank per forward; None: a power-of-two-friendly split, said in the card."""
    weight_decay: float | None = None
    """A fixed weight decay; None: from the fitted (or the tuned proxy's) timescale tau."""
    wd_mode: str | None = None
    """``coupled`` (torch AdamW: per-step decay lr × wd) or ``independent``; None: the tuned
    proxy's, else coupled."""
    warmup_tokens: float | None = None
    """Warmup length in tokens; None: the fitted rule, else ``warmup_fraction``."""
    warmup_fraction: float | None = None
    """Warmup as a share of the budget in [0, 1); None: 1% when no rule is fitted."""
    decay_fraction: float | None = None
    """WSD cooldown share of the steps in [0, 1]; None: fitted, else 0.2."""
    extrapolation_limit: float = 100.0
    """Warn when the target lies this many times beyond the measured range."""
    batch_rule: str = "auto"
    """Where the batch comes from (:data:`BATCH_RULES`): the fitted B*(D), the proxy's
    bracketed B* grown as the published laws grow (anchored), the published laws, or auto."""
    accept_edge: tuple[str, ...] = ()
    """Fitted values (:data:`EDGE_VALUES`) taken although at their grid's edge (``batch_rule="fit"``)."""
    published_prior: bool = True
    """Weigh the LR moved by the scaling fit against the published laws (DeepSeek LLM,
    Step Law) as a prior, each by its uncertainty (:func:`analysis.prior.weigh`); False:
    the data's LR alone."""

    def __post_init__(self) -> None:
        if self.accept_edge is None:
            object.__setattr__(self, "accept_edge", ())
        if self.schedule not in SCHEDULE_KINDS:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULE_KINDS)}, got {self.schedule!r}")
        if self.decay_shape not in DECAY_SHAPES:
            raise ValueError(f"decay_shape must be one of {', '.join(DECAY_SHAPES)}, got {self.decay_shape!r}")
        if self.wd_mode is not None and self.wd_mode not in WD_MODES:
            raise ValueError(f"wd_mode must be one of {', '.join(WD_MODES)}, got {self.wd_mode!r}")
        if self.batch_rule not in BATCH_RULES:
            raise ValueError(f"batch_rule must be one of {', '.join(BATCH_RULES)}, got {self.batch_rule!r}")
        edges = tuple(dict.fromkeys(str(e) for e in self.accept_edge))
        bad = [e for e in edges if e not in EDGE_VALUES]
        if bad or isinstance(self.accept_edge, str):
            raise ValueError(f"accept_edge takes a sequence of {', '.join(EDGE_VALUES)}, got {self.accept_edge!r}")
        object.__setattr__(self, "accept_edge", edges)
        if not isinstance(self.published_prior, bool):
            raise ValueError(f"published_prior must be True or False, got {self.published_prior!r}")
        _number("lr_floor", self.lr_floor, high=1.0)
        _number("weight_decay", self.weight_decay)
        _number("decay_fraction", self.decay_fraction, high=1.0)
        _number("warmup_fraction", self.warmup_fraction, high=0.999999)
        _number("warmup_tokens", self.warmup_tokens, open_low=True)
        _number("batch_tokens", self.batch_tokens, open_low=True)
        _number("extrapolation_limit", self.extrapolation_limit, open_low=True)
        for name in ("batch_sequences", "dp_size", "micro_batch"):
            _number(name, getattr(self, name), low=1, integer=True)
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))


@dataclass(frozen=True)
class ProxyPoint:
    """The proxy's measured optimum and the settings of its run that the target keeps."""

    lr: float
    """The proxy's optimal base LR (absolute, at the base width)."""
    lr_interval: tuple[float | None, float | None] | None = None
    """Its interval (an open side is None); None: not measured."""
    batch_tokens: float | None = None
    """The batch (tokens) the LR was tuned at."""
    tokens: float | None = None
    """The token budget the LR was tuned at."""
    tau: float | None = None
    """The tuned proxy's AdamW timescale (a fraction of its run), which the target keeps."""
    weight_decay: float | None = None
    """The tuned proxy's weight decay lambda (None: not tuned); a 0 has no timescale tau,
    and the target keeps 0 rather than a published rule's decay."""
    betas: tuple[float, float] | None = None
    """The tuned proxy's Adam betas; None: (0.9, 0.95). beta2 then follows the target's batch."""
    eps: float | None = None
    """The tuned proxy's Adam eps; None: the card's default."""
    beta2_halflife_tokens: float | None = None
    """beta2's half-life in tokens, which the target keeps; None: the proxy's beta2."""
    role_lr_mults: Mapping[str, float] = field(default_factory=dict)
    """Per-role LR multipliers tuned at the proxy (``input``, ``output``, ``vector``)."""

    def __post_init__(self) -> None:
        _number("proxy lr", self.lr, open_low=True)
        if self.lr is None:
            raise ValueError("proxy lr must be a positive finite number, got None")
        iv = self.lr_interval
        if iv is not None:
            if isinstance(iv, (str, bytes)) or not hasattr(iv, "__len__") or len(iv) != 2:
                raise ValueError(f"proxy lr_interval must be a pair [lo, hi] (None for an open side), got {iv!r}")
            for v in iv:
                _number("proxy lr_interval", v, open_low=True)
            object.__setattr__(self, "lr_interval", tuple(iv))
        _number("proxy batch_tokens", self.batch_tokens, open_low=True)
        _number("proxy tokens", self.tokens, open_low=True)
        _number("proxy tau", self.tau, open_low=True)
        _number("proxy weight_decay", self.weight_decay)
        _number("proxy eps", self.eps, open_low=True)
        _number("proxy beta2_halflife_tokens", self.beta2_halflife_tokens, open_low=True)
        if self.betas is not None:
            b = self.betas
            if isinstance(b, (str, bytes)) or not hasattr(b, "__len__") or len(b) != 2:
                raise ValueError(f"proxy betas must be a pair (beta1, beta2), got {b!r}")
            for v in b:
                _number("proxy betas", v, high=0.999999)
            object.__setattr__(self, "betas", (float(b[0]), float(b[1])))
        mults = self.role_lr_mults
        if mults is not None and not isinstance(mults, Mapping):
            raise TypeError(f"proxy role_lr_mults must be a mapping of role -> LR multiplier, got {mults!r}")
        for role, v in (mults or {}).items():
            _number(f"proxy role_lr_mults[{role!r}]", v, open_low=True)
        object.__setattr__(self, "role_lr_mults", dict(mults or {}))
