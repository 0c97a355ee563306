"""One fitted-state check for every fit: NotFittedError, as scikit-learn's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis._fitted import NotFittedError, check_is_fitted
from analysis._io import plain
from analysis.critical_batch import CriticalBatchFit
from analysis.loss_law import ChinchillaFit
from analysis.optimum import OptimumFit
from analysis.powerlaw import PowerLawFit
from analysis.scaling_fit import ScalingLawFit


def test_not_fitted_error_is_a_value_and_attribute_error() -> None:
    assert issubclass(NotFittedError, ValueError) and issubclass(NotFittedError, AttributeError)


@pytest.mark.parametrize("make, call", [
    (lambda: PowerLawFit("width", "lr"), lambda f: f.predict({"width": 64})),
    (lambda: CriticalBatchFit(), lambda f: f.predict(8)),
    (lambda: OptimumFit(), lambda f: f.group(1)),
    (lambda: ChinchillaFit(), lambda f: f.predict(1e6, 1e9)),
    (lambda: ScalingLawFit(), lambda f: f.predict_lr(1024, 1e6)),
    (lambda: ScalingLawFit(), lambda f: f.to_dict()),
])
def test_every_fit_raises_not_fitted_before_fit(make, call) -> None:
    fit = make()
    with pytest.raises(NotFittedError, match=f"this {type(fit).__name__} is not fitted yet"):
        call(fit)


def test_check_is_fitted_rules() -> None:
    class Est:
        pass

    e = Est()
    e.alpha = 1.0
    with pytest.raises(NotFittedError):
        check_is_fitted(e)  # scikit-learn's rule: no attribute ending in "_"
    with pytest.raises(NotFittedError):
        check_is_fitted(e, ["alpha", "params_"])  # every named attribute must be there
    e.params_ = {}
    check_is_fitted(e)
    check_is_fitted(e, ["alpha", "params_"])


def test_plain_is_json_data() -> None:
    got = plain({1: (np.float64(2.5), np.int64(3), np.bool_(True)), "x": [math.inf, "s", None]},
                nonfinite_to_none=True)
    assert got == {"1": [2.5, 3, True], "x": [None, "s", None]}
    assert type(got["1"][1]) is int and type(got["1"][2]) is bool
    assert math.isinf(plain([math.inf])[0])  # kept unless asked: a validator refuses it


def test_the_interval_level_has_one_spelling_level() -> None:
    """``level`` is the one name of an interval's level: ``ci=`` (a fit's) and ``interval=``
    (a call's), the 0.1.0 spellings, are refused by every fit, predict and plot."""
    assert PowerLawFit(level=0.8).level == 0.8 and OptimumFit(level=0.8).level == 0.8
    assert ChinchillaFit(level=0.8).level == 0.8 and CriticalBatchFit(level=0.8).level == 0.8
    for cls in (PowerLawFit, OptimumFit, ChinchillaFit, CriticalBatchFit):
        with pytest.raises(TypeError, match="'ci'"):
            cls(ci=0.8)
    with pytest.raises(ValueError, match="level"):
        PowerLawFit(level=1.5)
    x = np.array([64.0, 128.0, 256.0, 512.0, 1024.0])
    fit = PowerLawFit("width", "lr", n_boot=0).fit(x, 0.5 * x**-1.0 * np.exp([0.01, -0.02, 0.0, 0.02, -0.01]))
    band = fit.predict([2048.0], level=0.8)
    assert band.lo[0] < band.point[0] < band.hi[0]
    with pytest.raises(TypeError, match="'interval'"):
        fit.predict([2048.0], interval=0.8)
