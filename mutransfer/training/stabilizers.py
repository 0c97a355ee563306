"""Training stabilizers: grad-norm clipping, loss-spike detection, divergence detection.

- Global gradient-norm clipping (Pascanu et al. 2013, "On the difficulty of training
  recurrent neural networks", Alg. 2): if |g| > c, g <- g * c / |g|. The norm before
  clipping is returned so it can be logged.
- Loss spikes are found with robust running statistics over a window of recent losses:
  the median and the median absolute deviation, scaled by 1.4826 so that it estimates the
  standard deviation of Gaussian data (Hampel 1974; Rousseeuw & Croux 1993). A loss more
  than ``threshold`` robust standard deviations above the median is a spike. Median/MAD
  ignore the spikes themselves, so one spike does not hide the next (a mean/std window
  would be inflated by it).
- Divergence: a non-finite loss, or a loss above a bound, ends the run. It is reported
  (``diverged=True``), never raised, so a sweep keeps going.

What to do about a spike (``log`` / ``skip`` / ``rollback``) is the trainer's business;
see :mod:`mutransfer.training.train`. ``rollback`` follows PaLM (Chowdhery et al. 2022, §5.1):
restart from a checkpoint ~100 steps before the spike and skip the data batches around it.
"""

from __future__ import annotations

import math
import typing
from collections import deque
from collections.abc import Iterable
from typing import Any, Literal

import torch

from mutransfer.training.noise_scale import grad_sq_norm

__all__ = [
    "MAD_TO_SIGMA",
    "SPIKE_POLICIES",
    "SpikeDetector",
    "clip_grad_norm",
    "divergence_bound",
    "is_diverged",
    "robust_stats",
]

SpikePolicy = Literal["off", "log", "skip", "rollback"]
SPIKE_POLICIES: tuple[str, ...] = typing.get_args(SpikePolicy)
# 1 / Phi^-1(3/4): MAD * 1.4826 estimates sigma for normal data (Rousseeuw & Croux 1993).
MAD_TO_SIGMA = 1.4826


def robust_stats(values: Iterable[float]) -> tuple[float, float]:
    """(median, 1.4826 * MAD) of ``values`` (MAD = median of |x - median|)."""
    xs = sorted(float(v) for v in values)
    if not xs:
        raise ValueError("robust_stats needs at least one value")

    def median(s: list[float]) -> float:
        n = len(s)
        return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])

    med = median(xs)
    mad = median(sorted(abs(x - med) for x in xs))
    return med, MAD_TO_SIGMA * mad


class SpikeDetector:
    """Flags a loss that sits far above the recent ones.

    ``is_spike(loss)`` is True when at least ``min_history`` accepted losses are in the
    window and ``(loss - median) / max(sigma, rel_floor * |median|) > threshold``, with
    ``median, sigma = robust_stats(window)``. Only accepted (non-spike) losses enter the
    window (:meth:`update`), so a run of spikes keeps being flagged. ``rel_floor`` keeps a
    nearly flat window (sigma ~ 0) from flagging noise-level bumps.
    """

    def __init__(self, window: int = 50, threshold: float = 6.0, min_history: int = 10,
                 rel_floor: float = 0.01) -> None:
        if not (isinstance(window, int) and window >= 2):
            raise ValueError(f"spike window must be an integer >= 2, got {window!r}")
        if not (isinstance(min_history, int) and 2 <= min_history <= window):
            raise ValueError(f"spike min_history must be in [2, window={window}], got {min_history!r}")
        if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold > 0):
            raise ValueError(f"spike threshold must be a positive number, got {threshold!r}")
        self.window, self.threshold = window, float(threshold)
        self.min_history, self.rel_floor = min_history, float(rel_floor)
        self.losses: deque[float] = deque(maxlen=window)

    def score(self, loss: float) -> float | None:
        """Robust z-score of ``loss`` against the window, or None with too little history."""
        if len(self.losses) < self.min_history or not math.isfinite(loss):
            return None
        med, sigma = robust_stats(self.losses)
        return (loss - med) / max(sigma, self.rel_floor * abs(med), 1e-12)

    def is_spike(self, loss: float) -> bool:
        """Whether ``loss`` is a spike (does not add it to the window)."""
        z = self.score(loss)
        return z is not None and z > self.threshold

    def update(self, loss: float) -> None:
        """Add an accepted loss to the window (non-finite values are ignored)."""
        if math.isfinite(loss):
            self.losses.append(float(loss))

    def state_dict(self) -> dict[str, Any]:
        """The window, for checkpoints."""
        return {"losses": list(self.losses)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the window from :meth:`state_dict`."""
        self.losses = deque((float(x) for x in state.get("losses", [])), maxlen=self.window)


def clip_grad_norm(parameters: Iterable[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """Global L2 gradient norm (before clipping), clipping it to ``max_norm`` when given.

    One fused norm (:func:`mutransfer.training.noise_scale.grad_sq_norm`), then the scale-down of
    ``torch.nn.utils.clip_grads_with_norm_`` so the norm is not computed twice. Returns
    a 0-dim tensor (no host sync here).
    """
    params = [p for p in parameters if p.grad is not None]
    total = grad_sq_norm(params).sqrt()
    if max_norm is not None and max_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


def divergence_bound(factor: float, vocab_size: int, initial_loss: float | None) -> float:
    """Loss above which a run counts as diverged: ``factor * max(ln V, initial loss)``.

    ln V is the loss of the uniform predictor, which any run starts near; a loss several
    times that is a runaway, not a spike worth waiting out.
    """
    ref = math.log(vocab_size)
    if initial_loss is not None and math.isfinite(initial_loss):
        ref = max(ref, initial_loss)
    return factor * ref


def is_diverged(loss: float, bound: float) -> bool:
    """A non-finite loss, or one above ``bound``."""
    return not math.isfinite(loss) or loss > bound
