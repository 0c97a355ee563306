"""The AdamW timescale ``tau = B/(eta·lambda·D)`` and its inverse, the weight decay for a tau.

Batches ``B`` and budgets ``D`` in the same unit (tokens, or sequences); the ratio is unit-free.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["PUBLISHED_ETA_LAMBDA", "PUBLISHED_ETA_LAMBDA_SOURCE", "TAU_RULE", "tau_from", "weight_decay_for"]

#: Per-step decay eta·lambda of published 1B-7B pre-training recipes (peak LR × AdamW
#: weight decay): OLMo-1B 4e-4 × 0.1 (Groeneveld et al. 2024), TinyLlama 4e-4 × 0.1
#: (Zhang et al. 2024), DeepSeek LLM 7B 4.2e-4 × 0.1 (DeepSeek-AI 2024). A card whose
#: sweep did not optimise the weight decay (one lambda, so its tau says nothing about the
#: best tau) takes this instead, and says so.
PUBLISHED_ETA_LAMBDA = 4e-5
PUBLISHED_ETA_LAMBDA_SOURCE = ("published per-step eta·lambda 4e-5 (OLMo-1B 4e-4 × 0.1, TinyLlama 4e-4 × 0.1, "
                               "DeepSeek LLM 7B 4.2e-4 × 0.1)")

#: The rule that carries a weight decay to a run of another length, and its evidence:
#: ``benchmarks/wd_horizon.py`` (``results/wd_horizon.json``) scanned lambda on the card
#: benchmark's proxy at 2^15 and 2^17 tokens (256 and 1,024 steps, batch 8 x 16, 4 seeds,
#: each horizon at its own best LR): the best per-step eta·lambda fell 0.097x [0.030, 0.475]
#: (90%, paired seed bootstrap) at the 4x longer run, which holds tau's 0.25x and excludes
#: eta·lambda per step's 1x; at the long run tau's prediction cost 0.9998x the best loss and
#: eta·lambda per step's 1.0091x.
TAU_RULE = ("tau held as a fraction of the run (Wang & Aitchison 2024): on a 4x longer run the best per-step "
            "eta·lambda fell 0.097x [0.030, 0.475], holding tau's 0.25x, not eta·lambda per step's 1x "
            "(benchmarks/results/wd_horizon.json)")


def _arr(v: Any, name: str, *, zero_ok: bool = False) -> np.ndarray:
    a = np.asarray(v, dtype=float)
    bad = ~np.isfinite(a) | ((a < 0) if zero_ok else (a <= 0))
    if np.any(bad):
        raise ValueError(f"{name} must be finite and {'>= 0' if zero_ok else '> 0'}, "
                         f"got {a[bad].ravel()[0]!r}.")
    return a


def _out(a: np.ndarray) -> Any:
    return float(a) if a.ndim == 0 else a


def tau_from(batch: Any, lr: Any, weight_decay: Any, tokens: Any) -> Any:
    """AdamW timescale as a fraction of training: ``tau = B / (eta · lambda · D)``.

    AdamW's decoupled decay makes the weights an exponential moving average of recent
    updates with time constant ``1/(eta·lambda)`` iterations (Wang & Aitchison 2024, "How
    to set AdamW's weight decay as you scale model and dataset size"); over ``S = D/B``
    steps that is ``tau = B/(eta·lambda·D)`` of the run (Bergsma et al. 2025, "Power
    Lines: Scaling Laws for Weight Decay and Batch Size in LLM Pre-training", their
    ``tau_EMA``, defined in the abstract and §2). ``B`` and ``D`` must be in the same unit
    (both tokens or both sequences; the ratio is unit-free). ``weight_decay`` is the
    PyTorch AdamW ``weight_decay`` (decoupled, multiplied by the LR). Scalars give a
    float, arrays an array; ``weight_decay = 0`` gives ``inf``.
    """
    b, e, d = _arr(batch, "batch"), _arr(lr, "lr"), _arr(tokens, "tokens")
    lam = _arr(weight_decay, "weight_decay", zero_ok=True)
    with np.errstate(divide="ignore"):
        return _out(b / (e * lam * d))


def weight_decay_for(tau: Any, batch: Any, lr: Any, tokens: Any) -> Any:
    """The weight decay that gives timescale ``tau``: ``lambda = B / (eta · tau · D)``.

    The inverse of :func:`tau_from` (Wang & Aitchison 2024; Bergsma et al. 2025, who
    verify that at fixed N and D the optimal lambda grows linearly with B): holding
    ``tau`` fixed, lambda grows linearly with the batch and falls with the LR and budget.
    """
    b, e, d = _arr(batch, "batch"), _arr(lr, "lr"), _arr(tokens, "tokens")
    t = _arr(tau, "tau")
    return _out(b / (e * t * d))

