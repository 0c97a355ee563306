"""A batched L-BFGS: many independent small problems advanced together in NumPy.

scipy's L-BFGS-B optimizes one problem at a time, and its per-iteration Python overhead
(~100 µs) times thousands of starts is what makes a Hoffmann-style multi-start grid slow.
Here every start is a row of ``x`` (shape ``(S, p)``); one call of ``fun_grad`` returns
the objective and gradient of all rows at once, so the cost is a few large array
operations per iteration. Each row has its own history, step and convergence test; rows
that have converged leave the active set.

The algorithm is textbook L-BFGS (Nocedal & Wright, "Numerical Optimization", 2nd ed.,
Algorithm 7.4, two-loop recursion, with ``H0 = γ I``, ``γ = sᵀy / yᵀy``) with a
backtracking Armijo line search. Pairs failing the curvature test ``sᵀy > 0`` are skipped
(as in scipy). The stopping rules mirror scipy's L-BFGS-B: relative reduction
``(f_k − f_{k+1}) / max(|f_k|, |f_{k+1}|, 1) <= ftol`` or ``max |g| <= gtol``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

FunGrad = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class BatchResult:
    x: np.ndarray  # (S, p) final points
    fun: np.ndarray  # (S,) final objective values
    n_iter: np.ndarray  # (S,) iterations used
    converged: np.ndarray  # (S,) True where a stopping rule (not max_iter) ended the row


def batched_lbfgs(
    fun_grad: FunGrad,
    x0: np.ndarray,
    *,
    m: int = 10,
    max_iter: int = 500,
    ftol: float = 1e-12,
    gtol: float = 1e-8,
    max_backtrack: int = 40,
    c1: float = 1e-4,
) -> BatchResult:
    """Minimize ``S`` independent problems. ``fun_grad(x_rows, row_ids) -> (f, g)``.

    ``row_ids`` tells the callback which original rows ``x_rows`` belong to, so each row
    may have its own data weights (bootstrap replicates).
    """
    x = np.array(x0, dtype=float, copy=True)
    S, p = x.shape
    rows = np.arange(S)
    f, g = fun_grad(x, rows)
    f = np.where(np.isfinite(f), f, np.inf)
    s_hist = np.zeros((S, m, p))
    y_hist = np.zeros((S, m, p))
    rho = np.zeros((S, m))
    gamma = 1.0 / np.maximum(np.linalg.norm(g, axis=1), 1e-12)
    n_iter = np.zeros(S, dtype=int)
    converged = np.zeros(S, dtype=bool)
    active = np.isfinite(f) & ~(np.abs(g).max(axis=1) <= gtol)
    converged[np.isfinite(f) & ~active] = True
    for k in range(max_iter):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        xa, fa, ga = x[idx], f[idx], g[idx]
        # Two-loop recursion, newest pair first; slot (k-1-j) mod m holds the j-th newest.
        q = ga.copy()
        alphas = []
        order = [(k - 1 - j) % m for j in range(min(k, m))]
        for slot in order:
            a = rho[idx, slot] * np.einsum("ij,ij->i", s_hist[idx, slot], q)
            q -= a[:, None] * y_hist[idx, slot]
            alphas.append(a)
        r = gamma[idx, None] * q
        for slot, a in zip(reversed(order), reversed(alphas), strict=True):
            b = rho[idx, slot] * np.einsum("ij,ij->i", y_hist[idx, slot], r)
            r += (a - b)[:, None] * s_hist[idx, slot]
        d = -r
        slope = np.einsum("ij,ij->i", ga, d)
        bad = ~(slope < 0) | ~np.all(np.isfinite(d), axis=1)
        if bad.any():  # not a descent direction: restart that row from steepest descent
            d[bad] = -ga[bad] * gamma[idx[bad], None]
            slope[bad] = np.einsum("ij,ij->i", ga[bad], d[bad])
            rho[idx[bad]] = 0.0

        t = np.ones(idx.size)
        x_new = xa + d
        f_new, g_new = fun_grad(x_new, idx)
        f_new = np.where(np.isfinite(f_new), f_new, np.inf)
        ok = f_new <= fa + c1 * t * slope
        for _ in range(max_backtrack):
            if ok.all():
                break
            todo = np.flatnonzero(~ok)
            # Minimizer of the quadratic through f(0), f'(0) and f(t), kept in
            # [0.1 t, 0.5 t] (Nocedal & Wright §3.5); plain halving if f(t) is not finite.
            tt, sl = t[todo], slope[todo]
            curv = f_new[todo] - fa[todo] - sl * tt
            with np.errstate(all="ignore"):
                t_q = np.where(np.isfinite(curv) & (curv > 0), -sl * tt * tt / (2 * curv),
                               0.5 * tt)
            t[todo] = np.clip(t_q, 0.1 * tt, 0.5 * tt)
            x_new[todo] = xa[todo] + t[todo, None] * d[todo]
            ft, gt = fun_grad(x_new[todo], idx[todo])
            f_new[todo] = np.where(np.isfinite(ft), ft, np.inf)
            g_new[todo] = gt
            ok[todo] = f_new[todo] <= fa[todo] + c1 * t[todo] * slope[todo]
        # Rows whose line search failed cannot make progress: stop them where they are.
        failed = idx[~ok]
        active[failed] = False
        converged[failed] = True
        idx, xa, fa, ga = idx[ok], xa[ok], fa[ok], ga[ok]
        x_new, f_new, g_new, t, d = x_new[ok], f_new[ok], g_new[ok], t[ok], d[ok]

        s_vec = t[:, None] * d
        y_vec = g_new - ga
        sy = np.einsum("ij,ij->i", s_vec, y_vec)
        yy = np.einsum("ij,ij->i", y_vec, y_vec)
        good = sy > 1e-10 * np.linalg.norm(s_vec, axis=1) * np.sqrt(yy)
        slot = k % m
        s_hist[idx, slot] = s_vec
        y_hist[idx, slot] = y_vec
        rho[idx, slot] = np.where(good, 1.0 / np.where(good, sy, 1.0), 0.0)
        gamma[idx[good]] = sy[good] / yy[good]

        x[idx], f[idx], g[idx] = x_new, f_new, g_new
        n_iter[idx] = k + 1
        rel = (fa - f_new) / np.maximum(np.maximum(np.abs(fa), np.abs(f_new)), 1.0)
        done = (rel <= ftol) | (np.abs(g_new).max(axis=1) <= gtol)
        active[idx[done]] = False
        converged[idx[done]] = True
    return BatchResult(x=x, fun=f, n_iter=n_iter, converged=converged)


def batched_lbfgs_threads(fun_grad: FunGrad, x0: np.ndarray, n_jobs: int = 1,
                          **kwargs: float) -> BatchResult:
    """:func:`batched_lbfgs` with the rows split over ``n_jobs`` threads.

    NumPy releases the GIL inside large array operations, so threads use several cores
    without pickling the data to other processes.
    """
    S = x0.shape[0]
    n_jobs = max(1, min(int(n_jobs), S))
    if n_jobs == 1:
        return batched_lbfgs(fun_grad, x0, **kwargs)  # type: ignore[arg-type]
    from concurrent.futures import ThreadPoolExecutor

    chunks = np.array_split(np.arange(S), n_jobs)

    def run(ids: np.ndarray) -> BatchResult:
        return batched_lbfgs(lambda x, r: fun_grad(x, ids[r]), x0[ids],  # type: ignore[arg-type]
                             **kwargs)

    with ThreadPoolExecutor(n_jobs) as pool:
        parts = list(pool.map(run, chunks))
    return BatchResult(
        x=np.concatenate([p.x for p in parts]),
        fun=np.concatenate([p.fun for p in parts]),
        n_iter=np.concatenate([p.n_iter for p in parts]),
        converged=np.concatenate([p.converged for p in parts]),
    )
