"""Loss laws: Chinchilla ``L(N, D) = E + A/N^α + B/D^β`` and ``L(x) = E + A/x^α``.

Both are fitted the way Hoffmann et al. 2022 ("Training Compute-Optimal Large Language
Models", §3.3 and appendix D.2) fit their approach-3 law: minimize the sum of Huber
losses (δ = 1e-3) between predicted and observed *log* loss,

    min_{a, b, e, α, β}  Σ_i Huber_δ( LSE(a − α·log N_i, b − β·log D_i, e) − log L_i ),

with ``A = exp(a)``, ``B = exp(b)``, ``E = exp(e)`` and ``LSE`` the log-sum-exp, by
L-BFGS from every point of a grid of initializations, keeping the best. The paper's grid
(appendix D.2) is ``α, β ∈ {0, 0.5, …, 2}``, ``e ∈ {−1, −0.5, …, 1}``,
``a, b ∈ {0, 5, …, 25}``: 5·5·5·6·6 = **4500** starts (``HOFFMANN_GRID``). The one-term
law uses the matching 5·5·6 = 150-point grid.

How the grid stays fast (docs/architecture.md: < 10 s for the grid, < 60 s for 1000 bootstrap
fits on 2 cores): all starts run *together* through a batched L-BFGS written in NumPy
(``analysis/_lbfgs.py``) — one vectorized objective/gradient evaluation per iteration
for every start, with analytic gradients — instead of 4500 sequential
``scipy.optimize.minimize`` calls. The few best end points are then polished with
``scipy.optimize.minimize(method="L-BFGS-B")`` at tight tolerance. Every grid start is
run to convergence; none is discarded early. Bootstrap replicates (resampled runs) are
batched the same way, each starting from the full-data optimum and from the next-best
distinct local minima the grid found (``bootstrap_starts`` starts per replicate, default
4), rather than from all 4500 points.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ._fitted import check_is_fitted
from ._io import finite_positive, require_columns, usable_rows
from ._lbfgs import batched_lbfgs_threads
from ._stats import check_level, check_n_boot, make_rng, percentile_interval

__all__ = [
    "HOFFMANN_DELTA",
    "HOFFMANN_GRID",
    "ChinchillaFit",
    "ComputeOptimal",
    "LossPrediction",
    "SaturatingPowerLawFit",
]

HOFFMANN_DELTA = 1e-3
_EXP = (0.0, 0.5, 1.0, 1.5, 2.0)
_E = (-1.0, -0.5, 0.0, 0.5, 1.0)
_LOGCOEF = (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)
#: Hoffmann et al. 2022, appendix D.2: initial values of (α, β, e, a, b), 4500 points.
HOFFMANN_GRID: dict[str, tuple[float, ...]] = {
    "alpha": _EXP, "beta": _EXP, "e": _E, "a": _LOGCOEF, "b": _LOGCOEF,
}


@dataclass(frozen=True)
class LossPrediction:
    """Predicted loss with a percentile-bootstrap band of the fitted law."""

    point: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    level: float


@dataclass(frozen=True)
class ComputeOptimal:
    """Compute-optimal allocation at budgets ``compute`` (FLOPs), with bootstrap bands."""

    compute: np.ndarray
    n_opt: np.ndarray
    d_opt: np.ndarray
    n_lo: np.ndarray
    n_hi: np.ndarray
    d_lo: np.ndarray
    d_hi: np.ndarray
    level: float


def _lse_huber(theta: np.ndarray, logx: np.ndarray, logy: np.ndarray, w: np.ndarray,
               delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Objective and gradient of the scaled Huber fit for many parameter rows at once.

    ``theta`` rows are ``[e, a_1..a_K, α_1..α_K]``; ``w`` is ``(n,)`` or ``(S, n)``. The
    objective is ``Σ w_i Huber_δ(r_i) / (δ Σ w)``: dividing by ``δ Σw`` only rescales
    (the minimizer is unchanged) but keeps values and gradients O(1) for the stopping
    tests. Written with in-place operations because this is the whole cost of the fit.
    """
    K = logx.shape[1]
    S, n = theta.shape[0], logy.size
    T = np.empty((K + 1, S, n))
    T[0] = theta[:, :1]
    for k in range(K):
        np.multiply(theta[:, 1 + K + k, None], -logx[None, :, k], out=T[1 + k])
        T[1 + k] += theta[:, 1 + k, None]
    mx = T.max(axis=0)
    T -= mx
    np.exp(T, out=T)  # T now holds each term's share numerator
    tot = T.sum(axis=0)
    r = np.log(tot)
    r += mx
    r -= logy
    # With c = clip(r, ±δ): Huber_δ(r)/δ = c·(r − c/2)/δ, and its derivative is c/δ.
    c = np.clip(r, -delta, delta)
    r -= 0.5 * c
    r *= c
    wn = w / (w.sum(axis=-1, keepdims=True) * delta)
    f = (r * wn).sum(axis=1) if wn.ndim == 2 else r @ wn
    c *= wn
    c /= tot
    g = np.empty_like(theta)
    for k in range(K + 1):
        T[k] *= c
    g[:, 0] = T[0].sum(axis=1)
    for k in range(K):
        g[:, 1 + k] = T[1 + k].sum(axis=1)
        g[:, 1 + K + k] = -(T[1 + k] @ logx[:, k])
    return f, g


class _LSEHuberFit:
    """Shared machinery for ``L = E + Σ_k A_k / x_k^{α_k}`` fitted à la Hoffmann."""

    _coef_names: tuple[str, ...]
    _exp_names: tuple[str, ...]

    def __init__(self, xs: tuple[str, ...], y: str, *, delta: float, n_boot: int, level: float,
                 random_state: int | np.random.Generator | None, diverged: str | None,
                 bootstrap_starts: int, max_iter: int, n_jobs: int) -> None:
        if not delta > 0:
            raise ValueError(f"delta must be > 0, got {delta!r}.")
        if int(bootstrap_starts) != bootstrap_starts or bootstrap_starts < 1:
            raise ValueError(f"bootstrap_starts must be a positive integer, got "
                             f"{bootstrap_starts!r}.")
        self.xs, self.y = xs, y
        self.delta = float(delta)
        self.n_boot = check_n_boot(n_boot)
        self.level = check_level(level)
        self.random_state = random_state
        self.diverged = diverged
        self.bootstrap_starts = int(bootstrap_starts)
        self.max_iter = int(max_iter)
        if int(n_jobs) != n_jobs or n_jobs < 1:
            raise ValueError(f"n_jobs must be a positive integer, got {n_jobs!r}.")
        self.n_jobs = int(n_jobs)

    @property
    def param_names(self) -> tuple[str, ...]:
        return ("E", *self._coef_names, *self._exp_names)

    def grid(self) -> np.ndarray:
        """Initial points ``[e, a_1.., α_1..]`` (Hoffmann et al. 2022, appendix D.2)."""
        K = len(self.xs)
        axes = [_E] + [_LOGCOEF] * K + [_EXP] * K
        return np.array(list(itertools.product(*axes)), dtype=float)

    # ---------------------------------------------------------------- fitting
    def _arrays(self, data: Any, more: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        K = len(self.xs)
        if isinstance(data, pd.DataFrame) and not more:
            require_columns(data, [*self.xs, self.y], "loss-law data")
            ok = usable_rows(data, [*self.xs, self.y], self.diverged)
            if ok.empty:
                raise ValueError(f"no usable rows: every row diverged or has a non-finite "
                                 f"{self.y!r}.")
            X = ok[list(self.xs)].to_numpy(dtype=float)
            L = ok[self.y].to_numpy(dtype=float)
        else:
            arrays = [data, *more]
            if len(arrays) != K + 1:
                raise ValueError(f"fit() takes a DataFrame or {K + 1} arrays "
                                 f"({', '.join(self.xs)}, {self.y}); got {len(arrays)}.")
            X = np.column_stack([np.asarray(a, float).ravel() for a in arrays[:K]])
            L = np.asarray(arrays[K], float).ravel()
            if X.shape[0] != L.size:
                raise ValueError(f"{X.shape[0]} x values but {L.size} losses; they must match.")
        for k, name in enumerate(self.xs):
            finite_positive(X[:, k], f"column {name!r}")
            if np.unique(X[:, k]).size < 2:
                raise ValueError(f"column {name!r} takes the single value {X[0, k]!r}; its "
                                 "exponent cannot be fitted.")
        finite_positive(L, f"loss column {self.y!r}")
        n_par = 1 + 2 * K
        if L.size <= n_par:
            raise ValueError(f"this loss law has {n_par} parameters and needs more than "
                             f"{n_par} points, got {L.size}.")
        return X, L

    def fit(self, data: Any, *more: Any) -> Any:
        """Fit from a DataFrame (constructor's columns) or from arrays ``(x..., loss)``."""
        from scipy.optimize import minimize

        t_start = time.perf_counter()
        X, L = self._arrays(data, more)
        logx, logy = np.log(X), np.log(L)
        delta = self.delta
        ones = np.ones(L.size)

        def fg(theta: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return _lse_huber(theta, logx, logy, ones, delta)

        starts = self.grid()
        res = batched_lbfgs_threads(fg, starts, self.n_jobs, max_iter=self.max_iter,
                                    ftol=1e-13, gtol=1e-9)
        order = np.argsort(res.fun)
        minima = _distinct(res.x[order], res.fun[order], max(self.bootstrap_starts, 5))

        def single(theta: np.ndarray) -> tuple[float, np.ndarray]:
            f, g = _lse_huber(theta[None, :], logx, logy, ones, delta)
            return float(f[0]), g[0]

        polished = []
        for th in minima[:5]:
            r = minimize(single, th, jac=True, method="L-BFGS-B",
                         options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 5000})
            polished.append((float(r.fun), r.x))
        polished.sort(key=lambda t: t[0])
        best_f, theta = polished[0]
        if not np.all(np.isfinite(theta)):
            raise ValueError("the loss-law fit did not converge to finite parameters.")

        self.theta_ = theta
        self.x_data_, self.y_data_ = X, L
        self.params_ = self._natural(theta[None, :])[0]
        self.loss_ = best_f * delta * L.size  # Hoffmann's objective: Σ Huber_δ
        self.n_ = int(L.size)
        self.n_starts_ = int(starts.shape[0])
        self.n_converged_ = int(res.converged.sum())
        self.x_range_ = {n: (float(X[:, k].min()), float(X[:, k].max()))
                         for k, n in enumerate(self.xs)}
        self.residuals_ = self._predict_log(theta[None, :], logx)[0] - logy
        self.local_minima_ = [m for m in minima]

        t_grid = time.perf_counter()
        boot_theta = self._bootstrap(logx, logy, theta, minima)
        self.timings_ = {"grid_s": t_grid - t_start, "bootstrap_s": time.perf_counter() - t_grid}
        self.boot_theta_ = boot_theta
        self.boot_ = np.array([[p[k] for k in self.param_names]
                               for p in self._natural(boot_theta)]) if boot_theta.size else (
            np.empty((0, len(self.param_names))))
        self.ci_: dict[str, tuple[float, float]] = {}
        if self.boot_.shape[0]:
            lo, hi = percentile_interval(self.boot_, self.level)
            self.ci_ = {k: (float(lo[i]), float(hi[i])) for i, k in enumerate(self.param_names)}
        return self

    def _bootstrap(self, logx: np.ndarray, logy: np.ndarray, theta: np.ndarray,
                   minima: list[np.ndarray]) -> np.ndarray:
        B = self.n_boot
        if B == 0:
            return np.empty((0, theta.size))
        rng = make_rng(self.random_state)
        n = logy.size
        W = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(B)])
        W = W.astype(float)
        inits = [theta] + [m for m in minima[1:self.bootstrap_starts]]
        K0 = len(inits)
        x0 = np.repeat(np.array(inits)[None, :, :], B, axis=0).reshape(B * K0, -1)
        Wr = np.repeat(W, K0, axis=0)
        delta = self.delta

        def fg(th: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return _lse_huber(th, logx, logy, Wr[rows], delta)

        res = batched_lbfgs_threads(fg, x0, self.n_jobs, max_iter=self.max_iter,
                                    ftol=1e-13, gtol=1e-9)
        fun = res.fun.reshape(B, K0)
        best = np.argmin(fun, axis=1)
        out = res.x.reshape(B, K0, -1)[np.arange(B), best]
        return out[np.all(np.isfinite(out), axis=1)]

    # ------------------------------------------------------------- using it
    def _natural(self, theta: np.ndarray) -> list[dict[str, float]]:
        K = len(self.xs)
        out = []
        for row in theta:
            d = {"E": float(np.exp(row[0]))}
            for k in range(K):
                d[self._coef_names[k]] = float(np.exp(row[1 + k]))
                d[self._exp_names[k]] = float(row[1 + K + k])
            out.append(d)
        return out

    @staticmethod
    def _predict_log(theta: np.ndarray, logx: np.ndarray) -> np.ndarray:
        K = logx.shape[1]
        terms = [np.broadcast_to(theta[:, :1], (theta.shape[0], logx.shape[0]))]
        terms += [theta[:, 1 + k, None] - theta[:, 1 + K + k, None] * logx[None, :, k]
                  for k in range(K)]
        return np.logaddexp.reduce(np.stack(terms), axis=0)

    def _predict(self, xs: Sequence[Any], level: float | None) -> Any:
        check_is_fitted(self, "params_")
        arrs = np.broadcast_arrays(*[np.atleast_1d(np.asarray(v, float)) for v in xs])
        shape = arrs[0].shape
        logx = np.column_stack([np.log(finite_positive(a, n).ravel())
                                for a, n in zip(arrs, self.xs, strict=True)])
        point = np.exp(self._predict_log(self.theta_[None, :], logx)[0]).reshape(shape)
        if level is None:
            return point
        level = check_level(level, "level")
        if not self.boot_theta_.shape[0]:
            raise ValueError("no bootstrap draws (n_boot=0), so no interval can be given.")
        draws = np.exp(self._predict_log(self.boot_theta_, logx))
        lo, hi = percentile_interval(draws, level)
        return LossPrediction(point, lo.reshape(shape), hi.reshape(shape), level)

    def _law_text(self) -> str:
        raise NotImplementedError

    def report(self) -> str:
        """Readable summary: the law, parameters with intervals, fit diagnostics."""
        check_is_fitted(self, "params_")
        lines = [f"{type(self).__name__}: {self._law_text()}",
                 f"  Huber(δ={self.delta:g}) on log loss, n={self.n_}, best of "
                 f"{self.n_starts_} L-BFGS starts ({self.n_converged_} converged), "
                 f"objective Σ Huber = {self.loss_:.6g}"]
        for k in self.param_names:
            ci = self.ci_.get(k)
            cis = f"  [{ci[0]:.5g}, {ci[1]:.5g}]" if ci else ""
            lines.append(f"  {k:>5} = {self.params_[k]:.6g}{cis}")
        if self.ci_:
            lines.append(f"  intervals: {self.level:.0%} percentile bootstrap over runs, "
                         f"{self.boot_.shape[0]} resamples")
        rms = float(np.sqrt(np.mean(self.residuals_**2)))
        lines.append(f"  rms residual of log loss = {rms:.4g}")
        return "\n".join(lines)


def _distinct(xs: np.ndarray, fs: np.ndarray, k: int) -> list[np.ndarray]:
    """Up to ``k`` finite points from best to worst, skipping near-duplicates."""
    out: list[np.ndarray] = []
    for x, f in zip(xs, fs, strict=True):
        if not np.isfinite(f) or not np.all(np.isfinite(x)):
            continue
        if all(np.max(np.abs(x - o)) > 1e-3 * (1 + np.max(np.abs(o))) for o in out):
            out.append(x)
        if len(out) == k:
            break
    if not out:
        raise ValueError("every start of the loss-law fit ended at a non-finite objective.")
    return out


class ChinchillaFit(_LSEHuberFit):
    """Chinchilla loss law ``L(N, D) = E + A/N^α + B/D^β``.

    Hoffmann et al. 2022, eq. 2 (form) and appendix D.2 (fit: Huber δ = 1e-3 on log
    loss, LSE reparametrization, L-BFGS from a 4500-point grid). Their published fit is
    ``E = 1.69, A = 406.4, B = 410.7, α = 0.34, β = 0.28`` (N parameters, D tokens).
    See the module docstring for how the grid runs fast.

    Parameters: column names ``n`` (default ``n_params``), ``d`` (``tokens``), ``y``
    (``loss``); ``delta`` (1e-3); ``n_boot`` (1000 pairs-bootstrap refits over runs);
    ``level`` (0.95); ``bootstrap_starts`` (starts
    per bootstrap refit, default 4);
    ``max_iter`` per start (default 1000).

    Fitted attributes: ``params_`` (``E, A, B, alpha, beta``), ``ci_``, ``boot_``,
    ``loss_`` (Σ Huber at the optimum), ``n_starts_``, ``x_range_``, ``residuals_``,
    ``timings_`` (seconds spent in the grid fit and in the bootstrap).
    """

    _coef_names = ("A", "B")
    _exp_names = ("alpha", "beta")

    def __init__(self, n: str = "n_params", d: str = "tokens", y: str = "loss", *,
                 delta: float = HOFFMANN_DELTA, n_boot: int = 1000, level: float = 0.95,
                 random_state: int | np.random.Generator | None = 0,
                 diverged: str | None = "diverged", bootstrap_starts: int = 4,
                 max_iter: int = 200, n_jobs: int = 1) -> None:
        super().__init__((n, d), y, delta=delta, n_boot=n_boot, level=check_level(level, "level"),
                         random_state=random_state, diverged=diverged,
                         bootstrap_starts=bootstrap_starts, max_iter=max_iter,
                         n_jobs=n_jobs)

    def fit(self, data: Any, *more: Any) -> ChinchillaFit:
        """Fit on a DataFrame, or on arrays ``fit(N, D, L)``."""
        super().fit(data, *more)
        return self

    def predict(self, n: Any, d: Any, level: float | None = None) -> Any:
        """``E + A/N^α + B/D^β``; with ``level``, a :class:`LossPrediction` band at that level."""
        return self._predict([n, d], level)

    def _law_text(self) -> str:
        return f"{self.y} = E + A/{self.xs[0]}^alpha + B/{self.xs[1]}^beta"

    def compute_optimal(self, compute: Any, level: float = 0.9) -> ComputeOptimal:
        """Compute-optimal ``N`` and ``D`` at FLOP budgets ``C`` (with ``C ≈ 6·N·D``).

        Hoffmann et al. 2022, eq. 4: ``N_opt(C) = G·(C/6)^(β/(α+β))``,
        ``D_opt(C) = G^{-1}·(C/6)^(α/(α+β))``, ``G = (α·A/(β·B))^(1/(α+β))``. The band is
        the percentile band of the same formula over the bootstrap draws.
        """
        check_is_fitted(self, "params_")
        c = finite_positive(np.atleast_1d(compute), "compute")
        p = self.params_
        n_opt, d_opt = _allocation(p["A"], p["B"], p["alpha"], p["beta"], c)
        level = check_level(level, "level")
        if self.boot_.shape[0]:
            bA, bB, bal, bbe = (self.boot_[:, self.param_names.index(k)][:, None]
                                for k in ("A", "B", "alpha", "beta"))
            with np.errstate(all="ignore"):
                nb, db = _allocation(bA, bB, bal, bbe, c[None, :])
            keep = np.all(np.isfinite(nb) & np.isfinite(db), axis=1)
            if not keep.any():
                raise ValueError("no bootstrap draw gives a finite allocation (α or β ≤ 0).")
            n_lo, n_hi = percentile_interval(nb[keep], level)
            d_lo, d_hi = percentile_interval(db[keep], level)
        else:
            n_lo = n_hi = n_opt
            d_lo = d_hi = d_opt
        return ComputeOptimal(c, n_opt, d_opt, n_lo, n_hi, d_lo, d_hi, level)


def _allocation(A: Any, B: Any, alpha: Any, beta: Any, c: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    if np.any(np.asarray(alpha) <= 0) and np.ndim(alpha) == 0:
        raise ValueError(f"alpha={alpha!r} is not positive, so no compute-optimal size exists.")
    if np.any(np.asarray(beta) <= 0) and np.ndim(beta) == 0:
        raise ValueError(f"beta={beta!r} is not positive, so no compute-optimal size exists.")
    s = alpha + beta
    G = (alpha * A / (beta * B)) ** (1.0 / s)
    return G * (c / 6.0) ** (beta / s), (c / 6.0) ** (alpha / s) / G


class SaturatingPowerLawFit(_LSEHuberFit):
    """One-variable law with an irreducible term: ``L(x) = E + A/x^α``.

    Use ``x="n_params"`` for ``L(N)`` (Kaplan et al. 2020, eq. 1.1, plus the constant of
    Hoffmann et al. 2022, eq. 2), or a compute column (FLOPs, e.g. ``6·N·D``) for ``L(C)``
    with saturation. Fitted like :class:`ChinchillaFit` (Huber δ = 1e-3 on log loss, LSE
    form ``log L = LSE(a − α·log x, e)``), from the 5·5·6 = 150-point sub-grid
    ``e ∈ {−1..1}``, ``a ∈ {0..25}``, ``α ∈ {0..2}``.

    Fitted attributes: ``params_`` (``E, A, alpha``), ``ci_``, ``boot_``, ``loss_``.
    """

    _coef_names = ("A",)
    _exp_names = ("alpha",)

    def __init__(self, x: str = "n_params", y: str = "loss", *,
                 delta: float = HOFFMANN_DELTA, n_boot: int = 1000, level: float = 0.95,
                 random_state: int | np.random.Generator | None = 0,
                 diverged: str | None = "diverged", bootstrap_starts: int = 4,
                 max_iter: int = 200, n_jobs: int = 1) -> None:
        super().__init__((x,), y, delta=delta, n_boot=n_boot, level=check_level(level, "level"),
                         random_state=random_state, diverged=diverged,
                         bootstrap_starts=bootstrap_starts, max_iter=max_iter,
                         n_jobs=n_jobs)

    def fit(self, data: Any, *more: Any) -> SaturatingPowerLawFit:
        """Fit on a DataFrame, or on arrays ``fit(x, L)``."""
        super().fit(data, *more)
        return self

    def predict(self, x: Any, level: float | None = None) -> Any:
        """``E + A/x^α``; with ``level``, a :class:`LossPrediction` band at that level."""
        return self._predict([x], level)

    def _law_text(self) -> str:
        return f"{self.y} = E + A/{self.xs[0]}^alpha"
