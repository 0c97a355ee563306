"""Textbook LR and batch-size rules, shown beside a fitted scaling law for comparison.

Every rule returns ``{"lr": float | None, "batch_tokens": float | None, "source": str}``
(``None`` where the rule needs an input that was not given, e.g. a model size). Batches
are in tokens throughout. Two kinds of rule:

* anchored rules move the proxy's measured optimum ``(ref_lr, ref_batch_tokens,
  ref_tokens)`` to the target (sqrt and linear LR–batch rules, Power Lines);
* absolute laws fitted by others on their own set-ups (DeepSeek LLM, Step Law), applied
  as published. On a small CPU proxy they are far outside their fitted range; they are
  here to show how far off a borrowed law can be, never to replace a fit.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "DEEPSEEK_LLM",
    "POWER_LINES_BATCH_EXPONENT",
    "STEP_LAW",
    "DEEPSEEK_DATA",
    "anchored_published_batch",
    "deepseek_batch_in_tokens",
    "deepseek_llm",
    "published_batch",
    "linear_rule",
    "power_lines",
    "scaling_baselines",
    "sqrt_rule",
    "step_law",
]

#: DeepSeek-AI 2024 ("DeepSeek LLM: Scaling Open-Source Language Models with
#: Longtermism", §3.1, eq. 1): eta_opt = 0.3118 · C^-0.1250, B_opt = 0.2920 · C^0.3271,
#: C the compute budget in FLOPs, B in tokens.
DEEPSEEK_LLM = {"lr_coef": 0.3118, "lr_exp": -0.1250, "batch_coef": 0.2920, "batch_exp": 0.3271}

#: DeepSeek-AI 2024 (§3.2, eq. 4): the compute-optimal data D_opt = 5.8316 · C^0.4757 tokens.
#: Through it eq. 1's B_opt(C) becomes a law in the token budget:
#: B = 0.2920 · (D / 5.8316)^(0.3271 / 0.4757) = 0.0869 · D^0.6876 tokens.
DEEPSEEK_DATA = {"coef": 5.8316, "exp": 0.4757}

#: Li et al. 2025 ("Predictable Scale: Part I — Optimal Hyperparameter Scaling Law in
#: Large Language Model Pretraining", Step Law, §3): eta(N, D) = 1.79 · N^-0.713 ·
#: D^0.307, B(D) = 0.58 · D^0.571, N non-embedding parameters, D tokens, B in tokens.
STEP_LAW = {"lr_coef": 1.79, "lr_exp_n": -0.713, "lr_exp_d": 0.307,
            "batch_coef": 0.58, "batch_exp_d": 0.571}

#: Bergsma et al. 2025 ("Power Lines: Scaling Laws for Weight Decay and Batch Size in LLM
#: Pre-training", fig. 1): B_opt grows as a power of the token budget D alone,
#: independent of model size N; exponent about 0.38 (override where a closer value is
#: known: it only sets how fast the anchored batch grows).
POWER_LINES_BATCH_EXPONENT = 0.38


def _pos(name: str, v: Any) -> float:
    f = float(v)
    if not (math.isfinite(f) and f > 0):
        raise ValueError(f"{name}={v!r} must be a finite number > 0.")
    return f


def sqrt_rule(batch_tokens: float, ref_lr: float, ref_batch_tokens: float) -> dict[str, Any]:
    """``eta = eta0 · sqrt(B / B0)`` at the given batch ``B`` (square-root rule for Adam).

    Malladi et al. 2022 ("On the SDEs and Scaling Rules for Adaptive Gradient
    Algorithms", §4, the square-root scaling rule); ``(eta0, B0)`` is the proxy optimum.
    """
    b = _pos("batch_tokens", batch_tokens)
    lr = _pos("ref_lr", ref_lr) * math.sqrt(b / _pos("ref_batch_tokens", ref_batch_tokens))
    return {"lr": lr, "batch_tokens": b, "source": "sqrt rule: lr0·sqrt(B/B0) (Malladi et al. 2022)"}


def linear_rule(batch_tokens: float, ref_lr: float, ref_batch_tokens: float) -> dict[str, Any]:
    """``eta = eta0 · B / B0`` (linear scaling rule for SGD; Goyal et al. 2017, §2.1)."""
    b = _pos("batch_tokens", batch_tokens)
    lr = _pos("ref_lr", ref_lr) * b / _pos("ref_batch_tokens", ref_batch_tokens)
    return {"lr": lr, "batch_tokens": b, "source": "linear rule: lr0·B/B0 (Goyal et al. 2017)"}


def deepseek_llm(compute: float | None) -> dict[str, Any]:
    """DeepSeek LLM's laws: ``eta = 0.3118·C^-0.125``, ``B = 0.2920·C^0.3271`` tokens.

    ``compute`` in FLOPs. DeepSeek-AI 2024 use C = M·D with M the non-embedding FLOPs
    per token; with only a parameter count, ``C = 6·N·D`` (Kaplan et al. 2020, §2.1) is
    the usual stand-in.
    """
    src = "DeepSeek LLM: lr = 0.3118·C^-0.125, B = 0.2920·C^0.3271 (Bi et al. 2024, eq. 1)"
    if compute is None:
        return {"lr": None, "batch_tokens": None, "source": src + " — needs n_params"}
    c = _pos("compute", compute)
    p = DEEPSEEK_LLM
    return {"lr": p["lr_coef"] * c ** p["lr_exp"],
            "batch_tokens": p["batch_coef"] * c ** p["batch_exp"], "source": src}


def deepseek_batch_in_tokens(tokens: float) -> dict[str, Any]:
    """DeepSeek LLM's optimal batch written in the token budget ``D``:
    ``B = 0.2920 · C(D)^0.3271`` with ``C(D) = (D / 5.8316)^(1 / 0.4757)``, the compute
    whose optimal data is ``D`` (Bi et al. 2024, eqs. 1 and 4), i.e. ``B = 0.0869 ·
    D^0.6876`` tokens.

    DeepSeek fitted B(C) along its compute-optimal frontier (about 20 tokens per
    parameter), where ``C = 6·N·D`` and ``C(D)`` agree. Off the frontier they part: at 0.2
    tokens per parameter ``6·N·D`` is 100x the compute a run of D tokens would have on the
    frontier, and B(6·N·D) is 4.5x this. Step Law, Power Lines and Zhang et al. 2024 find
    the optimal batch follows D, not N, so this is the form used off the frontier.
    """
    d = _pos("tokens", tokens)
    c = (d / DEEPSEEK_DATA["coef"]) ** (1.0 / DEEPSEEK_DATA["exp"])
    return {"lr": None, "batch_tokens": DEEPSEEK_LLM["batch_coef"] * c ** DEEPSEEK_LLM["batch_exp"],
            "source": "DeepSeek LLM's B_opt = 0.2920·C^0.3271 at C = (D/5.8316)^(1/0.4757), the compute "
                      "whose optimal data is D (Bi et al. 2024, eqs. 1, 4): B = 0.0869·D^0.6876 tokens"}


def published_batch(tokens: float) -> dict[str, Any]:
    """The published optimal-batch laws in the token budget ``D``, for a target whose batch
    no fit of ours can set: the value is DeepSeek LLM's (:func:`deepseek_batch_in_tokens`;
    on DeepSeek's compute-optimal frontier it equals their B(C), so a run at ~20 tokens
    per parameter gets the batch it always did), and the interval ``[lo, hi]`` spans it
    and Step Law's ``B = 0.58·D^0.571`` tokens (Li et al. 2025): their spread is how much
    the published laws agree. Returns ``{"batch_tokens", "lo", "hi", "laws", "source"}``.
    """
    ds = float(deepseek_batch_in_tokens(tokens)["batch_tokens"])
    sl = float(step_law(None, tokens)["batch_tokens"])
    return {"batch_tokens": ds, "lo": min(ds, sl), "hi": max(ds, sl),
            "laws": {"deepseek_in_tokens": ds, "step_law": sl},
            "source": f"published B(D) at D = {float(tokens):.4g} tokens: DeepSeek LLM in D, 0.0869·D^0.6876 "
                      f"= {ds:.4g} (Bi et al. 2024, eqs. 1, 4); interval to Step Law's 0.58·D^0.571 = "
                      f"{sl:.4g} (Li et al. 2025)"}


def anchored_published_batch(tokens: float, anchor_tokens: float, anchor_batch: float,
                             anchor_lo: float | None = None, anchor_hi: float | None = None
                             ) -> dict[str, Any]:
    """The published laws' growth in the token budget, anchored at the proxy's own
    bracketed optimal batch: ``B = B_a · (D / D_a)^g`` tokens, ``(D_a, B_a)`` the largest
    budget where the proxy's best batch was bracketed.

    The value takes DeepSeek LLM's exponent in D, ``g = 0.3271 / 0.4757 = 0.6876``
    (:func:`deepseek_batch_in_tokens`, Bi et al. 2024, eqs. 1, 4), and the interval spans
    Step Law's ``g = 0.571`` (Li et al. 2025) over the anchor's own interval
    ``[anchor_lo, anchor_hi]``. A published law's exponent is what the papers measured
    across scales; its coefficient also carries their data, tokenizer and context, which
    the proxy's measured B* replaces (the Power Lines practice of anchoring at the proxy,
    Bergsma et al. 2025). Returns ``{"batch_tokens", "lo", "hi", "laws", "source"}``."""
    d, d_a = _pos("tokens", tokens), _pos("anchor_tokens", anchor_tokens)
    b_a = _pos("anchor_batch", anchor_batch)
    lo_a = _pos("anchor_lo", anchor_lo) if anchor_lo is not None else b_a
    hi_a = _pos("anchor_hi", anchor_hi) if anchor_hi is not None else b_a
    g_ds = DEEPSEEK_LLM["batch_exp"] / DEEPSEEK_DATA["exp"]
    g_sl = STEP_LAW["batch_exp_d"]
    r = d / d_a
    ds, sl = b_a * r**g_ds, b_a * r**g_sl
    ends = [b * r**g for b in (lo_a, hi_a) for g in (g_ds, g_sl)]
    return {"batch_tokens": ds, "lo": min(ends), "hi": max(ends),
            "laws": {"deepseek_in_tokens": ds, "step_law": sl},
            "anchor": {"tokens": d_a, "batch_tokens": b_a, "lo": lo_a, "hi": hi_a},
            "source": f"the proxy's bracketed B* {b_a:.4g} tokens at D {d_a:.4g} grown as the published "
                      f"laws grow in D: DeepSeek LLM's D^{g_ds:.4g} (Bi et al. 2024, eqs. 1, 4) = {ds:.4g}; "
                      f"interval to Step Law's D^{g_sl:.4g} (Li et al. 2025) over B*'s interval "
                      f"[{lo_a:.4g}, {hi_a:.4g}]"}


def step_law(n_params: float | None, tokens: float) -> dict[str, Any]:
    """Step Law: ``eta = 1.79·N^-0.713·D^0.307``, ``B = 0.58·D^0.571`` tokens (Li et al. 2025)."""
    d = _pos("tokens", tokens)
    p = STEP_LAW
    src = "Step Law: lr = 1.79·N^-0.713·D^0.307, B = 0.58·D^0.571 (Li et al. 2025)"
    lr = None
    if n_params is not None:
        lr = p["lr_coef"] * _pos("n_params", n_params) ** p["lr_exp_n"] * d ** p["lr_exp_d"]
    return {"lr": lr, "batch_tokens": p["batch_coef"] * d ** p["batch_exp_d"],
            "source": src if lr is not None else src + " — lr needs n_params"}


def power_lines(tokens: float, ref_lr: float, ref_batch_tokens: float, ref_tokens: float,
                exponent: float = POWER_LINES_BATCH_EXPONENT) -> dict[str, Any]:
    """Power Lines' batch rule anchored at the proxy, with the square-root LR rule.

    ``B = B0 · (D / D0)^0.38`` (Bergsma et al. 2025: B_opt is a power law in D alone)
    and ``eta = eta0 · sqrt(B / B0)``, where ``(eta0, B0)`` is the proxy's optimum at
    budget ``D0``.
    """
    d = _pos("tokens", tokens)
    b0 = _pos("ref_batch_tokens", ref_batch_tokens)
    b = b0 * (d / _pos("ref_tokens", ref_tokens)) ** float(exponent)
    lr = _pos("ref_lr", ref_lr) * math.sqrt(b / b0)
    return {"lr": lr, "batch_tokens": b,
            "source": f"Power Lines: B = B0·(D/D0)^{exponent:g}, lr = lr0·sqrt(B/B0) "
                      "(Bergsma et al. 2025)"}


def scaling_baselines(
    *,
    tokens: float,
    batch_tokens: float,
    ref_lr: float,
    ref_batch_tokens: float,
    ref_tokens: float,
    n_params: float | None = None,
    power_lines_exponent: float = POWER_LINES_BATCH_EXPONENT,
) -> dict[str, dict[str, Any]]:
    """All five baselines at a target budget ``tokens`` (and batch, for the LR–batch rules).

    ``batch_tokens`` is the batch the sqrt and linear rules are evaluated at (normally
    the projected batch, since those rules only say how the LR follows the batch).
    ``n_params`` (non-embedding, ideally) enables DeepSeek LLM (via ``C = 6·N·D``) and
    Step Law's LR; without it those entries hold ``None``.
    """
    compute = None if n_params is None else 6.0 * _pos("n_params", n_params) * _pos("tokens", tokens)
    return {
        "sqrt_rule": sqrt_rule(batch_tokens, ref_lr, ref_batch_tokens),
        "linear_rule": linear_rule(batch_tokens, ref_lr, ref_batch_tokens),
        "deepseek": deepseek_llm(compute),
        "step_law": step_law(n_params, tokens),
        "power_lines": power_lines(tokens, ref_lr, ref_batch_tokens, ref_tokens,
                                   power_lines_exponent),
    }
