"""Critical batch size: from a batch sweep's steps-to-target, or from the gradient noise scale."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ._fitted import check_is_fitted
from ._io import as_tuple, finite_positive, group_label, require_columns, usable_rows
from ._stats import check_level, check_n_boot, make_rng, percentile_interval
from .powerlaw import PowerLawFit

__all__ = [
    "CriticalBatchFit",
    "CriticalBatchResults",
    "first_crossing",
    "fit_critical_batch",
    "fit_noise_scale",
    "noise_scale_law",
    "steps_to_target",
]

_PARAMS = ("S_min", "E_min", "B_crit", "CBS")


def first_crossing(steps: Any, losses: Any, target: float) -> float:
    """First step at which a loss curve reaches ``target`` (``loss <= target``).

    Linear interpolation between the last point above the target and the first at or
    below it, so the answer is not quantized to the logging interval. Returns ``inf`` when
    the curve never reaches the target (an explicit "not reached", never NaN); raises if
    the steps are not increasing or a loss is non-finite.
    """
    s = np.asarray(steps, dtype=float)
    v = np.asarray(losses, dtype=float)
    if s.shape != v.shape or s.ndim != 1 or s.size == 0:
        raise ValueError("steps and losses must be 1-D arrays of the same, non-zero length.")
    if not np.all(np.isfinite(s)) or np.any(np.diff(s) <= 0):
        raise ValueError("steps must be finite and strictly increasing.")
    if not np.all(np.isfinite(v)):
        raise ValueError(
            f"loss curve has a non-finite value {v[~np.isfinite(v)][0]!r}; "
            "drop diverged runs first."
        )
    hit = np.flatnonzero(v <= target)
    if hit.size == 0:
        return float("inf")
    k = int(hit[0])
    if k == 0:
        return float(s[0])
    frac = (v[k - 1] - target) / (v[k - 1] - v[k])
    return float(s[k - 1] + frac * (s[k] - s[k - 1]))


def steps_to_target(
    curves: pd.DataFrame,
    target: float | str,
    *,
    step: str = "step",
    loss: str = "loss",
    group_by: str | Sequence[str] = ("batch_size",),
    smooth: int = 1,
) -> pd.DataFrame:
    """Steps each logged run needs to reach a target loss, ready for :class:`CriticalBatchFit`.

    ``curves`` is long format: one row per (run, logged step). ``group_by`` identifies a
    run (add ``seed``, ``model``, ... as needed). ``target`` is a number, or the name of
    a column holding each run's target (e.g. one target per model, as Zhang et al. 2024
    use). ``smooth > 1`` applies a trailing moving average of that many points first, so
    a single noisy dip does not count as reaching the target.

    Returns one row per run: the group columns, ``steps_to_target`` (``inf`` if never
    reached) and ``reached``.
    """
    keys = as_tuple(group_by)
    cols = [step, loss, *keys] + ([target] if isinstance(target, str) else [])
    require_columns(curves, cols, "loss curves")
    if int(smooth) != smooth or smooth < 1:
        raise ValueError(f"smooth must be a positive integer, got {smooth!r}.")
    rows = []
    grouped = curves.groupby(list(keys), sort=True) if keys else [((), curves)]
    for key, df in grouped:
        df = df.sort_values(step)
        v = df[loss].to_numpy(dtype=float)
        if smooth > 1:
            v = pd.Series(v).rolling(smooth, min_periods=1).mean().to_numpy()
        if isinstance(target, str):
            tv = df[target].unique()
            if tv.size != 1:
                raise ValueError(f"run {group_label(keys, key)} has several targets {tv[:3]}.")
            tgt = float(tv[0])
        else:
            tgt = float(target)
        key_t = key if isinstance(key, tuple) else (key,)
        s = first_crossing(df[step].to_numpy(dtype=float), v, tgt)
        rows.append({**dict(zip(keys, key_t, strict=True)), "target": tgt,
                     "steps_to_target": s, "reached": bool(np.isfinite(s))})
    return pd.DataFrame(rows)


def _fit_log_hyperbola(b: np.ndarray, s: np.ndarray, w: np.ndarray | None = None,
                       x0: np.ndarray | None = None) -> np.ndarray:
    """``[log S_min, log E_min]`` minimizing ``Σ w·(log(S_min + E_min/B) − log S)²``."""
    from scipy.optimize import least_squares
    from scipy.special import expit

    sw = np.ones_like(s) if w is None else np.sqrt(w)
    ls, inv_b = np.log(s), 1.0 / b

    def resid(p: np.ndarray) -> np.ndarray:
        return sw * (np.logaddexp(p[0], p[1] + np.log(inv_b)) - ls)

    def jac(p: np.ndarray) -> np.ndarray:
        # d/dp log(e^p0 + e^p1/B) = the two terms' shares of the sum
        # (the logistic of the log-ratio: no overflow when a bootstrap start runs far out)
        share = expit(p[0] - p[1] - np.log(inv_b))
        return sw[:, None] * np.column_stack([share, 1.0 - share])

    if x0 is None:
        # The two asymptotes: S -> S_min at large B, S -> E_min/B at small B.
        x0 = np.array([np.log(s.min()), np.log(np.max(s * b))])
    res = least_squares(resid, x0, jac=jac, method="lm", xtol=1e-14, ftol=1e-14, gtol=1e-14)
    return res.x


class CriticalBatchFit:
    """Steps-to-target against batch size: ``S(B) = S_min + E_min / B``.

    McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", eq. 2.11):
    the steps ``S`` and examples ``E = B·S`` needed to reach a given loss trade off as
    ``(S/S_min − 1)(E/E_min − 1) = 1``, i.e. ``S = S_min + E_min/B``. Fitted, as Zhang et
    al. 2024 ("How Does Critical Batch Size Scale in Pre-training?") do, by least squares
    on ``log S = log(S_min + E_min/B)`` (log-parametrized, so both stay positive).

    Derived quantities:

    * ``B_crit = E_min / S_min`` — McCandlish's critical batch (the knee: 2·S_min steps
      and 2·E_min examples).
    * ``CBS`` — Zhang et al. 2024's definition: the batch at which the examples needed
      exceed those of a small reference batch ``B0`` by ``overshoot`` (default 20 %),
      solving ``S(B)·B = (1 + o)·S(B0)·B0``: ``CBS = (1 + o)·B0 + o·E_min/S_min``, i.e.
      ``E_min/(5·S_min) + 1.2·B0`` for the defaults ``o = 0.2``, ``B0 = 256``.

    ``B`` is in whatever unit the column holds (sequences in Zhang et al.); ``E_min``,
    ``B_crit`` and ``CBS`` come out in that unit.

    Fitted attributes: ``params_`` (``S_min``, ``E_min``, ``B_crit``, ``CBS``), ``ci_``
    (pairs bootstrap, ``n_boot`` resamples), ``boot_`` (draws, one column per param),
    ``n_``, ``b_range_``, ``n_dropped_`` (rows that never reached the target, or
    diverged, when fitted from a DataFrame), ``batch_data_``/``steps_data_`` (the fitted
    points, for plots).
    """

    def __init__(
        self,
        batch: str = "batch_size",
        steps: str = "steps_to_target",
        *,
        b0: float = 256.0,
        overshoot: float = 0.2,
        diverged: str | None = "diverged",
        n_boot: int = 1000,
        level: float = 0.95,
        random_state: int | np.random.Generator | None = 0,
    ) -> None:
        if not b0 > 0:
            raise ValueError(f"b0 must be > 0, got {b0!r}.")
        if not overshoot > 0:
            raise ValueError(f"overshoot must be > 0, got {overshoot!r}.")
        self.batch, self.steps, self.diverged = batch, steps, diverged
        self.b0, self.overshoot = float(b0), float(overshoot)
        self.n_boot = check_n_boot(n_boot)
        self.level = check_level(level, "level")
        self.random_state = random_state

    def fit(self, data: pd.DataFrame | Any, steps: Any = None) -> CriticalBatchFit:
        """Fit on a DataFrame (``batch``/``steps`` columns) or on arrays ``(B, S)``.

        From a DataFrame, diverged runs and runs that never reached the target
        (non-finite steps) are dropped and counted in ``n_dropped_``.
        """
        if isinstance(data, pd.DataFrame) and steps is None:
            require_columns(data, [self.batch, self.steps], "batch sweep")
            ok = usable_rows(data, [self.batch, self.steps], self.diverged)
            self.n_dropped_ = len(data) - len(ok)
            b, s = ok[self.batch].to_numpy(float), ok[self.steps].to_numpy(float)
        else:
            if steps is None:
                raise ValueError("fit() needs the steps when data is not a DataFrame.")
            b, s = np.asarray(data, float).ravel(), np.asarray(steps, float).ravel()
            self.n_dropped_ = 0
        if b.shape != s.shape:
            raise ValueError(f"{b.size} batch sizes but {s.size} step counts; they must match.")
        finite_positive(b, f"batch size {self.batch!r}")
        finite_positive(s, f"steps {self.steps!r}")
        if np.unique(b).size < 3:
            raise ValueError(
                f"S(B) needs at least 3 distinct batch sizes, got {np.unique(b).size}."
            )
        p = _fit_log_hyperbola(b, s)
        self.log_params_ = p
        self.params_ = self._derived(p[None, :])[0]
        self.n_ = b.size
        self.b_range_ = (float(b.min()), float(b.max()))
        self.batch_data_, self.steps_data_ = b, s
        self.boot_ = self._bootstrap(b, s, p)
        self.ci_: dict[str, tuple[float, float]] = {}
        if self.boot_.shape[0]:
            lo, hi = percentile_interval(self.boot_, self.level)
            self.ci_ = {k: (float(lo[i]), float(hi[i])) for i, k in enumerate(_PARAMS)}
        return self

    def _derived(self, logp: np.ndarray) -> list[dict[str, float]]:
        s_min, e_min = np.exp(logp[:, 0]), np.exp(logp[:, 1])
        b_crit = np.exp(logp[:, 1] - logp[:, 0])  # E_min / S_min in log: no 0/0 when S_min underflows
        cbs = (1.0 + self.overshoot) * self.b0 + self.overshoot * b_crit
        return [
            {"S_min": float(a), "E_min": float(e), "B_crit": float(c), "CBS": float(d)}
            for a, e, c, d in zip(s_min, e_min, b_crit, cbs, strict=True)
        ]

    def _bootstrap(self, b: np.ndarray, s: np.ndarray, p: np.ndarray) -> np.ndarray:
        if self.n_boot == 0:
            return np.empty((0, len(_PARAMS)))
        rng = make_rng(self.random_state)
        n = b.size
        out = []
        for _ in range(self.n_boot):
            w = np.bincount(rng.integers(0, n, n), minlength=n).astype(float)
            if np.unique(b[w > 0]).size < 2:
                continue  # one batch size cannot separate S_min from E_min
            out.append(_fit_log_hyperbola(b, s, w, x0=p))
        if not out:
            return np.empty((0, len(_PARAMS)))
        d = self._derived(np.array(out))
        return np.array([[r[k] for k in _PARAMS] for r in d])

    def predict(self, batch: Any) -> np.ndarray:
        """Steps to target ``S(B) = S_min + E_min/B`` at batch size(s) ``batch``."""
        check_is_fitted(self, "params_")
        b = finite_positive(np.atleast_1d(batch), "batch")
        return self.params_["S_min"] + self.params_["E_min"] / b

    def examples(self, batch: Any) -> np.ndarray:
        """Examples (batch × steps) to target, ``E(B) = B·S(B) = S_min·B + E_min``."""
        b = finite_positive(np.atleast_1d(batch), "batch")
        return b * self.predict(b)

    def report(self) -> str:
        check_is_fitted(self, "params_")
        lines = [f"CriticalBatchFit: S(B) = S_min + E_min/B, fitted in log space "
                 f"(n={self.n_}, B in [{self.b_range_[0]:g}, {self.b_range_[1]:g}])"]
        for k in _PARAMS:
            ci = self.ci_.get(k)
            cis = f"  [{ci[0]:.5g}, {ci[1]:.5g}]" if ci else ""
            lines.append(f"  {k:>6} = {self.params_[k]:.6g}{cis}")
        lines.append(f"  B_crit = E_min/S_min; CBS = {1 + self.overshoot:g}·B0 + "
                     f"{self.overshoot:g}·B_crit with B0 = {self.b0:g}")
        if self.n_dropped_:
            lines.append(f"  {self.n_dropped_} run(s) dropped (diverged or target not reached)")
        return "\n".join(lines)


@dataclass
class CriticalBatchResults:
    """Per-group :class:`CriticalBatchFit` objects and their tidy table.

    ``table`` has the group columns, then ``S_min``, ``E_min``, ``B_crit``, ``CBS`` and
    ``<name>_lo``/``<name>_hi`` interval columns, and ``n_points``. Feed it to
    :class:`PowerLawFit` for a scaling law, e.g. ``PowerLawFit("n_params", "CBS")``.
    """

    fits: dict[Hashable, CriticalBatchFit]
    table: pd.DataFrame


def fit_critical_batch(
    data: pd.DataFrame,
    group_by: str | Sequence[str] = ("n_params",),
    **kwargs: Any,
) -> CriticalBatchResults:
    """One :class:`CriticalBatchFit` per group (e.g. per model size); ``kwargs`` go to it."""
    keys = as_tuple(group_by)
    require_columns(data, keys, "batch sweep")
    fits: dict[Hashable, CriticalBatchFit] = {}
    rows = []
    grouped = data.groupby(list(keys), sort=False) if keys else [((), data)]
    for key, df in grouped:
        key_t = key if isinstance(key, tuple) else (key,)
        k = key_t[0] if len(key_t) == 1 else key_t
        try:
            f = CriticalBatchFit(**kwargs).fit(df)
        except ValueError as err:
            raise ValueError(f"group {group_label(keys, k)}: {err}") from err
        fits[k] = f
        row: dict[str, Any] = dict(zip(keys, key_t, strict=True))
        row.update(f.params_)
        for name, (lo, hi) in f.ci_.items():
            row[f"{name}_lo"], row[f"{name}_hi"] = lo, hi
        row["n_points"] = f.n_
        rows.append(row)
    return CriticalBatchResults(fits=fits, table=pd.DataFrame(rows))


def fit_noise_scale(
    data: pd.DataFrame,
    x: str = "loss",
    gns: str = "gns",
    *,
    diverged: str | None = "diverged",
    **kwargs: Any,
) -> PowerLawFit:
    """Power law of the measured gradient noise scale against loss (or tokens, steps, ...).

    The simple noise scale ``B_simple = tr(Σ)/|G|²`` estimates the critical batch
    (McCandlish et al. 2018, eq. 2.8); Kaplan et al. 2020 ("Scaling Laws for Neural
    Language Models", eq. 1.4) find ``B_crit(L) ≈ B*/L^(1/α_B)`` with ``B* ≈ 2e8``
    tokens and ``α_B ≈ 0.21``, a power law in the loss. This fits ``gns = a·x^b`` with
    :class:`PowerLawFit` (so ``b ≈ −1/α_B ≈ −4.8`` in Kaplan's setting) after dropping
    diverged rows and rows with a non-finite ``x`` or ``gns``. ``kwargs`` go to
    :class:`PowerLawFit`.
    """
    require_columns(data, [x, gns], "noise-scale data")
    ok = usable_rows(data, [x, gns], diverged)
    if ok.empty:
        raise ValueError(f"no usable rows: every row diverged or has a non-finite {gns!r}.")
    return PowerLawFit(x, gns, **kwargs).fit(ok)


def noise_scale_law(
    data: pd.DataFrame,
    seq_len: int | None,
    *,
    lr: str = "lr",
    batch: str = "batch_tokens",
    tokens: str = "tokens",
    loss: str = "loss",
    gns: str = "gns",
) -> dict[str, Any] | None:
    """The critical batch as a law in the token budget, from a scaling sweep's measured GNS:
    ``B_simple(D) = c · D^e`` tokens.

    ``B_simple = tr(Σ)/|G|²`` (McCandlish et al. 2018, eq. 2.8) is the batch beyond which
    a larger batch buys fewer steps than it costs tokens: at ``B = B_simple`` a run needs
    about ``1 + B/B_simple = 2``× the minimal tokens (eq. 2.11). The sweep's runs end at
    budget ``D`` with their estimate of it (``gns``, in sequences; times ``seq_len`` in
    tokens). Per ``(B, D)`` cell the runs at the best LR (lowest seed-mean loss) count;
    per budget the geometric mean over its batches is ``B_simple(D)``; the law is the
    least-squares line in log-log through those (Zhang et al. 2024 find B_crit grows as a
    power of D, about D^0.47). Returns None when there is no ``gns`` column, no
    ``seq_len``, or fewer than 2 budgets with a finite, positive estimate.
    """
    if gns not in data.columns or not seq_len:
        return None
    by_d: dict[float, list[float]] = {}
    for (_, d), cell in data.groupby([batch, tokens]):
        means = cell.groupby(lr)[loss].mean()
        best = cell[cell[lr] == means.idxmin()][gns].to_numpy(dtype=float)
        best = best[np.isfinite(best) & (best > 0)]
        by_d.setdefault(float(d), []).extend((best * seq_len).tolist())
    rows = [{"tokens": d, "b_simple_tokens": float(np.exp(np.mean(np.log(v)))), "n_runs": len(v)}
            for d, v in sorted(by_d.items()) if v]
    if len(rows) < 2:
        return None
    x = np.log([r["tokens"] for r in rows])
    y = np.log([r["b_simple_tokens"] for r in rows])
    e, c = np.polyfit(x, y, 1)
    return {"coef": float(np.exp(c)), "exponent": float(e),
            "law": f"B_simple(D) = {float(np.exp(c)):.4g} · D^{float(e):.4g} tokens",
            "by_tokens": rows, "measured_tokens": [rows[0]["tokens"], rows[-1]["tokens"]],
            "source": "measured GNS B_simple = tr(Σ)/|G|² of the best-LR runs (McCandlish et al. 2018, "
                      "eq. 2.8), geometric mean over batches per budget, power law in D"}
