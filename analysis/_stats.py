"""Small statistics helpers shared by the fits (bootstrap intervals, RNG handling)."""

from __future__ import annotations

import numpy as np


def make_rng(random_state: int | np.random.Generator | None) -> np.random.Generator:
    """A NumPy Generator from a seed, an existing Generator, or ``None`` (fresh entropy)."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    return np.random.default_rng(random_state)


def check_level(level: float, name: str = "ci") -> float:
    """Validate a two-sided interval level in (0, 1)."""
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {level!r}.")
    return float(level)


def check_n_boot(n_boot: int) -> int:
    if int(n_boot) != n_boot or n_boot < 0:
        raise ValueError(f"n_boot must be a non-negative integer, got {n_boot!r}.")
    return int(n_boot)


def percentile_interval(samples: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval along axis 0 (equal tails)."""
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(samples, [tail, 100.0 - tail], axis=0)
    return lo, hi
