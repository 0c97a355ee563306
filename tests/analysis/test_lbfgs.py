from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis._lbfgs import batched_lbfgs, batched_lbfgs_threads
from analysis.loss_law import _lse_huber


def rosenbrock(x: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = x[:, 0], x[:, 1]
    f = (1 - a) ** 2 + 100 * (b - a**2) ** 2
    g = np.column_stack([-2 * (1 - a) - 400 * a * (b - a**2), 200 * (b - a**2)])
    return f, g


def test_batched_lbfgs_solves_many_rosenbrocks_independently() -> None:
    x0 = np.random.default_rng(0).uniform(-2, 2, (200, 2))
    res = batched_lbfgs(rosenbrock, x0, max_iter=2000, ftol=0, gtol=1e-10)
    np.testing.assert_allclose(res.x, 1.0, atol=1e-6)
    assert res.converged.all()
    assert len(np.unique(res.n_iter)) > 1  # rows stop on their own


def test_threads_give_the_same_answer_as_one_thread() -> None:
    x0 = np.random.default_rng(1).uniform(-2, 2, (50, 2))
    one = batched_lbfgs(rosenbrock, x0, max_iter=300)
    two = batched_lbfgs_threads(rosenbrock, x0, n_jobs=2, max_iter=300)
    np.testing.assert_array_equal(one.x, two.x)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_huber_objective_gradient_matches_finite_differences(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 30
    logx = np.column_stack([rng.uniform(15, 23, n), rng.uniform(20, 28, n)])
    logy = rng.uniform(0.5, 1.5, n)
    w = rng.integers(0, 3, n).astype(float) + 0.5
    theta = np.concatenate([rng.uniform(-1, 1, 1), rng.uniform(0, 10, 2),
                            rng.uniform(0, 1, 2)])[None, :]
    f, g = _lse_huber(theta, logx, logy, w, 0.05)
    eps = 1e-6
    for j in range(5):
        tp, tm = theta.copy(), theta.copy()
        tp[0, j] += eps
        tm[0, j] -= eps
        fd = (_lse_huber(tp, logx, logy, w, 0.05)[0] - _lse_huber(tm, logx, logy, w, 0.05)[0])
        np.testing.assert_allclose(g[0, j], fd[0] / (2 * eps), rtol=1e-4, atol=1e-7)
