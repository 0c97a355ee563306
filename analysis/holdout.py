"""The held-out audit of a scaling fit: fit without the largest budget (or batch), predict
the optimum there, and compare with the textbook baselines."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ._io import finite_or_none as _num
from ._io import require_columns
from .baselines import scaling_baselines
from .scaling_fit import ScalingLawFit
from .tau import _arr

__all__ = ["AUDIT_CRITERIA", "AUDIT_KEYS", "audit_verdict", "fill_loss_gap", "holdout_audit"]

#: The held-out audit's bar (docs/architecture.md): the predicted LR within 1.3x of the
#: measured optimum, and its loss within 0.25% of the best measured run.
AUDIT_CRITERIA: dict[str, float] = {"lr_ratio": 1.3, "loss_gap": 0.0025}


AUDIT_KEYS = ("method", "axis", "pred_lr", "meas_lr", "lr_ratio", "pred_batch_tokens",
              "meas_batch_tokens", "batch_ratio", "loss_gap")


def holdout_audit(
    df: pd.DataFrame,
    axis: str = "tokens",
    *,
    n_params: float | None = None,
    fit_kwargs: Mapping[str, Any] | None = None,
    columns: Mapping[str, str] | None = None,
    **init: Any,
) -> list[dict[str, Any]]:
    """Fit on all rows but the largest ``axis`` value and predict the optimum there.

    ``axis="tokens"``: hold out the largest budget ``D_h``. Predicted batch
    ``B*(D_h)``; measured batch: the per-budget optimum at ``D_h`` from all its runs.
    The LR is compared at the same batch on both sides — the measured best grid batch
    ``B_g`` at ``D_h`` — so ``lr_ratio = eta*_pred(B_g, D_h) / eta*_meas(B_g, D_h)``
    isolates the LR law's error from the batch law's.

    ``axis="batch_tokens"``: hold out the largest batch ``B_h``; compare the LR at
    ``(B_h, D_max)`` and the batch optimum at ``D_max`` (measured with every batch).

    One row for our fit and one per baseline (anchored at the optimum of the training
    rows), each with the keys of ``AUDIT_KEYS``; ``loss_gap`` is ``None`` until the
    predicted config is run (:func:`fill_loss_gap`). ``init`` goes to
    :class:`ScalingLawFit`, ``fit_kwargs`` to its ``fit``; ``n_params`` (or a single
    ``n_params`` column value) enables the DeepSeek and Step Law LRs.
    """
    if axis not in ("tokens", "batch_tokens"):
        raise ValueError(f"axis must be 'tokens' or 'batch_tokens', got {axis!r}.")
    fk = dict(fit_kwargs or {})
    cols = {"lr": fk.get("lr", "lr"), "batch_tokens": fk.get("batch", "batch_tokens"),
            "tokens": fk.get("tokens", "tokens")}
    cols.update(columns or {})
    col = cols[axis]
    require_columns(df, [col], "scaling sweep")
    vals = np.unique(pd.to_numeric(df[col], errors="coerce").dropna().to_numpy(dtype=float))
    if vals.size < 4:
        raise ValueError(f"a held-out audit on {axis!r} needs at least 4 distinct values "
                         f"(3 to fit, 1 held out), got {vals.size}.")
    held = float(vals.max())
    train = df[pd.to_numeric(df[col], errors="coerce") < held]
    full = ScalingLawFit(**{**init, "n_boot": 0}).fit(df, **fk)
    fit = ScalingLawFit(**init).fit(train, **fk)
    if n_params is None:
        n_params = full.measured_.get("n_params")
    cells = full.cells_
    if axis == "tokens":
        d = held
        at = cells[cells["tokens"] == d]
        b_g = float(at.loc[at["loss_opt"].idxmin(), "batch_tokens"])
        meas_batch = float(full.budgets_.loc[full.budgets_["tokens"] == d, "batch_opt"].iloc[0])
        pred_batch = float(fit.predict_batch(d)[0])
    else:
        d = float(full.measured_["tokens"][1])
        b_g = held
        at = cells[(cells["tokens"] == d) & (cells["batch_tokens"] == b_g)]
        if at.empty:
            raise ValueError(f"no runs at batch {b_g:g} and the largest budget {d:g}; the "
                             "audit compares the LR there.")
        meas_batch = float(full.budgets_.loc[full.budgets_["tokens"] == d, "batch_opt"].iloc[0])
        pred_batch = float(fit.predict_batch(d)[0])
    meas_lr = float(cells.loc[(cells["tokens"] == d) & (cells["batch_tokens"] == b_g),
                              "lr_opt"].iloc[0])
    pred_lr = float(fit.predict_lr(b_g, d)[0])
    ref = fit.reference_
    rows = [_audit_row("ours", axis, pred_lr, meas_lr, pred_batch, meas_batch)]
    base = scaling_baselines(tokens=d, batch_tokens=b_g, ref_lr=ref["lr"],
                             ref_batch_tokens=ref["batch_tokens"], ref_tokens=ref["tokens"],
                             n_params=n_params)
    # The LR–batch rules do not say which batch to use: they get ours.
    for name in ("sqrt_rule", "linear_rule"):
        base[name]["batch_tokens"] = pred_batch
    # Power Lines' LR rule is eta ∝ sqrt(B); every LR is compared at the same batch B_g.
    base["power_lines"]["lr"] = ref["lr"] * math.sqrt(b_g / ref["batch_tokens"])
    for name, b in base.items():
        rows.append(_audit_row(name, axis, b["lr"], meas_lr, b["batch_tokens"], meas_batch))
    return rows


def _audit_row(method: str, axis: str, pred_lr: float | None, meas_lr: float,
               pred_b: float | None, meas_b: float) -> dict[str, Any]:
    return {"method": method, "axis": axis, "pred_lr": _num(pred_lr), "meas_lr": _num(meas_lr),
            "lr_ratio": None if pred_lr is None else _num(pred_lr / meas_lr),
            "pred_batch_tokens": _num(pred_b), "meas_batch_tokens": _num(meas_b),
            "batch_ratio": None if pred_b is None else _num(pred_b / meas_b),
            "loss_gap": None}


def fill_loss_gap(rows: Sequence[Mapping[str, Any]], losses: Mapping[str, float],
                  best_loss: float) -> list[dict[str, Any]]:
    """Copies of the audit ``rows`` with ``loss_gap = loss / best_loss − 1`` filled in.

    ``losses`` maps a row's ``method`` to the measured loss of its predicted config at
    the held-out point; ``best_loss`` is the best measured run there. Rows whose method
    is not in ``losses`` keep ``loss_gap = None``.
    """
    best = float(_arr(best_loss, "best_loss"))
    known = {r["method"] for r in rows}
    extra = sorted(set(losses) - known)
    if extra:
        raise ValueError(f"losses name method(s) {extra} that are not in the audit rows "
                         f"{sorted(known)}.")
    out = []
    for r in rows:
        r2 = dict(r)
        if r["method"] in losses:
            v = float(losses[r["method"]])
            if not math.isfinite(v):
                raise ValueError(f"the loss of {r['method']!r} is {v!r}; a diverged run "
                                 "has no loss gap.")
            r2["loss_gap"] = v / best - 1.0
        out.append(r2)
    return out


def audit_verdict(rows: Sequence[Mapping[str, Any]],
                  criteria: Mapping[str, float] = AUDIT_CRITERIA) -> bool | None:
    """The audit's one verdict on its rows of method ``ours`` (the baselines are shown,
    not judged): False when any measured LR ratio lies outside ``1/lr_ratio .. lr_ratio``
    or any measured loss gap (loss / best - 1) exceeds ``loss_gap``; True when every row of
    ours has both measured and within; None when nothing of ours was audited or something
    is unmeasured and nothing failed (e.g. an LR 1.1x off whose loss was never trained).
    """
    ours = [r for r in rows if r.get("method") == "ours"]
    lim, gap = float(criteria["lr_ratio"]), float(criteria["loss_gap"])
    unmeasured = not ours
    for r in ours:
        ratio, loss_gap = r.get("lr_ratio"), r.get("loss_gap")
        if ratio is not None and max(float(ratio), 1.0 / float(ratio)) > lim:
            return False
        if loss_gap is not None and float(loss_gap) > gap:
            return False
        unmeasured = unmeasured or ratio is None or loss_gap is None
    return None if unmeasured else True
