"""Gradient noise scale ``B_simple = tr(Sigma) / |G|^2`` from two batch sizes.

McCandlish, Kaplan, Amodei & OpenAI Dota Team 2018, "An Empirical Model of Large-Batch
Training", Sec. 2.2 and App. A.1. The expected squared norm of a gradient averaged over
``B`` examples is ``E|G_B|^2 = |G|^2 + tr(Sigma) / B`` (``G`` the true gradient,
``Sigma`` the per-example gradient covariance). Measuring ``|G_B|^2`` at two batch sizes
``B_small < B_big`` gives the unbiased estimators (App. A.1, Eqs. A.2-A.3)

    |G|^2     ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)

Each is noisy (and can be negative) on a single step, so each is smoothed by its own
exponential moving average and ``B_simple`` is the ratio of the two averages (the paper
notes the ratio of averages is far less biased than the average of ratios).

Two batch sizes come for free in training:

- gradient accumulation: ``|G_small|^2`` is the squared norm of ONE micro-batch's
  gradient and ``|G_big|^2`` that of the accumulated gradient;
- data parallel: ``|G_small|^2`` is a rank's local gradient before the all-reduce and
  ``|G_big|^2`` the all-reduced one (``B_big = world_size * B_small``). Under DDP take
  the local one inside ``model.no_sync()`` or from a micro-step that does not sync.

The cost is two squared norms per step (:func:`grad_sq_norm`, a fused ``_foreach_norm``),
tiny next to a backward pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

__all__ = ["NoiseScaleEstimator", "grad_sq_norm", "unbiased_estimates"]


def unbiased_estimates(
    g_small_sq: float, g_big_sq: float, b_small: int, b_big: int
) -> tuple[float, float]:
    """Return ``(|G|^2, tr(Sigma))`` estimated from one pair of squared gradient norms.

    ``|G|^2 ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)`` and
    ``tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big)`` (McCandlish et al.
    2018, App. A.1). Both are unbiased; either may be negative on a single pair.
    """
    for name, value in (("b_small", b_small), ("b_big", b_big)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if b_big <= b_small:
        raise ValueError(f"b_big={b_big} must be larger than b_small={b_small}")
    for name, value in (("g_small_sq", g_small_sq), ("g_big_sq", g_big_sq)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite non-negative number, got {value!r}")
    g_sq = (b_big * g_big_sq - b_small * g_small_sq) / (b_big - b_small)
    trace = (g_small_sq - g_big_sq) / (1.0 / b_small - 1.0 / b_big)
    return g_sq, trace


class NoiseScaleEstimator:
    """Running ``B_simple`` from per-step pairs of squared gradient norms.

    ``update(g_small_sq, g_big_sq, b_small, b_big)`` folds one pair into two EMAs (one
    for ``|G|^2``, one for ``tr(Sigma)``, both with decay ``beta`` and the Adam-style
    bias correction ``ema / (1 - beta^n)``) and returns ``tr(Sigma)_ema / |G|^2_ema``, in
    the units of ``b_small`` and ``b_big`` (sequences if they count sequences; multiply
    by the sequence length for tokens). It returns ``None`` while either average is not
    positive, since a ratio of a negative estimate means "not enough data yet".
    Non-finite inputs raise instead of poisoning the averages.

    Default ``beta = 0.99`` (an average over ~100 steps); the estimate is only as steady
    as that window is long compared to the per-step noise.
    """

    def __init__(self, beta: float = 0.99) -> None:
        if not (isinstance(beta, (int, float)) and 0.0 <= beta < 1.0):
            raise ValueError(f"beta must be in [0, 1), got {beta!r}")
        self.beta = float(beta)
        self.n_updates = 0
        self._g_sq = 0.0
        self._trace = 0.0

    def _corrected(self, ema: float) -> float | None:
        if self.n_updates == 0:
            return None
        return ema / (1.0 - self.beta**self.n_updates)

    @property
    def g_sq(self) -> float | None:
        """Bias-corrected EMA of the ``|G|^2`` estimates (``None`` before any update)."""
        return self._corrected(self._g_sq)

    @property
    def trace(self) -> float | None:
        """Bias-corrected EMA of the ``tr(Sigma)`` estimates (``None`` before any update)."""
        return self._corrected(self._trace)

    @property
    def value(self) -> float | None:
        """Current ``B_simple = tr(Sigma) / |G|^2``, or ``None`` if not yet defined."""
        g_sq, trace = self.g_sq, self.trace
        if g_sq is None or trace is None or g_sq <= 0 or trace <= 0:
            return None
        return trace / g_sq

    def update(self, g_small_sq: float, g_big_sq: float, b_small: int, b_big: int) -> float | None:
        """Fold in one step's ``|G_small|^2`` and ``|G_big|^2``; return ``B_simple``."""
        g_sq, trace = unbiased_estimates(g_small_sq, g_big_sq, b_small, b_big)
        self.n_updates += 1
        self._g_sq = self.beta * self._g_sq + (1.0 - self.beta) * g_sq
        self._trace = self.beta * self._trace + (1.0 - self.beta) * trace
        return self.value

    def state_dict(self) -> dict[str, float | int]:
        """The averages and update count, for checkpoints."""
        return {
            "beta": self.beta,
            "n_updates": self.n_updates,
            "g_sq": self._g_sq,
            "trace": self._trace,
        }

    def load_state_dict(self, state: dict[str, float | int]) -> None:
        """Restore from :meth:`state_dict`."""
        try:
            beta, n = float(state["beta"]), int(state["n_updates"])
            g_sq, trace = float(state["g_sq"]), float(state["trace"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"noise-scale state is malformed: {exc!r}") from None
        if not (0.0 <= beta < 1.0 and n >= 0 and math.isfinite(g_sq) and math.isfinite(trace)):
            raise ValueError(f"noise-scale state has invalid values: {state!r}")
        self.beta, self.n_updates, self._g_sq, self._trace = beta, n, g_sq, trace


def grad_sq_norm(
    parameters: torch.nn.Module | Iterable[torch.Tensor], scale: float = 1.0
) -> torch.Tensor:
    """Squared L2 norm of all ``.grad`` tensors, times ``scale**2``, as a 0-dim fp32 tensor.

    Stays on the gradients' device (no host sync: call ``float()`` when the value is
    needed). Parameters without a gradient are skipped. Uses one fused
    ``torch._foreach_norm`` per device and dtype, accumulating in fp32.

    ``scale`` undoes loss scaling for accumulation: when each micro-batch loss is
    divided by ``n_micro`` (the usual way to average), the gradient after the first
    micro-batch's backward is ``g_micro / n_micro``, so pass ``scale=n_micro`` there and
    ``scale=1`` after the last one.
    """
    params = parameters.parameters() if isinstance(parameters, torch.nn.Module) else parameters
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for p in params:
        if p.grad is not None:
            g = p.grad
            if g.is_sparse:
                g = g.coalesce().values()
            groups.setdefault((g.device, g.dtype), []).append(g.detach())
    if not groups:
        raise ValueError("no parameter has a .grad: call backward() before grad_sq_norm")
    home = next(iter(groups))[0]  # sum on the first group's device
    totals = []
    for grads in groups.values():
        # Norms in fp32 even for bf16 grads: B_simple hinges on the small difference
        # |G_small|^2 - |G_big|^2, which bf16 rounding (~0.4%) would swamp.
        try:
            norms = list(torch._foreach_norm(grads, 2, dtype=torch.float32))
        except (AttributeError, TypeError, RuntimeError):  # older torch: same result
            norms = [torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads]
        totals.append(torch.stack(norms).square().sum().to(home))
    return torch.stack(totals).sum() * float(scale) ** 2
