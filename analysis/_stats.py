"""Small statistics helpers shared by the fits (bootstrap intervals, RNG handling)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


def make_rng(random_state: int | np.random.Generator | None) -> np.random.Generator:
    """A NumPy Generator from a seed, an existing Generator, or ``None`` (fresh entropy)."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    return np.random.default_rng(random_state)


def check_level(level: float, name: str = "level") -> float:
    """Validate a two-sided interval level in (0, 1)."""
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {level!r}.")
    return float(level)


def check_n_boot(n_boot: int) -> int:
    if int(n_boot) != n_boot or n_boot < 0:
        raise ValueError(f"n_boot must be a non-negative integer, got {n_boot!r}.")
    return int(n_boot)


def percentile_interval(samples: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval along axis 0 (equal tails).

    A replicate may be infinite (a critical batch B_crit = E_min/S_min whose S_min fit to
    0): interpolating next to it gives inf·0 = NaN, so there the order statistic on that
    side is taken instead, and the bound is ±inf (that side is unbounded), never NaN."""
    tail = 100.0 * (1.0 - level) / 2.0
    q = [tail, 100.0 - tail]
    with np.errstate(invalid="ignore"):
        lo, hi = np.percentile(samples, q, axis=0)
    if np.isnan(lo).any() or np.isnan(hi).any():
        lo_o = np.percentile(samples, tail, axis=0, method="lower")
        hi_o = np.percentile(samples, 100.0 - tail, axis=0, method="higher")
        lo, hi = np.where(np.isnan(lo), lo_o, lo), np.where(np.isnan(hi), hi_o, hi)
    return lo, hi


@dataclass(frozen=True)
class SeedSpread:
    """Leave-one-seed-out (LOSO) spread of one fitted value.

    The fit is repeated once per seed the table holds, each time without that seed's
    runs (every other step unchanged: the same seed averaging, window and edge rules),
    and ``values[i]`` is the refit value without ``seeds[i]``. For a positive value
    (``log_scale``: an optimal LR, a batch, a coefficient) the spread is the ratio
    ``max / min`` of the refits (1.0: no seed moves it; 2.0: dropping one seed moves it
    by an octave), also given in octaves, ``log2(max / min)``; for a signed value (an
    exponent) it is ``max − min``. Refits that could not be made (too few points left
    without that seed) are left out and counted in ``n_failed``. It measures how much
    one seed's noise moves the estimate, which is what a machine with other float
    rounding changes too; it is not a confidence interval.
    """

    name: str
    """what was refitted, e.g. ``"lr"`` or ``"lr_exp_tokens"``."""
    seeds: tuple[Any, ...]
    """the left-out seed of each refit (the seeds of the table, in sorted order)."""
    values: tuple[float, ...]
    """the refit value without each seed of ``seeds`` (same order)."""
    log_scale: bool = True
    """True: a positive value, spread as a ratio; False: a signed value, spread as max − min."""
    n_failed: int = 0
    """refits that were not possible (too few points without that seed)."""

    @property
    def ratio(self) -> float | None:
        """``max / min`` of the refits of a positive value; None with fewer than 2 refits."""
        if not self.log_scale or len(self.values) < 2:
            return None
        return float(max(self.values) / min(self.values))

    @property
    def octaves(self) -> float | None:
        r = self.ratio
        return None if r is None else float(math.log2(r))

    @property
    def spread(self) -> float | None:
        """``max − min`` of the refits; None with fewer than 2 refits."""
        if len(self.values) < 2:
            return None
        return float(max(self.values) - min(self.values))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": "leave-one-seed-out", "n_seeds": len(self.seeds) + self.n_failed,
                               "left_out": {str(s): float(v) for s, v in zip(self.seeds, self.values,
                                                                            strict=True)},
                               "n_failed": int(self.n_failed)}
        if self.log_scale:
            out.update(ratio=self.ratio, octaves=self.octaves)
        else:
            out["spread"] = self.spread
        return out


def seed_spread(name: str, refits: Mapping[Any, float | None], *, log_scale: bool = True
                ) -> SeedSpread:
    """A :class:`SeedSpread` from ``{left-out seed: refit value or None (not possible)}``."""
    ok = {s: float(v) for s, v in refits.items() if v is not None and math.isfinite(v)}
    keys = sorted(ok, key=lambda s: (str(type(s)), s))
    return SeedSpread(name, tuple(keys), tuple(ok[k] for k in keys), log_scale,
                      n_failed=len(refits) - len(ok))
