"""The LR law's second form in batch: the Adam "surge", and the choice between the two forms.

The power law ``eta*(B, D) = c·B^a·D^b`` (:class:`~analysis.ScalingLawFit`) rises with B
without end. For Adam-style optimizers the optimal LR rises with batch, peaks and then
falls (Li et al. 2024, "Surge Phenomenon in Optimal Learning Rate and Batch Size
Scaling", NeurIPS 2024, arXiv:2405.14578, §3, the optimal LR of sign-of-gradient updates;
its peak at B_peak = B_noise; the equation's number was not checked here: the stored
copies reachable when this was written held the abstract and summaries only):

    eta*(B) = 2·eta_max / (sqrt(B_peak / B) + sqrt(B / B_peak)),   B_peak ∝ B_noise,

i.e. ``ln eta* = ln eta_max − ln cosh(½·ln(B / B_peak))``: slope +½ in ln B well below
the peak, −½ well above it. The paper shows B_peak moving to larger batches as training
goes on, so per budget D both are power laws in D here:

    ln eta_max(D) = m0 + m1·ln D,   ln B_peak(D) = p0 + p1·ln D       (4 coefficients).

Why B_peak(D) is free and not tied to the fitted loss-optimal batch B*(D): on the sweeps
this fits (4–6 batches per budget, 3–4 budgets) B*(D) is often a bound at the batch grid's
edge (4 of 4 budgets on the demo's sweep), and tying the peak to it would carry that bias
into the LR; the peak's own shift between budgets identifies p1 wherever the data show a
peak, and where they show none the form is not chosen (:func:`choose_form`).

Both forms are fitted to the same per-cell optima; :func:`choose_form` keeps the one whose
leave-one-batch-out prediction of ln eta* is better (every batch left out in turn, both
forms refitted on the rest), and takes the surge only where the data show a peak: at some
budget the fitted B_peak lies at or above the smallest measured batch and at least one
octave below the largest, so measured cells lie past it. Its band, like the power law's,
is the bootstrap of the coefficients plus the law's misfit (:func:`surge_misfit`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._stats import percentile_interval

__all__ = ["FORMS", "choose_form", "fit_lr_form", "fit_surge", "peak_shown", "power_choice", "surge_boot",
           "surge_grad", "surge_log_lr", "surge_misfit"]

FORMS = ("power", "surge")
#: how far (natural log) the peak may be placed outside the measured batches in the search:
#: 6 octaves. A peak pushed to this bound means the data show none.
_PEAK_MARGIN = 6 * math.log(2.0)


def surge_log_lr(theta: np.ndarray, log_b: np.ndarray, log_d: np.ndarray) -> np.ndarray:
    """``ln eta*(B, D) = m0 + m1·ln D − ln cosh(½(ln B − p0 − p1·ln D))`` for
    ``theta = (m0, m1, p0, p1)`` (see the module docstring)."""
    z = 0.5 * (log_b - theta[2] - theta[3] * log_d)
    # ln cosh z = |z| + ln(1 + e^{-2|z|}) − ln 2, stable for large |z|
    lncosh = np.abs(z) + np.log1p(np.exp(-2.0 * np.abs(z))) - math.log(2.0)
    return theta[0] + theta[1] * log_d - lncosh


def surge_grad(theta: np.ndarray, log_b: np.ndarray, log_d: np.ndarray) -> np.ndarray:
    """Rows ``∂ ln eta* / ∂(m0, m1, p0, p1)`` at each point: shape ``(n, 4)``."""
    log_b, log_d = np.broadcast_arrays(np.asarray(log_b, float), np.asarray(log_d, float))
    h = 0.5 * np.tanh(0.5 * (log_b - theta[2] - theta[3] * log_d))
    return np.column_stack([np.ones(log_b.size), log_d.ravel(), h.ravel(), (h * log_d).ravel()])


def fit_surge(log_b: np.ndarray, log_d: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares ``theta`` of :func:`surge_log_lr` on optima ``y = ln eta*``.

    For a fixed peak law (p0, p1) the model is linear in (m0, m1), so the peak is found by
    a profile search over a grid (peak at the geometric centre of the budgets within the
    measured batches ± 6 octaves, p1 in [−1, 2]) and then polished by
    ``scipy.optimize.least_squares`` inside the same bounds."""
    log_b, log_d, y = (np.asarray(v, dtype=float) for v in (log_b, log_d, y))
    dc = float(np.mean(log_d))
    u = log_d - dc
    lo, hi = float(log_b.min()) - _PEAK_MARGIN, float(log_b.max()) + _PEAK_MARGIN
    X = np.column_stack([np.ones(u.size), u])
    pinv = np.linalg.pinv(X)

    def profile(q0: np.ndarray, q1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = 0.5 * (log_b[None, :] - q0[:, None] - q1[:, None] * u[None, :])
        lncosh = np.abs(z) + np.log1p(np.exp(-2.0 * np.abs(z))) - math.log(2.0)
        target = y[None, :] + lncosh
        m = target @ pinv.T
        r = target - m @ X.T
        return m, np.einsum("ij,ij->i", r, r)

    g0, g1 = np.meshgrid(np.linspace(lo, hi, 97), np.linspace(-1.0, 2.0, 31), indexing="ij")
    m, rss = profile(g0.ravel(), g1.ravel())
    k = int(np.argmin(rss))
    start = np.array([m[k, 0], m[k, 1], g0.ravel()[k], g1.ravel()[k]])
    from scipy.optimize import least_squares

    def resid(t: np.ndarray) -> np.ndarray:
        return surge_log_lr(t, log_b, u) - y

    def jac(t: np.ndarray) -> np.ndarray:
        return surge_grad(t, log_b, u)

    res = least_squares(resid, start, jac=jac, method="trf",
                        bounds=([-np.inf, -np.inf, lo, -1.0], [np.inf, np.inf, hi, 2.0]))
    t = res.x if float(res.cost) * 2 <= float(rss[k]) else start
    # back to ln D itself: m0 − m1·dc, p0 − p1·dc
    return np.array([t[0] - t[1] * dc, t[1], t[2] - t[3] * dc, t[3]])


def surge_misfit(log_b: np.ndarray, log_d: np.ndarray, y: np.ndarray,
                 theta: np.ndarray) -> dict[str, Any]:
    """The surge law's misfit, as :func:`analysis.scaling_fit.lr_misfit` for the power law
    with the Jacobian ``J`` in place of the design: ``s² = Σ r²/(n − 4)`` and
    ``cov_log = s²·(JᵀJ)⁻¹`` (the linearised least-squares covariance, Seber & Wild 1989, §2.1)."""
    n, p = y.size, 4
    if n <= p:
        return {"sd_log": 0.0, "dof": 0, "cov_log": np.zeros((p, p))}
    r = y - surge_log_lr(theta, log_b, log_d)
    s2 = float(r @ r) / (n - p)
    J = surge_grad(theta, log_b, log_d)
    return {"sd_log": math.sqrt(s2), "dof": int(n - p), "cov_log": s2 * np.linalg.pinv(J.T @ J)}


def surge_boot(log_b: np.ndarray, log_d: np.ndarray, y: np.ndarray, theta: np.ndarray,
               Y: np.ndarray) -> np.ndarray:
    """Bootstrap draws of ``theta`` from draws ``Y`` (rows) of the optima, each by one
    Gauss–Newton step from the fit: ``theta + J⁺(y_b − y)`` (exact for a linear law, as the
    power law's ``_ols_many``; a refit of every draw would cost ~1000 nonlinear fits)."""
    if Y.shape[0] == 0:
        return np.empty((0, 4))
    J = surge_grad(theta, log_b, log_d)
    return theta[None, :] + (Y - y[None, :]) @ np.linalg.pinv(J).T


def peak_shown(theta: np.ndarray, log_b: np.ndarray, log_d: np.ndarray) -> bool:
    """Do the data show a peak: at some budget, B_peak(D) at or above the smallest measured
    batch and at least one octave below the largest (measured cells lie past it)?"""
    for d in np.unique(log_d):
        lb = log_b[log_d == d]
        p = theta[2] + theta[3] * d
        if lb.min() <= p <= lb.max() - math.log(2.0):
            return True
    return False


def _power_fit(log_b: np.ndarray, log_d: np.ndarray, y: np.ndarray) -> np.ndarray:
    X = np.column_stack([np.ones(y.size), log_b, log_d])
    return np.linalg.lstsq(X, y, rcond=None)[0]


def choose_form(log_b: np.ndarray, log_d: np.ndarray, y: np.ndarray,
                theta: np.ndarray | None = None) -> dict[str, Any]:
    """Leave-one-batch-out scores of both forms and the chosen one.

    Each distinct batch is left out in turn (all its budgets), both forms are refitted on
    the rest and predict the left-out optima; the score is the root-mean-square error of
    ``log2 eta*`` over all left-out cells (octaves). The surge is chosen when its score is
    lower and the full fit shows a peak (:func:`peak_shown`); else the power law (the
    simpler form, and the one a sweep short of the peak cannot tell from the surge).
    Returns ``{"form", "scores": {form: octaves or None}, "peak_shown", "n_held_out"}``;
    a form with too few points to refit (or fewer than 3 batches) scores None. ``theta``:
    the surge fit on all the points when already made."""
    log_b, log_d, y = (np.asarray(v, dtype=float) for v in (log_b, log_d, y))
    errs: dict[str, list[float]] = {f: [] for f in FORMS}
    ok = {f: True for f in FORMS}
    batches = np.unique(log_b)
    for b in batches:
        train, test = log_b != b, log_b == b
        for form, need in (("power", 4), ("surge", 5)):
            if not ok[form]:
                continue
            if train.sum() < need or np.unique(log_b[train]).size < 2 or np.unique(log_d[train]).size < 2:
                ok[form] = False
                continue
            if form == "power":
                c = _power_fit(log_b[train], log_d[train], y[train])
                pred = c[0] + c[1] * log_b[test] + c[2] * log_d[test]
            else:
                t = fit_surge(log_b[train], log_d[train], y[train])
                pred = surge_log_lr(t, log_b[test], log_d[test])
            errs[form] += list((pred - y[test]) / math.log(2.0))
    scores = {f: (float(np.sqrt(np.mean(np.square(errs[f])))) if ok[f] and batches.size >= 3 and errs[f]
                  else None) for f in FORMS}
    if theta is None and y.size > 4:
        theta = fit_surge(log_b, log_d, y)
    shown = bool(theta is not None and peak_shown(theta, log_b, log_d))
    surge = scores["surge"] is not None and scores["power"] is not None and shown and \
        scores["surge"] < scores["power"]
    return {"form": "surge" if surge else "power", "scores": scores, "peak_shown": shown,
            "n_held_out": int(y.size), "criterion": "leave-one-batch-out RMS error of log2 eta* (octaves)"}


def power_choice(criterion: str) -> dict[str, Any]:
    """The choice record of a fit that keeps the power law without scoring the forms."""
    return {"form": "power", "scores": {f: None for f in FORMS}, "peak_shown": None, "criterion": criterion}


def fit_lr_form(log_b: np.ndarray, log_d: np.ndarray, y: np.ndarray, Y: np.ndarray, *, form: str,
                level: float) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The surge form on the same cell optima as the power law, and the choice between them:
    ``(surge, choice)``. ``surge``: ``coef_log``, ``boot`` (one draw per row of ``Y``, the
    optima's bootstrap draws), ``cov_log``, ``misfit`` and ``ci`` at ``level``; None when
    not fitted. ``choice``: :func:`choose_form`'s record when ``form`` is "auto"; a given
    form is recorded as given (``"surge"`` with too few optima: ValueError)."""
    if form == "power":  # given (a leave-one-seed-out refit of a power-law fit): no second form
        return None, power_choice("given (form='power')")
    surge = None
    if y.size > 4 and np.unique(log_b).size >= 3:
        theta = fit_surge(log_b, log_d, y)
        boot = surge_boot(log_b, log_d, y, theta, Y)
        surge = {"coef_log": theta, "boot": boot,
                 "cov_log": np.cov(boot, rowvar=False) if boot.shape[0] > 2 else np.zeros((4, 4)),
                 "misfit": surge_misfit(log_b, log_d, y, theta)}
        if boot.shape[0] > 2:
            lo, hi = percentile_interval(boot, level)
            surge["ci"] = [[float(a), float(b)] for a, b in zip(lo, hi, strict=True)]
        choice = choose_form(log_b, log_d, y, theta) if form == "auto" else {
            "form": "surge", "scores": {f: None for f in FORMS}, "peak_shown": None}
    else:
        choice = power_choice("too few optima for the surge form (needs 5 over 3 batches)")
    if form != "auto":
        if form == "surge" and surge is None:
            raise ValueError("form='surge' needs at least 5 LR optima over 3 batches; "
                             f"the fit has {y.size} over {np.unique(log_b).size}.")
        choice = {**choice, "form": form, "criterion": f"given (form={form!r})"}
    return surge, choice
