"""Warmup (in tokens) and WSD decay fraction: documented rules, not fitted laws."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .tau import _arr

__all__ = ["ScheduleRules", "warmup_from_section", "whole_warmup_steps"]


def whole_warmup_steps(raw: float, tokens: float, batch_tokens: float, max_fraction: float,
                       min_steps: int) -> float:
    """The warmup rule's last step, shared by every caller: ``raw`` tokens capped at
    ``max_fraction · tokens``, rounded up to whole steps of ``batch_tokens``, at least
    ``min_steps``; in tokens."""
    w = min(raw, max_fraction * tokens)
    return float(max(int(min_steps), math.ceil(w / batch_tokens - 1e-9)) * batch_tokens)


@dataclass(frozen=True)
class ScheduleRules:
    """Warmup (in tokens) and WSD decay fraction: documented rules, not fitted laws.

    Warmup: ``warmup_tokens = per_param · N`` when the model size ``N`` is known (Porian
    et al. 2024, "Resolving Discrepancies in Compute-Optimal Scaling of Language Models",
    who name warmup duration as one cause of the Kaplan–Chinchilla gap and warm up for
    as many tokens as the model has parameters, instead of a fixed step
    count that is far too long for small models), else ``fraction · D``; then capped at
    ``max_fraction · D`` and rounded up to whole steps, at least ``min_steps``.

    Decay: WSD (warmup–stable–decay) with a linear cooldown over the last
    ``decay_fraction`` of the steps; Hägele et al. 2024 ("Scaling Laws and
    Compute-Optimal Training Beyond Fixed Training Durations") find a cooldown of about
    20 % of the steps matches a tuned cosine schedule.
    """

    per_param: float = 1.0
    """warmup tokens per model parameter when ``n_params`` is given (default 1)."""
    fraction: float = 0.01
    """warmup as a fraction of the budget when ``n_params`` is unknown (default 1 %)."""
    max_fraction: float = 0.1
    """warmup never exceeds this fraction of the budget (default 10 %)."""
    min_steps: int = 1
    """at least this many warmup steps (default 1)."""
    decay_fraction: float = 0.2
    """fraction of the steps in the WSD cooldown (default 0.2, Hägele et al. 2024)."""

    def __post_init__(self) -> None:
        for name in ("per_param", "fraction", "max_fraction"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {v!r}.")
        if not 0 < self.decay_fraction < 1:
            raise ValueError(f"decay_fraction must be in (0, 1), got {self.decay_fraction!r}.")
        if int(self.min_steps) != self.min_steps or self.min_steps < 0:
            raise ValueError(f"min_steps must be a non-negative integer, got {self.min_steps!r}.")

    def warmup_tokens(self, tokens: float, batch_tokens: float,
                      n_params: float | None = None) -> float:
        """Warmup length in tokens, a whole number of steps of ``batch_tokens``."""
        d = float(_arr(tokens, "tokens"))
        b = float(_arr(batch_tokens, "batch_tokens"))
        w = self.per_param * float(n_params) if n_params is not None else self.fraction * d
        return whole_warmup_steps(w, d, b, self.max_fraction, int(self.min_steps))

    def source(self, n_params: float | None) -> str:
        base = (f"{self.per_param:g} token(s) per parameter (Porian et al. 2024)"
                if n_params is not None else f"{self.fraction:g} × tokens (rule of thumb)")
        return f"warmup = {base}, at most {self.max_fraction:g} × tokens, whole steps"

    def to_dict(self) -> dict[str, Any]:
        return {"per_param": self.per_param, "fraction": self.fraction,
                "max_fraction": self.max_fraction, "min_steps": int(self.min_steps),
                "decay_fraction": self.decay_fraction}


def warmup_from_section(section: Mapping[str, Any], tokens: float, batch_tokens: float,
                        n_params: float | None, where: str) -> float | None:
    """The warmup of a FIT.json ``warmup`` section, whose fields may be partial (older or
    hand-written fits): ``per_param · N`` tokens when both are known, else
    ``fraction · D``; at most ``max_fraction · D`` (default 1); whole steps, at least
    ``min_steps`` (default 0). None when the section has no rule (Porian et al. 2024)."""
    if not section:
        return None
    vals = {}
    for key, default in (("per_param", None), ("fraction", None), ("max_fraction", 1.0), ("min_steps", 0)):
        v = section.get(key, default)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)
                              or not math.isfinite(v) or v < 0):
            raise ValueError(f"{where}: field warmup.{key} must be a finite number >= 0, got {v!r}")
        vals[key] = v
    if vals["per_param"] is not None and n_params is not None:
        raw = vals["per_param"] * n_params
    elif vals["fraction"] is not None:
        raw = vals["fraction"] * tokens
    else:
        return None
    return whole_warmup_steps(raw, tokens, batch_tokens, vals["max_fraction"], int(vals["min_steps"]))
