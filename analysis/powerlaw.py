"""Power laws fitted by least squares in log space, with bootstrap and prediction intervals."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np
import pandas as pd

from ._fitted import check_is_fitted
from ._io import as_tuple, finite_positive, require_columns
from ._stats import check_level, check_n_boot, make_rng, percentile_interval

__all__ = ["PowerLawFit", "PowerLawPrediction"]

_EXPONENT_NAMES = "bcdfghjk"  # "e" is skipped so it never reads as Euler's number


@dataclass(frozen=True)
class PowerLawPrediction:
    """Point prediction and a two-sided interval (arrays, one entry per target point)."""

    point: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    level: float
    kind: str


class PowerLawFit:
    """Power law ``y = a · x1^b · x2^c · ...`` by (weighted) OLS on ``log y``.

    With one variable this is ``y = a·x^b`` (e.g. optimal LR against width, IsoFLOP
    ``N* = k·C^a``, Chinchilla approach 1); with two it is the Step Law form
    ``η*(N, D) = a·N^b·D^c`` (Li et al. 2025, "Predictable Scale: Part I — Optimal
    Hyperparameter Scaling Law in Large Language Model Pretraining", eq. 1).

    Model: ``log y = log a + b·log x1 + c·log x2 + ε``; the coefficients minimize
    ``Σ w_i ε_i²`` (natural logs; exponents do not depend on the base).

    Parameters
    ----------
    x, y:
        Column names used when ``fit`` gets a DataFrame (defaults: ``width``, ``lr``).
        ``x`` may be one name or a sequence of names (one exponent each).
    weight:
        Optional column of non-negative weights (e.g. ``1/var`` of each optimum).
    n_boot:
        Pairs-bootstrap resamples for ``ci_`` (default 1000; 0 disables ``ci_``).
        Resamples whose design is singular (e.g. all draws at one x) are dropped; the
        number kept is ``n_boot_used_``.
    level:
        Two-sided level of ``ci_`` (default 0.95).
    random_state:
        Seed or Generator for the bootstrap.

    Fitted attributes
    -----------------
    ``params_`` ({"a", "b", ...}), ``ci_`` (name -> (lo, hi), percentile bootstrap),
    ``stderr_`` (analytic OLS standard errors; ``a``'s is for ``log a``), ``x_names_``,
    ``x_range_`` (name -> (min, max) of the fitted x), ``n_``, ``sigma_`` (residual std
    of ``log y``), ``r2_``, ``boot_`` (bootstrap draws of ``[log a, b, ...]``),
    ``x_data_``/``y_data_``/``weights_`` (the fitted points, for plots).
    """

    def __init__(
        self,
        x: str | Sequence[str] = "width",
        y: str = "lr",
        *,
        weight: str | None = None,
        n_boot: int = 1000,
        level: float = 0.95,
        random_state: int | np.random.Generator | None = 0,
    ) -> None:
        self.x = as_tuple(x)
        self.y = y
        self.weight = weight
        self.n_boot = check_n_boot(n_boot)
        self.level = check_level(level, "level")
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        data: pd.DataFrame | Any,
        y: Any = None,
        *,
        weights: Any = None,
    ) -> PowerLawFit:
        """Fit on a DataFrame (columns from the constructor) or on arrays ``(x, y)``.

        ``x`` arrays are shape ``(n,)`` for one variable or ``(n, k)`` for ``k``.
        Raises ValueError for non-positive or non-finite values, fewer than ``k + 2``
        points (an interval needs at least one residual degree of freedom), or an x that
        takes a single value.
        """
        if isinstance(data, pd.DataFrame) and y is None:
            cols = [*self.x, self.y] + ([self.weight] if self.weight else [])
            require_columns(data, cols, "power-law data")
            xs = data[list(self.x)].to_numpy(dtype=float)
            ys = data[self.y].to_numpy(dtype=float)
            w = data[self.weight].to_numpy(dtype=float) if self.weight else weights
            names = self.x
        else:
            if y is None:
                raise ValueError("fit() needs y values when data is not a DataFrame.")
            xs = np.asarray(data, dtype=float)
            if xs.ndim == 1:
                xs = xs[:, None]
            ys = np.asarray(y, dtype=float).ravel()
            w = weights
            names = self.x if len(self.x) == xs.shape[1] else tuple(
                f"x{i + 1}" for i in range(xs.shape[1])
            )
        if xs.ndim != 2 or xs.shape[0] != ys.shape[0]:
            raise ValueError(
                f"x has {xs.shape[0]} rows but y has {ys.shape[0]} values; they must match."
            )
        k = xs.shape[1]
        if k > len(_EXPONENT_NAMES):
            raise ValueError(f"at most {len(_EXPONENT_NAMES)} x variables are supported, got {k}.")
        n = ys.shape[0]
        if n < k + 2:
            raise ValueError(
                f"a power law in {k} variable(s) needs at least {k + 2} points, got {n}."
            )
        for j, name in enumerate(names):
            finite_positive(xs[:, j], f"x column {name!r}")
            if np.unique(xs[:, j]).size < 2:
                raise ValueError(
                    f"x column {name!r} takes the single value {xs[0, j]!r}; "
                    "an exponent cannot be fitted."
                )
        finite_positive(ys, f"y column {self.y!r}")
        if w is None:
            wv = np.ones(n)
        else:
            wv = np.asarray(w, dtype=float).ravel()
            if wv.shape != (n,) or not np.all(np.isfinite(wv)) or np.any(wv < 0):
                raise ValueError("weights must be n finite, non-negative numbers.")
            if np.count_nonzero(wv) < k + 2:
                raise ValueError(
                    f"only {np.count_nonzero(wv)} points have a positive weight; "
                    f"need {k + 2}."
                )

        X = np.column_stack([np.ones(n), np.log(xs)])
        ly = np.log(ys)
        sw = np.sqrt(wv)
        Xw, yw = X * sw[:, None], ly * sw
        coef, *_ = np.linalg.lstsq(Xw, yw, rcond=None)
        if np.linalg.matrix_rank(Xw) < k + 1:
            raise ValueError(
                "the x columns are collinear in log space, so the exponents are not "
                "identifiable."
            )
        resid = ly - X @ coef
        dof = np.count_nonzero(wv) - (k + 1)
        sigma2 = float(np.sum(wv * resid**2) / dof)
        xtwx_inv = np.linalg.inv(Xw.T @ Xw)

        self.x_data_, self.y_data_, self.weights_ = xs, ys, wv
        self.x_names_ = tuple(names)
        self.param_names_ = ("a", *_EXPONENT_NAMES[:k])
        self.coef_ = coef
        self.cov_ = sigma2 * xtwx_inv
        self._xtwx_inv = xtwx_inv
        self.sigma_ = math.sqrt(sigma2)
        self.dof_ = dof
        self.n_ = n
        ss_tot = float(np.sum(wv * (ly - np.average(ly, weights=wv)) ** 2))
        self.r2_ = 1.0 - float(np.sum(wv * resid**2)) / ss_tot if ss_tot > 0 else 1.0
        self.x_range_ = {
            name: (float(xs[:, j].min()), float(xs[:, j].max())) for j, name in enumerate(names)
        }
        self.params_ = {"a": float(np.exp(coef[0]))}
        self.params_.update({p: float(c) for p, c in zip(self.param_names_[1:], coef[1:])})
        se = np.sqrt(np.diag(self.cov_))
        self.stderr_ = dict(zip(self.param_names_, (float(s) for s in se), strict=True))

        self.boot_ = self._bootstrap(X, ly, wv)
        self.n_boot_used_ = int(self.boot_.shape[0])
        self.ci_: dict[str, tuple[float, float]] = {}
        if self.n_boot_used_:
            lo, hi = percentile_interval(self.boot_, self.level)
            self.ci_["a"] = (float(np.exp(lo[0])), float(np.exp(hi[0])))
            for j, p in enumerate(self.param_names_[1:], start=1):
                self.ci_[p] = (float(lo[j]), float(hi[j]))
        return self

    def _bootstrap(self, X: np.ndarray, ly: np.ndarray, w: np.ndarray) -> np.ndarray:
        p = X.shape[1]
        if self.n_boot == 0:
            return np.empty((0, p))
        rng = make_rng(self.random_state)
        n = X.shape[0]
        idx = rng.integers(0, n, size=(self.n_boot, n))
        sw = np.sqrt(w)[idx]
        Xb = X[idx] * sw[..., None]
        yb = ly[idx] * sw
        # Batched lstsq through the pseudo-inverse; rank-deficient draws (too few
        # distinct x) are dropped rather than given an arbitrary minimum-norm answer.
        ok = np.linalg.matrix_rank(Xb) == p
        coef = np.einsum("bpn,bn->bp", np.linalg.pinv(Xb[ok]), yb[ok])
        return coef

    # --------------------------------------------------------------- prediction
    def _design(self, x: Any) -> np.ndarray:
        k = len(self.x_names_)
        if isinstance(x, pd.DataFrame):
            require_columns(x, self.x_names_, "prediction input")
            xs = x[list(self.x_names_)].to_numpy(dtype=float)
        elif isinstance(x, Mapping):
            missing = [n for n in self.x_names_ if n not in x]
            if missing:
                raise ValueError(f"prediction input lacks {missing}.")
            xs = np.column_stack([np.atleast_1d(np.asarray(x[n], float)) for n in self.x_names_])
        else:
            xs = np.asarray(x, dtype=float)
            xs = xs.reshape(-1, 1) if k == 1 else np.atleast_2d(xs)
        if xs.shape[1] != k:
            raise ValueError(f"prediction input has {xs.shape[1]} columns; the fit has {k}.")
        finite_positive(xs, "prediction x")
        return np.column_stack([np.ones(xs.shape[0]), np.log(xs)])

    @overload
    def predict(self, x: Any, level: None = None, kind: str = ...,) -> np.ndarray: ...

    @overload
    def predict(
        self, x: Any, level: float | None = ..., kind: Literal["prediction", "confidence"] = ...,
    ) -> PowerLawPrediction: ...

    def predict(
        self,
        x: Any,
        level: float | None = None,
        kind: Literal["prediction", "confidence"] = "prediction",
    ) -> np.ndarray | PowerLawPrediction:
        """``a·x^b...`` at ``x``; with ``level`` also a two-sided band at that level.

        ``kind="prediction"`` (default) bands a new observation (weight 1):
        ``ŷ ± t_{dof,(1+q)/2} · σ · sqrt(1 + x0ᵀ(XᵀWX)⁻¹x0)`` in log space, then
        exponentiated; ``kind="confidence"`` drops the ``1 +`` and bands the fitted law.
        These are the textbook normal-theory OLS intervals (e.g. Montgomery, Peck &
        Vining, "Introduction to Linear Regression Analysis", §2.4).
        """
        check_is_fitted(self, "params_")
        X0 = self._design(x)
        mean = X0 @ self.coef_
        point = np.exp(mean)
        if level is None:
            return point
        level = check_level(level, "level")
        if kind not in ("prediction", "confidence"):
            raise ValueError(f"kind must be 'prediction' or 'confidence', got {kind!r}.")
        from scipy import stats

        lev = np.einsum("ij,jk,ik->i", X0, self._xtwx_inv, X0)
        var = self.sigma_**2 * (lev + (1.0 if kind == "prediction" else 0.0))
        half = stats.t.ppf(0.5 + level / 2.0, self.dof_) * np.sqrt(var)
        return PowerLawPrediction(point, np.exp(mean - half), np.exp(mean + half), level, kind)

    def extrapolation_factor(self, x: Any) -> np.ndarray:
        """How far ``x`` lies outside the fitted range, as a ratio (1 = inside).

        Per point, the largest over variables of ``x/max`` or ``min/x`` (whichever > 1).
        """
        check_is_fitted(self, "params_")
        logs = self._design(x)[:, 1:]
        out = np.ones(logs.shape[0])
        for j, name in enumerate(self.x_names_):
            lo, hi = self.x_range_[name]
            v = np.exp(logs[:, j])
            out = np.maximum(out, np.maximum(v / hi, lo / v))
        return out

    def report(self) -> str:
        """Readable summary: the law, each parameter with its CI, fit quality."""
        check_is_fitted(self, "params_")
        terms = " · ".join(
            f"{n}^{p}" for n, p in zip(self.x_names_, self.param_names_[1:], strict=True)
        )
        lines = [f"PowerLawFit: {self.y} = a · {terms}   (OLS in log space, n={self.n_})"]
        for p in self.param_names_:
            ci = self.ci_.get(p)
            cis = f"  [{ci[0]:.4g}, {ci[1]:.4g}]" if ci else ""
            lines.append(f"  {p:>2} = {self.params_[p]:.6g}{cis}")
        if self.ci_:
            lines.append(
                f"  intervals: {self.level:.0%} percentile bootstrap, "
                f"{self.n_boot_used_} resamples"
            )
        lines.append(f"  residual sd (log y) = {self.sigma_:.4g}, R² = {self.r2_:.4f}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        if hasattr(self, "params_"):
            inner = ", ".join(f"{k}={v:.4g}" for k, v in self.params_.items())
            return f"PowerLawFit({inner})"
        return f"PowerLawFit(x={self.x!r}, y={self.y!r})"
