from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.loss_law import HOFFMANN_GRID, ChinchillaFit, SaturatingPowerLawFit

# Hoffmann et al. 2022, eq. 10 (their fitted approach-3 law) used as ground truth.
TRUTH = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


def chinchilla_data(noise: float, seed: int = 0, n: int = 8) -> tuple[np.ndarray, ...]:
    N, D = np.meshgrid(np.geomspace(1e7, 1e10, n), np.geomspace(1e9, 1e12, n))
    N, D = N.ravel(), D.ravel()
    L = TRUTH["E"] + TRUTH["A"] / N ** TRUTH["alpha"] + TRUTH["B"] / D ** TRUTH["beta"]
    return N, D, L * np.exp(np.random.default_rng(seed).normal(0.0, noise, L.size))


@pytest.fixture(scope="module")
def noisy_fit() -> tuple[ChinchillaFit, tuple[np.ndarray, ...]]:
    data = chinchilla_data(0.01, seed=4)
    return ChinchillaFit(n_boot=200).fit(*data), data


def test_grid_is_hoffmann_4500_starts() -> None:
    assert HOFFMANN_GRID["e"] == (-1.0, -0.5, 0.0, 0.5, 1.0)
    grid = ChinchillaFit().grid()
    assert grid.shape == (4500, 5)
    assert np.unique(grid, axis=0).shape[0] == 4500


def test_exact_recovery_from_noise_free_data() -> None:
    fit = ChinchillaFit(n_boot=0).fit(*chinchilla_data(0.0))
    for k, v in TRUTH.items():
        assert fit.params_[k] == pytest.approx(v, rel=1e-6), k
    assert fit.n_starts_ == 4500
    assert fit.loss_ < 1e-15


def test_noisy_recovery_within_bootstrap_ci(noisy_fit: tuple[ChinchillaFit, tuple]) -> None:
    fit, _ = noisy_fit
    assert fit.boot_.shape[0] == 200
    for k, v in TRUTH.items():
        lo, hi = fit.ci_[k]
        assert lo <= v <= hi, (k, lo, v, hi)
    assert fit.params_["alpha"] == pytest.approx(0.34, abs=0.05)
    assert fit.params_["E"] == pytest.approx(1.69, rel=0.05)


def test_best_start_no_worse_than_scipy_single_starts(
    noisy_fit: tuple[ChinchillaFit, tuple],
) -> None:
    """The batched grid finds an objective at least as low as plain scipy L-BFGS-B."""
    from scipy.optimize import minimize

    from analysis.loss_law import _lse_huber

    fit, (N, D, L) = noisy_fit
    logx, logy, w = np.log(np.column_stack([N, D])), np.log(L), np.ones(L.size)

    def fg(th: np.ndarray) -> tuple[float, np.ndarray]:
        f, g = _lse_huber(th[None, :], logx, logy, w, 1e-3)
        return float(f[0]), g[0]

    ours = fg(fit.theta_)[0]
    grid = fit.grid()
    for i in np.random.default_rng(0).choice(grid.shape[0], 15, replace=False):
        res = minimize(fg, grid[i], jac=True, method="L-BFGS-B")
        assert ours <= res.fun + 1e-12
    assert fit.loss_ == pytest.approx(ours * 1e-3 * L.size)


def test_predict_band_contains_point_and_truth(noisy_fit: tuple[ChinchillaFit, tuple]) -> None:
    fit, _ = noisy_fit
    n, d = np.array([1e8, 1e9]), np.array([2e9, 2e10])
    p = fit.predict(n, d, level=0.95)
    truth = TRUTH["E"] + TRUTH["A"] / n ** 0.34 + TRUTH["B"] / d ** 0.28
    assert np.all(p.lo <= p.point) and np.all(p.point <= p.hi)
    assert np.all((p.lo <= truth) & (truth <= p.hi))
    np.testing.assert_allclose(fit.predict(n, d), p.point)


def test_compute_optimal_matches_hoffmann_eq4() -> None:
    fit = ChinchillaFit(n_boot=0)
    fit.params_ = dict(TRUTH)  # the published law, without refitting
    fit.boot_ = np.empty((0, 5))
    c = np.array([1e21, 5.76e23])
    alloc = fit.compute_optimal(c)
    a, b = 0.28 / 0.62, 0.34 / 0.62
    G = (0.34 * 406.4 / (0.28 * 410.7)) ** (1 / 0.62)
    np.testing.assert_allclose(alloc.n_opt, G * (c / 6) ** a, rtol=1e-12)
    np.testing.assert_allclose(alloc.n_opt * alloc.d_opt, c / 6, rtol=1e-12)
    slope = np.log(alloc.n_opt[1] / alloc.n_opt[0]) / np.log(c[1] / c[0])
    assert slope == pytest.approx(a) and 1 - slope == pytest.approx(b)


def test_compute_optimal_band_from_bootstrap(noisy_fit: tuple[ChinchillaFit, tuple]) -> None:
    fit, _ = noisy_fit
    alloc = fit.compute_optimal([1e22], level=0.9)
    assert alloc.n_lo[0] < alloc.n_opt[0] < alloc.n_hi[0]
    assert alloc.d_lo[0] < alloc.d_opt[0] < alloc.d_hi[0]


def test_saturating_power_law_recovers_l_of_n_and_skips_diverged() -> None:
    n = np.geomspace(1e6, 1e10, 12)
    df = pd.DataFrame({"n_params": n, "loss": 1.8 + 480.0 / n**0.31, "diverged": False})
    df.loc[len(df)] = {"n_params": 3e7, "loss": 0.01, "diverged": True}
    df.loc[len(df)] = {"n_params": 4e7, "loss": np.nan, "diverged": False}
    fit = SaturatingPowerLawFit(n_boot=50).fit(df)
    assert fit.n_ == 12 and fit.n_starts_ == 150
    assert fit.params_["E"] == pytest.approx(1.8, rel=1e-6)
    assert fit.params_["A"] == pytest.approx(480.0, rel=1e-5)
    assert fit.params_["alpha"] == pytest.approx(0.31, rel=1e-6)
    assert "E + A/n_params^alpha" in fit.report()


def test_l_of_compute_with_saturation() -> None:
    c = np.geomspace(1e17, 1e21, 10)
    fit = SaturatingPowerLawFit(x="compute", n_boot=0).fit(c, 2.0 + 30.0 / c**0.05)
    assert fit.params_["alpha"] == pytest.approx(0.05, rel=1e-5)
    assert fit.predict(1e23)[0] == pytest.approx(2.0 + 30.0 / 1e23**0.05, rel=1e-6)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([1e7, 1e8], [1e9, 1e10], [3.0, 2.9]), "needs more than 5 points"),
        (([1e7, 0, 1e8, 1e9, 1e7, 1e8], [1e9] * 3 + [1e10] * 3, [3.0] * 6), "0.0"),
        (([1e7] * 6, [1e9, 1e10] * 3, [3.0] * 6), "single value"),
    ],
)
def test_bad_input_raises(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ChinchillaFit(n_boot=0).fit(*args)


def test_all_rows_diverged_raises() -> None:
    df = pd.DataFrame({"n_params": [1e7, 1e8, 1e9, 1e10], "loss": [3.0, 2.8, 2.6, 2.5],
                       "diverged": True})
    with pytest.raises(ValueError, match="every row diverged"):
        SaturatingPowerLawFit().fit(df)


def test_chinchilla_plot_renders_fit(noisy_fit: tuple[ChinchillaFit, tuple], tmp_path) -> None:
    from analysis.plots import plot_loss_law

    fit, _ = noisy_fit
    out = plot_loss_law(fit, tmp_path / "chin.png")
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 5000
